-- Job events without a foreign key (issue 16), as job_usage (migration 0018). The key's check of
-- each event reads the job's row and locks it (FOR KEY SHARE: a write to the job's page), and
-- events come by the thousand: B1x's burst writes one per assignment (22,185; the check 15 µs
-- each, ~0.3 s of the parts' commits) and its first explanations one per job left waiting
-- (77,815: 0.6 of the statement's 1.6 s). Every statement that adds events takes their jobs from
-- the jobs table (the rows it changed, or a join), and store.AddJobEvent, the one that names
-- its job, adds the event only for a job that exists; the events of a job are deleted with it
-- by the trigger below, as the key's ON DELETE CASCADE did.
ALTER TABLE job_events DROP CONSTRAINT job_events_job_uuid_fkey;

CREATE FUNCTION delete_job_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_events WHERE job_uuid = OLD.uuid;
    RETURN NULL;
END
$$;
CREATE TRIGGER jobs_events_delete AFTER DELETE ON jobs FOR EACH ROW EXECUTE FUNCTION delete_job_events();
