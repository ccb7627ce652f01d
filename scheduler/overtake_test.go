package scheduler

import (
	"math"
	"testing"
	"time"
)

// TestOvertaking: σ for a rank is the work of the arrivals ranked strictly ahead of it, as a
// share of the cluster's GPU time over the window, capped; CPU-only arrivals count for
// nothing.
func TestOvertaking(t *testing.T) {
	const h = time.Hour
	tallies := map[int64]float64{1: 0, 2: 9} // ranks: user 1 (1 h) 1, user 2 (1 h) 10
	arrivals := []Arrival{
		{UserID: 1, GPUs: 2, MaxDuration: h}, // rank 1, 2 GPU-h
		{UserID: 2, GPUs: 4, MaxDuration: h}, // rank 10, 4 GPU-h
		{UserID: 1, GPUs: 0, MaxDuration: h}, // CPU only
	}
	// 1 GPU over the 24 h window: 24 GPU-h of capacity.
	o := newOvertaking(arrivals, tallies, RunRatios{}, 1)
	for _, c := range []struct {
		rank, want float64
	}{
		{0.5, 0},       // ranked ahead of every arrival
		{1, 0},         // ties do not overtake
		{5, 2.0 / 24},  // behind user 1's
		{20, 6.0 / 24}, // behind both
	} {
		if got := o.of(c.rank); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("σ(%v) = %v, want %v", c.rank, got, c.want)
		}
	}
	// Learned ratios: a job is expected to run its owner's Mid of its maxDuration.
	o = newOvertaking(arrivals, tallies, RunRatios{Global: RunRatio{Low: 0.1, Mid: 0.5}}, 1)
	if got, want := o.of(20), 3.0/24; math.Abs(got-want) > 1e-12 {
		t.Errorf("σ with ratio 0.5 = %v, want %v", got, want)
	}
	// A group counts as many jobs.
	grouped := []Arrival{{UserID: 1, GPUs: 2, MaxDuration: h, Count: 3}}
	if got, want := newOvertaking(grouped, tallies, RunRatios{}, 1).of(20), 6.0/24; math.Abs(got-want) > 1e-12 {
		t.Errorf("σ of three grouped jobs = %v, want %v", got, want)
	}
	// A flood ranked ahead is capped.
	flood := []Arrival{{UserID: 1, GPUs: 8, MaxDuration: 100 * h}}
	if got := newOvertaking(flood, tallies, RunRatios{}, 1).of(1e9); got != maxOvertake {
		t.Errorf("σ of a flood = %v, want the cap %v", got, maxOvertake)
	}
	if newOvertaking(nil, tallies, RunRatios{}, 8).of(5) != 0 {
		t.Error("no arrivals: σ should be 0")
	}
}

// TestPlanStretchesByOvertaking: under the fair order a waiting job's likely and late starts
// stretch by 1/(1−σ) of what arrivals ranked ahead of it bring, its early start stays, a job
// ranked ahead of every arrival keeps its range, and other policies ignore arrivals.
func TestPlanStretchesByOvertaking(t *testing.T) {
	const h = time.Hour
	base := Snapshot{Now: t0, Policy: PolicyFair, Tallies: map[int64]float64{1: 0, 2: 9},
		Slaves:  []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 1)...))},
		Running: []Placed{{JobUUID: "run", SlaveName: "gpu1", UserID: 1, GPUIndices: []int{0}, CPUIDs: []int{0}, MemoryGb: 1, Started: t0.Add(-h), Ends: t0.Add(2 * h)}},
		Queued:  []Job{mkJob("light", 1, 1, 1, user(1), maxDur(h)), mkJob("heavy", 1, 1, 1, user(2), maxDur(h))},
	}
	raw := base.Plan().Ranges
	with := base
	// Light user's arrivals: 12 GPU-h over the window on 1 GPU, σ = 0.5 for the heavy job.
	for range 12 {
		with.Arrivals = append(with.Arrivals, Arrival{UserID: 1, GPUs: 1, MaxDuration: h})
	}
	got := with.Plan().Ranges
	if got["light"] != raw["light"] {
		t.Errorf("light job ranked with the arrivals: %+v, want its raw range %+v", got["light"], raw["light"])
	}
	h0, h1 := raw["heavy"], got["heavy"]
	if h1.Early != h0.Early || h1.Likely.Sub(t0) != 2*h0.Likely.Sub(t0) || h1.Late.Sub(t0) != 2*h0.Late.Sub(t0) {
		t.Errorf("heavy job: %+v, want early %s and likely and late waits doubled from %+v", h1, h0.Early, h0)
	}
	fifo := with
	fifo.Policy = PolicyFIFO
	rawFIFO := base
	rawFIFO.Policy = PolicyFIFO
	if a, b := fifo.Plan().Ranges, rawFIFO.Plan().Ranges; a["heavy"] != b["heavy"] {
		t.Errorf("FIFO stretched by arrivals: %+v vs %+v", a["heavy"], b["heavy"])
	}
}
