-- What a waiting job is told, apart from the job (issue 16). The scheduler writes each queued
-- job's explanations (why it waits) and start estimate whenever they change. In the jobs row
-- those writes were rarely HOT updates: a page holds four or five jobs, and its free space
-- (fillfactor 80) takes one new version, so when a burst or a forecast rewrote every job of a
-- page, the others went to new pages with an entry in each of the table's indexes. B1x's
-- explanations of the 77,815 jobs left waiting wrote 8.3 WAL records and 1.9 kB a job, 2.9 s
-- in one statement, and every pass of a long queue rewrote rows of the largest table.
--
-- Here each queued job has at most one narrow row, keyed by its uuid alone: a change rewrites
-- that row (HOT, the key unchanged) and not the job's. Without a foreign key, as job_usage
-- (migration 0018): a key's check locks the job's row (FOR KEY SHARE, a write to its page), and
-- would make the forecaster's estimates wait for a job's row that a state change holds (FOR
-- UPDATE), where they must never wait (store.SetStartEstimatesAmong); a job's row here goes
-- with the job, by the trigger below. The documents are shown while the job is
-- QUEUED (store's job reads merge them into state.scheduling); a job leaving the queue no
-- longer shows an explanation or an estimated start it had while waiting (a cancelled job kept
-- both before). A job's leaving the queue (assigned, cancelled, failed) deletes its row, without
-- waiting for it: a row the forecaster is writing at that moment is left, not shown (its job is
-- no longer QUEUED), overwritten if the job is queued again, and goes with the job.
CREATE TABLE job_waits (
    job_uuid     UUID PRIMARY KEY,
    -- {"queuedExplanations": [...]} or {}
    explanations JSONB NOT NULL DEFAULT '{}'::jsonb,
    -- {"estimatedStart": ..., "estimatedStartEarliest": ..., "estimatedStartLatest": ...} or {}
    estimate     JSONB NOT NULL DEFAULT '{}'::jsonb
) WITH (fillfactor = 70);

INSERT INTO job_waits (job_uuid, explanations, estimate)
SELECT uuid,
    jsonb_strip_nulls(jsonb_build_object('queuedExplanations', scheduling->'queuedExplanations')),
    jsonb_strip_nulls(jsonb_build_object('estimatedStart', scheduling->'estimatedStart',
        'estimatedStartEarliest', scheduling->'estimatedStartEarliest', 'estimatedStartLatest', scheduling->'estimatedStartLatest'))
FROM jobs
WHERE status = 'QUEUED' AND scheduling ?| ARRAY['queuedExplanations', 'estimatedStart', 'estimatedStartEarliest', 'estimatedStartLatest'];

UPDATE jobs SET scheduling = scheduling - 'queuedExplanations' - 'estimatedStart' - 'estimatedStartEarliest' - 'estimatedStartLatest'
WHERE scheduling ?| ARRAY['queuedExplanations', 'estimatedStart', 'estimatedStartEarliest', 'estimatedStartLatest'];

CREATE FUNCTION delete_job_waits() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_waits WHERE job_uuid = OLD.uuid;
    RETURN NULL;
END
$$;
CREATE TRIGGER jobs_waits_delete AFTER DELETE ON jobs FOR EACH ROW EXECUTE FUNCTION delete_job_waits();
