package scheduler

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
)

// b1xSnapshot is B1x's first pass as a snapshot: slaves × 8 GPUs (32 CPUs, 256 GB) over five
// clusters, nothing running, and a burst of jobs of B1's mix (70 % one GPU, 20 % 2–8 GPUs,
// 10 % one GPU pinned to a cluster; 2 CPUs and 8 GB per GPU) from 50 users.
func b1xSnapshot(slaves, jobs int) Snapshot {
	rng := rand.New(rand.NewPCG(6, 1))
	s := Snapshot{Now: t0, Policy: PolicyFair, Clusters: map[int]Cluster{}, Tallies: map[int64]float64{}}
	for c := 1; c <= 5; c++ {
		s.Clusters[c] = Cluster{ID: c}
	}
	for i := range slaves {
		s.Slaves = append(s.Slaves, mkSlave(fmt.Sprintf("node%05d", i), gpus(gpuList(v100, 32, 0, 8)...), func(sl *Slave) { sl.ClusterID = 1 + i%5 }))
	}
	for u := int64(1); u <= 50; u++ {
		s.Tallies[u] = rng.Float64() * 100
	}
	for i := range jobs {
		d := time.Duration(1+rng.IntN(48)) * time.Hour
		g, opts := 1, []jobOpt{user(1 + rng.Int64N(50)), minDur(d / 2), maxDur(d)}
		switch i % 10 {
		case 1, 5:
			g = 2 + rng.IntN(7)
		case 9:
			opts = append(opts, cluster(1+rng.IntN(5)))
		}
		j := mkJob(fmt.Sprintf("job%06d", i), g, 2*g, 8*g, opts...)
		j.Submitted = t0.Add(-time.Hour + time.Duration(i)*time.Millisecond)
		s.Queued = append(s.Queued, j)
	}
	return s
}

// b1xSize reads GPULAB_BENCH_B1X ("SLAVESxJOBS"), by default a tenth of B1x: 500x10000.
func b1xSize() (slaves, jobs int) {
	slaves, jobs = 500, 10000
	if v := os.Getenv("GPULAB_BENCH_B1X"); v != "" {
		a, c, _ := strings.Cut(v, "x")
		slaves, _ = strconv.Atoi(a)
		jobs, _ = strconv.Atoi(c)
	}
	return slaves, jobs
}

// BenchmarkPlanB1x is one Plan of B1x's first pass (GPULAB_BENCH_B1X=SLAVESxJOBS, default a
// tenth: 500x10000): the pure part of what the issue asks to take ≤ 5 s at 5000x100000.
func BenchmarkPlanB1x(b *testing.B) {
	slaves, jobs := b1xSize()
	s := b1xSnapshot(slaves, jobs)
	var p Plan
	for b.Loop() {
		p = s.Plan()
	}
	b.ReportMetric(float64(len(p.Assignments)), "assigned")
	b.ReportMetric(float64(len(p.Explanations)), "waiting")
}

// TestScanShortcutsKeepThePlan: the scans' shortcuts (a scan reused while nothing was
// assigned, the first look only at slaves with room) change nothing in the plan: on random
// clusters, with and without known ends (backfill and halts), and on B1x's burst, the plan is
// the same with them as without.
func TestScanShortcutsKeepThePlan(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	// A full cluster where a few users are far lighter than the rest: SCORE halts for some of
	// their jobs, none for most (makeRoom's shortcut when no slave's top outranks).
	steady := steadySnapshot(60, 1500, 5)
	steady.NoRanges = false
	for u := range steady.Tallies {
		steady.Tallies[u] = 1000 * float64(u%10)
	}
	for k := range steady.Running {
		steady.Running[k].Restartable = k%2 == 0
	}
	// The backfill head draining its slave: every long job that fits is held back.
	draining := drainingSnapshot(60, 1500)
	draining.NoRanges = false
	snaps := []Snapshot{b1xSnapshot(60, 1500), steady, draining}
	for i := range uint64(12) {
		s := randomSnapshot(seed+i, 40+int(i)*10, 600)
		if i%2 == 1 {
			s = withEnds(s)
			for k := range s.Running {
				s.Running[k].Started = s.Now.Add(-time.Duration(1+k%5) * time.Hour)
				s.Running[k].Restartable = k%3 == 0
			}
			s.Policy = PolicyFair
		}
		snaps = append(snaps, s)
	}
	// Slaves of 8, 4, 2, 1 and no GPUs: the index's lists of free counts of unequal lengths.
	for i := range uint64(4) {
		s := randomSnapshot(seed+100+i, 80, 800)
		for k := range s.Slaves {
			sl := &s.Slaves[k]
			sl.GPUs = slices.Clone(sl.GPUs[:[]int{8, 4, 2, 1, 0, 8}[k%6]])
		}
		if i%2 == 1 {
			s = withEnds(s)
		}
		snaps = append(snaps, s)
	}
	from := bestFitFrom
	defer func() { bestFitFrom = from }()
	for i, s := range snaps {
		with := s.Plan()
		// The best fits found through the index on clusters of any size (bestfit.go).
		bestFitFrom = 1
		indexed := s.Plan()
		bestFitFrom = from
		scanShortcuts = false
		without := s.Plan()
		scanShortcuts = true
		for name, p := range map[string]Plan{"with the shortcuts": with, "with the index": indexed} {
			if !reflect.DeepEqual(p, without) {
				for _, diff := range planDiff(p, without) {
					t.Errorf("snapshot %d, %s: %s", i, name, diff)
				}
			}
		}
		if i == 2 && heldBack(with) < 100 {
			t.Fatalf("the draining cluster: %d jobs held back, want most", heldBack(with))
		}
		if i == 1 && (len(with.Halts) == 0 || len(with.Explanations) == 0) {
			t.Fatalf("the steady full cluster: %d halts, %d waiting: want both", len(with.Halts), len(with.Explanations))
		}
		if i == 0 && (len(with.Assignments) == 0 || len(with.Explanations) == 0) {
			t.Fatalf("B1x's burst: %d assigned, %d waiting: want both", len(with.Assignments), len(with.Explanations))
		}
	}
}

// heldBack counts the jobs a plan holds back for the backfill head.
func heldBack(p Plan) int {
	n := 0
	for _, w := range p.Explanations {
		if len(w) > 0 && strings.HasPrefix(w[0], "held back") {
			n++
		}
	}
	return n
}

// planDiff names the first differences between two plans.
func planDiff(a, b Plan) []string {
	var out []string
	if !reflect.DeepEqual(a.Assignments, b.Assignments) {
		out = append(out, fmt.Sprintf("assignments differ: %d vs %d", len(a.Assignments), len(b.Assignments)))
	}
	if !reflect.DeepEqual(a.Failures, b.Failures) {
		out = append(out, "failures differ")
	}
	if !reflect.DeepEqual(a.Halts, b.Halts) {
		out = append(out, fmt.Sprintf("halts differ: %v vs %v", a.Halts, b.Halts))
	}
	for id, w := range a.Explanations {
		if !reflect.DeepEqual(w, b.Explanations[id]) {
			out = append(out, fmt.Sprintf("job %s explained %q with the shortcuts, %q without", id, w, b.Explanations[id]))
			break
		}
	}
	if len(a.Explanations) != len(b.Explanations) {
		out = append(out, "explanation counts differ")
	}
	if !reflect.DeepEqual(a.Estimates, b.Estimates) {
		out = append(out, "estimates differ")
	}
	if !reflect.DeepEqual(a.Ranges, b.Ranges) {
		out = append(out, "ranges differ")
	}
	return out
}

// BenchmarkPlanSteadyForecast is a pass of a full cluster with a long queue (B1x's burst after
// its first pass: what was assigned runs, started within the last day), with the forecast's
// ratios unknown, known as a mean, and known as a distribution (the drawn replays): what the
// likely start's draws cost a pass (GPULAB_BENCH_B1X as for BenchmarkPlanB1x).
func BenchmarkPlanSteadyForecast(b *testing.B) {
	slaves, jobs := b1xSize()
	s := steadySnapshot(slaves, jobs, 0)
	s.NoRanges = false
	q := make([]float64, RatioQuantiles+1)
	for k := range q {
		x := float64(k) / RatioQuantiles
		q[k] = x * x // many short runs, a long tail
	}
	for _, c := range []struct {
		name   string
		ratios RunRatios
	}{
		{"unknown", RunRatios{}},
		{"mean", RunRatios{Global: RunRatio{Low: 0.01, Mid: 1.0 / 3}}},
		{"drawn", RunRatios{Global: NewRunRatio(1.0/3, q)}},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := s
			s.Ratios = c.ratios
			var p Plan
			for b.Loop() {
				p = s.Plan()
			}
			b.ReportMetric(float64(len(p.Ranges)), "ranges")
		})
	}
}

// steadySnapshot is B8x's steady state as a pass sees it: slaves × 8 GPUs full with the jobs
// B1x's first pass placed, a few of them ended since (their room free), and the rest of the
// burst queued behind.
func steadySnapshot(slaves, jobs, ended int) Snapshot {
	s := b1xSnapshot(slaves, jobs)
	first := s.Plan()
	byUUID := map[string]Job{}
	for _, j := range s.Queued {
		byUUID[j.UUID] = j
	}
	rng := rand.New(rand.NewPCG(8, 1))
	placed := map[string]bool{}
	for i, a := range first.Assignments {
		placed[a.JobUUID] = true
		if i%(len(first.Assignments)/max(ended, 1)) == 0 && ended > 0 {
			ended--
			continue // ended since: its room is free
		}
		j := byUUID[a.JobUUID]
		gi := make([]int, len(a.GPUs))
		for k, g := range a.GPUs {
			gi[k] = g.Index
		}
		started := t0.Add(-time.Duration(rng.Int64N(int64(24 * time.Hour))))
		s.Running = append(s.Running, Placed{JobUUID: a.JobUUID, SlaveName: a.SlaveName, UserID: j.UserID, GPUIndices: gi,
			CPUIDs: a.CPUIDs, MemoryGb: a.MemoryGb, Started: started, Ends: started.Add(j.Request.Scheduling.MaxDuration.Std())})
	}
	var queued []Job
	for _, j := range s.Queued {
		if !placed[j.UUID] {
			queued = append(queued, j)
		}
	}
	s.Queued = queued
	s.NoRanges = true
	return s
}

// BenchmarkPlanSteadyB8x is a pass of B8x's steady state without the forecast: 5,000 full
// slaves, 25 jobs' room free, ~22,000 queued (GPULAB_BENCH_B1X=SLAVESxJOBS sizes the burst).
func BenchmarkPlanSteadyB8x(b *testing.B) {
	slaves, jobs := 5000, 44000
	if os.Getenv("GPULAB_BENCH_B1X") != "" {
		slaves, jobs = b1xSize()
	}
	s := steadySnapshot(slaves, jobs, 25)
	for _, sweep := range []int{0, ForecastCap} {
		b.Run(fmt.Sprintf("sweep=%d", sweep), func(b *testing.B) {
			s := s
			s.Sweep = sweep
			if sweep > 0 {
				// The leader names the jobs no pass planned yet: some 50 new ones at the queue's end.
				for i := len(s.Queued) - 50; i < len(s.Queued); i++ {
					s.Decide = append(s.Decide, i)
				}
			}
			var p Plan
			for b.Loop() {
				p = s.Plan()
			}
			b.ReportMetric(float64(len(s.Queued)), "queued")
			b.ReportMetric(float64(len(s.Queued)-len(p.Skipped)), "decided")
			b.ReportMetric(float64(len(p.Assignments)), "assigned")
		})
	}
}

// soakSnapshot is B8x's queue as the forecaster sees it in the soak (bench/soak_test.go): slaves
// × 8 GPUs full, mostly with one-GPU jobs (3 % of 2–4), started within age and running to the
// 2-week default maxDuration; queued jobs of one GPU, a share multi of them 2–4, from 20 users;
// ratios learned as the soak's run times give them (exponential, mean 800 s, of two weeks).
func soakSnapshot(slaves, queued int, multi float64, age time.Duration) Snapshot {
	rng := rand.New(rand.NewPCG(3, 1))
	s := Snapshot{Now: t0, Policy: PolicyFair, Clusters: map[int]Cluster{1: {ID: 1}}, Tallies: map[int64]float64{}}
	for i := range slaves {
		s.Slaves = append(s.Slaves, mkSlave(fmt.Sprintf("node%05d", i), gpus(gpuList(v100, 32, 0, 8)...), func(sl *Slave) { sl.ClusterID = 1 }))
	}
	for u := int64(1); u <= 20; u++ {
		s.Tallies[u] = rng.Float64() * 100
	}
	maxd := 14 * 24 * time.Hour
	n := 0
	for i := range slaves {
		k := 0
		for k < 8 {
			g := 1
			if rng.Float64() < 0.03 {
				g = min(2+rng.IntN(3), 8-k)
			}
			gi := make([]int, g)
			ci := make([]int, 2*g)
			for x := range g {
				gi[x] = k + x
				ci[2*x], ci[2*x+1] = 2*(k+x), 2*(k+x)+1
			}
			started := t0.Add(-time.Duration(rng.Int64N(int64(age))))
			s.Running = append(s.Running, Placed{JobUUID: fmt.Sprintf("run%06d", n), SlaveName: fmt.Sprintf("node%05d", i), UserID: 1 + rng.Int64N(20),
				GPUIndices: gi, CPUIDs: ci, MemoryGb: 8 * g, Started: started, Ends: started.Add(maxd)})
			n++
			k += g
		}
	}
	for i := range queued {
		g := 1
		if rng.Float64() < multi {
			g = 2 + rng.IntN(3)
		}
		j := mkJob(fmt.Sprintf("job%06d", i), g, 2*g, 8*g, user(1+rng.Int64N(20)), minDur(7*24*time.Hour), maxDur(maxd))
		j.Submitted = t0.Add(-age + time.Duration(i)*time.Millisecond)
		s.Queued = append(s.Queued, j)
	}
	q := make([]float64, RatioQuantiles+1)
	mean := 800.0 / maxd.Seconds()
	for k := range q {
		p := float64(k) / RatioQuantiles
		if k == RatioQuantiles {
			p = 0.999
		}
		q[k] = -math.Log(1-p) * mean
	}
	s.Ratios = RunRatios{Global: NewRunRatio(mean, q)}
	return s
}

// BenchmarkForecastSoak is the forecaster's plan in B8x at 2,000 slaves, early (the queue's
// 2–4-GPU jobs 7 %, the running jobs started in the last minute) and late (23 %, 30 minutes),
// with the replays on every core and one at a time (the master's forecaster on 2 cores), and
// the pass alone (no ranges) for scale.
func BenchmarkForecastSoak(b *testing.B) {
	for _, c := range []struct {
		name    string
		multi   float64
		age     time.Duration
		workers int
		ranges  bool
	}{
		{"early", 0.067, time.Minute, 0, true}, {"late", 0.23, 30 * time.Minute, 0, true},
		{"late/workers=1", 0.23, 30 * time.Minute, 1, true}, {"late/noranges", 0.23, 30 * time.Minute, 0, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := soakSnapshot(2000, 20000, c.multi, c.age)
			s.NoRanges, s.ForecastWorkers = !c.ranges, c.workers
			var p Plan
			for b.Loop() {
				p = s.Plan()
			}
			b.ReportMetric(float64(len(p.Ranges)), "ranges")
		})
	}
}

// drainingSnapshot is soakSnapshot with a 4-GPU job first in the queue (FIFO) and one slave,
// node00007, three GPUs short of it and ending its jobs first: the head's reservation, where
// every long one-GPU job would fit and is held back, as in B8x's last minutes, until short jobs
// have taken that room.
func drainingSnapshot(slaves, queued int) Snapshot {
	s := soakSnapshot(slaves, queued, 0.23, 30*time.Minute)
	var run []Placed
	dropped := 0
	for _, pl := range s.Running {
		if pl.SlaveName == "node00007" && len(pl.GPUIndices) == 1 && dropped < 3 {
			dropped++
			continue
		}
		if pl.SlaveName == "node00007" {
			pl.Ends = t0.Add(time.Minute)
		}
		run = append(run, pl)
	}
	s.Running = run
	for i := range s.Queued {
		if s.Queued[i].Request.Resources.GPUs == 4 {
			s.Queued[i].Submitted = t0.Add(-48 * time.Hour)
			s.Queued[0], s.Queued[i] = s.Queued[i], s.Queued[0]
			break
		}
	}
	// Now and then a short one-GPU job, done before the head starts, backfills the held room:
	// the long jobs after the third are no longer held back but find nothing free.
	for i := 1; i < len(s.Queued); i += len(s.Queued) / 4 {
		if q := &s.Queued[i]; q.Request.Resources.GPUs == 1 {
			q.Request.Scheduling.MinDuration = job.Duration(10 * time.Second)
			q.Request.Scheduling.MaxDuration = job.Duration(30 * time.Second)
		}
	}
	s.Policy = PolicyFIFO
	return s
}

// BenchmarkPlanHeadDraining is a pass of B8x at 2,000 slaves while the backfill head drains its
// slave: ~4,600 of the 5,000 jobs decided are held back, each once a scan of every slave.
func BenchmarkPlanHeadDraining(b *testing.B) {
	s := drainingSnapshot(2000, 20000)
	s.Sweep, s.NoRanges = ForecastCap, true
	var p Plan
	for b.Loop() {
		p = s.Plan()
	}
	b.ReportMetric(float64(heldBack(p)), "held")
}

// BenchmarkQueueOrder is the sort of a pass's queue in the fair order: B8x's 20,000 queued jobs
// of 20 users (soakSnapshot), most of one user's jobs tied up to their submission time.
func BenchmarkQueueOrder(b *testing.B) {
	s := soakSnapshot(2000, 20000, 0.23, 30*time.Minute)
	for b.Loop() {
		queueOrder(s, nil)
	}
}
