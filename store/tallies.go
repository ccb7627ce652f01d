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
// counts that much late at most.
func (s *Store) AccrueTallies(ctx context.Context, w TallyWeights, halfLife time.Duration) error {
	_, err := s.q.ExecContext(ctx, `WITH
added AS (INSERT INTO user_tallies (user_id) SELECT id FROM users ON CONFLICT (user_id) DO NOTHING),
use AS (SELECT user_id, SUM(gpus * $1::float8 + cpus * $2::float8 + cpu_memory_gb * $3::float8) AS weight FROM jobs WHERE status = ANY($4) GROUP BY user_id)
UPDATE user_tallies t SET
    tally = t.tally * power(0.5, EXTRACT(EPOCH FROM (now() - t.updated_at)) / $5::float8)
          + COALESCE(u.weight, 0) * EXTRACT(EPOCH FROM (now() - t.updated_at)) / 3600.0,
    updated_at = now()
FROM user_tallies t2 LEFT JOIN use u ON u.user_id = t2.user_id
WHERE t.user_id = t2.user_id`, w.GPU, w.CPU, w.MemoryGb, pq.Array(statusStrings(job.RunningStatuses)), halfLife.Seconds())
	return mapErr(err, "accrue tallies")
}

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
