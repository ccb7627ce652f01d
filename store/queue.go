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

// QueuedKey is what the scheduler must read of every queued job at every pass: which jobs are
// queued, in what order, and whose. The request, the bulk of a row, never changes after
// submit (nor do the owner and the creation time), so the leader keeps requests in memory and
// reads only those of jobs it has not seen queued before (QueuedRequests).
type QueuedKey struct {
	UUID      string    `db:"uuid"`
	UserID    int64     `db:"user_id"`
	ProjectID int64     `db:"project_id"`
	Created   time.Time `db:"created_at"`
}

// ListQueuedKeys returns every queued job's key, oldest first. The order is made here: sorting
// 100,000 rows spilled to disk in Postgres, and the jobs_queued_idx order lacks the uuid that
// breaks ties.
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

// QueuedRequest is a queued job's key with its decoded request.
type QueuedRequest struct {
	QueuedKey
	Request job.Request
}

// QueuedRequests returns the keys and requests of those of the named jobs that are still
// queued (a job that left the queue since it was listed is left out).
func (s *Store) QueuedRequests(ctx context.Context, uuids []string) ([]QueuedRequest, error) {
	if len(uuids) == 0 {
		return nil, nil
	}
	var rows []struct {
		QueuedKey
		Request []byte `db:"request"`
	}
	err := s.q.SelectContext(ctx, &rows, `SELECT uuid, user_id, project_id, created_at, request FROM jobs
WHERE uuid = ANY($1::uuid[]) AND status = 'QUEUED'`, pq.Array(uuids))
	if err != nil {
		return nil, mapErr(err, "read queued requests")
	}
	out := make([]QueuedRequest, len(rows))
	for i, r := range rows {
		out[i].QueuedKey = r.QueuedKey
		if err := json.Unmarshal(r.Request, &out[i].Request); err != nil {
			return nil, fmt.Errorf("decode request of job %s: %w", r.UUID, err)
		}
	}
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
	_, err = s.q.ExecContext(ctx, `UPDATE jobs j SET scheduling = (j.scheduling - 'estimatedStart' - 'estimatedStartEarliest' - 'estimatedStartLatest')
    || COALESCE(e.value, '{}'::jsonb)
FROM jobs j2 LEFT JOIN jsonb_each($1::jsonb) e ON e.key = j2.uuid::text
WHERE j.uuid = j2.uuid AND j2.status = 'QUEUED' AND ($2::uuid[] IS NULL OR j2.uuid = ANY($2::uuid[]))
  AND jsonb_strip_nulls(jsonb_build_object('estimatedStart', j.scheduling->'estimatedStart',
        'estimatedStartEarliest', j.scheduling->'estimatedStartEarliest', 'estimatedStartLatest', j.scheduling->'estimatedStartLatest'))
      IS DISTINCT FROM COALESCE(e.value, '{}'::jsonb)`, data, pq.Array(among))
	return mapErr(err, "set estimated starts")
}
