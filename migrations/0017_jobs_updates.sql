-- Cheaper writes of a job's row (issue 16). A state change writes a new version of the row and,
-- unless Postgres can keep it on the same page without touching an indexed column (a HOT
-- update), an entry in every one of the table's indexes.
--
-- jobs_running_status_idx (migration 0002) and jobs_slave_live_idx (0006) index the same rows
-- (the live jobs) by the same leading column: every query that could use the first uses the
-- second, and each change into or between the live states paid for both.
DROP INDEX jobs_running_status_idx;

-- The scheduler writes each waiting job's explanation and start estimate when they change (the
-- `scheduling` document, which no index covers): with room left on each page those writes are
-- HOT updates (no index entries; the page's dead versions are pruned in place), where a full
-- page sent each of them to a new page with an entry in each of the 15 indexes. Pages written
-- before this migration keep their old fill until they are rewritten.
ALTER TABLE jobs SET (fillfactor = 80);
