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
