package leader

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/store"
)

// removeSorted removes exactly the elements named, wherever they are in the list, as the
// slower filter over the whole list did.
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
		want := slices.DeleteFunc(slices.Clone(list), func(v int) bool { return slices.Contains(gone, v) })
		got := removeSorted(slices.Clone(list), gone, func(a, b int) int { return a - b })
		if !slices.Equal(got, want) {
			t.Fatalf("removeSorted(%v, %v) = %v, want %v", list, gone, got, want)
		}
	}
}

// The queue names the jobs that left it since the leader last asked, and the leader forgets
// what it kept of them (planned, explanation, estimate) and nothing else; after a full read it
// sweeps instead.
func TestDepartedJobsForgotten(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	row := func(i int, status job.Status) store.SchedJob {
		r := store.SchedJob{Held: store.Held{UUID: fmt.Sprintf("job-%02d", i), Status: status}, Created: t0.Add(time.Duration(i) * time.Second),
			Request: []byte(`{"resources":{"gpus":1}}`)}
		if status != job.StatusQueued {
			r.Request = nil
		}
		return r
	}
	q := newQueue(time.Hour, nil, nil)
	q.jobs, q.held = map[string]scheduler.Job{}, map[string]store.SchedJob{}
	var rows []store.SchedJob
	for i := range 10 {
		rows = append(rows, row(i, job.StatusQueued))
	}
	if err := q.apply(rows, nil); err != nil {
		t.Fatal(err)
	}
	if ids, _ := q.takeDeparted(); len(ids) != 0 {
		t.Fatalf("departed after adding jobs: %v", ids)
	}
	// Job 3 is assigned, job 7 cancelled, job 5 read again by name and gone.
	if err := q.apply([]store.SchedJob{row(3, job.StatusAssigned), row(7, job.StatusCancelled)}, []string{"job-05"}); err != nil {
		t.Fatal(err)
	}
	ids, all := q.takeDeparted()
	slices.Sort(ids)
	if all || !slices.Equal(ids, []string{"job-03", "job-05", "job-07"}) {
		t.Fatalf("departed = %v (all %v), want jobs 3, 5 and 7", ids, all)
	}
	var order []string
	for _, j := range q.order {
		order = append(order, j.UUID)
	}
	if want := []string{"job-00", "job-01", "job-02", "job-04", "job-06", "job-08", "job-09"}; !slices.Equal(order, want) {
		t.Fatalf("queue order %v, want %v", order, want)
	}

	l := &Loop{queue: q, planned: map[string]bool{}, explained: explained{}, written: written{}}
	for _, id := range order {
		l.planned[id], l.explained[id], l.written[id] = true, explainedJob{}, &job.StartEstimate{}
	}
	// Job 1 is assigned; job 2 too, and queued again (its slave never took it) before the
	// leader asks: forgotten as well, what the database holds of it was cleared.
	if err := q.apply([]store.SchedJob{row(1, job.StatusAssigned), row(2, job.StatusAssigned)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := q.apply([]store.SchedJob{row(2, job.StatusQueued)}, nil); err != nil {
		t.Fatal(err)
	}
	l.forgetDeparted()
	for _, id := range order {
		_, e := l.explained[id]
		_, w := l.written[id]
		if kept, want := l.planned[id] || e || w, id != "job-01" && id != "job-02"; kept != want {
			t.Errorf("%s kept %v, want %v (planned %v, explained %v, written %v)", id, kept, want, l.planned[id], e, w)
		}
	}
	// A full read: what is kept is swept against the queue.
	q.reset()
	q.jobs = map[string]scheduler.Job{"job-04": {UUID: "job-04"}}
	l.forgetDeparted()
	if len(l.planned) != 1 || !l.planned["job-04"] || len(l.explained) != 1 || len(l.written) != 1 {
		t.Errorf("after a full read kept planned %v, explained %d, written %d; want job 4 only", l.planned, len(l.explained), len(l.written))
	}
}
