-- The slaves join the leader's change feed (issue 16). A pass read every slave's small columns
-- (online, accepting, disabled, cluster, host) to see what changed; but a slave's row is
-- rewritten by each of its heartbeats (the time, the usage report), so that with 1,000
-- slaves heartbeating the table held 7 dead row versions for each live one and that read
-- scanned 12 MB, 20–30 ms per pass (B2x), more at 5,000 slaves. Every column the scheduler
-- reads now stamps the row when it changes, so a pass reads only the slaves changed since
-- its last read, by the index below; the heartbeats, which change none of them (but online,
-- when a slave comes back), stamp nothing and stay HOT updates (sched_xid is not changed).
DROP TRIGGER slaves_sched_update ON slaves;
CREATE TRIGGER slaves_sched_update
    BEFORE UPDATE OF instance_id, cluster_id, host, dns_name, accepting_jobs, online, disabled, inventory, capacity_gpus
    ON slaves FOR EACH ROW
    WHEN (OLD.instance_id IS DISTINCT FROM NEW.instance_id
       OR OLD.cluster_id IS DISTINCT FROM NEW.cluster_id
       OR OLD.host IS DISTINCT FROM NEW.host
       OR OLD.dns_name IS DISTINCT FROM NEW.dns_name
       OR OLD.accepting_jobs IS DISTINCT FROM NEW.accepting_jobs
       OR OLD.online IS DISTINCT FROM NEW.online
       OR OLD.disabled IS DISTINCT FROM NEW.disabled
       OR OLD.inventory IS DISTINCT FROM NEW.inventory
       OR OLD.capacity_gpus IS DISTINCT FROM NEW.capacity_gpus)
    EXECUTE FUNCTION stamp_sched_xid();
CREATE INDEX slaves_sched_xid_idx ON slaves (sched_xid);

-- Room on each page for the next versions of its rows: a heartbeat's new version then stays on
-- the page (a HOT update: no index entry) and the page's dead versions are pruned when it
-- fills, instead of the table growing until autovacuum comes (half the heartbeats were not
-- HOT). Pages written before this migration keep their old fill until they are rewritten.
ALTER TABLE slaves SET (fillfactor = 50);
