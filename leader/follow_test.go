package leader

import (
	"database/sql"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/store"
)

// removeSorted removes exactly the elements named, wherever they are in the list, as the
// slower filter over the whole list did, and passes over those named that are not in it.
func TestRemoveSorted(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for range 500 {
		n := rng.IntN(40)
		list := make([]int, n)
		for i := range list {
			list[i] = rng.IntN(60)
		}
		slices.Sort(list)
		list = slices.Compact(list)
		var gone []int
		for _, v := range list {
			if rng.IntN(4) == 0 {
				gone = append(gone, v)
			}
		}
		for range rng.IntN(3) { // not in the list: passed over
			if v := rng.IntN(62) - 1; !slices.Contains(list, v) && !slices.Contains(gone, v) {
				gone = append(gone, v)
			}
		}
		slices.Sort(gone)
		want := slices.DeleteFunc(slices.Clone(list), func(v int) bool { return slices.Contains(gone, v) })
		got := removeSorted(slices.Clone(list), gone, func(a, b int) int { return a - b })
		if !slices.Equal(got, want) {
			t.Fatalf("removeSorted(%v, %v) = %v, want %v", list, gone, got, want)
		}
	}
}

// mergeSorted merges in place, with or without room in the first list's array, wherever the
// second's entries fall; an entry equal to one of the first goes after it.
func TestMergeSorted(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	type entry struct{ key, from int }
	cmp := func(a, b entry) int { return a.key - b.key }
	randomSorted := func(n, from int) []entry {
		out := make([]entry, n, n+rng.IntN(8)) // room in the array, or not
		for i := range out {
			out[i] = entry{rng.IntN(50), from}
		}
		slices.SortFunc(out, cmp)
		return out
	}
	for range 1000 {
		a, b := randomSorted(rng.IntN(30), 0), randomSorted(rng.IntN(6), 1)
		want := slices.Concat(a, b)
		slices.SortStableFunc(want, cmp)
		if got := mergeSorted(slices.Clip(slices.Clone(a)), b, cmp); !slices.Equal(got, want) {
			t.Fatalf("mergeSorted(%v, %v) = %v, want %v", a, b, got, want)
		}
		if got := mergeSorted(a, b, cmp); !slices.Equal(got, want) {
			t.Fatalf("mergeSorted(%v, %v) with room = %v, want %v", a, b, got, want)
		}
	}
}

// What is held is walked oldest first, what ended jobs still hold among the live jobs'; each
// running job's indices are its own, whatever is appended to another's; a live job not yet
// RUNNING ends at the latest its maxDuration after the pass, a RUNNING one after its start.
func TestHeldWalkedInOrder(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	held := func(id string, at int, gpus ...int) store.SchedJob {
		return store.SchedJob{Held: store.Held{UUID: id, SlaveName: "s-" + id, GPUIDs: gpus, CPUIDs: []int{at}, MaxDuration: 3600},
			Created: t0.Add(time.Duration(at) * time.Second)}
	}
	running := held("c", 3, 1, 2)
	running.Status, running.RunningAt = job.StatusRunning, sql.NullTime{Time: t0, Valid: true}
	h := heldList{live: []heldJob{{SchedJob: held("a", 1, 0)}, {SchedJob: running}, {SchedJob: held("e", 5)}},
		releasing: []store.SchedJob{held("b", 2, 3), held("d", 4, 4), held("f", 6, 5)}}
	var walked []string
	for x := range h.all() {
		walked = append(walked, x.UUID)
	}
	view := &slaveView{gen: 1}
	for pass, now := range []time.Time{t0.Add(time.Minute), t0.Add(time.Hour)} {
		placed := h.placed(nil, now, view)
		var ids []string
		for _, p := range placed {
			ids = append(ids, p.JobUUID)
		}
		if want := []string{"a", "b", "c", "d", "e", "f"}; !slices.Equal(ids, want) || !slices.Equal(walked, want) || h.len() != 6 {
			t.Fatalf("pass %d: walked %v and placed %v (len %d), want %v", pass, walked, ids, h.len(), want)
		}
		if want := now.Add(time.Hour); !placed[0].Ends.Equal(want) || !placed[4].Ends.Equal(want) {
			t.Errorf("pass %d at %v: jobs not RUNNING yet end at %v and %v, want %v", pass, now, placed[0].Ends, placed[4].Ends, want)
		}
		if want := t0.Add(time.Hour); !placed[2].Ends.Equal(want) || !placed[2].Started.Equal(t0) {
			t.Errorf("pass %d: the RUNNING job started %v and ends %v, want %v and %v", pass, placed[2].Started, placed[2].Ends, t0, want)
		}
		placed[0].GPUIndices = append(placed[0].GPUIndices, 9)
		placed[2].CPUIDs = append(placed[2].CPUIDs, 9)
		if !slices.Equal(placed[1].GPUIndices, []int{3}) || !slices.Equal(placed[2].GPUIndices, []int{1, 2}) || !slices.Equal(placed[3].GPUIndices, []int{4}) ||
			!slices.Equal(h.live[0].GPUIDs, store.Ints{0}) || !slices.Equal(h.live[1].CPUIDs, store.Ints{3}) {
			t.Errorf("pass %d: an append to one job's indices changed another's, or the memory's: %+v", pass, placed)
		}
	}
}

// A running job's slave hint is its slave's place in the view's index, found again when the
// view changed: a pass with a view made since would otherwise point the planner at another
// slave's place (which the planner checks, and then looks the name up).
func TestHeldSlaveHintFollowsTheView(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	view := func(gen uint32, names ...string) *slaveView {
		var ss []scheduler.Slave
		for _, n := range names {
			ss = append(ss, scheduler.Slave{Name: n, InstanceID: "i-" + n, Online: true, Accepting: true})
		}
		return &slaveView{slaves: ss, index: scheduler.NewSlaveIndex(ss, nil), gen: gen}
	}
	h := heldList{live: []heldJob{{SchedJob: store.SchedJob{Held: store.Held{UUID: "j", SlaveName: "s2", Status: job.StatusRunning}, Created: t0}}}}
	for _, step := range []struct {
		view *slaveView
		want int
	}{
		{view(1, "s1", "s2", "s3"), 2},       // s2 second, plus one
		{view(1, "s0", "s1", "s2", "s3"), 2}, // the same view number: kept (a view is made anew only with a new number)
		{view(2, "s0", "s1", "s2", "s3"), 3}, // a slave joined
		{view(3, "s1", "s3"), 0},             // its slave left
		{view(4, "s2"), 1},                   // back
	} {
		p := h.placed(nil, t0, step.view)[0]
		if p.SlaveHint != step.want || p.SlaveName != "s2" {
			t.Fatalf("in view %d of %d slaves: hint %d on %q, want %d on s2", step.view.gen, len(step.view.slaves), p.SlaveHint, p.SlaveName, step.want)
		}
	}
}

// The queue names the jobs that came into it and left it since the leader last asked, and the
// leader follows what it keeps per queued job with them: a job that arrived is fresh, what was
// kept of one that left (freshness, explanation, estimate) is forgotten, and nothing else; a
// full read names them as exactly.
func TestQueueChangesFollowed(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	row := func(i int, status job.Status) store.SchedJob {
		r := store.SchedJob{Held: store.Held{UUID: fmt.Sprintf("job-%02d", i), Status: status}, Created: t0.Add(time.Duration(i) * time.Second),
			Request: []byte(`{"resources":{"gpus":1}}`)}
		if status != job.StatusQueued {
			r.Request = nil
		}
		return r
	}
	sorted := func(ids []string) []string { slices.Sort(ids); return ids }
	q := newQueue(time.Hour, nil, nil)
	q.jobs, q.held = map[string]scheduler.Job{}, map[string]store.SchedJob{}
	var rows []store.SchedJob
	for i := range 10 {
		rows = append(rows, row(i, job.StatusQueued))
	}
	if err := q.apply(rows, nil); err != nil {
		t.Fatal(err)
	}
	if arrived, departed, _ := q.takeChanges(); len(arrived) != 10 || len(departed) != 0 {
		t.Fatalf("after adding 10 jobs: arrived %v, departed %v", arrived, departed)
	}
	// Job 3 is assigned, job 7 cancelled, job 5 read again by name and gone.
	if err := q.apply([]store.SchedJob{row(3, job.StatusAssigned), row(7, job.StatusCancelled)}, []string{"job-05"}); err != nil {
		t.Fatal(err)
	}
	arrived, departed, swept := q.takeChanges()
	if swept || len(arrived) != 0 || !slices.Equal(sorted(departed), []string{"job-03", "job-05", "job-07"}) {
		t.Fatalf("arrived %v, departed %v (swept %v), want jobs 3, 5 and 7 departed", arrived, departed, swept)
	}
	var order []string
	for _, j := range q.order {
		order = append(order, j.UUID)
	}
	if want := []string{"job-00", "job-01", "job-02", "job-04", "job-06", "job-08", "job-09"}; !slices.Equal(order, want) {
		t.Fatalf("queue order %v, want %v", order, want)
	}

	// Jobs 0 and 4 are fresh; every queued job has an explanation and an estimate kept.
	l := &Loop{queue: q, fresh: map[string]bool{"job-00": true, "job-04": true}, explained: explained{}, written: written{}}
	for _, id := range order {
		l.explained[id], l.written[id] = explainedJob{}, &job.StartEstimate{}
	}
	// Job 1 is assigned, and job 4; job 2 too, and queued again (its slave never took it)
	// before the leader asks; job 10 is submitted, job 11 submitted and cancelled.
	if err := q.apply([]store.SchedJob{row(1, job.StatusAssigned), row(2, job.StatusAssigned), row(4, job.StatusAssigned),
		row(10, job.StatusQueued), row(11, job.StatusQueued)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := q.apply([]store.SchedJob{row(2, job.StatusQueued), row(11, job.StatusCancelled)}, nil); err != nil {
		t.Fatal(err)
	}
	l.followQueue()
	if want := map[string]bool{"job-00": true, "job-02": true, "job-10": true}; !maps.Equal(l.fresh, want) {
		t.Errorf("fresh %v, want %v", l.fresh, want)
	}
	for _, id := range order {
		_, e := l.explained[id]
		_, w := l.written[id]
		if want := id != "job-01" && id != "job-02" && id != "job-04"; e != want || w != want {
			t.Errorf("%s: explanation kept %v, estimate kept %v, want %v", id, e, w, want)
		}
	}

	// A full read names the changes as exactly (job 6 gone, job 12 new), and what is kept is
	// swept against it (an explanation kept of a job the queue never held).
	l.explained["ghost"] = explainedJob{}
	jobs := map[string]scheduler.Job{}
	for id, j := range q.jobs {
		if id != "job-06" {
			jobs[id] = j
		}
	}
	jobs["job-12"] = scheduler.Job{UUID: "job-12", Submitted: t0.Add(12 * time.Second)}
	q.replace(memory{jobs: jobs, held: q.held, order: slices.SortedFunc(maps.Values(jobs), compareJobs), holders: q.holders})
	l.followQueue()
	if want := map[string]bool{"job-00": true, "job-02": true, "job-10": true, "job-12": true}; !maps.Equal(l.fresh, want) {
		t.Errorf("after a full read fresh %v, want %v", l.fresh, want)
	}
	if _, ok := l.explained["job-06"]; ok {
		t.Error("job 6, gone at the full read, still has its explanation kept")
	}
	if _, ok := l.explained["ghost"]; ok {
		t.Error("the full read's sweep left an explanation of a job not queued")
	}
}

// The check's comparisons notice a change of any field of what the memory keeps, so that a
// field added to a job's row or to scheduler.Job is compared (or this test names it).
func TestSameNoticesEveryField(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	held := store.SchedJob{Held: store.Held{UUID: "a", UserID: 1, ProjectID: 2, Status: job.StatusRunning, SlaveName: "s", GPUIDs: []int{1},
		CPUIDs: []int{2}, MemoryGb: 3, RunningAt: sql.NullTime{Time: t0, Valid: true}, MinDuration: 4, MaxDuration: 5, Bucket: "b",
		Reservations: []string{"r"}}, Created: t0}
	queued := scheduler.Job{UUID: "a", Submitted: t0, UserID: 1, ProjectID: 2, OracleDuration: 3, Attained: 4}
	for _, path := range leafFields(reflect.TypeOf(held), nil) {
		changed := held
		changed.GPUIDs, changed.CPUIDs, changed.Reservations = slices.Clone(held.GPUIDs), slices.Clone(held.CPUIDs), slices.Clone(held.Reservations)
		alter(t, reflect.ValueOf(&changed).Elem().FieldByIndex(path))
		if sameHeld(&held, &changed) {
			t.Errorf("sameHeld misses a change of store.SchedJob field %v", reflect.TypeOf(held).FieldByIndex(path).Name)
		}
	}
	for _, path := range leafFields(reflect.TypeOf(queued), nil) {
		if f := reflect.TypeOf(queued).FieldByIndex(path); f.Name == "Request" || len(path) > 1 && reflect.TypeOf(queued).Field(path[0]).Name == "Request" {
			continue // compared by its text's sum
		}
		changed := queued
		alter(t, reflect.ValueOf(&changed).Elem().FieldByIndex(path))
		if sameQueued(&queued, &changed, 7, 7) {
			t.Errorf("sameQueued misses a change of scheduler.Job field %v", reflect.TypeOf(queued).FieldByIndex(path).Name)
		}
	}
	if sameQueued(&queued, &queued, 7, 8) {
		t.Error("sameQueued misses a changed request's sum")
	}
}

// leafFields lists the index paths of a struct's fields, into embedded and other structs but
// time.Time.
func leafFields(typ reflect.Type, prefix []int) [][]int {
	var out [][]int
	for i := range typ.NumField() {
		f := typ.Field(i)
		path := append(slices.Clone(prefix), i)
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(time.Time{}) && f.Name != "Request" {
			out = append(out, leafFields(f.Type, path)...)
			continue
		}
		out = append(out, path)
	}
	return out
}

// alter changes a field's value.
func alter(t *testing.T, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Int, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Slice:
		v.Set(reflect.Append(v, reflect.Zero(v.Type().Elem())))
	case reflect.Struct: // time.Time
		v.Set(reflect.ValueOf(v.Interface().(time.Time).Add(time.Second)))
	default:
		t.Fatalf("alter: a field of kind %v", v.Kind())
	}
}

// overdue names the live jobs that will have run past their maxDuration (since RUNNING) by the
// time given, and no other: not one still starting, not one with time left, not an ended one.
func TestOverdueNamesTheJobsPastTheirMaxDuration(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	row := func(id string, status job.Status, ranFor time.Duration, maxDur int64) store.SchedJob {
		r := store.SchedJob{Held: store.Held{UUID: id, Status: status, MaxDuration: maxDur}, Created: t0.Add(-24 * time.Hour), Holds: true}
		if ranFor > 0 {
			r.RunningAt = sql.NullTime{Time: t0.Add(-ranFor), Valid: true}
		}
		return r
	}
	q := newQueue(time.Hour, nil, nil)
	if ids, known := q.overdue(t0); known || ids != nil {
		t.Fatalf("an empty memory: overdue %v, known %v; want nothing known (every running job asked about)", ids, known)
	}
	mem, err := fullMemory([]store.SchedJob{
		row("past", job.StatusRunning, 2*time.Hour, 3600),
		row("halting-past", job.StatusHalting, 2*time.Hour, 3600),
		row("musthalt-past", job.StatusMustHalt, 2*time.Hour, 3600),
		row("time-left", job.StatusRunning, 30*time.Minute, 3600),
		row("starting", job.StatusStarting, 0, 3600),
		row("assigned", job.StatusAssigned, 0, 60),
	})
	if err != nil {
		t.Fatal(err)
	}
	q.replace(mem)
	ids, known := q.overdue(t0)
	slices.Sort(ids)
	if want := []string{"halting-past", "musthalt-past", "past"}; !known || !slices.Equal(ids, want) {
		t.Errorf("overdue %v (known %v), want %v", ids, known, want)
	}
	if ids, _ := q.overdue(t0.Add(time.Hour)); len(ids) != 4 {
		t.Errorf("an hour later: overdue %v, want the three and time-left", ids)
	}
}
