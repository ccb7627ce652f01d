-- Retention (issue 14): the leader deletes, in small batches, job logs and events some time after
-- their job ended and DELETED jobs some time after their deletion. These indexes let each batch
-- find its oldest rows without scanning the tables.
CREATE INDEX job_logs_at_idx ON job_logs (at);
CREATE INDEX job_events_at_idx ON job_events (at);
CREATE INDEX jobs_deleted_idx ON jobs (updated_at) WHERE status = 'DELETED';
