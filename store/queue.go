package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lib/pq"

	"github.com/opengpulab/gpulab/job"
)

// QueuedKey is a queued job's place in the queue and its owner.
type QueuedKey struct {
	UUID      string    `db:"uuid"`
	UserID    int64     `db:"user_id"`
	ProjectID int64     `db:"project_id"`
	Created   time.Time `db:"created_at"`
}

// ListQueuedKeys returns every queued job's key, oldest first: the queue as the leader's memory
// of it (SchedulerJobs, JobsChangedSince) must hold it. The order is made here: sorting 100,000
// rows spilled to disk in Postgres, and the jobs_queued_idx order lacks the uuid that breaks
// ties.
func (s *Store) ListQueuedKeys(ctx context.Context) ([]QueuedKey, error) {
	var out []QueuedKey
	if err := s.q.SelectContext(ctx, &out, `SELECT uuid, user_id, project_id, created_at FROM jobs WHERE status = 'QUEUED'`); err != nil {
		return nil, mapErr(err, "list queued jobs")
	}
	slices.SortFunc(out, func(a, b QueuedKey) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.UUID, b.UUID)
	})
	return out, nil
}

// SetStartEstimatesAmong is SetStartEstimates for a pass that planned only some of the queue
// (the leader's narrowed passes): only the named jobs' estimates are set or cleared, the
// others keep theirs until a pass plans them again; nil names every queued job.
func (s *Store) SetStartEstimatesAmong(ctx context.Context, est map[string]job.StartEstimate, among []string) error {
	data, err := json.Marshal(est)
	if err != nil {
		return fmt.Errorf("encode estimated starts: %w", err)
	}
	// Only rows whose estimate changed are written. A narrowed pass names its few hundred jobs:
	// the statement starts from them (the primary key) rather than from the whole queue, which
	// it matched against the list row by row (20,000 queued: 20 ms a pass).
	//
	// An estimate never waits for a job's row: rows another transaction holds (a pass
	// assigning the job, a cancel) are skipped, and get their estimate at the next forecast.
	// The forecaster writes thousands of rows beside the passes; waiting, it locked rows in
	// another order than a pass's assignment and the two deadlocked (bench/ B8x, minute 15:
	// Postgres broke the cycle after a second, failing the pass).
	const set = `WITH locked AS (
    SELECT j.uuid, COALESCE(e.value, '{}'::jsonb) AS value
    FROM %s JOIN jobs j ON j.uuid = j2.uuid LEFT JOIN jsonb_each($1::jsonb) e ON e.key = j2.uuid::text
    WHERE j.status = 'QUEUED'
      AND jsonb_strip_nulls(jsonb_build_object('estimatedStart', j.scheduling->'estimatedStart',
            'estimatedStartEarliest', j.scheduling->'estimatedStartEarliest', 'estimatedStartLatest', j.scheduling->'estimatedStartLatest'))
          IS DISTINCT FROM COALESCE(e.value, '{}'::jsonb)
    FOR UPDATE OF j SKIP LOCKED
)
UPDATE jobs j SET scheduling = (j.scheduling - 'estimatedStart' - 'estimatedStartEarliest' - 'estimatedStartLatest') || l.value
FROM locked l WHERE j.uuid = l.uuid`
	if among == nil {
		_, err = s.q.ExecContext(ctx, fmt.Sprintf(set, `(SELECT uuid FROM jobs WHERE status = 'QUEUED') j2`), data)
	} else {
		_, err = s.q.ExecContext(ctx, fmt.Sprintf(set, `unnest($2::uuid[]) AS j2(uuid)`), data, pq.Array(among))
	}
	return mapErr(err, "set estimated starts")
}
