package scheduler

import (
	"math"
	"slices"
)

// RatioSample is one ended job for learning run-time ratios: its owner, and how much of its
// maxDuration it ran (run time over maxDuration, clamped to [0, 1]).
type RatioSample struct {
	UserID int64
	Ratio  float64
}

// RatioLowQuantile is the quantile of the run-time ratio that the forecast's early start uses
// (RunRatio.Low); the likely start uses the mean (RunRatio.Mid): a job waits for the sum of
// many run times, which the mean predicts and the median, for skewed run times, does not (on
// the Philly replay, the median's error p50 was a quarter larger). store.RunRatios computes the
// same in SQL (percentile_cont, avg).
const RatioLowQuantile = 0.1

// LearnRatios turns ended jobs' ratios into the forecast's input the way the master does: each
// user with at least minJobs samples gets his own ratio, and everyone's together make the
// global one, which counts only over at least minJobs samples (fewer is no knowledge). The
// low quantile interpolates between samples like SQL's percentile_cont, so that the simulator,
// which learns from the jobs it has replayed, sees what the master would read from its store.
func LearnRatios(samples []RatioSample, minJobs int) RunRatios {
	out := RunRatios{Users: map[int64]RunRatio{}}
	all := make([]float64, 0, len(samples))
	per := map[int64][]float64{}
	for _, s := range samples {
		r := min(1, max(0, s.Ratio))
		all = append(all, r)
		per[s.UserID] = append(per[s.UserID], r)
	}
	if len(all) > 0 && len(all) >= minJobs {
		out.Global = ratioOf(all)
	}
	for u, rs := range per {
		if len(rs) >= minJobs && len(rs) > 0 {
			out.Users[u] = ratioOf(rs)
		}
	}
	return out
}

// ratioOf takes rs's quantiles, reordering rs. The low quantile needs only two order
// statistics, so it selects them rather than sorting: the simulator learns from a month of
// ended jobs every few simulated hours, and sorting them was a twentieth of a replay.
func ratioOf(rs []float64) RunRatio {
	var sum float64
	for _, r := range rs {
		sum += r
	}
	return RunRatio{Low: percentileContUnsorted(rs, RatioLowQuantile), Mid: sum / float64(len(rs))}
}

// percentileContUnsorted is PercentileCont of xs as if sorted, reordering xs: the value at
// position lo is selected (quickselect), and the next in order is the least of those after it.
func percentileContUnsorted(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	pos := min(max(p, 0), 1) * float64(len(xs)-1)
	lo := int(math.Floor(pos))
	v := selectKth(xs, min(lo, len(xs)-1))
	if lo >= len(xs)-1 {
		return v
	}
	next := slices.Min(xs[lo+1:])
	return v + (pos-float64(lo))*(next-v)
}

// selectKth reorders xs so that xs[k] is the value sorting would put there, with no greater
// value before it and no smaller one after it, and returns it (Hoare's selection, the middle
// of three as pivot; k must be an index of xs).
func selectKth(xs []float64, k int) float64 {
	lo, hi := 0, len(xs)-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		// Order xs[lo], xs[mid], xs[hi], so the pivot is their median.
		if xs[mid] < xs[lo] {
			xs[mid], xs[lo] = xs[lo], xs[mid]
		}
		if xs[hi] < xs[lo] {
			xs[hi], xs[lo] = xs[lo], xs[hi]
		}
		if xs[hi] < xs[mid] {
			xs[hi], xs[mid] = xs[mid], xs[hi]
		}
		pivot := xs[mid]
		i, j := lo, hi
		for i <= j {
			for xs[i] < pivot {
				i++
			}
			for xs[j] > pivot {
				j--
			}
			if i <= j {
				xs[i], xs[j] = xs[j], xs[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return xs[k]
		}
	}
	return xs[k]
}

// PercentileCont is SQL's percentile_cont(p) of sorted xs: the value at position p·(n−1),
// interpolated linearly between its neighbours; 0 for no values.
func PercentileCont(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	pos := min(max(p, 0), 1) * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	if lo >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	f := pos - float64(lo)
	return sorted[lo] + f*(sorted[lo+1]-sorted[lo])
}
