-- The scheduler's lease (issue 16, B8x). A leader's transaction proves its lease by locking the
-- lease row; with FOR SHARE that lock also held off the leader's own renewals (an UPDATE of
-- expires_at) for as long as the pass ran, and a pass longer than the lease lost it. The proof
-- is now FOR KEY SHARE, which an UPDATE of expires_at does not wait for; and so that a takeover
-- still waits for a leader's open transaction, the epoch it changes becomes a key: an UPDATE of a
-- uniquely indexed column takes the row's strongest lock, which FOR KEY SHARE holds off.
CREATE UNIQUE INDEX scheduler_leader_epoch_key ON scheduler_leader (epoch);
