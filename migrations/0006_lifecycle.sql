-- An airtight job lifecycle: attempts that fence a slave's calls, leases on the in-between
-- states, reconciliation between master and slave, resources held until the slave confirms a
-- container gone, and a scheduler leadership proven inside the transactions that act on it.

-- attempt counts the job's placements (QUEUED → ASSIGNED adds one). Every slave call names the
-- attempt it acts for, so a slave that lost track (a reply lost, a partition, a requeue) can
-- never move a job that was given to another slave, or to itself again, since.
ALTER TABLE jobs ADD COLUMN attempt INTEGER NOT NULL DEFAULT 0;
-- lease_expires_at is set while a job is ASSIGNED, STARTING, MUSTHALT or HALTING: when it passes
-- (database clock), the scheduler's housekeeping gives the job its defined outcome.
ALTER TABLE jobs ADD COLUMN lease_expires_at TIMESTAMPTZ;
-- missing_since marks a job the master has on a slave that the slave's heartbeat did not list;
-- still missing after a grace, the job is requeued or ended.
ALTER TABLE jobs ADD COLUMN missing_since TIMESTAMPTZ;

-- A slave's live jobs, read at every heartbeat and long poll. The predicate is written out in
-- the queries that use it (a parameter would keep Postgres from using the index).
CREATE INDEX jobs_slave_live_idx ON jobs (assigned_slave_name)
    WHERE status IN ('ASSIGNED', 'STARTING', 'RUNNING', 'MUSTHALT', 'HALTING');
CREATE INDEX jobs_lease_idx ON jobs (lease_expires_at) WHERE lease_expires_at IS NOT NULL;

-- What jobs the master ended (cancel, maxDuration, worker lost, lease outcomes) still hold on a
-- slave until the slave confirms their container gone: the scheduler counts it as taken, so no
-- GPU is ever given to a second live container.
CREATE TABLE job_releases (
    job_uuid    UUID NOT NULL REFERENCES jobs(uuid) ON DELETE CASCADE,
    attempt     INTEGER NOT NULL,
    slave_name  TEXT NOT NULL,
    resources   JSONB NOT NULL,
    reason      TEXT NOT NULL DEFAULT '',
    since       TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (job_uuid, attempt)
);
CREATE INDEX job_releases_slave_idx ON job_releases (slave_name);

-- The scheduler's leadership: a lease with an epoch. A master leads while its lease has not
-- expired; every transaction that acts as leader first checks its epoch (FOR SHARE), so a
-- leader that was frozen or cut off and lost the lease can no longer write as one.
CREATE TABLE scheduler_leader (
    id          SMALLINT PRIMARY KEY CHECK (id = 1),
    epoch       BIGINT NOT NULL DEFAULT 0,
    holder      TEXT NOT NULL DEFAULT '',
    since       TIMESTAMPTZ,
    expires_at  TIMESTAMPTZ NOT NULL DEFAULT '-infinity'
);
INSERT INTO scheduler_leader (id) VALUES (1);

-- The GPUs a slave has had at most: a request is impossible only against them, so a GPU that
-- drops out of the inventory for a while (an Xid error) never fails queued jobs at once.
ALTER TABLE slaves ADD COLUMN capacity_gpus JSONB NOT NULL DEFAULT '[]'::jsonb;

-- A submission may carry an idempotency key (the Idempotency-Key header): a retry of a submit
-- whose answer was lost finds the job the first attempt made instead of making a second one.
ALTER TABLE jobs ADD COLUMN submit_key TEXT;
CREATE UNIQUE INDEX jobs_submit_key_idx ON jobs (user_id, submit_key) WHERE submit_key IS NOT NULL;
