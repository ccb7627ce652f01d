package sim

import (
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
		l.ended(t0, 1, time.Duration(i+1)*time.Minute, 20*time.Minute)
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
