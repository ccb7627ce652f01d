package store

import (
	"context"
	"fmt"
	"time"
)

// finalStatuses is the SQL list of the states a job never leaves (DELETED included): only the
// logs and events of such jobs are ever deleted by retention.
const finalStatuses = `('FINISHED','FAILED','CANCELLED','HALTED','DELETED')`

// DeleteOldJobLogs deletes at most limit log chunks of jobs that ended more than age ago (by
// the database's clock), oldest first, and returns how many it deleted. A running job's log is
// never touched: its next chunk must find the one before it.
func (s *Store) DeleteOldJobLogs(ctx context.Context, age time.Duration, limit int) (int64, error) {
	return s.deleteBatch(ctx, "job logs", `DELETE FROM job_logs WHERE (job_uuid, seq) IN (
  SELECT l.job_uuid, l.seq FROM job_logs l JOIN jobs j ON j.uuid = l.job_uuid
  WHERE l.at < now() - make_interval(secs => $1) AND j.status IN `+finalStatuses+`
    AND j.updated_at < now() - make_interval(secs => $1)
  ORDER BY l.at LIMIT $2)`, age, limit)
}

// DeleteOldJobEvents deletes at most limit events older than age of jobs that ended more than
// age ago, oldest first. A live job keeps its whole history.
func (s *Store) DeleteOldJobEvents(ctx context.Context, age time.Duration, limit int) (int64, error) {
	return s.deleteBatch(ctx, "job events", `DELETE FROM job_events WHERE id IN (
  SELECT e.id FROM job_events e JOIN jobs j ON j.uuid = e.job_uuid
  WHERE e.at < now() - make_interval(secs => $1) AND j.status IN `+finalStatuses+`
    AND j.updated_at < now() - make_interval(secs => $1)
  ORDER BY e.at LIMIT $2)`, age, limit)
}

// DeleteOldDeletedJobs removes at most limit jobs that have been DELETED for more than age,
// with everything that hangs on them (events and logs: ON DELETE CASCADE; usage: a trigger,
// migration 0018).
func (s *Store) DeleteOldDeletedJobs(ctx context.Context, age time.Duration, limit int) (int64, error) {
	return s.deleteBatch(ctx, "deleted jobs", `DELETE FROM jobs WHERE uuid IN (
  SELECT uuid FROM jobs WHERE status = 'DELETED' AND updated_at < now() - make_interval(secs => $1)
  ORDER BY updated_at LIMIT $2)`, age, limit)
}

// DeleteStaleJobWaits deletes at most limit rows of job_waits left behind, and returns how
// many. A job leaving the queue drops what it was told while waiting, unless the forecaster
// was writing that row at the moment (the assignment and changeJob skip a locked row rather
// than wait for it), and an estimate can race an administrator's deletion of its job: such a
// row is never shown (reads merge it into a QUEUED job only) but nothing else removes it. A
// row goes once its job has been out of the queue for age, or is gone. The jobs' rows are
// locked FOR SHARE: a job being queued again at this moment is waited for and then kept, with
// what it is told now; a row the forecaster or a pass holds is skipped (the next sweep).
func (s *Store) DeleteStaleJobWaits(ctx context.Context, age time.Duration, limit int) (int64, error) {
	return s.deleteBatch(ctx, "job waits", `WITH left_queue AS (
    SELECT w.job_uuid FROM job_waits w JOIN jobs j ON j.uuid = w.job_uuid
    WHERE j.status <> 'QUEUED' AND j.updated_at < now() - make_interval(secs => $1)
    LIMIT $2 FOR UPDATE OF w SKIP LOCKED FOR SHARE OF j
  ), no_job AS (
    SELECT w.job_uuid FROM job_waits w WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.uuid = w.job_uuid)
    LIMIT $2 FOR UPDATE OF w SKIP LOCKED
  )
DELETE FROM job_waits w WHERE w.job_uuid IN (SELECT job_uuid FROM left_queue UNION ALL SELECT job_uuid FROM no_job)`, age, limit)
}

func (s *Store) deleteBatch(ctx context.Context, what, query string, age time.Duration, limit int) (int64, error) {
	res, err := s.q.ExecContext(ctx, query, age.Seconds(), limit)
	if err != nil {
		return 0, mapErr(err, "delete old "+what)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("delete old %s: %w", what, err)
	}
	return n, nil
}
