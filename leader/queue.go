package leader

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/store"
)

// queue is the leader's memory between passes (issue 16) of the jobs a pass reads: the queued
// ones with their requests, and what the jobs on slaves hold. Reading all of them at every pass
// was most of a pass on a busy cluster (B2x: 20,000 queued and 6,000 running jobs, ~160 ms of
// Postgres and as much of the master per pass, at a pass a second); a pass now reads only the
// jobs whose state changed since its last read (store's change feed: JobsChangedSince), and what
// ended jobs still hold (a short list) in full.
//
// The memory starts empty (a new leader, or a leader again after losing the lease, reads
// everything), and is checked against a full read every checkEvery: any difference is a bug (a
// change the feed missed, or a request changed in place), logged and counted, and the full read
// replaces the memory. A job a pass's conditional writes found changed behind its back is read
// again by name at the next pass (recheck), whatever the feed says.
type queue struct {
	// jobs are the queued jobs, held what the live jobs hold, by job.
	jobs map[string]scheduler.Job
	held map[string]store.SchedJob
	// order and holders are the same, oldest first: kept sorted between passes, since a pass
	// mostly adds a few new jobs at the end and removes a few.
	order   []scheduler.Job
	holders []store.SchedJob
	// mark is where the next read of the feed starts.
	mark    store.ChangeMark
	recheck map[string]bool
	// arrived and departed are the jobs that came into the queue and those that left it since
	// takeChanges last took them (a job may be in both); swept says a full read replaced the
	// memory meanwhile.
	arrived, departed []string
	swept             bool

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
func (q *queue) reset() {
	q.jobs, q.held, q.order, q.holders, q.recheck, q.checkedAt = nil, nil, nil, nil, nil, time.Time{}
	q.arrived, q.departed, q.swept = nil, nil, true
}

// takeChanges returns the jobs that came into the queue and those that left it since the last
// call (a job that left and came back, or came and left, is in both: ask queued), and swept
// true when a full read replaced the memory meanwhile (the lists are exact all the same). The
// leader follows what it keeps per queued job with them, at every pass: sweeping its maps of
// 20,000 queued jobs at every pass was a third of a pass's CPU when passes come back to back
// (B2x), and looking each queued job up in a map of the jobs planned, another third.
func (q *queue) takeChanges() (arrived, departed []string, swept bool) {
	arrived, departed, swept = q.arrived, q.departed, q.swept
	q.arrived, q.departed, q.swept = nil, nil, false
	return arrived, departed, swept
}

// queued says whether the memory holds id as queued.
func (q *queue) queued(id string) bool {
	_, ok := q.jobs[id]
	return ok
}

// readAgain makes the next read read these jobs whatever the feed says: a pass's conditional
// write found them in another state than the snapshot's.
func (q *queue) readAgain(ids ...string) {
	if q.recheck == nil {
		q.recheck = map[string]bool{}
	}
	for _, id := range ids {
		q.recheck[id] = true
	}
}

// rechecked lists the jobs readAgain named.
func (q *queue) rechecked() []string {
	also := make([]string, 0, len(q.recheck))
	for id := range q.recheck {
		also = append(also, id)
	}
	return also
}

// read returns the queued jobs in queue order (oldest first) and what is held on the slaves
// (oldest first, as store.ListHeld orders it); mark, taken before the read, is where the next
// read of the feed starts. The queued jobs' slice is the memory's own: valid until the next
// read, and not to be changed.
func (q *queue) read(ctx context.Context, st *store.Store, mark store.ChangeMark) ([]scheduler.Job, []store.Held, error) {
	full := q.jobs == nil || time.Since(q.checkedAt) >= q.checkEvery
	if full {
		// A check compares the memory, brought up to date through the feed, with the full
		// read, both in one snapshot: compared with the memory of the last pass, every change
		// made since (submits, ends: hundreds at B8x's size) looked like drift.
		check := q.jobs != nil
		also := q.rechecked()
		var rows, changed []store.SchedJob
		err := st.InSnapshot(ctx, func(tx *store.Store) error {
			var err error
			if check {
				if changed, err = tx.JobsChangedSince(ctx, q.mark, also); err != nil {
					return err
				}
			}
			rows, err = tx.SchedulerJobs(ctx)
			return err
		})
		if err != nil {
			return nil, nil, err
		}
		if check {
			if err := q.apply(changed, also); err != nil {
				return nil, nil, err
			}
		}
		decoded, err := decodeQueued(rows)
		if err != nil {
			return nil, nil, err
		}
		jobs, held := make(map[string]scheduler.Job, len(rows)), map[string]store.SchedJob{}
		for i, r := range rows {
			if err := put(jobs, held, decoded[i], r); err != nil {
				return nil, nil, err
			}
		}
		if q.jobs != nil {
			q.compare(jobs, held)
		}
		q.replace(jobs, held)
	} else {
		also := q.rechecked()
		rows, err := st.JobsChangedSince(ctx, q.mark, also)
		if err != nil {
			return nil, nil, err
		}
		if err := q.apply(rows, also); err != nil {
			return nil, nil, err
		}
	}
	q.mark, q.recheck = mark, nil
	releasing, err := st.Releasing(ctx)
	if err != nil {
		return nil, nil, err
	}
	slices.SortFunc(releasing, compareHeld)
	held := make([]store.Held, 0, len(q.holders)+len(releasing))
	i := 0
	for _, r := range releasing {
		for ; i < len(q.holders) && compareHeld(q.holders[i], r) <= 0; i++ {
			held = append(held, q.holders[i].Held)
		}
		held = append(held, r.Held)
	}
	for _, h := range q.holders[i:] {
		held = append(held, h.Held)
	}
	return q.order, held, nil
}

// replace puts a full read in the memory's place, and notes the jobs that came and left.
func (q *queue) replace(jobs map[string]scheduler.Job, held map[string]store.SchedJob) {
	for id := range jobs {
		if _, ok := q.jobs[id]; !ok {
			q.arrived = append(q.arrived, id)
		}
	}
	for id := range q.jobs {
		if _, ok := jobs[id]; !ok {
			q.departed = append(q.departed, id)
		}
	}
	q.jobs, q.held, q.checkedAt = jobs, held, time.Now()
	q.order, q.holders = sortedValues(jobs, compareJobs), sortedValues(held, compareHeld)
	q.swept = true
}

// apply brings the memory up to date with the changed rows; also are jobs read by name, which
// are forgotten when they no longer exist.
func (q *queue) apply(rows []store.SchedJob, also []string) error {
	seen := make(map[string]bool, len(rows))
	var addedJobs, removedJobs []scheduler.Job
	var addedHeld []store.SchedJob
	dropHeld := map[string]bool{}
	for _, r := range rows {
		if seen[r.UUID] {
			continue
		}
		seen[r.UUID] = true
		_, wasQueued := q.jobs[r.UUID]
		_, wasHeld := q.held[r.UUID]
		old, hadOld := q.jobs[r.UUID]
		delete(q.jobs, r.UUID)
		delete(q.held, r.UUID)
		var keep *scheduler.Job
		if hadOld {
			keep = &old
		}
		if err := put(q.jobs, q.held, keep, r); err != nil {
			return err
		}
		_, isQueued := q.jobs[r.UUID]
		h, isHeld := q.held[r.UUID]
		switch {
		case wasQueued && !isQueued:
			removedJobs = append(removedJobs, old)
		case !wasQueued && isQueued:
			addedJobs = append(addedJobs, q.jobs[r.UUID])
			q.arrived = append(q.arrived, r.UUID)
		}
		if wasHeld {
			dropHeld[r.UUID] = true // changed or gone: its old entry leaves the list
		}
		if isHeld {
			addedHeld = append(addedHeld, h)
		}
	}
	for _, id := range also {
		if seen[id] {
			continue
		}
		if old, ok := q.jobs[id]; ok {
			delete(q.jobs, id)
			removedJobs = append(removedJobs, old)
		}
		if _, ok := q.held[id]; ok {
			delete(q.held, id)
			dropHeld[id] = true
		}
	}
	// In place: the slices read returned are not used after the pass that read them.
	if len(removedJobs) > 0 {
		slices.SortFunc(removedJobs, compareJobs)
		q.order = removeSorted(q.order, removedJobs, compareJobs)
		for _, j := range removedJobs {
			q.departed = append(q.departed, j.UUID)
		}
	}
	if len(addedJobs) > 0 {
		slices.SortFunc(addedJobs, compareJobs)
		q.order = mergeSorted(q.order, addedJobs, compareJobs)
	}
	if len(dropHeld) > 0 {
		q.holders = slices.DeleteFunc(q.holders, func(h store.SchedJob) bool { return dropHeld[h.UUID] })
	}
	if len(addedHeld) > 0 {
		slices.SortFunc(addedHeld, compareHeld)
		q.holders = mergeSorted(q.holders, addedHeld, compareHeld)
	}
	return nil
}

// decodeQueued decodes the requests of the queued jobs among rows (nil for the others), on
// every core: a term's first read of 100,000 queued jobs spent 2.8 s decoding them, before the
// burst's first assignment.
func decodeQueued(rows []store.SchedJob) ([]*scheduler.Job, error) {
	out := make([]*scheduler.Job, len(rows))
	var g errgroup.Group
	n := runtime.GOMAXPROCS(0)
	chunk := (len(rows) + n - 1) / n
	for lo := 0; lo < len(rows); lo += chunk {
		hi := min(lo+chunk, len(rows))
		g.Go(func() error {
			for i := lo; i < hi; i++ {
				r := rows[i]
				if !r.Queued() {
					continue
				}
				j, err := decodeJob(r)
				if err != nil {
					return err
				}
				out[i] = &j
			}
			return nil
		})
	}
	return out, g.Wait()
}

// decodeJob is the queued job a row describes, its request decoded.
func decodeJob(r store.SchedJob) (scheduler.Job, error) {
	j := scheduler.Job{UUID: r.UUID, Submitted: r.Created, UserID: r.UserID, ProjectID: r.ProjectID}
	if err := json.Unmarshal(r.Request, &j.Request); err != nil {
		return j, fmt.Errorf("decode request of job %s: %w", r.UUID, err)
	}
	return j, nil
}

// put files a row: a queued job in jobs (keeping keep, the job as remembered, rather than
// decoding its request again: a request never changes), a job holding resources in held.
func put(jobs map[string]scheduler.Job, held map[string]store.SchedJob, keep *scheduler.Job, r store.SchedJob) error {
	switch {
	case r.Queued():
		if keep != nil {
			jobs[r.UUID] = *keep
			return nil
		}
		j, err := decodeJob(r)
		if err != nil {
			return err
		}
		jobs[r.UUID] = j
	case r.Holds:
		r.Request = nil
		held[r.UUID] = r
	}
	return nil
}

// overdue returns the remembered jobs that will have run past their maxDuration (since RUNNING)
// by before: the candidates the housekeeping asks the database about (store.ListExpiredJobs),
// which decides on its own clock. known is false when nothing is remembered yet (the first
// pass of a term): then every running job must be asked about.
func (q *queue) overdue(before time.Time) (ids []string, known bool) {
	if q.held == nil {
		return nil, false
	}
	ids = []string{}
	for id, h := range q.held {
		switch h.Status {
		case "RUNNING", "MUSTHALT", "HALTING":
			if h.RunningAt.Valid && h.RunningAt.Time.Add(time.Duration(h.MaxDuration)*time.Second).Before(before) {
				ids = append(ids, id)
			}
		}
	}
	return ids, true
}

// compareJobs is the queue's order: oldest first, ties broken by id.
func compareJobs(a, b scheduler.Job) int {
	return cmp.Or(a.Submitted.Compare(b.Submitted), strings.Compare(a.UUID, b.UUID))
}

// compareHeld orders what is held as store.ListHeld does: by creation (or release), then id.
func compareHeld(a, b store.SchedJob) int {
	return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.UUID, b.UUID))
}

func sortedValues[T any](m map[string]T, cmp func(a, b T) int) []T {
	out := make([]T, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	slices.SortFunc(out, cmp)
	return out
}

// mergeSorted merges two sorted lists into one (reusing a's array when it can).
func mergeSorted[T any](a, b []T, cmp func(a, b T) int) []T {
	if len(b) == 0 {
		return a
	}
	if len(a) == 0 || cmp(a[len(a)-1], b[0]) <= 0 {
		return append(a, b...) // the usual case: new jobs are the newest
	}
	out := make([]T, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if cmp(b[j], a[i]) < 0 {
			out = append(out, b[j])
			j++
		} else {
			out = append(out, a[i])
			i++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

// removeSorted removes from a sorted list the elements of gone (sorted the same way, each in
// the list), in place: it looks for the first by binary search and moves only what follows it
// (a pass's removed jobs are a few of a long queue, often its newest).
func removeSorted[T any](list, gone []T, cmp func(a, b T) int) []T {
	if len(gone) == 0 {
		return list
	}
	first, _ := slices.BinarySearchFunc(list, gone[0], cmp)
	out, g := first, 0
	for i := first; i < len(list); i++ {
		for g < len(gone) && cmp(gone[g], list[i]) < 0 {
			g++ // not in the list after all
		}
		if g < len(gone) && cmp(gone[g], list[i]) == 0 {
			g++
			continue
		}
		list[out] = list[i]
		out++
	}
	clear(list[out:])
	return list[:out]
}

// differing lists the keys whose values differ between two maps, or are in one only.
func differing[T any](a, b map[string]T) []string {
	var out []string
	for id, v := range b {
		if old, ok := a[id]; !ok || !reflect.DeepEqual(old, v) {
			out = append(out, id)
		}
	}
	for id := range a {
		if _, ok := b[id]; !ok {
			out = append(out, id)
		}
	}
	return out
}

// compare logs and counts what a full read found different from the memory: a bug.
func (q *queue) compare(jobs map[string]scheduler.Job, held map[string]store.SchedJob) {
	diff := append(differing(q.jobs, jobs), differing(q.held, held)...)
	slices.Sort(diff)
	diff = slices.Compact(diff)
	for i, id := range diff {
		if i == 10 {
			break
		}
		q.log.Error("scheduler memory drift: a job differs from the database (a bug: a change the feed missed, or a request changed in place)",
			"job", id)
	}
	if len(diff) > 0 {
		q.log.Error("scheduler memory drift: the full read differs from what the leader remembered; the full read replaces it", "jobs", len(diff))
		if q.onDrift != nil {
			q.onDrift(len(diff))
		}
	}
}
