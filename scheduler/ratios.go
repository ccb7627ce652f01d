package scheduler

import (
	"cmp"
	"math"
	"math/bits"
	"slices"
	"sort"
	"time"
)

// RatioSample is one job for learning run-time ratios: its owner, its maxDuration, how much of
// it the job ran (run time over maxDuration, clamped to [0, 1]), when it started running,
// whether it still runs (then Ratio is what it has run so far) and whether the scheduler halted
// it. Only a user's ratio for a class learns from running jobs, and it takes a halted one for a
// job that would have run longer (RecentRatio); the others count ended jobs alone, halted ones
// among them (they freed their GPUs then).
type RatioSample struct {
	UserID      int64
	MaxDuration time.Duration
	Ratio       float64
	Started     time.Time
	Running     bool
	Halted      bool
}

// RatioRun is one of a user's latest jobs of a class for RecentRatio: its ratio, and whether it
// ran at least that without ending on its own (Censored: it still runs, or was halted).
type RatioRun struct {
	Ratio    float64
	Censored bool
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

// RatioHalfLife is how many of a user's later-started jobs of the same maxDuration class halve
// the weight of one of them in his ratio for that class (RecentRatio): a user's jobs come in
// campaigns (a sweep of one model, then another), and his last few hundred runs say more of the
// next one's run time than his month. On the Philly replay (fair-halt, 80 × 8 GPUs, three seeds)
// the month's distribution left the estimates' median error over the wait at 0.40–0.42; the
// latest jobs weighed so, 0.25–0.28 (RecentRatio). A shorter memory fitted that setting better
// (100, ended jobs only: 0.28 against 0.30 with 150) but followed a campaign's change badly where
// few jobs wait (100 and 120 slaves: 0.37 and 0.48 against 0.31 and 0.29); a longer one gave up
// most of the gain (300: 0.32; the last 1,000 jobs alike: 0.34).
const RatioHalfLife = 150

// RatioRecentJobs is how many of a user's latest ended jobs of a class RecentRatio weighs: ten
// half-lives, after which a job weighs less than a thousandth of the latest.
const RatioRecentJobs = 10 * RatioHalfLife

// LearnRatios turns ended jobs' ratios into the forecast's input the way the master does: a
// ratio per user and maxDuration class, per class, per user and over everyone, each only over
// at least minJobs samples (fewer is no knowledge). The quantiles interpolate between samples
// like SQL's percentile_cont, so that the simulator, which learns from the jobs it has replayed,
// sees what the master would read from its store. Running samples count only in a user's ratio
// for a class, which weighs his latest jobs by start most (RecentRatio); samples that started
// at the same instant keep their order, the later the more recent.
func LearnRatios(samples []RatioSample, minJobs int) RunRatios {
	out := RunRatios{Users: map[int64]RunRatio{}, Classes: map[int]RunRatio{}, UserClasses: map[UserClass]RunRatio{}}
	all := make([]float64, 0, len(samples))
	per := map[int64][]float64{}
	perClass := map[int][]float64{}
	perUC := map[UserClass][]float64{}
	started := map[UserClass][]RatioSample{}
	for _, s := range samples {
		uc := UserClass{s.UserID, DurationClass(s.MaxDuration)}
		started[uc] = append(started[uc], s)
		if s.Running {
			continue
		}
		r := min(1, max(0, s.Ratio))
		c := DurationClass(s.MaxDuration)
		all = append(all, r)
		per[s.UserID] = append(per[s.UserID], r)
		perClass[c] = append(perClass[c], r)
		perUC[uc] = append(perUC[uc], r)
	}
	if len(all) > 0 && len(all) >= minJobs {
		slices.Sort(all)
		out.Global = ratioOf(all)
	}
	learnEach(out.Users, per, minJobs)
	learnEach(out.Classes, perClass, minJobs)
	for k, rs := range perUC {
		if len(rs) < minJobs || len(rs) == 0 {
			continue
		}
		g := started[k]
		slices.SortStableFunc(g, func(a, b RatioSample) int { return a.Started.Compare(b.Started) })
		recent := make([]RatioRun, 0, min(len(g), RatioRecentJobs))
		for i := len(g) - 1; i >= 0 && len(recent) < RatioRecentJobs; i-- {
			recent = append(recent, RatioRun{Ratio: g[i].Ratio, Censored: g[i].Running || g[i].Halted})
		}
		slices.Sort(rs)
		out.UserClasses[k] = RecentRatio(recent, ratioOf(rs))
	}
	return out
}

// recentWeights are RecentRatio's weights by position, latest first: 2^(−i/RatioHalfLife),
// computed once. The simulator learns the ratios again every few simulated minutes, and
// math.Exp2 over up to RatioRecentJobs runs at each call was 3 % of a Philly replay.
var recentWeights = func() (w [RatioRecentJobs]float64) {
	for i := range w {
		w[i] = math.Exp2(-float64(i) / RatioHalfLife)
	}
	return w
}()

// RecentRatio is a user's ratio for one class from his latest jobs by start, the latest first
// (at most RatioRecentJobs of them are read): each weighs half as much as the job started
// RatioHalfLife places after it, so that the mean and the quantiles follow what he runs now. A
// job still running, or halted, counts as one that runs at least what it ran (Kaplan–Meier: at
// each ratio an ended job reached, the share still to end falls by that job's weight over the
// weight of the jobs that reached it, ended or not): learned from ended jobs alone, the latest
// of a campaign are its shortest, the long ones started with them not ended yet, and a halt
// looks like a short run (on the Philly replay, fair-halt, three seeds: 0.29–0.30 of the wait
// as they ended; counting the running ones 0.27–0.30; and the halted ones too, 0.25–0.28).
// What is left when the last ended job has been counted (the jobs running past it) ends as
// wide's jobs that ran longer did, or on at the rate the others ended (RunRatio.tail). Its
// Low, the early end of the ranges, is the lower of its own and wide's (the same group over
// the whole window, unweighted): a distribution of recent jobs is narrower than the user's
// habits, and the ranges must hold when he changes them (on the Philly replay, with the recent
// Low alone, FIFO's share of starts inside the range fell from 94 % to 74 %, a quarter of them
// before it).
func RecentRatio(latestFirst []RatioRun, wide RunRatio) RunRatio {
	n := min(len(latestFirst), RatioRecentJobs)
	type obs struct {
		r, w     float64
		censored bool
	}
	xs := make([]obs, n)
	atRisk := 0.0
	for i := range n {
		w := recentWeights[i]
		xs[i] = obs{min(1, max(0, latestFirst[i].Ratio)), w, latestFirst[i].Censored}
		atRisk += w
	}
	// By ratio; at the same ratio the ended first (a job cut at that ratio had not ended there).
	slices.SortFunc(xs, func(a, b obs) int {
		if c := cmp.Compare(a.r, b.r); c != 0 {
			return c
		}
		switch {
		case a.censored == b.censored:
			return 0
		case b.censored:
			return -1
		}
		return 1
	})
	points := make([]ratioPoint, 0, n+1+tailPoints)
	left := 1.0 // the share not ended yet
	for _, x := range xs {
		if !x.censored && atRisk > 0 {
			m := left * x.w / atRisk
			points = append(points, ratioPoint{x.r, m})
			left -= m
		}
		atRisk -= x.w
	}
	if len(points) == 0 {
		return wide
	}
	if left > 1e-12 {
		// What is left is the share of the jobs still running past the last ended one: from
		// where they have run to on average, and on at the rate jobs ended up to the longest.
		var sw, sr float64
		for _, x := range slices.Backward(xs) {
			if !x.censored || x.r <= points[len(points)-1].r {
				break
			}
			sw, sr = sw+x.w, sr+x.w*x.r
		}
		from := points[len(points)-1].r
		if sw > 0 {
			from = max(from, sr/sw)
		}
		points = wide.tail(points, from, xs[len(xs)-1].r, left)
	}
	// Each point sits at the middle of its mass on the cumulative distribution; a quantile
	// between two points interpolates between them (with equal weights and nothing running,
	// (i + ½)/n: close to percentile_cont's i/(n − 1)); below the first and above the last,
	// the extremes.
	pos := make([]float64, len(points))
	var cum, mean float64
	for i, p := range points {
		pos[i] = cum + p.mass/2
		cum += p.mass
		mean += p.r * p.mass
	}
	q := make([]float64, RatioQuantiles+1)
	for k := range q {
		p := float64(k) / RatioQuantiles
		i := sort.SearchFloat64s(pos, p) // pos[i-1] < p ≤ pos[i]
		switch {
		case i == 0:
			q[k] = points[0].r
		case i == len(points):
			q[k] = points[len(points)-1].r
		default:
			f := (p - pos[i-1]) / (pos[i] - pos[i-1])
			q[k] = points[i-1].r + f*(points[i].r-points[i-1].r)
		}
	}
	r := NewRunRatio(mean/cum, q)
	if wide.Low < r.Low && wide.Low > 0 {
		r.Low = wide.Low
	}
	return r
}

// ratioPoint is a ratio and the share of jobs that end at it (RecentRatio).
type ratioPoint struct{ r, mass float64 }

// tailPoints is how many points the share of a user's recent jobs left running past the
// longest that ended is spread over (RunRatio.tail).
const tailPoints = 10

// tail adds to points, sorted by ratio, the share mass of a user's recent jobs still running
// past the last of them that ended, having run to from (their mean), spread over tailPoints
// even steps of what is known of such runs: as r's jobs that ran longer than from ended
// (QuantileGiven), or, where r knows none, on at the rate the recent jobs ended at up to the
// longest of them, longest (the Brown–Hollander–Korwar completion: the share 1 − mass ended by
// then, at a constant rate); never past maxDuration (1), where all of it goes when no rate
// follows (every recent run ended at a ratio of 0). Put at maxDuration always, as until
// 30 Nov, it drew whole maxDurations for a user
// whose latest jobs have mostly not ended: in B8x a user's latest 1,500 jobs started in the last
// quarter of an hour, a third of them still ran, no job of his had ended later than that, and
// jobs of 13 minutes (mean) were drawn to run their two weeks one time in three; the likely
// starts of the jobs behind them lay days ahead (median 7–9 days, minRunTime's floor already a
// minute) of a queue that drained in minutes.
func (r RunRatio) tail(points []ratioPoint, from, longest, mass float64) []ratioPoint {
	_, known := r.QuantileGiven(from, 0)
	rate := -math.Log(mass) / longest // per unit of ratio
	if !known && (mass >= 1 || !(rate > 0) || math.IsInf(rate, 0)) {
		return append(points, ratioPoint{1, mass})
	}
	at := points[len(points)-1].r
	for i := range tailPoints {
		u := (float64(i) + 0.5) / tailPoints
		x, _ := r.QuantileGiven(from, u)
		if !known {
			x = from - math.Log(1-u)/rate
		}
		at = min(max(at, x), 1) // sorted, whatever the interpolation gives
		points = append(points, ratioPoint{at, mass / tailPoints})
	}
	return points
}

func learnEach[K comparable](out map[K]RunRatio, groups map[K][]float64, minJobs int) {
	for k, rs := range groups {
		if len(rs) >= minJobs && len(rs) > 0 {
			slices.Sort(rs)
			out[k] = ratioOf(rs)
		}
	}
}

// WindowRatio is one group's ratio over a window, every job weighing the same (the ratios are
// clamped to [0, 1] and sorted in place): RecentRatio's wide one.
func WindowRatio(ratios []float64) RunRatio {
	if len(ratios) == 0 {
		return RunRatio{}
	}
	for i, r := range ratios {
		ratios[i] = min(1, max(0, r))
	}
	slices.Sort(ratios)
	return ratioOf(ratios)
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
