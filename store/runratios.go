package store

import (
	"context"
	"database/sql"
	"time"

	"github.com/lib/pq"
)

// RunRatio is how much of their maxDuration finished jobs really ran, over one group: one user's
// jobs of one maxDuration class (scheduler.DurationClass), everyone's of one class (UserID 0),
// one user's of every class (Class −1) or everyone's (both). Mid is the mean of run time over
// maxDuration and Q its quantiles at 0, 1/steps, …, 1, over Jobs jobs; a user's group in a class
// also has Recent, his latest jobs of it by start, the latest first, and Censored, whether
// each ran that long without ending on its own (still running: its ratio so far; or halted),
// for the weighing the scheduler gives them
// (scheduler.RecentRatio; scheduler.LearnRatios computes all of it from samples, for the
// simulator). The scheduler's start estimates use it to say when running jobs will likely end.
type RunRatio struct {
	UserID   int64
	Class    int
	Jobs     int
	Mid      float64
	Q        []float64
	Recent   []float64
	Censored []bool
}

// RunRatios returns the run-time ratios of jobs created since then that ran and ended
// (finished, failed, cancelled or halted: all free their resources early), per user and
// maxDuration class, per class, per user and over everyone; groups of fewer than minJobs such
// jobs are left out (the global row never is, when there are any jobs). The class is the bit
// length of the maxDuration's whole minutes − 1, which is scheduler.DurationClass. A user's
// group in a class also gets its latest `recent` jobs of the window by the time they started
// running, those still running (or halting) with what they have run so far by the database's
// clock, and which of them still run or were halted. One aggregate over the jobs of the window, meant to be cached for minutes: see
// leader.Loop.
func (s *Store) RunRatios(ctx context.Context, since time.Time, minJobs, steps, recent int) ([]RunRatio, error) {
	points := make(pq.Float64Array, max(steps, 1)+1)
	for k := range points {
		points[k] = float64(k) / float64(len(points)-1)
	}
	var rows []struct {
		UserID   sql.NullInt64   `db:"user_id"`
		Class    sql.NullInt64   `db:"class"`
		AnyUser  int             `db:"any_user"`
		AnyClass int             `db:"any_class"`
		Jobs     int             `db:"jobs"`
		Mid      float64         `db:"mid"`
		Q        pq.Float64Array `db:"q"`
		Recent   pq.Float64Array `db:"recent"`
		Censored pq.BoolArray    `db:"recent_censored"`
	}
	err := s.q.SelectContext(ctx, &rows, `WITH w AS (
    SELECT uuid, user_id, length(ltrim((GREATEST(max_duration_s / 60, 1) - 1)::bit(64)::text, '0')) AS class,
        (event_times->>'RUNNING')::timestamptz AS started,
        CASE WHEN status IN ('RUNNING', 'MUSTHALT', 'HALTING') THEN now() ELSE (event_times->>status)::timestamptz END AS upto,
        status IN ('RUNNING', 'MUSTHALT', 'HALTING') AS running, status = 'HALTED' AS halted, max_duration_s
    FROM jobs
    WHERE created_at >= $1 AND status IN ('FINISHED', 'FAILED', 'CANCELLED', 'HALTED', 'RUNNING', 'MUSTHALT', 'HALTING')
      AND max_duration_s > 0 AND event_times ? 'RUNNING' AND (event_times ? status OR status IN ('RUNNING', 'MUSTHALT', 'HALTING'))),
r AS (
    SELECT user_id, class, running, running OR halted AS censored, LEAST(1, GREATEST(0, extract(epoch FROM upto - started) / max_duration_s))::float8 AS ratio,
        row_number() OVER (PARTITION BY user_id, class ORDER BY started DESC, uuid DESC) AS latest
    FROM w),
recent AS (
    SELECT user_id, class, array_agg(ratio ORDER BY latest) AS recent, array_agg(censored ORDER BY latest) AS recent_censored
    FROM r WHERE latest <= $4 GROUP BY user_id, class),
g AS (
    SELECT user_id, class, GROUPING(user_id) AS any_user, GROUPING(class) AS any_class, count(*) AS jobs,
        COALESCE(avg(ratio), 1) AS mid, percentile_cont($3::float8[]) WITHIN GROUP (ORDER BY ratio) AS q
    FROM r WHERE NOT running GROUP BY GROUPING SETS ((user_id, class), (class), (user_id), ())
    HAVING count(*) >= $2 OR (GROUPING(user_id) = 1 AND GROUPING(class) = 1))
SELECT g.*, recent.recent, recent.recent_censored FROM g
LEFT JOIN recent ON g.any_user = 0 AND g.any_class = 0 AND recent.user_id = g.user_id AND recent.class = g.class`,
		since, minJobs, points, recent)
	if err != nil {
		return nil, mapErr(err, "run ratios")
	}
	out := make([]RunRatio, 0, len(rows))
	for _, r := range rows {
		rr := RunRatio{UserID: r.UserID.Int64, Class: int(r.Class.Int64), Jobs: r.Jobs, Mid: r.Mid, Q: r.Q, Recent: r.Recent, Censored: r.Censored}
		if r.AnyUser == 1 {
			rr.UserID = 0
		}
		if r.AnyClass == 1 {
			rr.Class = -1
		}
		out = append(out, rr)
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
