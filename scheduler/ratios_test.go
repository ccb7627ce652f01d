package scheduler

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testenv"
)

// TestLearnRatios: a user with RatioMinJobs samples gets his own ratio, one with fewer counts
// only in the global one; the low quantile interpolates like percentile_cont and the mid is the
// mean (what store.RunRatios computes in SQL), and ratios outside [0, 1] are clamped as the SQL
// clamps them.
func TestLearnRatios(t *testing.T) {
	var s []RatioSample
	for i := range 20 {
		s = append(s, RatioSample{UserID: 1, Ratio: float64(i+1) / 20})
	}
	s = append(s, RatioSample{UserID: 2, Ratio: 7}, RatioSample{UserID: 2, Ratio: -1})
	r := LearnRatios(s, 20)
	u, ok := r.Users[1]
	// 0.05..1: p10 at position 1.9 (0.10 + 0.9·0.05), mean 0.525.
	if !ok || math.Abs(u.Low-0.145) > 1e-9 || math.Abs(u.Mid-0.525) > 1e-9 {
		t.Fatalf("user 1: %+v", r.Users)
	}
	if _, ok := r.Users[2]; ok {
		t.Fatalf("user 2 has 2 samples, got a ratio: %+v", r.Users)
	}
	// Global over 22: 0, then 0.05..1, then 1 (clamped): mean 11.5/22, p10 at 2.1 → 0.105.
	if math.Abs(r.Global.Mid-11.5/22) > 1e-9 || math.Abs(r.Global.Low-0.105) > 1e-9 {
		t.Fatalf("global %+v", r.Global)
	}
	if r := LearnRatios(s[:5], 20); r.Global != (RunRatio{}) || len(r.Users) != 0 {
		t.Fatalf("5 samples: %+v, want no knowledge", r)
	}
	if PercentileCont(nil, 0.5) != 0 || PercentileCont([]float64{3}, 0.1) != 3 {
		t.Fatal("PercentileCont of none or one")
	}
}

// TestForecastWaiting: jobs given as Snapshot.Waiting are not decided (no assignment, no
// explanation) but forecast in queue order among the decided ones, as if they were queued.
func TestForecastWaiting(t *testing.T) {
	s := busyTwoGPUs()
	s.Policy = PolicyFIFO
	all := queueOf(4)
	for i := range all {
		all[i].Submitted = t0.Add(time.Duration(i) * time.Second)
	}
	s.Queued = all
	want := s.Plan()
	s.Queued, s.Waiting = []Job{all[0], all[2]}, []Job{all[3], all[1]}
	got := s.Plan()
	if len(got.Explanations) != 2 || got.Explanations["q1"] != nil || len(got.Assignments) != 0 {
		t.Fatalf("waiting jobs were decided: %+v", got)
	}
	for id, r := range want.Ranges {
		if got.Ranges[id] != r {
			t.Errorf("%s: range %+v, want %+v (as if queued)", id, got.Ranges[id], r)
		}
	}
	if len(want.Ranges) != 4 {
		t.Fatalf("ranges %+v", want.Ranges)
	}
}

// TestPercentileWithoutSorting: the selected quantile equals the sorted one, for random lists
// with ties and every size up to 60, at quantiles from 0 to 1.
func TestPercentileWithoutSorting(t *testing.T) {
	seed := testenv.Seed(t)
	r := rand.New(rand.NewPCG(seed, 3))
	for range 3000 {
		xs := make([]float64, r.IntN(60))
		for i := range xs {
			xs[i] = float64(r.IntN(12)) / 11 // ties are common: ratios of 1
		}
		p := []float64{0, RatioLowQuantile, 0.5, 0.37, 0.99, 1}[r.IntN(6)]
		sorted := slices.Sorted(slices.Values(xs))
		want := PercentileCont(sorted, p)
		if got := percentileContUnsorted(slices.Clone(xs), p); got != want {
			t.Fatalf("%v at %g: %g, sorted gives %g", xs, p, got, want)
		}
		if len(xs) > 0 {
			k := r.IntN(len(xs))
			c := slices.Clone(xs)
			if got := selectKth(c, k); got != sorted[k] || slices.Max(c[:k+1]) != got || slices.Min(c[k:]) != got {
				t.Fatalf("%v: element %d is %g, want %g, in place: %v", xs, k, got, sorted[k], c)
			}
		}
	}
}
