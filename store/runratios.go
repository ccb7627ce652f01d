package store

import (
	"context"
	"database/sql"
	"time"
)

// RunRatio is how much of their maxDuration one user's finished jobs (or everyone's, UserID 0)
// really ran: Low is the 10th percentile and Mid the mean of run time over maxDuration, over
// Jobs jobs (scheduler.LearnRatios computes the same from samples, for the simulator). The scheduler's start estimates use it to say when running jobs will likely end.
type RunRatio struct {
	UserID int64
	Jobs   int
	Low    float64
	Mid    float64
}

// RunRatios returns the run-time ratios of jobs created since then that ran and ended
// (finished, failed, cancelled or halted: all free their resources early), per user and, with
// UserID 0, over everyone; users with fewer than minJobs such jobs are left out (the global row
// never is, when there are any jobs). One aggregate over the jobs of the window, meant to be
// cached for minutes: see leader.Loop.
func (s *Store) RunRatios(ctx context.Context, since time.Time, minJobs int) ([]RunRatio, error) {
	var rows []struct {
		UserID sql.NullInt64 `db:"user_id"`
		Jobs   int           `db:"jobs"`
		Low    float64       `db:"low"`
		Mid    float64       `db:"mid"`
	}
	err := s.q.SelectContext(ctx, &rows, `WITH r AS (
    SELECT user_id, LEAST(1, GREATEST(0, extract(epoch FROM (event_times->>status)::timestamptz - (event_times->>'RUNNING')::timestamptz)
        / max_duration_s)) AS ratio
    FROM jobs
    WHERE created_at >= $1 AND status IN ('FINISHED', 'FAILED', 'CANCELLED', 'HALTED') AND max_duration_s > 0
      AND event_times ? 'RUNNING' AND event_times ? status)
SELECT user_id, count(*) AS jobs, COALESCE(percentile_cont(0.1) WITHIN GROUP (ORDER BY ratio), 1) AS low,
    COALESCE(avg(ratio), 1) AS mid
FROM r GROUP BY GROUPING SETS ((user_id), ()) HAVING count(*) >= $2 OR GROUPING(user_id) = 1`, since, minJobs)
	if err != nil {
		return nil, mapErr(err, "run ratios")
	}
	out := make([]RunRatio, 0, len(rows))
	for _, r := range rows {
		out = append(out, RunRatio{UserID: r.UserID.Int64, Jobs: r.Jobs, Low: r.Low, Mid: r.Mid})
	}
	return out, nil
}

// Arrival is the jobs submitted recently by one user with the same GPUs and maxDuration, and
// how many (scheduler.Arrival).
type Arrival struct {
	UserID       int64 `db:"user_id"`
	GPUs         int   `db:"gpus"`
	MaxDurationS int64 `db:"max_duration_s"`
	Count        int   `db:"n"`
}

// Arrivals returns the jobs submitted since `since` (any state; restarts included, as they
// arrive in the queue too), grouped by owner, GPUs and maxDuration: at 50 submissions a second
// a day is 4 million jobs, but a few thousand groups. At most limit groups, the largest first.
func (s *Store) Arrivals(ctx context.Context, since time.Time, limit int) ([]Arrival, error) {
	var out []Arrival
	err := s.q.SelectContext(ctx, &out, `SELECT user_id, gpus, max_duration_s, count(*) AS n FROM jobs
WHERE created_at >= $1 GROUP BY user_id, gpus, max_duration_s ORDER BY n DESC LIMIT $2`, since, limit)
	return out, mapErr(err, "recent arrivals")
}
