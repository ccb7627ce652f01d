-- Fewer index entries for each change of a job's state (issue 16). A job's state change is not
-- a HOT update (its status is indexed), so Postgres adds an entry to every index of the table
-- for the new version of the row, whatever the index covers: the scheduler's burst of 22,185
-- assignments (bench/ B1x) wrote 15 WAL records a job.
--
-- jobs_cluster_idx answered nothing: the one query that matches a job's cluster (the job list's
-- cluster filter) asks for the requested or the assigned cluster, an OR that an index on one of
-- the two columns cannot serve.
DROP INDEX jobs_cluster_idx;

-- The job list's reservation filter is the only user of jobs_reservations_idx, and most jobs
-- name no reservation: a GIN index still keeps an entry for an empty array, added to its
-- pending list at every state change and merged into the index by whichever statement finds
-- the list full. Only jobs that name a reservation are indexed now; the filter says so too
-- (store.ListJobs), so that Postgres may use this index.
DROP INDEX jobs_reservations_idx;
CREATE INDEX jobs_reservations_idx ON jobs USING GIN (reservation_ids) WHERE reservation_ids <> '{}';
