package scheduler

import (
	"math"
	"math/bits"
	"slices"
	"sort"
	"time"
)

// RatioSample is one ended job for learning run-time ratios: its owner, its maxDuration, and how
// much of it the job ran (run time over maxDuration, clamped to [0, 1]).
type RatioSample struct {
	UserID      int64
	MaxDuration time.Duration
	Ratio       float64
}

// RatioLowQuantile is the quantile of the run-time ratio that the forecast's early start uses
// (RunRatio.Low); the likely start uses the mean (RunRatio.Mid) or, where the quantiles are
// known, the median of replays with run times drawn from them (forecast.go): a job waits for
// the sum of many run times, which the mean predicts and the median, for skewed run times, does
// not (on the Philly replay, the median's error p50 was a quarter larger). store.RunRatios
// computes the same in SQL (percentile_cont, avg).
const RatioLowQuantile = 0.1

// RatioQuantiles is how many steps the learned distribution of a ratio has: RunRatio.Q holds
// its quantiles at 0, 1/RatioQuantiles, …, 1. A multiple of 10, so that RatioLowQuantile is one
// of them. Fine steps resolve the tail, where a running job that has run long sits (in a trial
// with 11 draws, 20 steps gave the Philly replay's error over the wait 0.41, 100 steps 0.39);
// fifty cost 51 numbers per user and class.
const RatioQuantiles = 50

// DurationClass is the class of a maxDuration that run-time ratios are learned per: the power of
// two of its minutes, rounded up (60 min → 6, 61–128 → 7, a day → 11, a week → 14). Users ask
// for round durations, and how much of them a job uses depends on which: a job asking for a week
// that ran two days used 29 %, one asking for an hour that ran 50 minutes 83 %, and one ratio
// for both mispredicted each (Philly replay: error over wait 0.49 → 0.44). store.RunRatios
// computes the same in SQL, as the bit length of minutes − 1.
func DurationClass(d time.Duration) int {
	m := max(int64(d/time.Minute), 1)
	return bits.Len64(uint64(m - 1))
}

// UserClass keys a user's ratio in one DurationClass.
type UserClass struct {
	UserID int64
	Class  int
}

// LearnRatios turns ended jobs' ratios into the forecast's input the way the master does: a
// ratio per user and maxDuration class, per class, per user and over everyone, each only over
// at least minJobs samples (fewer is no knowledge). The quantiles interpolate between samples
// like SQL's percentile_cont, so that the simulator, which learns from the jobs it has replayed,
// sees what the master would read from its store.
func LearnRatios(samples []RatioSample, minJobs int) RunRatios {
	out := RunRatios{Users: map[int64]RunRatio{}, Classes: map[int]RunRatio{}, UserClasses: map[UserClass]RunRatio{}}
	all := make([]float64, 0, len(samples))
	per := map[int64][]float64{}
	perClass := map[int][]float64{}
	perUC := map[UserClass][]float64{}
	for _, s := range samples {
		r := min(1, max(0, s.Ratio))
		c := DurationClass(s.MaxDuration)
		all = append(all, r)
		per[s.UserID] = append(per[s.UserID], r)
		perClass[c] = append(perClass[c], r)
		uc := UserClass{s.UserID, c}
		perUC[uc] = append(perUC[uc], r)
	}
	if len(all) > 0 && len(all) >= minJobs {
		slices.Sort(all)
		out.Global = ratioOf(all)
	}
	learnEach(out.Users, per, minJobs)
	learnEach(out.Classes, perClass, minJobs)
	learnEach(out.UserClasses, perUC, minJobs)
	return out
}

func learnEach[K comparable](out map[K]RunRatio, groups map[K][]float64, minJobs int) {
	for k, rs := range groups {
		if len(rs) >= minJobs && len(rs) > 0 {
			slices.Sort(rs)
			out[k] = ratioOf(rs)
		}
	}
}

// ratioOf learns one group's ratio from its sorted ratios.
func ratioOf(rs []float64) RunRatio {
	var sum float64
	for _, r := range rs {
		sum += r
	}
	q := make([]float64, RatioQuantiles+1)
	for k := range q {
		q[k] = PercentileCont(rs, float64(k)/RatioQuantiles)
	}
	return NewRunRatio(sum/float64(len(rs)), q)
}

// NewRunRatio is the ratio with that mean and those quantiles (at 0, 1/RatioQuantiles, …, 1;
// nil: only the mean is known, and Low is the mean too). Quantiles of another length, or out of
// order, are no knowledge of the distribution.
func NewRunRatio(mean float64, q []float64) RunRatio {
	r := RunRatio{Low: mean, Mid: mean}
	if len(q) != RatioQuantiles+1 || !slices.IsSorted(q) {
		return r
	}
	r.Q = q
	r.Low = q[int(RatioLowQuantile*RatioQuantiles)]
	// above[k] is the mean of the ratio over the steps from q[k] up: each step holds
	// 1/RatioQuantiles of the jobs, spread evenly between its ends.
	r.above = make([]float64, len(q))
	for k := len(q) - 2; k >= 0; k-- {
		r.above[k] = r.above[k+1] + (q[k]+q[k+1])/2
	}
	for k := range len(q) - 1 {
		r.above[k] /= float64(len(q) - 1 - k)
	}
	return r
}

// known says whether the distribution is known: quantiles as NewRunRatio keeps them (a RunRatio
// written as a literal with Q has no tail means, and is taken as its mean alone).
func (r RunRatio) known() bool {
	return len(r.Q) == RatioQuantiles+1 && len(r.above) == len(r.Q)
}

// given describes the ratio of a job known to have run a share f of its maxDuration already: the
// distribution above f. cdf is the share of jobs that end by f; ok is false when f is past every
// ratio learned (the job has run longer than any like it), when nothing of it is known.
func (r RunRatio) given(f float64) (k int, cdf float64, ok bool) {
	q := r.Q
	n := len(q) - 1
	if f < q[0] {
		return -1, 0, true
	}
	if f >= q[n] {
		return n, 1, false
	}
	// The step holding f: q[k] ≤ f < q[k+1].
	k = sort.Search(n, func(i int) bool { return q[i+1] > f })
	return k, (float64(k) + (f-q[k])/(q[k+1]-q[k])) / float64(n), true
}

// MeanGiven is the mean ratio of the jobs that ran longer than the share f of their
// maxDuration, from the learned quantiles (without them, or past all of them, ok is false).
// A running job's likely end is the mean of those like it that lasted as long: the mean over
// everyone says little of a job already past most of them.
func (r RunRatio) MeanGiven(f float64) (float64, bool) {
	if !r.known() {
		return 0, false
	}
	k, _, ok := r.given(f)
	if !ok {
		return 0, false
	}
	if k < 0 {
		return r.above[0], true
	}
	// The part of step k above f, then the whole steps above it.
	q, n := r.Q, len(r.Q)-1
	part := (q[k+1] - f) / (q[k+1] - q[k])
	rest := float64(n - 1 - k)
	sum := part * (f + q[k+1]) / 2
	if rest > 0 {
		sum += rest * r.above[k+1]
	}
	return sum / (part + rest), true
}

// QuantileGiven is the u-quantile of the ratio of the jobs that ran longer than the share f of
// their maxDuration (u in [0, 1]; ok as for MeanGiven). With u drawn evenly, it draws a run time
// from what is learned, for the forecast's sampled replays.
func (r RunRatio) QuantileGiven(f, u float64) (float64, bool) {
	if !r.known() {
		return 0, false
	}
	_, cdf, ok := r.given(f)
	if !ok {
		return 0, false
	}
	q, n := r.Q, len(r.Q)-1
	pos := (cdf + min(max(u, 0), 1)*(1-cdf)) * float64(n)
	k := min(int(pos), n-1)
	return q[k] + (pos-float64(k))*(q[k+1]-q[k]), true
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
