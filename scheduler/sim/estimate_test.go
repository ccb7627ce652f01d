package sim

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/scheduler"
)

// TestAccuracyByHand: one slave with one GPU, FIFO, maxDuration 1 hour each, too few ended jobs
// to learn ratios (every range is one point: all jobs run their maxDuration). A (30m) starts at
// once at 0; B (10m, at 10m) is told 1h (A's maxDuration) and starts at 30m: error 30m over a
// 20m wait; C (10m, at 20m) is told 2h (after B's hour) and starts at 40m: error 80m over 20m.
// Later estimates: B at 20m (10m left, still 1h: error 30m); C at 30m (B has just started:
// 1h30, 10m left, error 50m).
func TestAccuracyByHand(t *testing.T) {
	mk := func(at, dur time.Duration) TraceJob {
		j := tj(at, dur, 1, "u")
		j.MaxDuration, j.MinDuration = time.Hour, time.Hour
		return j
	}
	jobs := []TraceJob{mk(0, 30*time.Minute), mk(10*time.Minute, 10*time.Minute), mk(20*time.Minute, 10*time.Minute)}
	r := Run(Config{Policy: scheduler.PolicyFIFO, Slaves: 1, GPUsPerSlave: 1}, jobs)
	starts := []time.Duration{0, 30 * time.Minute, 40 * time.Minute}
	for i, o := range r.Outcomes {
		if o.Start != t0.Add(starts[i]) {
			t.Fatalf("job %d started at %s, want %s", i, o.Start.Sub(t0), starts[i])
		}
	}
	a := r.Accuracy
	if a.Waited != 2 || a.AtOnce != 1 || a.NoRange != 0 {
		t.Fatalf("waited %d, at once %d, no range %d; want 2, 1, 0", a.Waited, a.AtOnce, a.NoRange)
	}
	if a.MedianErr != 30*time.Minute || a.P90Err != 80*time.Minute || a.MedianRel != 1.5 {
		t.Errorf("errors p50 %s, p90 %s, over wait %v; want 30m, 1h20m, 1.5", a.MedianErr, a.P90Err, a.MedianRel)
	}
	if a.InRange != 0 || a.Early != 1 || a.Late != 0 || a.MedianWidth != 0 {
		t.Errorf("in range %v, before early %v, after late %v, width %s; want 0, 1, 0, 0", a.InRange, a.Early, a.Late, a.MedianWidth)
	}
	want := map[time.Duration][2]time.Duration{ // horizon: count, median error
		10 * time.Minute: {2, 30 * time.Minute},
		time.Hour:        {2, 30 * time.Minute},
	}
	for _, h := range a.ByHorizon {
		w := want[h.Upto]
		if time.Duration(h.N) != w[0] || h.MedianErr != w[1] {
			t.Errorf("horizon %s: %d estimates, error p50 %s; want %d, %s", h.Upto, h.N, h.MedianErr, w[0], w[1])
		}
	}
	if r2 := Run(Config{Policy: scheduler.PolicyFIFO, Slaves: 1, GPUsPerSlave: 1, NoEstimates: true}, jobs); r2.Accuracy.Waited != 0 || r2.Metrics != r.Metrics {
		t.Errorf("without estimates: accuracy %+v, metrics %+v (want none, and the same metrics)", r2.Accuracy, r2.Metrics)
	}
}

// TestLearnRatiosInSim: the replay learns from the runs it ended, per user from RatioMinJobs
// samples and globally from as many, and forgets runs created before the window.
func TestLearnRatiosInSim(t *testing.T) {
	var l ratioLearner
	for i := range 20 {
		l.ended(l.started(t0, t0, 1, 20*time.Minute), t0.Add(time.Duration(i+1)*time.Minute), false)
	}
	r := l.ratios(t0)
	u, ok := r.Users[1]
	// Ratios 0.05..1 in steps of 0.05: p10 at position 1.9 → 0.095 + ... = 0.145, mean 0.525.
	if !ok || abs(u.Low-0.145) > 1e-9 || abs(u.Mid-0.525) > 1e-9 || r.Global.Mid != u.Mid || !slices.Equal(r.Global.Q, u.Q) {
		t.Fatalf("ratios %+v", r)
	}
	// Samples created before the window are forgotten.
	if r := l.ratios(t0.Add(ratioWindow + time.Hour)); r.Global.Mid != 0 || r.Global.Q != nil {
		t.Fatalf("after the window: %+v", r)
	}
}

func abs(x float64) float64 { return max(x, -x) }

// TestLearnerFollowsTheLatestRuns: once the replay reads the month's ratios only daily, a user's
// ratio for a class still follows his latest runs at every ratioRefresh, the running ones
// counted for what they have run so far (as the master's, read every RatioRefresh), and is what
// LearnRatios gives over the same runs; the month's groups wait for the next full read.
func TestLearnerFollowsTheLatestRuns(t *testing.T) {
	var l ratioLearner
	var all []scheduler.RatioSample
	at := t0
	run := func(n int, ran time.Duration) {
		for range n {
			at = at.Add(time.Second)
			l.ended(l.started(at, at, 1, time.Hour), at.Add(ran), false)
			all = append(all, scheduler.RatioSample{UserID: 1, MaxDuration: time.Hour, Ratio: ran.Hours(), Started: at})
		}
	}
	run(500, 6*time.Minute)
	now := at.Add(time.Hour)
	first := l.ratios(now)
	run(200, 54*time.Minute)
	var runs []*learnRun
	at = now.Add(ratioRefresh - 30*time.Minute)
	for range 50 { // still running at now + ratioRefresh, for about 30 minutes then
		at = at.Add(time.Second)
		runs = append(runs, l.started(at, at, 1, time.Hour))
	}
	k := scheduler.UserClass{UserID: 1, Class: scheduler.DurationClass(time.Hour)}
	if r := l.ratios(now.Add(ratioRefresh / 2)); r.UserClasses[k].Mid != first.UserClasses[k].Mid {
		t.Fatalf("read again before ratioRefresh: mid %.3f → %.3f", first.UserClasses[k].Mid, r.UserClasses[k].Mid)
	}
	now = now.Add(ratioRefresh)
	for _, r := range runs {
		all = append(all, scheduler.RatioSample{UserID: 1, MaxDuration: time.Hour, Ratio: now.Sub(r.started).Hours(), Started: r.started, Running: true})
	}
	r := l.ratios(now)
	want := scheduler.LearnRatios(all, ratioMinJobs).UserClasses[k]
	if got := r.UserClasses[k]; abs(got.Mid-want.Mid) > 1e-9 || got.Low != want.Low || !slices.Equal(got.Q, want.Q) || got.Mid < 0.5 {
		t.Errorf("after the latest runs: mid %.3f low %.3f, want LearnRatios' %.3f and %.3f", got.Mid, got.Low, want.Mid, want.Low)
	}
	if r.Global.Mid != first.Global.Mid {
		t.Errorf("global ratio read again before the daily read: %.3f → %.3f", first.Global.Mid, r.Global.Mid)
	}
	if first.UserClasses[k].Mid > 0.11 {
		t.Errorf("the map handed out before changed: mid %.3f", first.UserClasses[k].Mid)
	}
	// Nothing ends, but the running jobs run on: read again at every refresh. Past the 0.9 of
	// the jobs that ended longest, they are sure to run longer than those: their share moves
	// from 0.9 to past where they have run to, towards maxDuration.
	if r2 := l.ratios(now.Add(6 * ratioRefresh)); r2.UserClasses[k].Mid <= r.UserClasses[k].Mid+0.01 {
		t.Errorf("running jobs ran past 0.9: mid %.4f → %.4f, want it higher", r.UserClasses[k].Mid, r2.UserClasses[k].Mid)
	}
}

// TestLearnerTakesHaltsAsCut: a run the scheduler halted did not end on its own; a user's ratio
// for the class takes it as one that would have run longer (scheduler.RatioRun.Censored), while
// the class over everyone counts it as ended (it freed its GPUs then).
func TestLearnerTakesHaltsAsCut(t *testing.T) {
	var l ratioLearner
	at := t0
	for i := range 60 {
		at = at.Add(time.Second)
		ran := 12 * time.Minute // 0.2 of the hour
		if i >= 40 {
			ran = 18 * time.Minute // halted at 0.3
		}
		l.ended(l.started(at, at, 1, time.Hour), at.Add(ran), i >= 40)
	}
	r := l.ratios(at.Add(time.Hour))
	k := scheduler.UserClass{UserID: 1, Class: scheduler.DurationClass(time.Hour)}
	// The ended runs keep the weight they have among all (all of them ended below every halt);
	// the halted ones' (0.365) goes on past 0.3, where the class knows no longer run, at the
	// rate the others ended up to there (−ln 0.365 / 0.3 = 3.4 per maxDuration), at 10 points
	// from 0.32 to 1 (mean 0.568; scheduler.RunRatio's tail). Taken as ends at 0.3, it would
	// be 0.2 × 0.635 + 0.3 × 0.365 = 0.237.
	var ended, all float64
	for i := range 60 {
		w := math.Exp2(-float64(i) / scheduler.RatioHalfLife) // latest first
		all += w
		if i >= 20 {
			ended += w
		}
	}
	want := 0.2*ended/all + 0.5681*(1-ended/all)
	if uc, c := r.UserClasses[k], r.Classes[k.Class]; abs(uc.Mid-want) > 1e-4 || abs(c.Mid-(40*0.2+20*0.3)/60) > 1e-9 {
		t.Errorf("user's class mid %.4f, want %.4f (the halted would have run past 0.3); class %.4f, want the halts as ends", uc.Mid, want, c.Mid)
	}
}
