-- A job found by a prefix of its UUID is found by a range of the primary key (store.FindJob):
-- Postgres orders UUIDs as their text orders. The index on the UUIDs' text (for LIKE) answered
-- nothing else, and every change of a job's state is an update that adds an entry to each of the
-- table's indexes (its status is indexed, so no update of it is HOT), at a random place of this
-- one, as of the primary key. On 526,000 jobs, changing the state of 16,000 right after a
-- checkpoint wrote 88–98 MB of WAL in 0.77–0.99 s with it and 65–66 MB in 0.52–0.63 s without.
DROP INDEX jobs_uuid_text_idx;
