-- The leader's change feed (issue 16). The leader keeps the queued jobs, what the running jobs
-- hold and the slaves' inventories in memory between passes; reading all of them again at every
-- pass (20,000 queued and 6,000 running jobs, 1,000 slaves in B2x: ~240 ms of Postgres per pass)
-- was most of a pass. Each row now carries the id of the transaction that last changed what the
-- scheduler reads of it (sched_xid, set by a trigger, so that no writer can forget it), and a
-- pass reads only the jobs changed since the oldest transaction still running at its last read
-- (store.JobsChangedSince), and the slaves' inventories changed since then (SchedulerSlaves).
--
-- Only the columns that change after a job is submitted stamp the row (status, resources, the
-- slave, event times): the others (request, owner, durations, reservations) never change once
-- written, which the leader's periodic full read checks and counts as drift if they do. The
-- triggers name their columns, so that the writes that set none of them (explanations and
-- estimates on jobs, heartbeats on slaves: the most frequent) do not even evaluate the WHEN.
ALTER TABLE jobs ADD COLUMN sched_xid xid8 NOT NULL DEFAULT '0';
ALTER TABLE slaves ADD COLUMN sched_xid xid8 NOT NULL DEFAULT '0';
CREATE INDEX jobs_sched_xid_idx ON jobs (sched_xid);

CREATE FUNCTION stamp_sched_xid() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.sched_xid := pg_current_xact_id();
    RETURN NEW;
END
$$;

CREATE TRIGGER jobs_sched_insert BEFORE INSERT ON jobs FOR EACH ROW EXECUTE FUNCTION stamp_sched_xid();
CREATE TRIGGER jobs_sched_update BEFORE UPDATE OF status, resources, assigned_slave_name, event_times ON jobs FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status
       OR OLD.resources IS DISTINCT FROM NEW.resources
       OR OLD.assigned_slave_name IS DISTINCT FROM NEW.assigned_slave_name
       OR OLD.event_times IS DISTINCT FROM NEW.event_times)
    EXECUTE FUNCTION stamp_sched_xid();

-- A slave's small columns (online, accepting, disabled, cluster, host) are read at every pass;
-- only its inventory and GPU capacity, documents of a few kilobytes that change when it
-- registers again, are read when they changed since the last read.
CREATE TRIGGER slaves_sched_insert BEFORE INSERT ON slaves FOR EACH ROW EXECUTE FUNCTION stamp_sched_xid();
CREATE TRIGGER slaves_sched_update BEFORE UPDATE OF inventory, capacity_gpus ON slaves FOR EACH ROW
    WHEN (OLD.inventory IS DISTINCT FROM NEW.inventory
       OR OLD.capacity_gpus IS DISTINCT FROM NEW.capacity_gpus)
    EXECUTE FUNCTION stamp_sched_xid();
