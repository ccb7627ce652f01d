package store

import (
	"context"
	"fmt"
	"time"

	"github.com/lib/pq"

	"github.com/opengpulab/gpulab/job"
)

// leaderLockKey is the advisory lock held by the master that runs the scheduler.
const leaderLockKey = 0x67707573636864 // "gpuschd"

// Leader is the held scheduler lock; it lasts as long as its connection.
type Leader struct {
	conn interface {
		PingContext(ctx context.Context) error
		Close() error
	}
}

// TryLeader takes the scheduler lock if no other master holds it. Several masters may share
// one database; exactly one schedules at a time, and another takes over when its connection
// dies.
func (s *Store) TryLeader(ctx context.Context) (*Leader, bool, error) {
	conn, err := s.db.Connx(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("scheduler lock: %w", err)
	}
	var ok bool
	if err := conn.GetContext(ctx, &ok, `SELECT pg_try_advisory_lock($1)`, leaderLockKey); err != nil {
		_ = conn.Close()
		return nil, false, fmt.Errorf("scheduler lock: %w", err)
	}
	if !ok {
		_ = conn.Close()
		return nil, false, nil
	}
	return &Leader{conn: conn}, true, nil
}

// Alive reports whether the lock's connection (and so the lock) still holds.
func (l *Leader) Alive(ctx context.Context) bool { return l.conn.PingContext(ctx) == nil }

// Release gives the lock up.
func (l *Leader) Release() error { return l.conn.Close() }

// LostJob is a job on a slave that has been offline longer than the job grace.
type LostJob struct {
	UUID      string `db:"uuid"`
	Status    string `db:"status"`
	SlaveName string `db:"assigned_slave_name"`
}

// ListLostJobs lists jobs holding a slave that went offline before `offlineBefore`.
func (s *Store) ListLostJobs(ctx context.Context, offlineBefore time.Time) ([]LostJob, error) {
	var out []LostJob
	err := s.q.SelectContext(ctx, &out, `SELECT j.uuid::text AS uuid, j.status, j.assigned_slave_name FROM jobs j
JOIN slaves s ON s.name = j.assigned_slave_name
WHERE j.status = ANY($1) AND NOT s.online AND s.offline_since < $2`, pq.Array(statusStrings(job.RunningStatuses)), offlineBefore)
	return out, mapErr(err, "list lost jobs")
}

// ExpiredJob is a running job past its maxDuration.
type ExpiredJob struct {
	UUID   string `db:"uuid"`
	Status string `db:"status"`
	MaxS   int64  `db:"max_duration_s"`
}

// ListExpiredJobs lists jobs that have run (since RUNNING) longer than their maxDuration.
func (s *Store) ListExpiredJobs(ctx context.Context, now time.Time) ([]ExpiredJob, error) {
	var out []ExpiredJob
	err := s.q.SelectContext(ctx, &out, `SELECT uuid::text AS uuid, status, max_duration_s FROM jobs
WHERE status IN ('RUNNING', 'MUSTHALT', 'HALTING') AND event_times ? 'RUNNING'
AND (event_times->>'RUNNING')::timestamptz + make_interval(secs => max_duration_s) < $1`, now)
	return out, mapErr(err, "list expired jobs")
}
