package leader

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/scheduler"
)

// randomCluster is a busy cluster with a long queue: slaves of two GPU models over three
// clusters, some offline or draining, running jobs filling most of them, and queued jobs of
// many shapes (some pinned to a cluster or a model, some interactive, some past their
// notAfter, some not before a time, some naming a reservation that runs now or begins later),
// owned by users of different tallies. A running job stops filling a slave with a
// chance of 1 in fill.
func randomCluster(rng *rand.Rand, slaves, queued, fill int) scheduler.Snapshot {
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	snap := scheduler.Snapshot{Now: now, Policy: scheduler.PolicyFair, Clusters: map[int]scheduler.Cluster{}, Tallies: map[int64]float64{}}
	for c := 1; c <= 3; c++ {
		snap.Clusters[c] = scheduler.Cluster{ID: c}
	}
	for u := int64(1); u <= 8; u++ {
		snap.Tallies[u] = rng.Float64() * 100
	}
	models := []string{"V100-32GB", "A100-80GB"}
	n := 0
	for i := range slaves {
		name := fmt.Sprintf("s%03d", i)
		model := models[i%2]
		gpus := make([]protocol.GPU, 8)
		for k := range gpus {
			gpus[k] = protocol.GPU{Index: k, UUID: fmt.Sprintf("GPU-%s-%d", name, k), Model: model, MemoryMiB: 32 << 10}
		}
		s := scheduler.Slave{Name: name, InstanceID: "i-" + name, ClusterID: 1 + i%3, Online: rng.IntN(10) > 0, Accepting: rng.IntN(10) > 0,
			CPUs: 32, MemoryGb: 256, CudaMajor: 12, GPUs: gpus}
		snap.Slaves = append(snap.Slaves, s)
		// Running jobs take a random part of the slave, GPUs and CPUs from the bottom.
		g, c := 0, 0
		for g < 8 && rng.IntN(fill) > 0 {
			take := min(1+rng.IntN(4), 8-g)
			pl := scheduler.Placed{JobUUID: fmt.Sprintf("run-%04d", n), SlaveName: name, UserID: 1 + rng.Int64N(8), ProjectID: 1,
				MemoryGb: 8 * take, Started: now.Add(-time.Duration(1+rng.IntN(48)) * time.Hour), Restartable: rng.IntN(2) == 0,
				Ends: now.Add(time.Duration(1+rng.IntN(48)) * time.Hour)}
			for k := range take {
				pl.GPUIndices = append(pl.GPUIndices, g+k)
				pl.CPUIDs = append(pl.CPUIDs, c+2*k, c+2*k+1)
			}
			g, c = g+take, c+2*take
			snap.Running = append(snap.Running, pl)
			n++
		}
	}
	// A reservation days ahead and one running now, both held by users 1–4.
	snap.Reservations = []scheduler.Reservation{
		{ID: "later", ClusterID: 1, GPUs: 8, Start: now.Add(48 * time.Hour), End: now.Add(72 * time.Hour), Users: []int64{1, 2, 3, 4}},
		{ID: "now", ClusterID: 2, GPUs: 4, Start: now.Add(-time.Hour), End: now.Add(5 * time.Hour), Users: []int64{1, 2, 3, 4}},
	}
	for i := range queued {
		gpus := []int{1, 1, 1, 2, 4, 8}[rng.IntN(6)]
		req := job.Request{Resources: job.Resources{GPUs: gpus, CPUs: 2 * gpus, CPUMemoryGb: 8 * gpus},
			Scheduling: job.Scheduling{MaxDuration: job.Duration(time.Duration(1+rng.IntN(24)) * time.Hour)}}
		switch rng.IntN(10) {
		case 0:
			req.Resources.ClusterID = 1 + rng.IntN(3)
		case 1:
			req.Resources.GPUModel = []string{"A100"}
		case 2:
			req.Scheduling.Interactive = true
		case 3:
			past := now.Add(-time.Minute)
			req.Scheduling.NotAfter = &past
		case 4:
			// Not before a time ahead, or one already past.
			nb := now.Add(time.Duration(rng.IntN(3)-1) * time.Hour)
			req.Scheduling.NotBefore = &nb
		case 5:
			// A reservation ahead or running now, which its owner holds (a job naming one he
			// does not hold fails at its first pass, so no planned job does).
			req.Scheduling.ReservationIDs = []string{[]string{"later", "now"}[rng.IntN(2)]}
		}
		user := 1 + rng.Int64N(8)
		if len(req.Scheduling.ReservationIDs) > 0 {
			user = 1 + rng.Int64N(4)
		}
		snap.Queued = append(snap.Queued, scheduler.Job{UUID: fmt.Sprintf("q-%05d", i), Request: req,
			Submitted: now.Add(-time.Duration(queued-i) * time.Second), UserID: user, ProjectID: 1})
	}
	return snap
}

// TestNarrowedPlanPlacesWhatTheFullPlanPlaces: on random busy clusters with long queues, the
// plan of the narrowed queue (every job already planned once but one, a sweep of 3) assigns the
// same jobs to the same slaves and devices, fails the same jobs, asks only halts the full plan
// asks, and explains the early jobs (those ahead of any job left out) as the full plan does,
// while planning fewer jobs; the job never planned before is always in.
func TestNarrowedPlanPlacesWhatTheFullPlanPlaces(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 16))
	smaller, fallbacks, halts, assigned := 0, 0, 0, 0
	const rounds = 60
	var scratch narrowScratch // filled again each round, as by the loop's passes
	for round := range rounds {
		snap := randomCluster(rng, 30, 400, []int{3, 30}[round%2])
		fresh := snap.Queued[rng.IntN(len(snap.Queued))].UUID
		fresher := map[string]bool{fresh: true}
		full := snap.Plan()
		halts += len(full.Halts)
		assigned += len(full.Assignments)
		got, jobs, narrowed := planNarrowed(snap, fresher, queuedIn(snap), 3, &scratch)
		if !slices.ContainsFunc(jobs, func(j scheduler.Job) bool { return j.UUID == fresh }) {
			t.Fatalf("round %d: job %s, never planned, was left out", round, fresh)
		}
		early := earlyJobs(snap, fresher, 3)
		if narrowed {
			smaller++
		} else if len(early) < len(snap.Queued) {
			fallbacks++
		}
		if !reflect.DeepEqual(got.Assignments, full.Assignments) {
			t.Fatalf("round %d: narrowed plan (%d of %d jobs) assigns\n%v\nthe full plan\n%v", round, len(jobs), len(snap.Queued), got.Assignments, full.Assignments)
		}
		if !reflect.DeepEqual(got.Failures, full.Failures) {
			t.Fatalf("round %d: narrowed plan fails %v, the full plan %v", round, got.Failures, full.Failures)
		}
		for _, h := range got.Halts {
			if !slices.Contains(full.Halts, h) {
				t.Errorf("round %d: narrowed plan halts %+v, the full plan does not", round, h)
			}
		}
		for id := range early {
			if a, b := got.Explanations[id], full.Explanations[id]; !slices.Equal(a, b) {
				t.Errorf("round %d: early job %s explained %q by the narrowed plan, %q by the full one", round, id, a, b)
			}
		}
	}
	t.Logf("%d of %d passes narrowed, %d fell back to a full plan; %d assignments and %d halts in the full plans", smaller, rounds, fallbacks, assigned, halts)
	if smaller < rounds/4 {
		t.Errorf("only %d of %d passes were narrowed: the test does not exercise narrowing", smaller, rounds)
	}
}

// TestRememberPlanned: the jobs a pass planned and left waiting are fresh no more; those it
// assigned or failed stay fresh, so that one coming back is new again (jobs that left the
// queue otherwise: TestQueueChangesFollowed).
func TestRememberPlanned(t *testing.T) {
	job := func(id string) scheduler.Job { return scheduler.Job{UUID: id} }
	l := &Loop{queue: &queue{memory: memory{jobs: map[string]scheduler.Job{"a": job("a"), "b": job("b"), "c": job("c"), "d": job("d"), "e": job("e")}}},
		fresh: map[string]bool{"b": true, "c": true, "d": true, "e": true}}
	l.remember([]scheduler.Job{job("a"), job("b"), job("c"), job("d")},
		scheduler.Plan{Assignments: []scheduler.Assignment{{JobUUID: "c"}}, Failures: []scheduler.Failure{{JobUUID: "d"}}})
	if want := map[string]bool{"c": true, "d": true, "e": true}; !reflect.DeepEqual(l.fresh, want) {
		t.Errorf("fresh %v, want %v", l.fresh, want)
	}
}

// earlyJobs are the jobs whose turn comes before that of the first job the narrowed plan
// leaves out (all of them when it leaves none out): the plan decides for them exactly what the
// full plan decides.
func earlyJobs(snap scheduler.Snapshot, fresh map[string]bool, sweep int) map[string]bool {
	jobs, decide := narrow(snap, fresh, queuedIn(snap))
	sub := snap
	sub.Queued, sub.Sweep, sub.Decide = jobs, sweep, decide
	plan := sub.Plan()
	keys := make([]scheduler.QueueKey, len(jobs))
	for i := range jobs {
		keys[i] = sub.QueueKey(&jobs[i])
	}
	slices.SortFunc(keys, scheduler.QueueKey.Compare)
	early := map[string]bool{}
	for _, k := range keys {
		if len(plan.Skipped) > 0 && k.Job.UUID == plan.Skipped[0] {
			break
		}
		early[k.Job.UUID] = true
	}
	return early
}

// A pass is crowded when it leaves a job waiting for room; jobs waiting only for their time
// (notBefore ahead, a reservation days away) do not make it so, and the loop does not rest
// after it (Config.MaxBusy).
func TestCrowded(t *testing.T) {
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	gpus := make([]protocol.GPU, 8)
	for k := range gpus {
		gpus[k] = protocol.GPU{Index: k, UUID: fmt.Sprintf("GPU-s1-%d", k), Model: "A100-80GB", MemoryMiB: 80 << 10}
	}
	base := scheduler.Snapshot{Now: now, Policy: scheduler.PolicyFair, Clusters: map[int]scheduler.Cluster{1: {ID: 1}}, Tallies: map[int64]float64{},
		Slaves: []scheduler.Slave{{Name: "s1", InstanceID: "i-s1", ClusterID: 1, Online: true, Accepting: true, CPUs: 32, MemoryGb: 256, CudaMajor: 12, GPUs: gpus}},
		// Half the slave is taken for a day.
		Running: []scheduler.Placed{{JobUUID: "run", SlaveName: "s1", UserID: 2, ProjectID: 1, GPUIndices: []int{0, 1, 2, 3}, CPUIDs: []int{0, 1},
			MemoryGb: 16, Started: now.Add(-time.Hour), Ends: now.Add(24 * time.Hour)}},
		Reservations: []scheduler.Reservation{{ID: "later", ClusterID: 1, GPUs: 8, Start: now.Add(48 * time.Hour), End: now.Add(72 * time.Hour), Users: []int64{1}}},
	}
	queued := func(id string, gpus int, sch job.Scheduling) scheduler.Job {
		sch.MaxDuration = job.Duration(time.Hour)
		return scheduler.Job{UUID: id, UserID: 1, ProjectID: 1, Submitted: now.Add(-time.Minute),
			Request: job.Request{Resources: job.Resources{GPUs: gpus, CPUs: 1, CPUMemoryGb: 4}, Scheduling: sch}}
	}
	later := now.Add(time.Hour)
	for _, c := range []struct {
		name  string
		queue []scheduler.Job
		want  bool
	}{
		{"every job starts", []scheduler.Job{queued("small", 2, job.Scheduling{})}, false},
		{"a job waits for room", []scheduler.Job{queued("small", 2, job.Scheduling{}), queued("big", 8, job.Scheduling{})}, true},
		{"a job waits for its notBefore", []scheduler.Job{queued("small", 2, job.Scheduling{}), queued("late", 1, job.Scheduling{NotBefore: &later})}, false},
		{"a job waits for its reservation", []scheduler.Job{queued("booked", 1, job.Scheduling{ReservationIDs: []string{"later"}})}, false},
		{"nothing queued", nil, false},
	} {
		snap := base
		snap.Queued = c.queue
		plan := snap.Plan()
		if got := crowded(snap, plan); got != c.want {
			t.Errorf("%s: crowded = %v, want %v (plan %+v)", c.name, got, c.want, plan)
		}
	}
	// A narrowed plan's skipped jobs could not start by counts: they wait for room.
	snap := base
	snap.Queued = []scheduler.Job{queued("big", 8, job.Scheduling{})}
	if !crowded(snap, scheduler.Plan{Skipped: []string{"big"}}) {
		t.Error("a plan that skipped a job is not crowded")
	}
}

// The loop rests after a slow pass unless it placed jobs and left none waiting for room; a
// failed pass rests too.
func TestRests(t *testing.T) {
	for _, c := range []struct {
		err  error
		ph   Phases
		want bool
	}{
		{nil, Phases{Assigned: 30}, false},                   // a stream of submissions on a cluster with room
		{nil, Phases{Assigned: 30, Crowded: true}, true},     // a full cluster
		{nil, Phases{Assigned: 0}, true},                     // nothing came of it
		{errors.New("deadlock"), Phases{Assigned: 30}, true}, // failed
	} {
		if got := rests(c.err, c.ph); got != c.want {
			t.Errorf("rests(%v, %+v) = %v, want %v", c.err, c.ph, got, c.want)
		}
	}
}

// TestNarrowKeepsWhatMustBeDecided: a job waiting for time alone is left out unless it is
// fresh, interactive or past its notAfter; every other job is kept; decide gives the places of
// the fresh jobs that are queued in the jobs kept, and is the pass's own.
func TestNarrowKeepsWhatMustBeDecided(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	later, past := now.Add(time.Hour), now.Add(-time.Minute)
	queued := func(id string, s job.Scheduling) scheduler.Job {
		return scheduler.Job{UUID: id, Request: job.Request{Resources: job.Resources{GPUs: 1}, Scheduling: s}}
	}
	// Not in the queue's order (the same submission time, uuids unsorted): places are found by
	// looking at each job.
	snap := scheduler.Snapshot{Now: now, Queued: []scheduler.Job{
		queued("plain", job.Scheduling{}),
		queued("waits", job.Scheduling{NotBefore: &later}),
		queued("waits-fresh", job.Scheduling{NotBefore: &later}),
		queued("waits-interactive", job.Scheduling{NotBefore: &later, Interactive: true}),
		queued("waits-expired", job.Scheduling{NotBefore: &later, NotAfter: &past}),
		queued("fresh", job.Scheduling{}),
		queued("due", job.Scheduling{NotBefore: &past}),
	}}
	fresh := map[string]bool{"waits-fresh": true, "fresh": true, "gone": true}
	jobs, decide := narrow(snap, fresh, queuedIn(snap))
	var ids []string
	for _, j := range jobs {
		ids = append(ids, j.UUID)
	}
	if want := []string{"plain", "waits-fresh", "waits-interactive", "waits-expired", "fresh", "due"}; !slices.Equal(ids, want) {
		t.Errorf("kept %v, want %v", ids, want)
	}
	if want := []int{1, 4}; !slices.Equal(decide, want) {
		t.Errorf("decide %v, want %v (waits-fresh and fresh among the jobs kept)", decide, want)
	}
	if jobs, decide := narrow(snap, nil, queuedIn(snap)); len(jobs) != 5 || len(decide) != 0 {
		t.Errorf("without fresh jobs: kept %d, decide %v; want 5 and none", len(jobs), decide)
	}
}

// TestNarrowFindsFreshJobsInOrder: in a queue in the queue's order (as the loop's memory keeps
// it), the fresh jobs' places in the jobs kept are found, among jobs left out before them,
// equal submission times and uuids that share a prefix, with one look-up in the queue's memory
// per fresh job; a fresh job no longer queued is not placed. Its seed is printed.
func TestNarrowFindsFreshJobsInOrder(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 21))
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	later := now.Add(time.Hour)
	for round := range 50 {
		n := 1 + rng.IntN(400)
		snap := scheduler.Snapshot{Now: now}
		for i := range n {
			j := scheduler.Job{UUID: fmt.Sprintf("%08x-job-%d", rng.IntN(64), i), Submitted: now.Add(-time.Duration(rng.IntN(50)) * time.Second),
				Request: job.Request{Resources: job.Resources{GPUs: 1}}}
			if rng.IntN(3) == 0 {
				j.Request.Scheduling.NotBefore = &later // left out unless fresh
			}
			snap.Queued = append(snap.Queued, j)
		}
		slices.SortFunc(snap.Queued, compareJobs)
		fresh := map[string]bool{"gone": true}
		for range rng.IntN(20) {
			fresh[snap.Queued[rng.IntN(n)].UUID] = true
		}
		lookups := 0
		inOrder := func(id string) (scheduler.Job, bool) {
			lookups++
			return queuedIn(snap)(id)
		}
		jobs, decide := narrow(snap, fresh, inOrder)
		var want []int
		for i, j := range jobs {
			if fresh[j.UUID] {
				want = append(want, i)
			}
		}
		if !slices.Equal(decide, want) {
			t.Fatalf("round %d: decide %v, want %v", round, decide, want)
		}
		if lookups != len(fresh) {
			t.Fatalf("round %d: %d look-ups in the queue's memory for %d fresh jobs", round, lookups, len(fresh))
		}
	}
}

// queuedIn finds a queued job of snap by uuid, as the queue's memory does for the loop.
func queuedIn(snap scheduler.Snapshot) func(id string) (scheduler.Job, bool) {
	return func(id string) (scheduler.Job, bool) {
		for _, j := range snap.Queued {
			if j.UUID == id {
				return j, true
			}
		}
		return scheduler.Job{}, false
	}
}
