package leader

import (
	"context"
	"log/slog"
	"reflect"
	"time"

	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/store"
)

// queue is the leader's memory of the queued jobs between passes (issue 16). Reading and
// decoding every queued job's request at every pass was most of a pass with a long queue
// (100,000 jobs: seconds), yet a request never changes after submit: a pass now lists only
// which jobs are queued (store.ListQueuedKeys, a few columns from the queue's index) and reads
// the requests of the jobs it has not seen queued before. What the list no longer names (jobs
// assigned, cancelled, failed) is forgotten, so the memory is the queue's size.
//
// The memory starts empty (a new leader, or a leader again after losing the lease, reads
// everything), and is checked against a full read every checkEvery: any difference is a bug
// (a request changed in place), logged and counted, and the full read replaces the memory.
type queue struct {
	jobs       map[string]scheduler.Job
	checkEvery time.Duration
	checkedAt  time.Time
	log        *slog.Logger
	// onDrift is called with the number of jobs found different by a check.
	onDrift func(n int)
}

func newQueue(checkEvery time.Duration, log *slog.Logger, onDrift func(int)) *queue {
	return &queue{checkEvery: checkEvery, log: log, onDrift: onDrift}
}

// reset forgets everything: the next read is a full one (a change of leader).
func (q *queue) reset() { q.jobs, q.checkedAt = nil, time.Time{} }

// read returns the queued jobs in queue order (oldest first).
func (q *queue) read(ctx context.Context, st *store.Store) ([]scheduler.Job, error) {
	keys, err := st.ListQueuedKeys(ctx)
	if err != nil {
		return nil, err
	}
	check := q.jobs != nil && time.Since(q.checkedAt) >= q.checkEvery
	var want []string
	for _, k := range keys {
		if _, ok := q.jobs[k.UUID]; !ok || check {
			want = append(want, k.UUID)
		}
	}
	fresh, err := st.QueuedRequests(ctx, want)
	if err != nil {
		return nil, err
	}
	next := make(map[string]scheduler.Job, len(keys))
	for _, r := range fresh {
		next[r.UUID] = scheduler.Job{UUID: r.UUID, Request: r.Request, Submitted: r.Created, UserID: r.UserID, ProjectID: r.ProjectID}
	}
	if check {
		q.compare(next)
	}
	if q.jobs == nil || check {
		q.checkedAt = time.Now()
	}
	out := make([]scheduler.Job, 0, len(keys))
	for _, k := range keys {
		j, ok := next[k.UUID]
		if !ok {
			if j, ok = q.jobs[k.UUID]; !ok {
				continue // left the queue between the two reads
			}
			next[k.UUID] = j
		}
		out = append(out, j)
	}
	q.jobs = next
	return out, nil
}

// compare logs and counts the remembered jobs that a full read found different: a bug.
func (q *queue) compare(fresh map[string]scheduler.Job) {
	drift := 0
	for id, j := range fresh {
		old, ok := q.jobs[id]
		if ok && !reflect.DeepEqual(old, j) {
			drift++
			if drift <= 10 {
				q.log.Error("scheduler memory drift: a queued job's request or owner differs from the database (a bug: requests never change after submit)",
					"job", id)
			}
		}
	}
	if drift > 0 {
		q.log.Error("scheduler memory drift: the full read differs from what the leader remembered; the full read replaces it", "jobs", drift)
		if q.onDrift != nil {
			q.onDrift(drift)
		}
	}
}
