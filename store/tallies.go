package store

import (
	"context"
	"time"

	"github.com/lib/pq"

	"github.com/opengpulab/gpulab/job"
)

// TallyWeights say how much holding one GPU, one CPU or one GB of memory for an hour adds to
// a user's tally (SPEC 7.2: GPUs weigh most).
type TallyWeights struct {
	GPU, CPU, MemoryGb float64
}

// DefaultTallyWeights: a GPU-hour counts 1, a CPU-hour 0.05, a GB-hour 0.005.
var DefaultTallyWeights = TallyWeights{GPU: 1, CPU: 0.05, MemoryGb: 0.005}

// Weight is what a job adds to its owner's tally per hour it runs.
func (w TallyWeights) Weight(gpus, cpus, memGb int) float64 {
	return w.GPU*float64(gpus) + w.CPU*float64(cpus) + w.MemoryGb*float64(memGb)
}

// AccrueTallies brings every user's tally up to now: the old value decays with the half-life,
// and every job holding resources adds its weight for the time since the last update. Called by
// the leader's passes at most every few seconds (leader.TallyEvery), so a start or an end
// counts that much late at most. The weights are read from the jobs (a GROUP BY over every
// running job: 100–145 ms at 35,000, bench/ B8x); a leader that keeps the running jobs in
// memory gives them instead (AccrueTalliesOf).
func (s *Store) AccrueTallies(ctx context.Context, w TallyWeights, halfLife time.Duration) error {
	_, err := s.q.ExecContext(ctx, `WITH
use AS (SELECT user_id, SUM(gpus * $2::float8 + cpus * $3::float8 + cpu_memory_gb * $4::float8) AS weight FROM jobs WHERE status = ANY($5) GROUP BY user_id),
`+accrue, halfLife.Seconds(), w.GPU, w.CPU, w.MemoryGb, pq.Array(statusStrings(job.RunningStatuses)))
	return mapErr(err, "accrue tallies")
}

// AccrueTalliesOf is AccrueTallies with each user's weight given (what his running jobs add to
// his tally per hour, TallyWeights.Weight; a user left out adds nothing).
func (s *Store) AccrueTalliesOf(ctx context.Context, weights map[int64]float64, halfLife time.Duration) error {
	users, each := make([]int64, 0, len(weights)), make([]float64, 0, len(weights))
	for u, w := range weights {
		users, each = append(users, u), append(each, w)
	}
	_, err := s.q.ExecContext(ctx, `WITH
use AS (SELECT * FROM unnest($2::bigint[], $3::float8[]) AS u(user_id, weight)),
`+accrue, halfLife.Seconds(), pq.Array(users), pq.Array(each))
	return mapErr(err, "accrue tallies")
}

// accrue ends the tally accrual's statements, after their CTE use (user_id, weight): every
// user gets a tally row, and every row is decayed with the half-life ($1, seconds) and grown by
// its user's weight for the time since its last update.
const accrue = `added AS (INSERT INTO user_tallies (user_id) SELECT id FROM users ON CONFLICT (user_id) DO NOTHING)
UPDATE user_tallies t SET
    tally = t.tally * power(0.5, EXTRACT(EPOCH FROM (now() - t.updated_at)) / $1::float8)
          + COALESCE(u.weight, 0) * EXTRACT(EPOCH FROM (now() - t.updated_at)) / 3600.0,
    updated_at = now()
FROM user_tallies t2 LEFT JOIN use u ON u.user_id = t2.user_id
WHERE t.user_id = t2.user_id`

// Tallies returns every user's tally, decayed to now (without writing).
func (s *Store) Tallies(ctx context.Context, halfLife time.Duration) (map[int64]float64, error) {
	var rows []struct {
		UserID int64   `db:"user_id"`
		Tally  float64 `db:"tally"`
	}
	if err := s.q.SelectContext(ctx, &rows, `SELECT user_id, tally * power(0.5, EXTRACT(EPOCH FROM (now() - updated_at)) / $1) AS tally
FROM user_tallies`, halfLife.Seconds()); err != nil {
		return nil, mapErr(err, "read tallies")
	}
	out := make(map[int64]float64, len(rows))
	for _, r := range rows {
		out[r.UserID] = r.Tally
	}
	return out, nil
}

// ActiveUserIDs lists the users with a job that is queued or holds resources: with the users
// whose tally still counts, they are the ones a user's standing is measured against.
func (s *Store) ActiveUserIDs(ctx context.Context) ([]int64, error) {
	var ids []int64
	err := s.q.SelectContext(ctx, &ids, `SELECT DISTINCT user_id FROM jobs WHERE status = ANY($1)`,
		pq.Array(append(statusStrings(job.PendingStatuses), statusStrings(job.RunningStatuses)...)))
	return ids, mapErr(err, "list active users")
}
