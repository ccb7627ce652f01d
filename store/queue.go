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
	// What a queued job is told lives apart from the job (job_waits, migration 0022): an
	// estimate neither rewrites nor locks the job's row. Rows are written in the order of
	// their uuids, as the explanations are (the forecaster writes thousands beside the passes:
	// two writers of the same rows in one order never deadlock), and an assignment never waits
	// for them (store's assignClear).
	const set = `WITH changed AS (
    SELECT DISTINCT ON (j.uuid) j.uuid, COALESCE(e.value, '{}'::jsonb) AS value
    FROM %s JOIN jobs j ON j.uuid = j2.uuid LEFT JOIN jsonb_each($1::jsonb) e ON e.key = j2.uuid::text
        LEFT JOIN job_waits w ON w.job_uuid = j.uuid
    WHERE j.status = 'QUEUED' AND COALESCE(w.estimate, '{}'::jsonb) IS DISTINCT FROM COALESCE(e.value, '{}'::jsonb)
    ORDER BY j.uuid
)
INSERT INTO job_waits AS w (job_uuid, estimate) SELECT uuid, value FROM changed
ON CONFLICT (job_uuid) DO UPDATE SET estimate = EXCLUDED.estimate`
	if among == nil {
		_, err = s.q.ExecContext(ctx, fmt.Sprintf(set, `(SELECT uuid FROM jobs WHERE status = 'QUEUED') j2`), data)
	} else {
		_, err = s.q.ExecContext(ctx, fmt.Sprintf(set, `unnest($2::uuid[]) AS j2(uuid)`), data, pq.Array(among))
	}
	return mapErr(err, "set estimated starts")
}
