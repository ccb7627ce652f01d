package leader

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"log/slog"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/opengpulab/gpulab/job"
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
// replaces the memory. The check's full read runs beside the passes (checker), not in one: at
// B8x's size (20,000 queued and 40,000 running jobs on a saturated machine) a pass that read
// everything took 5–8 s, so the jobs submitted then waited that long. A job a pass's
// conditional writes found changed behind its back is read again by name at the next pass
// (recheck), whatever the feed says.
type queue struct {
	memory
	// mark is where the next read of the feed starts.
	mark    store.ChangeMark
	recheck map[string]bool
	// arrived and departed are the jobs that came into the queue and those that left it since
	// takeChanges last took them (a job may be in both); swept says a full read replaced the
	// memory meanwhile.
	arrived, departed []string
	swept             bool

	check checker[memory]
	log   *slog.Logger
	// onDrift is called with the number of jobs found different by a check.
	onDrift func(n int)
	// lastRead is what the last read did, for the pass's debug log.
	lastRead readStats
}

// memory is what the queue remembers, or a check read in full.
type memory struct {
	// jobs are the queued jobs, held what the live jobs hold, by job.
	jobs map[string]scheduler.Job
	held map[string]store.SchedJob
	// order and holders are the same, oldest first: kept sorted between passes, since a pass
	// mostly adds a few new jobs at the end and removes a few.
	order   []scheduler.Job
	holders []heldJob
	// sums are the queued jobs' requests as read, hashed: a check compares them rather than the
	// decoded requests (reflect.DeepEqual over B8x's 20,000 queued and 37,000 live jobs took
	// 200 ms, in the pass that compares).
	sums map[string]uint64
}

// readStats is what one read of the queue did: a full read, the feed's (after a check when
// checked), how many rows the feed (or the full read) returned, and, for a full read, the time
// of its statements (the feed's are the pass's read, store.ReadPass).
type readStats struct {
	full, checked   bool
	rows            int
	feed, releasing time.Duration
}

func newQueue(checkEvery time.Duration, log *slog.Logger, onDrift func(int)) *queue {
	return &queue{check: newChecker[memory](checkEvery), log: log, onDrift: onDrift}
}

// reset forgets everything: the next read is a full one (a change of leader). A check still
// running is ignored when it ends.
func (q *queue) reset() {
	q.memory, q.recheck = memory{}, nil
	q.arrived, q.departed, q.swept = nil, nil, true
	q.check.reset()
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

// job is the memory's queued job id, not ok when it holds none.
func (q *queue) job(id string) (scheduler.Job, bool) {
	j, ok := q.jobs[id]
	return j, ok
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

// queueFeed is how a pass reads the jobs (next): whole (a term's first read), or the feed from
// a mark with the jobs to read again whatever their stamp, and the outcome of a check that
// ended to bring up to date with it.
type queueFeed struct {
	full bool
	from store.ChangeMark
	also []string
	done *checked[memory]
}

// next says how this pass reads the jobs; it takes the outcome of a check that ended and starts
// one that is due. The pass reads the feed and what ended jobs still hold (with its basics:
// store.ReadPass) and hands them to take.
func (q *queue) next(ctx context.Context, st *store.Store) queueFeed {
	if q.jobs == nil {
		return queueFeed{full: true}
	}
	done, from := q.check.feed(ctx, st, q.log, "jobs", q.mark, readMemory(st, len(q.jobs)))
	return queueFeed{from: from, also: q.rechecked(), done: done}
}

// readAll is how a pass reads the jobs when what the memory holds may be what the database no
// longer does (wentBack, or the database restarted): in full, a check running ignored (its
// read is as old).
func (q *queue) readAll() queueFeed {
	q.check.reset()
	return queueFeed{full: true}
}

// take returns the queued jobs in queue order (oldest first) and what is held on the slaves
// (oldest first, as store.ListHeld orders it), given the feed's rows and what ended jobs hold,
// read in that order as next said (with a full read, neither: take reads every job, then what
// ended jobs hold, itself); mark, taken before those reads, is where the next read of the feed
// starts. Both are the memory's own: valid until the next read, and not to be changed. A mark
// older than the last (wentBack) makes it a full read.
//
// A term's first read reads everything. Later reads read the feed; when a check is due, next
// starts one (checker) and the passes go on with the feed; the read after it ended reads the
// feed from the check's mark (or its own, the older), and take brings both the memory and the
// check's full read up to date with it and compares them.
func (q *queue) take(ctx context.Context, st *store.Store, n queueFeed, rows, releasing []store.SchedJob, mark store.ChangeMark) ([]scheduler.Job, heldList, error) {
	if !n.full && wentBack(mark, q.mark) {
		q.log.Warn(wentBackMessage, "what", "jobs", "mark", mark.String(), "last", q.mark.String())
		n = q.readAll()
	}
	q.lastRead = readStats{full: n.full}
	if n.full {
		t := time.Now()
		all, err := st.SchedulerJobs(ctx, len(q.jobs))
		if err != nil {
			return nil, heldList{}, err
		}
		q.lastRead.feed, q.lastRead.rows = time.Since(t), len(all)
		mem, err := fullMemory(all)
		if err != nil {
			return nil, heldList{}, err
		}
		q.replace(mem)
		q.check.at = time.Now()
		// What ended jobs hold is read after the jobs: a job that ends between the two reads
		// is then counted twice (safe), never not at all.
		t = time.Now()
		if releasing, err = st.Releasing(ctx); err != nil {
			return nil, heldList{}, err
		}
		q.lastRead.releasing = time.Since(t)
	} else {
		q.lastRead.rows, q.lastRead.checked = len(rows), n.done != nil
		if err := q.apply(rows, n.also); err != nil {
			return nil, heldList{}, err
		}
		if done := n.done; done != nil {
			// Both as of this read now: what changed since the check's read is no drift.
			if _, _, err := done.read.apply(rows, n.also); err != nil {
				return nil, heldList{}, err
			}
			if q.compare(done.read) > 0 {
				q.replace(done.read)
			}
			q.check.at = done.started
		}
	}
	q.mark, q.recheck = mark, nil
	slices.SortFunc(releasing, func(a, b store.SchedJob) int { return compareHeld(&a, &b) })
	return q.order, heldList{live: q.holders, releasing: releasing}, nil
}

// heldList is what is held on the slaves: the live jobs' (the memory's) and what ended jobs
// still hold, each sorted. all walks them merged, without copying the 40,000 live jobs' of
// B8x's size at every pass.
type heldList struct {
	live      []heldJob
	releasing []store.SchedJob
}

func (h heldList) len() int { return len(h.live) + len(h.releasing) }

// placed appends everything held to out, oldest first, as Plan sees it at now (setPlaced), each
// live job with its slave's place in view's index (heldJob.hint).
func (h heldList) placed(out []scheduler.Placed, now time.Time, view *slaveView) []scheduler.Placed {
	n := len(out)
	out = slices.Grow(out, h.len())[:n+h.len()]
	at, i := out[n:], 0
	for k := range h.releasing {
		r := &h.releasing[k]
		for ; i < len(h.live) && compareHeld(&h.live[i].SchedJob, r) <= 0; i++ {
			h.live[i].set(&at[0], now, view)
			at = at[1:]
		}
		setPlaced(&at[0], &r.Held, now)
		at = at[1:]
	}
	for k := i; k < len(h.live); k++ {
		h.live[k].set(&at[k-i], now, view)
	}
	return out
}

// heldJob is a live job's row as the memory keeps it, with where its slave was in the slave
// index of the view it was last planned with: the planner looked every running job's slave up
// by name at every pass (0.26 s of the master's CPU a minute at 2,000 slaves, bench/ B8x;
// scheduler.Placed.SlaveHint). The rows lie side by side in the memory's list, so a pass reads
// them in order: kept in heap objects of their own (tried), a pass read them more slowly than it
// had made them anew.
type heldJob struct {
	store.SchedJob
	// hint is the slave's place in the index of the view numbered view (slaveView.gen), plus
	// one, and slave its name as that index holds it; zero and "" when not found. A view of
	// another number finds them again.
	hint  int32
	view  uint32
	slave string
}

// set sets *pl to what the job holds as Plan sees it at now (setPlaced), with its slave's
// place in view's index: found again only when the view is not the one it was found in (a
// slave came, went or changed since).
func (x *heldJob) set(pl *scheduler.Placed, now time.Time, view *slaveView) {
	if x.view != view.gen {
		hint, name := view.index.Place(x.SlaveName)
		x.hint, x.slave, x.view = int32(hint), name, view.gen
	}
	setPlaced(pl, &x.Held, now)
	if x.hint > 0 {
		pl.SlaveHint, pl.SlaveName = int(x.hint), x.slave
	}
}

// readMemory is a check's read: every queued and live job, decoded. n, how many jobs the
// memory holds now, sizes the read (store.SchedulerJobs).
func readMemory(st *store.Store, n int) func(context.Context) (memory, error) {
	return func(ctx context.Context) (memory, error) {
		rows, err := st.SchedulerJobs(ctx, n)
		if err != nil {
			return memory{}, err
		}
		return fullMemory(rows)
	}
}

// fullMemory is the memory of a full read: every request decoded, both lists sorted.
func fullMemory(rows []store.SchedJob) (memory, error) {
	decoded, err := decodeQueued(rows)
	if err != nil {
		return memory{}, err
	}
	m := memory{jobs: make(map[string]scheduler.Job, len(rows)), held: map[string]store.SchedJob{}, sums: map[string]uint64{}}
	// The rows in the lists' order (compareJobs and compareHeld: by creation, then id), sorted
	// by their places: sorting the lists themselves moved every 608-byte Job some twenty times
	// (B1x's 100,000 queued jobs: 0.2 s).
	at := make([]int32, len(rows))
	queued := 0
	for i := range at {
		at[i] = int32(i)
		if decoded[i] != nil {
			queued++
		}
	}
	m.order, m.holders = make([]scheduler.Job, 0, queued), make([]heldJob, 0, len(rows)-queued)
	slices.SortFunc(at, func(a, b int32) int {
		return cmp.Or(rows[a].Created.Compare(rows[b].Created), strings.Compare(rows[a].UUID, rows[b].UUID))
	})
	for _, i := range at {
		r := rows[i]
		if err := m.put(decoded[i], requestSum(r.Request), r); err != nil {
			return memory{}, err
		}
		switch {
		case r.Queued():
			m.order = append(m.order, *decoded[i])
		case r.Holds:
			m.holders = append(m.holders, heldJob{SchedJob: m.held[r.UUID]})
		}
	}
	return m, nil
}

// replace puts a full read in the memory's place, and notes the jobs that came and left.
func (q *queue) replace(m memory) {
	for id := range m.jobs {
		if _, ok := q.jobs[id]; !ok {
			q.arrived = append(q.arrived, id)
		}
	}
	for id := range q.jobs {
		if _, ok := m.jobs[id]; !ok {
			q.departed = append(q.departed, id)
		}
	}
	q.memory, q.swept = m, true
}

// apply brings the memory up to date with the changed rows, and notes the jobs that came and
// left.
func (q *queue) apply(rows []store.SchedJob, also []string) error {
	arrived, departed, err := q.memory.apply(rows, also)
	q.arrived, q.departed = append(q.arrived, arrived...), append(q.departed, departed...)
	return err
}

// apply brings the memory up to date with the changed rows; also are jobs read by name, which
// are forgotten when they no longer exist. It returns the jobs that came into the queue and
// those that left it.
func (q *memory) apply(rows []store.SchedJob, also []string) (arrived, departed []string, err error) {
	seen := make(map[string]bool, len(rows))
	var addedJobs, removedJobs []scheduler.Job
	var addedHeld, droppedHeld []heldJob
	for _, r := range rows {
		if seen[r.UUID] {
			continue
		}
		seen[r.UUID] = true
		_, wasQueued := q.jobs[r.UUID]
		oldHeld, wasHeld := q.held[r.UUID]
		old, hadOld := q.jobs[r.UUID]
		oldSum := q.sums[r.UUID]
		delete(q.jobs, r.UUID)
		delete(q.held, r.UUID)
		delete(q.sums, r.UUID)
		keep, sum := (*scheduler.Job)(nil), oldSum
		if hadOld {
			keep = &old
		} else {
			sum = requestSum(r.Request)
		}
		if err := q.put(keep, sum, r); err != nil {
			return nil, nil, err
		}
		_, isQueued := q.jobs[r.UUID]
		h, isHeld := q.held[r.UUID]
		switch {
		case wasQueued && !isQueued:
			removedJobs = append(removedJobs, old)
		case !wasQueued && isQueued:
			addedJobs = append(addedJobs, q.jobs[r.UUID])
			arrived = append(arrived, r.UUID)
		}
		if wasHeld {
			droppedHeld = append(droppedHeld, heldJob{SchedJob: oldHeld}) // changed or gone: its old entry leaves the list
		}
		if isHeld {
			addedHeld = append(addedHeld, heldJob{SchedJob: h})
		}
	}
	for _, id := range also {
		if seen[id] {
			continue
		}
		if old, ok := q.jobs[id]; ok {
			delete(q.jobs, id)
			delete(q.sums, id)
			removedJobs = append(removedJobs, old)
		}
		if old, ok := q.held[id]; ok {
			delete(q.held, id)
			droppedHeld = append(droppedHeld, heldJob{SchedJob: old})
		}
	}
	// In place: the slices read returned are not used after the pass that read them.
	if len(removedJobs) > 0 {
		slices.SortFunc(removedJobs, compareJobs)
		q.order = removeSorted(q.order, removedJobs, compareJobs)
		for _, j := range removedJobs {
			departed = append(departed, j.UUID)
		}
	}
	if len(addedJobs) > 0 {
		slices.SortFunc(addedJobs, compareJobs)
		q.order = mergeSorted(q.order, addedJobs, compareJobs)
	}
	if len(droppedHeld) > 0 {
		slices.SortFunc(droppedHeld, compareHeldJobs)
		q.holders = removeSorted(q.holders, droppedHeld, compareHeldJobs)
	}
	if len(addedHeld) > 0 {
		slices.SortFunc(addedHeld, compareHeldJobs)
		q.holders = mergeSorted(q.holders, addedHeld, compareHeldJobs)
	}
	return arrived, departed, nil
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

// decodeJob is the queued job a row describes, with what the scheduler reads of its request
// (scheduled).
func decodeJob(r store.SchedJob) (scheduler.Job, error) {
	j := scheduler.Job{UUID: r.UUID, Submitted: r.Created, UserID: r.UserID, ProjectID: r.ProjectID}
	var s scheduled
	if err := json.Unmarshal(r.Request, &s); err != nil {
		return j, fmt.Errorf("decode request of job %s: %w", r.UUID, err)
	}
	j.Request = job.Request{Resources: s.Resources, Scheduling: s.Scheduling, Docker: job.Docker{Storage: s.Docker.Storage}}
	return j, nil
}

// scheduled is what the scheduler reads of a request: its resources, its scheduling and its
// storage (a RAM disk counts as memory: job.Request.TotalMemoryGb). The image, command,
// environment, ports and extras are skipped by the decoder, not built, and not kept in the
// leader's memory: a whole request of B1's kind took 6.1 µs and 17 allocations to decode, its
// parts 3.7 µs and 8 (a microbenchmark, 30 Nov); a term's first read of 100,000 queued jobs
// decoded for 0.53–0.55 s of CPU instead of 0.63–0.71 (bench/ TestPassCost).
type scheduled struct {
	Resources  job.Resources  `json:"resources"`
	Scheduling job.Scheduling `json:"scheduling"`
	Docker     struct {
		Storage []job.Storage `json:"storage"`
	} `json:"docker"`
}

// put files a row: a queued job in jobs with its request's sum (keeping keep, the job as
// remembered, rather than decoding its request again: a request never changes), a job holding
// resources in held.
func (m *memory) put(keep *scheduler.Job, sum uint64, r store.SchedJob) error {
	switch {
	case r.Queued():
		if m.sums == nil {
			m.sums = map[string]uint64{}
		}
		m.sums[r.UUID] = sum
		if keep != nil {
			m.jobs[r.UUID] = *keep
			return nil
		}
		j, err := decodeJob(r)
		if err != nil {
			return err
		}
		m.jobs[r.UUID] = j
	case r.Holds:
		r.Request = nil
		m.held[r.UUID] = r
	}
	return nil
}

// sumSeed makes the sums of one process comparable.
var sumSeed = maphash.MakeSeed()

// requestSum is a request's text hashed: Postgres writes a jsonb document the same way each
// time it is read, so that a request changed in place changes its sum.
func requestSum(text []byte) uint64 { return maphash.Bytes(sumSeed, text) }

// overdue returns the remembered jobs that will have run past their maxDuration (since RUNNING)
// by before: the candidates the housekeeping asks the database about (store.ListExpiredJobs),
// which decides on its own clock. known is false when nothing is remembered yet (the first
// pass of a term): then every running job must be asked about.
func (q *queue) overdue(before time.Time) (ids []string, known bool) {
	if q.held == nil {
		return nil, false
	}
	// The list, not the map: the same jobs, side by side in memory (a walk of the map was
	// 12 ms at B8x's size, 0.29 s of the master's CPU a minute at 2,000 slaves).
	ids = []string{}
	for i := range q.holders {
		h := &q.holders[i]
		switch h.Status {
		case job.StatusRunning, job.StatusMustHalt, job.StatusHalting:
			if h.RunningAt.Valid && h.RunningAt.Time.Add(time.Duration(h.MaxDuration)*time.Second).Before(before) {
				ids = append(ids, h.UUID)
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
func compareHeld(a, b *store.SchedJob) int {
	if c := a.Created.Compare(b.Created); c != 0 {
		return c
	}
	return strings.Compare(a.UUID, b.UUID)
}

// compareHeldJobs is compareHeld for the memory's list.
func compareHeldJobs(a, b heldJob) int { return compareHeld(&a.SchedJob, &b.SchedJob) }

// mergeSorted merges b into a, both sorted, in a's array when it has room (the memory's lists
// grow by a pass's few new entries, and a new array of 40,000 held jobs at every pass was most
// of what a pass allocated): it moves only the entries after the first of b's place, a run of
// them at a time, each of b's place found by a binary search. An entry of b equal to one of a
// goes after it.
//
// Moved one at a time, each compared with b's next, the entries after the first place were
// walked at every pass in B8x: a job a pass assigns was queued before many of the held jobs
// started (the fair order is not the order of submission), so it falls inside the list, not at
// its end, and so do the ended jobs removeSorted takes out.
func mergeSorted[T any](a, b []T, cmp func(a, b T) int) []T {
	if len(b) == 0 {
		return a
	}
	n := len(a)
	a = append(a, b...) // grows the array if it must; the tail is overwritten below
	if n == 0 || cmp(a[n-1], b[0]) <= 0 {
		return a // the usual case: new jobs are the newest
	}
	end, k := n, len(a) // a[:end] is still in place, a[k:] merged
	for j := len(b) - 1; j >= 0; j-- {
		at := sort.Search(end, func(x int) bool { return cmp(b[j], a[x]) < 0 }) // the first greater
		k -= end - at
		copy(a[k:], a[at:end])
		k--
		a[k] = b[j]
		end = at
	}
	return a
}

// removeSorted removes from a sorted list the elements of gone (sorted the same way; one not in
// the list is passed over), in place: it finds each by a binary search and moves the runs
// between them, each in one copy (see mergeSorted: a pass's ended jobs are anywhere among
// those held, its assigned ones anywhere in the queue).
func removeSorted[T any](list, gone []T, cmp func(a, b T) int) []T {
	out, from, lo := -1, 0, 0 // list[:out] is kept, list[from:] not yet looked at
	for _, g := range gone {
		i, found := slices.BinarySearchFunc(list[lo:], g, cmp)
		i += lo
		lo = i
		if !found {
			continue
		}
		if out < 0 {
			out = i
		} else {
			out += copy(list[out:], list[from:i])
		}
		from, lo = i+1, i+1
	}
	if out < 0 {
		return list
	}
	out += copy(list[out:], list[from:])
	clear(list[out:])
	return list[:out]
}

// differing lists the ids of the entries that differ between two lists sorted by cmp (same says
// whether two entries of one id are the same), or are in one only: a walk of both in step, for
// 60,000 jobs at B8x's size (looking each up in the other's map was 80 ms).
func differing[T any](a, b []T, cmp func(x, y T) int, id func(*T) string, same func(x, y *T) bool) []string {
	var out []string
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || i < len(a) && cmp(a[i], b[j]) < 0:
			out = append(out, id(&a[i]))
			i++
		case i == len(a) || cmp(a[i], b[j]) > 0:
			out = append(out, id(&b[j]))
			j++
		default:
			if !same(&a[i], &b[j]) {
				out = append(out, id(&a[i]))
			}
			i++
			j++
		}
	}
	return out
}

// sameQueued says whether two reads of a queued job are the same, its request compared by the
// sums of its text.
func sameQueued(x, y *scheduler.Job, sumX, sumY uint64) bool {
	return sumX == sumY && x.UUID == y.UUID && x.Submitted.Equal(y.Submitted) && x.UserID == y.UserID && x.ProjectID == y.ProjectID &&
		x.OracleDuration == y.OracleDuration && x.Attained == y.Attained
}

// sameHeld says whether two reads of what a job holds are the same (its request is not read).
func sameHeld(x, y *store.SchedJob) bool {
	a, b := x.Held, y.Held
	return x.Created.Equal(y.Created) && x.Holds == y.Holds && bytes.Equal(x.Request, y.Request) &&
		a.UUID == b.UUID && a.UserID == b.UserID && a.ProjectID == b.ProjectID && a.Status == b.Status && a.SlaveName == b.SlaveName &&
		slices.Equal(a.GPUIDs, b.GPUIDs) && slices.Equal(a.CPUIDs, b.CPUIDs) && a.MemoryGb == b.MemoryGb &&
		a.RunningAt.Valid == b.RunningAt.Valid && a.RunningAt.Time.Equal(b.RunningAt.Time) &&
		a.MinDuration == b.MinDuration && a.MaxDuration == b.MaxDuration && a.Restartable == b.Restartable &&
		a.Interactive == b.Interactive && a.Bucket == b.Bucket && slices.Equal(a.Reservations, b.Reservations) && a.Releasing == b.Releasing
}

// compare logs and counts what a full read found different from the memory (a bug), and
// returns how many jobs differ.
func (q *queue) compare(m memory) int {
	diff := append(differing(q.order, m.order, compareJobs, func(j *scheduler.Job) string { return j.UUID },
		func(x, y *scheduler.Job) bool { return sameQueued(x, y, q.sums[x.UUID], m.sums[y.UUID]) }),
		differing(q.holders, m.holders, compareHeldJobs, func(h *heldJob) string { return h.UUID },
			func(x, y *heldJob) bool { return sameHeld(&x.SchedJob, &y.SchedJob) })...)
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
	return len(diff)
}
