-- Usage samples without a foreign key (issue 16). Each sample row checked its job through the
-- key, which reads the job's row and locks it (FOR KEY SHARE: a write to the job's page for
-- every sample), eight times for a heartbeat of a slave running eight jobs, a thousand
-- heartbeats a second at 5,000 slaves. The statements that append samples already keep only
-- samples of jobs the master has on that slave (store.heartbeats), and the samples of a job
-- are deleted with it by the trigger below, as the key's ON DELETE CASCADE did.
ALTER TABLE job_usage DROP CONSTRAINT job_usage_job_uuid_fkey;

CREATE FUNCTION delete_job_usage() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_usage WHERE job_uuid = OLD.uuid;
    RETURN NULL;
END
$$;
CREATE TRIGGER jobs_usage_delete AFTER DELETE ON jobs FOR EACH ROW EXECUTE FUNCTION delete_job_usage();
