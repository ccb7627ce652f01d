package scheduler

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
)

// busyTwoGPUs is one slave with 2 V100s, both held by running jobs that reach their
// maxDuration (1 hour, started 30 minutes ago) in 30 minutes and 90 minutes.
func busyTwoGPUs() Snapshot {
	run := func(id string, gpu int, ends time.Duration) Placed {
		pl := ending(id, "gpu1", []int{gpu}, []int{gpu}, 10, ends)
		pl.Started = pl.Ends.Add(-time.Hour)
		pl.UserID = 1
		return pl
	}
	return Snapshot{Now: t0, Slaves: []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 2)...))},
		Running: []Placed{run("r1", 0, 30*time.Minute), run("r2", 1, 90*time.Minute)}}
}

func queueOf(n int, opts ...jobOpt) []Job {
	out := make([]Job, n)
	for i := range out {
		out[i] = mkJob(fmt.Sprintf("q%d", i), 1, 1, 1, append([]jobOpt{maxDur(time.Hour)}, opts...)...)
	}
	return out
}

// TestForecastEveryJob: without learned ratios every waiting job gets its worst-case start, in
// queue order, as the jobs ahead of it take the GPUs the running ones free.
func TestForecastEveryJob(t *testing.T) {
	s := busyTwoGPUs()
	s.Queued = queueOf(5)
	p := s.Plan()
	if len(p.Ranges) != 5 {
		t.Fatalf("%d ranges, want 5: %v", len(p.Ranges), p.Ranges)
	}
	// GPU 0 frees at +30m (q0, then q2 at +1h30m, q4 at +2h30m); GPU 1 at +1h30m (q1, q3 at +2h30m).
	want := []time.Duration{30 * time.Minute, 90 * time.Minute, 90 * time.Minute, 150 * time.Minute, 150 * time.Minute}
	for i, w := range want {
		r := p.Ranges[fmt.Sprintf("q%d", i)]
		if !r.Late.Equal(t0.Add(w)) {
			t.Errorf("q%d: late %s, want %s", i, r.Late, t0.Add(w))
		}
		// No ratios: every job is taken to run its maxDuration, so the range is one point.
		if !r.Early.Equal(r.Late) || !r.Likely.Equal(r.Late) {
			t.Errorf("q%d: range %+v, want a single point", i, r)
		}
	}
	// The backfill head keeps its own estimate, which agrees with the forecast.
	if est := p.Estimates["q0"]; !est.Equal(p.Ranges["q0"].Late) {
		t.Errorf("head estimate %s, forecast %s", est, p.Ranges["q0"].Late)
	}
}

// TestForecastReach: a forecast covers the first ForecastReach waiting jobs in queue order and
// names the others, in order, as beyond its reach; the ranges it gives are those of the whole
// forecast, which replays the queue in order (a job's start depends only on the jobs ahead).
func TestForecastReach(t *testing.T) {
	s := busyTwoGPUs()
	s.Queued = queueOf(5)
	whole := s.Plan()
	if len(whole.Ranges) != 5 || whole.Unreached != nil {
		t.Fatalf("default reach: %d ranges, unreached %v; want 5 and none", len(whole.Ranges), whole.Unreached)
	}
	s.ForecastReach = 3
	p := s.Plan()
	if len(p.Ranges) != 3 || !slices.Equal(p.Unreached, []string{"q3", "q4"}) {
		t.Fatalf("reach 3: ranges %v, unreached %v; want q0–q2, and q3, q4 beyond", p.Ranges, p.Unreached)
	}
	for id, r := range p.Ranges {
		if w := whole.Ranges[id]; !r.Early.Equal(w.Early) || !r.Likely.Equal(w.Likely) || !r.Late.Equal(w.Late) {
			t.Errorf("%s: range %+v within the reach, %+v in the whole forecast", id, r, whole.Ranges[id])
		}
	}
}

// TestForecastOrder: a job is never estimated to start before one ahead of it in the queue, and
// in each scenario the range is ordered.
func TestForecastOrder(t *testing.T) {
	s := busyTwoGPUs()
	s.Ratios = RunRatios{Global: RunRatio{Low: 0.2, Mid: 0.6}}
	s.Queued = queueOf(6)
	p := s.Plan()
	order := queueOrder(s, nil)
	var prev Range
	for i, j := range order {
		r, ok := p.Ranges[j.UUID]
		if !ok {
			t.Fatalf("%s has no range", j.UUID)
		}
		if r.Early.After(r.Likely) || r.Likely.After(r.Late) || r.Early.Before(t0) {
			t.Errorf("%s: range out of order: %+v", j.UUID, r)
		}
		if i > 0 && (r.Early.Before(prev.Early) || r.Likely.Before(prev.Likely) || r.Late.Before(prev.Late)) {
			t.Errorf("%s (%+v) estimated before the job ahead of it (%+v)", j.UUID, r, prev)
		}
		prev = r
	}
}

// TestForecastRatiosNarrowEarly: learned ratios bring the early and likely starts forward while
// the late one stays the worst case; a user's own ratio wins over the global one.
func TestForecastRatiosNarrowEarly(t *testing.T) {
	s := busyTwoGPUs()
	s.Queued = queueOf(3)
	worst := s.Plan().Ranges

	s.Ratios = RunRatios{Global: RunRatio{Low: 0.25, Mid: 0.5}}
	learned := s.Plan().Ranges
	for id, w := range worst {
		l := learned[id]
		if !l.Late.Equal(w.Late) {
			t.Errorf("%s: late %s with ratios, %s without: the worst case must not move", id, l.Late, w.Late)
		}
		if !l.Early.Before(w.Early) || !l.Likely.Before(w.Likely) || l.Early.After(l.Likely) {
			t.Errorf("%s: ratios gave %+v, worst case %+v: early and likely should come forward", id, l, w)
		}
	}
	// r1 started 30 minutes before t0 with a 1-hour maxDuration: at ratio 0.5 it is due now.
	if got := learned["q0"].Likely; !got.Equal(t0) {
		t.Errorf("q0 likely %s, want %s", got, t0)
	}

	// User 1 (owner of everything here) is known to use his whole maxDuration: no narrowing.
	s.Ratios.Users = map[int64]RunRatio{1: {Low: 1, Mid: 1}}
	own := s.Plan().Ranges
	for id, w := range worst {
		if own[id] != w {
			t.Errorf("%s: per-user ratio 1 gave %+v, want the worst case %+v", id, own[id], w)
		}
	}
}

// TestForecastNone: a job that can never fit fails, one behind resources that never end (no
// maxDuration) and one pinned to an offline slave get no range; the others still do.
func TestForecastNone(t *testing.T) {
	s := busyTwoGPUs()
	s.Slaves = append(s.Slaves, mkSlave("gpu2", gpus(gpuList(a100, 80, 0, 1)...)), mkSlave("gpu3", offline(), gpus(gpuList(t4, 16, 0, 1)...)))
	s.Running = append(s.Running, ending("forever", "gpu2", []int{0}, nil, 1, 0))
	s.Queued = []Job{
		mkJob("huge", 4, 1, 1, maxDur(time.Hour)),
		mkJob("a100", 1, 1, 1, model("A100"), maxDur(time.Hour)),
		mkJob("t4", 1, 1, 1, onSlave("gpu3"), maxDur(time.Hour)),
		mkJob("v100", 1, 1, 1, model("V100"), maxDur(time.Hour)),
	}
	p := s.Plan()
	if _, ok := p.Ranges["huge"]; ok || outcome(p)["huge"][:4] != "FAIL" {
		t.Errorf("huge: %s, range %+v: want a failure without a range", outcome(p)["huge"], p.Ranges["huge"])
	}
	for _, id := range []string{"a100", "t4"} {
		if r, ok := p.Ranges[id]; ok {
			t.Errorf("%s: range %+v, want none", id, r)
		}
	}
	if r := p.Ranges["v100"]; !r.Late.Equal(t0.Add(30 * time.Minute)) {
		t.Errorf("v100: %+v, want late start at +30m", r)
	}
}

// TestForecastAfterAssignments: jobs assigned in the pass hold their GPUs until their own end.
func TestForecastAfterAssignments(t *testing.T) {
	s := Snapshot{Now: t0, Slaves: []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 1)...))}, Queued: queueOf(3)}
	p := s.Plan()
	if len(p.Assignments) != 1 {
		t.Fatalf("%d assignments, want 1", len(p.Assignments))
	}
	for i, w := range []time.Duration{time.Hour, 2 * time.Hour} {
		id := fmt.Sprintf("q%d", i+1)
		if r := p.Ranges[id]; !r.Late.Equal(t0.Add(w)) {
			t.Errorf("%s: %+v, want late start at +%s", id, r, w)
		}
	}
}

// TestForecastRandom: on random snapshots with known ends, only waiting jobs get ranges, and
// every range is ordered and in the future.
func TestForecastRandom(t *testing.T) {
	for seed := range uint64(10) {
		s := withEnds(randomSnapshot(seed, 40, 400))
		s.Ratios = RunRatios{Global: RunRatio{Low: 0.1, Mid: 0.4}, Users: map[int64]RunRatio{1: {Low: 0.5, Mid: 0.9}}}
		p := s.Plan()
		if len(p.Ranges) == 0 {
			t.Errorf("seed %d: no ranges", seed)
		}
		for id, r := range p.Ranges {
			if _, waiting := p.Explanations[id]; !waiting {
				t.Errorf("seed %d: %s has a range but does not wait", seed, id)
			}
			if r.Early.Before(s.Now) || r.Early.After(r.Likely) || r.Likely.After(r.Late) {
				t.Errorf("seed %d: %s: range %+v out of order", seed, id, r)
			}
		}
	}
}

// BenchmarkPlanForecast is a large installation with a long queue: 500 slaves, 5,000 queued
// jobs, known ends and learned ratios, so that the forecast replays the whole queue.
func BenchmarkPlanForecast(b *testing.B) {
	s := withEnds(randomSnapshot(42, 500, 5000))
	s.Ratios = RunRatios{Global: RunRatio{Low: 0.1, Mid: 0.4}}
	var p Plan
	b.ReportAllocs()
	for b.Loop() {
		p = s.Plan()
	}
	b.ReportMetric(float64(len(p.Explanations)), "waiting")
	b.ReportMetric(float64(len(p.Ranges)), "ranges")
}

// TestForecastPrivateCluster: jobs sharing candidate slaves must share the scope: a guest
// (short minDuration) and an owner's job get ranges on a private cluster's slave, a job of
// another project too long to be a guest none.
func TestForecastPrivateCluster(t *testing.T) {
	s := busyTwoGPUs()
	s.Slaves[0].ClusterID = 4
	s.Clusters = map[int]Cluster{4: {ID: 4, Private: true, Projects: []int64{4}, GuestLimit: 2 * time.Hour}}
	s.Queued = []Job{
		mkJob("long", 1, 1, 1, maxDur(time.Hour)),
		mkJob("guest", 1, 1, 1, maxDur(time.Hour), minDur(time.Hour)),
		mkJob("owner", 1, 1, 1, maxDur(time.Hour), project(4)),
	}
	p := s.Plan()
	if r, ok := p.Ranges["long"]; ok {
		t.Errorf("long: range %+v, want none (it may not use the private cluster)", r)
	}
	for _, id := range []string{"guest", "owner"} {
		if _, ok := p.Ranges[id]; !ok {
			t.Errorf("%s: no range", id)
		}
	}
}

// TestForecastBackfill: a one-GPU job behind a two-GPU job is not held to the big job's start:
// on the other slave a GPU comes free at +60m, and it is estimated to start then, as the
// planner would backfill it; the big job starts at +90m, when slave A is wholly free.
func TestForecastBackfill(t *testing.T) {
	run := func(id, slave string, gpu int, ends time.Duration) Placed {
		pl := ending(id, slave, []int{gpu}, []int{gpu}, 10, ends)
		pl.Started = t0.Add(-time.Minute)
		return pl
	}
	s := Snapshot{Now: t0, Policy: PolicyFIFO,
		Slaves: []Slave{mkSlave("a", gpus(gpuList(v100, 32, 0, 2)...)), mkSlave("b", gpus(gpuList(v100, 32, 0, 2)...))},
		Running: []Placed{run("a0", "a", 0, 30*time.Minute), run("a1", "a", 1, 90*time.Minute),
			run("b0", "b", 0, 60*time.Minute), run("b1", "b", 1, 120*time.Minute)},
		Queued: []Job{mkJob("big", 2, 2, 2, maxDur(time.Hour), submitted(0)), mkJob("small", 1, 1, 1, maxDur(time.Hour), submitted(time.Second)),
			mkJob("small2", 1, 1, 1, maxDur(time.Hour), submitted(2*time.Second))}}
	p := s.Plan()
	want := map[string]time.Duration{"big": 90 * time.Minute, "small": 60 * time.Minute, "small2": 120 * time.Minute}
	for id, w := range want {
		if r := p.Ranges[id]; !r.Late.Equal(t0.Add(w)) {
			t.Errorf("%s: late start %s, want +%s", id, r.Late.Sub(t0), w)
		}
	}
}

// TestForecastWaitsForTheHaltGrace: a job that waits for a victim to stop may start at once
// (a victim that stops at SIGUSR1) and most likely when the victim's halt grace is over, not at
// the very pass that halted it (the estimate then said "now" and the job always started after
// its range); a job already halting counts the same, and the snapshot's own grace is used.
func TestForecastWaitsForTheHaltGrace(t *testing.T) {
	const h = time.Hour
	for _, c := range []struct {
		name  string
		grace time.Duration
		run   Placed
		halts int
	}{
		{"halted this pass", 0, ran("heavy-1", "gpu1", 0, 2, 2*h, h, restartable()), 1},
		{"already halting", 0, ran("heavy-1", "gpu1", 0, 2, 2*h, h, halting()), 0},
		{"a longer grace", 2 * time.Minute, ran("heavy-1", "gpu1", 0, 2, 2*h, h, restartable()), 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.run.Ends = t0.Add(5 * h)
			s := Snapshot{Now: t0, Policy: PolicyFair, HaltGrace: c.grace, Tallies: map[int64]float64{1: 1, 2: 10},
				Slaves: []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 1)...))}, Running: []Placed{c.run},
				Queued: []Job{mkJob("light", 1, 1, 1, user(1), maxDur(h))}}
			p := s.Plan()
			if len(p.Halts) != c.halts {
				t.Fatalf("halts %+v, want %d (%q)", p.Halts, c.halts, p.Explanations)
			}
			grace := c.grace
			if grace == 0 {
				grace = DefaultHaltGrace
			}
			want := Range{Early: t0, Likely: t0.Add(grace), Late: t0.Add(grace)}
			if got := p.Ranges["light"]; got != want {
				t.Errorf("range %+v, want %+v", got, want)
			}
		})
	}
}

// TestRangesFor: with RangesFor set, a pass forecasts only when one of the named jobs is left
// waiting (decided to wait, or given in Waiting), and then for the waiting jobs up to the last
// named one, as without it (those behind it are not replayed); nil RangesFor forecasts every
// job at every pass (the master). One GPU of two is free: q0 is assigned, q1 and q2 wait.
func TestRangesFor(t *testing.T) {
	s := busyTwoGPUs()
	s.Running = s.Running[1:] // GPU 0 free
	s.Queued = queueOf(3)
	all := s.Plan()
	if len(all.Assignments) != 1 || all.Assignments[0].JobUUID != "q0" || len(all.Ranges) != 2 {
		t.Fatalf("without RangesFor: assigned %+v, ranges %v", all.Assignments, all.Ranges)
	}
	for _, c := range []struct {
		name    string
		named   []string
		waiting bool // q2 given in Waiting rather than Queued
		ranges  bool
	}{
		{"an assigned job named", []string{"q0"}, false, false},
		{"none named", []string{}, false, false},
		{"a waiting job named", []string{"q0", "q2"}, false, true},
		{"a job of Waiting named", []string{"q2"}, true, true},
		{"an unknown job named", []string{"gone"}, false, false},
		{"the first waiting job named", []string{"q1"}, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := s
			s.RangesFor = c.named
			if c.waiting {
				s.Queued, s.Waiting = s.Queued[:2], s.Queued[2:]
			}
			got := s.Plan()
			if !reflect.DeepEqual(got.Assignments, all.Assignments) {
				t.Fatalf("RangesFor changed the decisions: %+v", got.Assignments)
			}
			want := all.Ranges
			if slices.Equal(c.named, []string{"q1"}) {
				want = map[string]Range{"q1": all.Ranges["q1"]}
			}
			switch {
			case c.ranges && !reflect.DeepEqual(got.Ranges, want):
				t.Fatalf("ranges %v, want those without RangesFor %v", got.Ranges, want)
			case !c.ranges && len(got.Ranges) != 0:
				t.Fatalf("forecast though no named job waits: %v", got.Ranges)
			}
		})
	}
}

// TestForecastRunningJobByItsAge: where the distribution of run times is learned, a running job
// ends as the jobs like it that ran as long did. Half of all jobs end at a tenth of their
// maxDuration, half run it all: a job that has run half of its 2 hours is past the first half
// and will run to its end, though the mean ratio (0.55) says it is due in 6 minutes. The drawn
// replays agree on it, and a pass forecasts the same every time.
func TestForecastRunningJobByItsAge(t *testing.T) {
	s := Snapshot{Now: t0, Slaves: []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 1)...))}}
	run := ending("r1", "gpu1", []int{0}, []int{0}, 10, time.Hour)
	run.Started, run.UserID = t0.Add(-time.Hour), 1
	s.Running = []Placed{run}
	s.Queued = queueOf(1)

	s.Ratios = RunRatios{Global: RunRatio{Low: 0.1, Mid: 0.55}}
	if got, want := s.Plan().Ranges["q0"].Likely, t0.Add(6*time.Minute); !got.Equal(want) {
		t.Fatalf("by the mean alone: likely %s, want %s", got, want)
	}
	skew := make([]float64, RatioQuantiles+1)
	for k := range skew {
		skew[k] = 0.1
		if k > RatioQuantiles/2 {
			skew[k] = 1
		}
	}
	s.Ratios = RunRatios{Global: NewRunRatio(0.55, skew)}
	p := s.Plan()
	r := p.Ranges["q0"]
	if r.Likely.Before(t0.Add(55*time.Minute)) || r.Likely.After(r.Late) || !r.Late.Equal(t0.Add(time.Hour)) {
		t.Fatalf("by its age: range %+v, want likely about %s", r, t0.Add(time.Hour))
	}
	for range 3 {
		if again := s.Plan().Ranges["q0"]; again != r {
			t.Fatalf("the same pass forecast %+v, then %+v", r, again)
		}
	}
}

// TestForecastDrawnReplays: with a learned distribution the likely start is the median of
// replays with drawn run times. Eight queued one-hour jobs behind two busy GPUs, on a
// distribution even over [0.2, 1]: every likely start lies within the range, in queue order,
// and a later job's likely wait is about the sum of the mean run times (0.6 h) ahead of it on
// its GPU, not the worst case.
func TestForecastDrawnReplays(t *testing.T) {
	s := busyTwoGPUs()
	s.Queued = queueOf(8)
	q := make([]float64, RatioQuantiles+1)
	for k := range q {
		q[k] = 0.2 + 0.8*float64(k)/RatioQuantiles
	}
	s.Ratios = RunRatios{Global: NewRunRatio(0.6, q)}
	p := s.Plan()
	var prev time.Time
	for _, j := range queueOrder(s, nil) {
		r := p.Ranges[j.UUID]
		if r.Likely.Before(r.Early) || r.Likely.After(r.Late) || r.Likely.Before(prev) {
			t.Errorf("%s: %+v (job ahead likely at %s)", j.UUID, r, prev)
		}
		prev = r.Likely
	}
	// q7 is the fourth on its GPU: the running job's rest, then three runs of 0.6 h on average.
	last := p.Ranges["q7"]
	if w := last.Likely.Sub(t0); w < 90*time.Minute || w > 4*time.Hour || !last.Likely.Before(last.Late) {
		t.Errorf("q7: likely wait %s, range %+v", w, last)
	}
}

// TestForecastShortRunsOfLongMaxDurations: jobs that run minutes of the default two weeks are
// forecast to run those minutes, not a floor share of the two weeks (it was 1 %, 3.4 hours: one
// of the two reasons B8x's starts lay days ahead, RunRatio.tail the other); a ratio
// learned as next to nothing still holds a GPU a minute (minRunTime), not no time at all. One
// GPU, held by a job 5 minutes into its two weeks, and four waiting two-week jobs.
func TestForecastShortRunsOfLongMaxDurations(t *testing.T) {
	const twoWeeks = 14 * 24 * time.Hour
	s := Snapshot{Now: t0, Slaves: []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 1)...))}}
	run := ending("r1", "gpu1", []int{0}, []int{0}, 10, twoWeeks-5*time.Minute)
	run.Started, run.UserID = t0.Add(-5*time.Minute), 1
	s.Running = []Placed{run}
	s.Queued = queueOf(4, maxDur(twoWeeks))
	ratios := func(lo, hi float64) RunRatios {
		q := make([]float64, RatioQuantiles+1)
		for k := range q {
			q[k] = lo + (hi-lo)*float64(k)/RatioQuantiles
		}
		return RunRatios{Global: NewRunRatio((lo+hi)/2, q)}
	}
	// Run times even over 8–24 minutes (mean 16): the last waits for r1's rest and three runs.
	s.Ratios = ratios(8.0/(14*24*60), 24.0/(14*24*60))
	r := s.Plan().Ranges["q3"]
	if w := r.Likely.Sub(t0); w < 30*time.Minute || w > 90*time.Minute {
		t.Errorf("runs of 8–24 minutes: q3's likely start %s ahead (range %+v), want about an hour", w, r)
	}
	if w := r.Early.Sub(t0); w < 10*time.Minute || w > r.Likely.Sub(t0) {
		t.Errorf("runs of 8–24 minutes: q3's early start %s ahead, likely %s", w, r.Likely.Sub(t0))
	}
	// Ratios of a millionth of the two weeks (1.2 s): each run holds the GPU the minute.
	s.Ratios = ratios(1e-7, 1e-6)
	p := s.Plan()
	for i, id := range []string{"q0", "q1", "q2", "q3"} {
		r, ok := p.Ranges[id]
		end := p.Ranges["q0"].Likely
		if !ok || r.Likely.Sub(end) < time.Duration(i)*minRunTime || r.Likely.Sub(end) > time.Duration(i)*minRunTime+time.Second {
			t.Errorf("runs of a second: %s likely at %s (q0 at %s, ok %v), want %d× the minute after q0", id, r.Likely, end, ok, i)
		}
	}
}

// TestForecastDrawsAreStable: a job's draws are its own, the same at every pass, so its likely
// start moves only when what it waits for does. Twenty queued jobs behind a full slave, passes
// 5 s apart with nothing else changed: no likely start moves by a minute (the master's
// tolerance before it writes an estimate again), though the waits reach hours.
func TestForecastDrawsAreStable(t *testing.T) {
	s := Snapshot{Now: t0, Slaves: []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 3)...))}}
	for g := range 4 {
		pl := ending(fmt.Sprintf("r%d", g), "gpu1", []int{g}, []int{g}, 10, time.Duration(g+1)*time.Hour)
		pl.Started, pl.UserID = pl.Ends.Add(-8*time.Hour), 1
		s.Running = append(s.Running, pl)
	}
	s.Queued = queueOf(20, maxDur(4*time.Hour))
	q := make([]float64, RatioQuantiles+1)
	for k := range q {
		q[k] = 0.05 + 0.95*float64(k)/RatioQuantiles
	}
	s.Ratios = RunRatios{Global: NewRunRatio(0.5, q)}
	first := s.Plan().Ranges
	s.Now = t0.Add(5 * time.Second)
	again := s.Plan().Ranges
	var far time.Duration
	for id, r := range first {
		far = max(far, r.Likely.Sub(t0))
		if d := again[id].Likely.Sub(r.Likely).Abs(); d >= time.Minute {
			t.Errorf("%s: likely %s, 5 s later %s", id, r.Likely, again[id].Likely)
		}
	}
	if len(first) != 20 || far < 2*time.Hour {
		t.Fatalf("%d ranges, the farthest likely start %s ahead: want 20, hours ahead", len(first), far)
	}
}

// TestForecastWorkersKeepTheRanges: the replays give the same ranges run one at a time, two at a
// time or all at once (the master's forecaster runs them on all cores but one).
func TestForecastWorkersKeepTheRanges(t *testing.T) {
	s := soakSnapshot(100, 2000, 0.23, 30*time.Minute)
	s.NoRanges = false
	want := s.Plan().Ranges
	if len(want) == 0 {
		t.Fatal("no ranges")
	}
	for _, w := range []int{1, 2, 3} {
		s.ForecastWorkers = w
		if got := s.Plan().Ranges; !reflect.DeepEqual(got, want) {
			t.Errorf("%d workers: %d ranges, %d differ from all at once", w, len(got), rangesDiffer(got, want))
		}
	}
}

func rangesDiffer(a, b map[string]Range) int {
	n := 0
	for id, r := range a {
		if b[id] != r {
			n++
		}
	}
	return n + max(0, len(b)-len(a))
}

// TestSlaveSet: the replay's look at the slaves with room visits, in index order, those in both
// sets, and stops where told.
func TestSlaveSet(t *testing.T) {
	a, b := newSlaveSet(200), newSlaveSet(200)
	for _, i := range []int{0, 3, 63, 64, 65, 130, 199} {
		a.add(i)
	}
	for _, i := range []int{3, 63, 64, 100, 130, 199} {
		b.add(i)
	}
	b.remove(100)
	var seen []int
	a.eachIn(b, func(i int) bool { seen = append(seen, i); return false })
	if want := []int{3, 63, 64, 130, 199}; !slices.Equal(seen, want) {
		t.Errorf("both: %v, want %v", seen, want)
	}
	seen = seen[:0]
	a.eachIn(b, func(i int) bool { seen = append(seen, i); return i == 64 })
	if want := []int{3, 63, 64}; !slices.Equal(seen, want) {
		t.Errorf("stopped at 64: %v, want %v", seen, want)
	}
	if !a.has(65) || a.has(66) || b.has(100) {
		t.Error("has")
	}
}

// TestForecastTreeKeepsTheScan: the replay's walk of the slaves by when their GPUs came free
// (fromTree) chooses the slave the scan by index chooses, so the ranges are the same with it
// and without it: random installations (GPU models, clusters, CPUs and memory that may not
// fit), with learned ratios, drawn ones and none, and B8x's queue.
func TestForecastTreeKeepsTheScan(t *testing.T) {
	q := make([]float64, RatioQuantiles+1)
	for k := range q {
		x := float64(k) / RatioQuantiles
		q[k] = x * x
	}
	var snaps []Snapshot
	for seed := range uint64(12) {
		s := withEnds(randomSnapshot(seed, 80, 600))
		switch seed % 3 {
		case 1:
			s.Ratios = RunRatios{Global: RunRatio{Low: 0.1, Mid: 0.4}, Users: map[int64]RunRatio{1: {Low: 0.5, Mid: 0.9}}}
		case 2:
			s.Ratios = RunRatios{Global: NewRunRatio(1.0/3, q)}
		}
		snaps = append(snaps, s)
	}
	for seed := range uint64(12) {
		snaps = append(snaps, mixedSnapshot(seed))
	}
	snaps = append(snaps, soakSnapshot(150, 3000, 0.23, 30*time.Minute))
	defer func() { replayTrees = true }()
	for i, s := range snaps {
		s.NoRanges = false
		replayTrees = false
		want := s.Plan().Ranges
		replayTrees = true
		got := s.Plan().Ranges
		if len(want) == 0 {
			t.Errorf("snapshot %d: no ranges", i)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("snapshot %d: %d of %d ranges differ with the tree", i, rangesDiffer(got, want), len(want))
		}
	}
}

// mixedSnapshot is a cluster whose slaves each mix two GPU models (a job asking one model may
// not take a slave's GPUs that came free first) and whose jobs end on the same ten minutes (ties
// between slaves), with a few GPUs free: where the walk by bound and the scan by index could part.
func mixedSnapshot(seed uint64) Snapshot {
	r := rand.New(rand.NewPCG(seed, 7))
	s := Snapshot{Now: t0, Clusters: map[int]Cluster{1: {ID: 1}}}
	for i := range 40 {
		sl := mkSlave(fmt.Sprintf("node%03d", i), inCluster(1))
		sl.GPUs = gpuList(v100, 32, 0, 8)
		for k := range sl.GPUs {
			if r.IntN(2) == 0 {
				sl.GPUs[k] = gpuList(a100, 80, k, 1)[0]
			}
		}
		s.Slaves = append(s.Slaves, sl)
		for _, k := range r.Perm(8)[:6+r.IntN(3)] {
			s.Running = append(s.Running, Placed{JobUUID: fmt.Sprintf("run%03d-%d", i, k), SlaveName: sl.Name, UserID: int64(1 + r.IntN(5)),
				GPUIndices: []int{k}, CPUIDs: []int{k}, MemoryGb: 1, Ends: t0.Add(time.Duration(1+r.IntN(12)) * 10 * time.Minute)})
		}
	}
	for i := range 400 {
		var opts []jobOpt
		if r.IntN(2) == 0 {
			opts = append(opts, model([]string{"V100", "a100"}[r.IntN(2)]))
		}
		opts = append(opts, user(int64(1+r.IntN(5))), maxDur(time.Duration(1+r.IntN(6))*time.Hour), submitted(time.Duration(i)*time.Second))
		s.Queued = append(s.Queued, mkJob(fmt.Sprintf("job%04d", i), 1+r.IntN(4), 1, 1, opts...))
	}
	return s
}

// TestFendHeapOrder: a replay's ends come back in time order, to the nanosecond and past the
// year 2262 (a maxDuration may be up to 292 years, past what nanoseconds since 1970 hold),
// those added before heap.Init and those pushed after alike; ties come back, all of them.
func TestFendHeapOrder(t *testing.T) {
	base := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	var ats []time.Time
	for _, d := range []time.Duration{5 * time.Second, time.Nanosecond, 0, 290 * 365 * 24 * time.Hour, time.Hour,
		290*365*24*time.Hour + time.Nanosecond, 2 * time.Nanosecond, time.Hour, 250 * 365 * 24 * time.Hour} {
		ats = append(ats, base.Add(d))
	}
	h := newFendHeap(0)
	for i, at := range ats[:5] {
		h.add(fend{at: at, sl: i})
	}
	heap.Init(&h)
	for i, at := range ats[5:] {
		h.push(fend{at: at, sl: 5 + i})
	}
	want := slices.Clone(ats)
	slices.SortFunc(want, time.Time.Compare)
	var got []time.Time
	for h.Len() > 0 {
		next := want[len(got)]
		if !h.endsBy(next) || h.endsBy(next.Add(-time.Nanosecond)) {
			t.Fatalf("the next end is at %v: endsBy it %v, endsBy a nanosecond before %v", next, h.endsBy(next), h.endsBy(next.Add(-time.Nanosecond)))
		}
		e := h.pop()
		if !e.at.Equal(ats[e.sl]) {
			t.Fatalf("popped end %d at %v, added at %v", e.sl, e.at, ats[e.sl])
		}
		got = append(got, e.at)
	}
	if !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Errorf("ends came back in the order\n%v\nwant\n%v", got, want)
	}
	if h.endsBy(ats[5]) {
		t.Error("endsBy on an empty heap: true")
	}
}
