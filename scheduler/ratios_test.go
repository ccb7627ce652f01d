package scheduler

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
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
	if r := LearnRatios(s[:5], 20); r.Global.Mid != 0 || r.Global.Q != nil || len(r.Users) != 0 {
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

// TestDurationClass: the class is the power of two of the whole minutes, rounded up, as
// store.RunRatios computes it in SQL (the bit length of minutes − 1).
func TestDurationClass(t *testing.T) {
	for d, want := range map[time.Duration]int{
		0: 0, 30 * time.Second: 0, time.Minute: 0, 2 * time.Minute: 1, 3 * time.Minute: 2,
		time.Hour: 6, 64 * time.Minute: 6, 65 * time.Minute: 7, 2 * time.Hour: 7, 129 * time.Minute: 8,
		24 * time.Hour: 11, 7 * 24 * time.Hour: 14, 61*time.Minute - time.Second: 6,
	} {
		if got := DurationClass(d); got != want {
			t.Errorf("DurationClass(%s) = %d, want %d", d, got, want)
		}
	}
}

// TestLearnRatiosByClass: ratios are learned per user and class, per class, per user and over
// everyone, each over at least minJobs samples, and a job takes the most specific one known.
func TestLearnRatiosByClass(t *testing.T) {
	var s []RatioSample
	add := func(user int64, maxDur time.Duration, n int, ratio float64) {
		for range n {
			s = append(s, RatioSample{UserID: user, MaxDuration: maxDur, Ratio: ratio})
		}
	}
	add(1, time.Hour, 20, 0.9)       // user 1's hour-long jobs
	add(2, time.Hour, 10, 0.5)       // too few for user 2's own hour class
	add(2, 7*24*time.Hour, 20, 0.25) // user 2's week-long jobs
	r := LearnRatios(s, 20)
	hour, week := DurationClass(time.Hour), DurationClass(7*24*time.Hour)
	if len(r.UserClasses) != 2 || len(r.Classes) != 2 || len(r.Users) != 2 {
		t.Fatalf("groups: %d user classes, %d classes, %d users; want 2 each", len(r.UserClasses), len(r.Classes), len(r.Users))
	}
	for _, c := range []struct {
		user   int64
		maxDur time.Duration
		want   float64
	}{
		{1, time.Hour, 0.9},                                  // his own class
		{2, 50 * time.Minute, (20*0.9 + 10*0.5) / 30},        // everyone's hour class
		{2, 7 * 24 * time.Hour, 0.25},                        // his own class
		{3, 7 * 24 * time.Hour, 0.25},                        // everyone's week class
		{2, 90 * time.Minute, (10*0.5 + 20*0.25) / 30},       // no one's class: his over all classes
		{3, 2 * time.Hour, (20*0.9 + 10*0.5 + 20*0.25) / 50}, // nothing of class or user: global
	} {
		if got := r.of(c.user, c.maxDur).Mid; math.Abs(got-c.want) > 1e-9 {
			t.Errorf("user %d, %s: mid %.4f, want %.4f", c.user, c.maxDur, got, c.want)
		}
	}
	if q := r.UserClasses[UserClass{2, week}].Q; len(q) != RatioQuantiles+1 || q[0] != 0.25 || q[RatioQuantiles] != 0.25 {
		t.Errorf("user 2's week quantiles %v", q)
	}
	if _, ok := r.UserClasses[UserClass{2, hour}]; ok {
		t.Error("user 2's 10 hour-long jobs made a ratio of their own")
	}
}

// TestRatioGiven: on a learned distribution even over [0, 1], the jobs that ran past a share f
// of their maxDuration run (f+1)/2 on average and their u-quantile is f + u(1−f); past every
// ratio learned, or without quantiles, nothing is known.
func TestRatioGiven(t *testing.T) {
	q := make([]float64, RatioQuantiles+1)
	for k := range q {
		q[k] = float64(k) / RatioQuantiles
	}
	r := NewRunRatio(0.5, q)
	if math.Abs(r.Low-RatioLowQuantile) > 1e-12 || r.Mid != 0.5 {
		t.Fatalf("low %g, mid %g", r.Low, r.Mid)
	}
	for _, f := range []float64{-1, 0, 0.013, 0.3, 0.5, 0.77, 0.98, 0.999} {
		from := max(f, 0)
		m, ok := r.MeanGiven(f)
		if !ok || math.Abs(m-(from+1)/2) > 1e-9 {
			t.Errorf("MeanGiven(%g) = %g, %v; want %g", f, m, ok, (from+1)/2)
		}
		for _, u := range []float64{0, 0.1, 0.5, 0.93, 1} {
			x, ok := r.QuantileGiven(f, u)
			if want := from + u*(1-from); !ok || math.Abs(x-want) > 1e-9 {
				t.Errorf("QuantileGiven(%g, %g) = %g, %v; want %g", f, u, x, ok, want)
			}
		}
	}
	if _, ok := r.MeanGiven(1); ok {
		t.Error("a job past every ratio learned has a mean")
	}
	if _, ok := (RunRatio{Low: 0.1, Mid: 0.5}).QuantileGiven(0.2, 0.5); ok {
		t.Error("a ratio without quantiles has one")
	}
	// A skewed distribution: half the jobs end at once, half run their whole maxDuration. One
	// that has run 10 % will run to the end.
	skew := make([]float64, RatioQuantiles+1)
	for k := RatioQuantiles/2 + 1; k < len(skew); k++ {
		skew[k] = 1
	}
	if m, ok := NewRunRatio(0.5, skew).MeanGiven(0.1); !ok || m < 0.95 {
		t.Errorf("skewed: MeanGiven(0.1) = %g, %v; want about 1", m, ok)
	}
	if r := NewRunRatio(0.5, q[:10]); r.Q != nil || r.Low != 0.5 {
		t.Errorf("quantiles of the wrong length kept: %+v", r)
	}
	// Quantiles written in a literal, not through NewRunRatio, are no knowledge (not a panic).
	for _, lit := range []RunRatio{{Mid: 0.5, Q: q}, {Mid: 0.5, Q: q[:1]}} {
		if _, ok := lit.MeanGiven(0.3); ok {
			t.Errorf("literal %v: a mean", lit.Q)
		}
		if _, ok := lit.QuantileGiven(0.3, 0.5); ok {
			t.Errorf("literal %v: a quantile", lit.Q)
		}
	}
}

// TestRecentRatio: a user's ratio for a class weighs his latest jobs most, each half as much as
// the one RatioHalfLife places later: after a month of jobs that ran 10 % of their maxDuration,
// his latest RatioHalfLife ran 90 % and already make the mean about 0.5 and the median about
// 0.9's edge; jobs past RatioRecentJobs weigh nothing; the early end (Low) is never later than
// the whole window's; and jobs all alike give that ratio everywhere.
func TestRecentRatio(t *testing.T) {
	var latest []RatioRun // latest first
	for range RatioHalfLife {
		latest = append(latest, RatioRun{Ratio: 0.9})
	}
	for range 5 * RatioRecentJobs {
		latest = append(latest, RatioRun{Ratio: 0.1})
	}
	wide := NewRunRatio(0.1, nil)
	r := RecentRatio(latest, wide)
	// The latest RatioHalfLife weigh (1 − 2^−1)/(1 − 2^−10) of the RatioRecentJobs read.
	share := 0.5 / (1 - math.Exp2(-10))
	if want := share*0.9 + (1-share)*0.1; math.Abs(r.Mid-want) > 0.01 {
		t.Errorf("mid %.4f, want %.4f", r.Mid, want)
	}
	if med := r.Q[RatioQuantiles/2]; med <= 0.1 || med >= 0.9 {
		t.Errorf("median %.3f: want between the old jobs' 0.1 and the latest 0.9", med)
	}
	if q := r.Q[RatioQuantiles*6/10]; q != 0.9 {
		t.Errorf("60th percentile %.3f, want the latest jobs' 0.9", q)
	}
	if r.Low != 0.1 {
		t.Errorf("low %.3f, want the window's 0.1", r.Low)
	}
	// The same latest jobs with nothing older: 0.9 throughout, Low too (the window's is later).
	r = RecentRatio(latest[:RatioHalfLife], NewRunRatio(0.95, nil))
	if math.Abs(r.Mid-0.9) > 1e-9 || r.Low != 0.9 || r.Q[0] != 0.9 || r.Q[RatioQuantiles] != 0.9 {
		t.Errorf("alike: mid %g low %g quantiles %v", r.Mid, r.Low, r.Q)
	}
	// Only the latest RatioRecentJobs count: more of the old ones change nothing.
	if a, b := RecentRatio(latest[:RatioRecentJobs], wide), RecentRatio(latest, wide); a.Mid != b.Mid || !slices.Equal(a.Q, b.Q) {
		t.Errorf("jobs past RatioRecentJobs counted: %v vs %v", a.Q, b.Q)
	}
	if r := RecentRatio(nil, wide); r.Mid != wide.Mid || r.Low != wide.Low {
		t.Errorf("no recent jobs: %+v, want the window's", r)
	}
}

// TestRecentRatioCountsTheRunning: the latest twenty jobs still run, at 0.5 of their
// maxDuration so far, behind twenty that ended at 0.2. Learned from the ended ones alone, jobs
// of this class run 0.2; counted as running at least 0.5 (Kaplan–Meier), the share they weigh
// is still to end after 0.2, and with no ended job past it, ends from 0.5 on as the window's
// jobs that ran longer than 0.5 did, or, where it knows none, on at the rate the others ended
// (RunRatio.tail), never past 1. Running jobs behind an ended one at a higher ratio share in
// it: a job running at 0.3 among jobs that ended at 0.2 and 0.8 moves the mass it would carry
// to 0.8.
func TestRecentRatioCountsTheRunning(t *testing.T) {
	var latest []RatioRun
	var runW, allW float64
	for i := range 40 {
		w := math.Exp2(-float64(i) / RatioHalfLife)
		allW += w
		if i < 20 {
			latest = append(latest, RatioRun{Ratio: 0.5, Censored: true})
			runW += w
			continue
		}
		latest = append(latest, RatioRun{Ratio: 0.2})
	}
	a := 1 - runW/allW // 0.477 of the weight ended at 0.2
	// Nothing known past 0.2: half of the weight ended by 0.2, so the rest, from 0.5, ends at a
	// rate of −ln(0.523)/0.5 = 1.3 per maxDuration (mean 0.77 more), half of it cut at 1: at
	// 0.54, 0.63, 0.72, 0.83, 0.96 and five times 1 (mean 0.868).
	r := RecentRatio(latest, RunRatio{})
	if want := 0.2*a + 0.8681*(1-a); math.Abs(r.Mid-want) > 1e-3 {
		t.Errorf("mid %.4f, want %.4f (%.3f of the weight ended at 0.2, the rest from 0.5 on)", r.Mid, want, a)
	}
	if r.Q[0] != 0.2 || r.Q[RatioQuantiles] != 1 {
		t.Errorf("quantiles %v: want from 0.2 to 1", r.Q)
	}
	// The window's jobs ran from 0.1 to 0.6, evenly: those still running at 0.5 end as those
	// of them that ran longer than 0.5 did, evenly over 0.5–0.6 (mean 0.55), not at
	// maxDuration. (B8x: jobs of 13 minutes drawn to run their two weeks one time in three.)
	even := func(lo, hi float64) RunRatio {
		q := make([]float64, RatioQuantiles+1)
		for k := range q {
			q[k] = lo + (hi-lo)*float64(k)/RatioQuantiles
		}
		return NewRunRatio((lo+hi)/2, q)
	}
	if w := RecentRatio(latest, even(0.1, 0.6)); math.Abs(w.Mid-(0.2*a+0.55*(1-a))) > 1e-9 || w.Q[RatioQuantiles] < 0.59 || w.Q[RatioQuantiles] > 0.6 {
		t.Errorf("with the window's longer runs: mid %.4f, want %.4f; quantiles %v, want them to end near 0.6", w.Mid, 0.2*a+0.55*(1-a), w.Q)
	}
	// The window knows no job longer than 0.5: as knowing nothing.
	if w := RecentRatio(latest, even(0.05, 0.15)); w.Mid != r.Mid {
		t.Errorf("the window's runs all shorter: mid %.4f, want %.4f as without them", w.Mid, r.Mid)
	}
	// Nothing ended: nothing learned beyond the window's.
	if r := RecentRatio(latest[:20], NewRunRatio(0.3, nil)); r.Mid != 0.3 {
		t.Errorf("all running: mid %.3f, want the window's 0.3", r.Mid)
	}
	// Equal weights near enough (three jobs): 0.2 ended, 0.3 running, 0.8 ended. The 0.2 takes
	// a third; the running one's share goes to 0.8.
	r = RecentRatio([]RatioRun{{Ratio: 0.2}, {Ratio: 0.3, Censored: true}, {Ratio: 0.8}}, RunRatio{})
	w := []float64{1, math.Exp2(-1.0 / RatioHalfLife), math.Exp2(-2.0 / RatioHalfLife)}
	m02 := w[0] / (w[0] + w[1] + w[2])
	if want := 0.2*m02 + 0.8*(1-m02); math.Abs(r.Mid-want) > 1e-9 {
		t.Errorf("mid %.4f, want %.4f", r.Mid, want)
	}
}

// TestLearnRatiosWeighsTheLatest: LearnRatios takes its samples in the order the jobs ended and
// gives a user's class the recency-weighted ratio (RecentRatio), while everyone's class weighs
// every job alike.
func TestLearnRatiosWeighsTheLatest(t *testing.T) {
	var s []RatioSample
	for range 1000 {
		s = append(s, RatioSample{UserID: 1, MaxDuration: time.Hour, Ratio: 0.1})
	}
	for range 200 {
		s = append(s, RatioSample{UserID: 1, MaxDuration: time.Hour, Ratio: 0.9})
	}
	r := LearnRatios(s, 20)
	hour := DurationClass(time.Hour)
	uc, class := r.UserClasses[UserClass{1, hour}], r.Classes[hour]
	if uc.Mid < 0.5 || math.Abs(class.Mid-(1000*0.1+200*0.9)/1200) > 1e-9 {
		t.Errorf("user's class mid %.3f (want over 0.5: his latest ran 0.9), everyone's %.3f", uc.Mid, class.Mid)
	}
	if uc.Low != class.Low {
		t.Errorf("user's class low %.3f, want the window's %.3f", uc.Low, class.Low)
	}
	// In the other order the latest ran 0.1.
	slices.Reverse(s)
	if r := LearnRatios(s, 20); r.UserClasses[UserClass{1, hour}].Mid > 0.2 {
		t.Errorf("latest ran 0.1, mid %.3f", r.UserClasses[UserClass{1, hour}].Mid)
	}
}

// TestRecentRatioOfShortRunsStillRunning: a user whose latest 1,500 jobs started in the last
// quarter of an hour, of 13 minutes 20 on average (exponential) out of the default two weeks,
// as in B8x: a third of them still run, and none of his jobs ran longer than the quarter
// hour. His ratio is still about 13 minutes, not a third of the jobs at two weeks (mean 4.7
// days), and the longest he is drawn to run is an hour or so.
//
// One draw's estimate is noisy: the latest jobs weigh most and most of them still run, so
// over 3,000 seeds it spread from 8.1 to 17.7 minutes (1 % under 9.2, median 13.1). Each of
// the fixed seeds must land within a factor of two of the true mean (the bug this guards
// against was off by a factor of 500), and their median within a tenth of it.
func TestRecentRatioOfShortRunsStillRunning(t *testing.T) {
	const maxDur = 14 * 24 * time.Hour
	mean, now := 800*time.Second, 15*time.Minute
	var mids []time.Duration
	for _, seed := range fixedSeeds(t, 300) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var runs []RatioRun // latest first
		var ended []float64
		for s := now; s >= 0; s -= time.Minute / 100 {
			d := time.Duration(rng.ExpFloat64() * float64(mean))
			if s+d <= now {
				runs = append(runs, RatioRun{Ratio: float64(d) / float64(maxDur)})
				ended = append(ended, float64(d)/float64(maxDur))
			} else {
				runs = append(runs, RatioRun{Ratio: float64(now-s) / float64(maxDur), Censored: true})
			}
		}
		slices.Sort(ended)
		r := RecentRatio(runs, ratioOf(ended))
		got := time.Duration(r.Mid * float64(maxDur))
		top := time.Duration(r.Q[RatioQuantiles] * float64(maxDur))
		if got < mean/2 || got > 2*mean || top > 2*time.Hour {
			t.Errorf("seed %d: %d runs, %d ended: mean run %s, the longest drawn %s; want within a factor of two of %s, and under 2 h",
				seed, len(runs), len(ended), got, top, mean)
		}
		mids = append(mids, got)
	}
	slices.Sort(mids)
	if med := mids[len(mids)/2]; med < mean*9/10 || med > mean*11/10 {
		t.Errorf("median estimate over %d seeds %s, want within a tenth of %s", len(mids), med, mean)
	}
}
