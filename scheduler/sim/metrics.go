package sim

import (
	"cmp"
	"slices"
	"time"
)

// Metrics are the figures the literature reports for GPU-cluster schedulers, so that a replay
// can be set beside them (with its differences stated).
type Metrics struct {
	// Jobs is how many jobs completed.
	Jobs int
	// JCT (job completion time) is end − submit; Wait is JCT − run time: the time the result
	// came later than the job's own run, which is start − submit for a job never halted, and
	// also counts requeueing and lost work for one that was.
	AvgJCT, P50JCT, P95JCT, P99JCT     time.Duration
	AvgWait, P50Wait, P95Wait, P99Wait time.Duration
	// AvgSlowdown is the mean bounded slowdown (see Slowdown).
	AvgSlowdown float64
	// Utilisation is busy GPU-time over (total GPUs × Makespan).
	Utilisation float64
	// Makespan is the last end minus the first submission.
	Makespan time.Duration
	// Jain is Jain's fairness index over users of their mean bounded slowdown (see Slowdown):
	// 1 when every user's jobs are slowed alike, 1/n when one user bears it all.
	Jain float64
	// HaltsPerJob is halts over jobs replayed (Run fills it: Summarize sees only completions).
	HaltsPerJob float64
	// Estimates is how many completed jobs had a start estimate at their first planning pass;
	// EstMedianErr and EstP90Err are the absolute errors |estimate − first start| of those,
	// EstMedianRel the median of that error over the job's wait (jobs that waited at all).
	Estimates               int
	EstMedianErr, EstP90Err time.Duration
	EstMedianRel            float64
}

// SlowdownFloor bounds slowdown for very short jobs: a 1-second job waiting a minute is not
// 60 times worse off than a day-long job waiting a day in any sense users feel, and unbounded
// slowdown lets a handful of such jobs decide the fairness index.
const SlowdownFloor = 10 * time.Second

// Slowdown is a job's bounded slowdown, max(1, JCT / max(duration, SlowdownFloor)): how many
// times longer than its run the user waited for the result.
func Slowdown(o Outcome) float64 {
	d := max(o.Job.Duration, SlowdownFloor)
	return max(1, float64(o.End.Sub(o.Job.Submit))/float64(d))
}

// Jain is Jain's fairness index (Σx)² / (n·Σx²) of xs; 1 for an empty or all-zero list (nobody
// is treated worse than anybody else).
func Jain(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if len(xs) == 0 || s2 == 0 {
		return 1
	}
	return s * s / (float64(len(xs)) * s2)
}

// percentile is the nearest-rank p-th percentile of sorted ds.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	k := int(p/100*float64(len(sorted))+0.999999999) - 1
	return sorted[min(max(k, 0), len(sorted)-1)]
}

// Summarize computes the metrics of completed jobs on a cluster of totalGPUs.
func Summarize(out []Outcome, totalGPUs int) Metrics {
	m := Metrics{Jobs: len(out), Jain: 1}
	if len(out) == 0 {
		return m
	}
	jct := make([]time.Duration, len(out))
	wait := make([]time.Duration, len(out))
	var sumJ, sumW time.Duration
	var busy float64
	first, lastEnd := out[0].Job.Submit, out[0].End
	per := map[string][2]float64{} // user: sum of slowdowns, count
	for i, o := range out {
		jct[i] = o.End.Sub(o.Job.Submit)
		sumJ += jct[i]
		wait[i] = max(0, jct[i]-o.Job.Duration)
		sumW += wait[i]
		held := o.Held
		if held == 0 { // an outcome built by hand
			held = time.Duration(o.Job.GPUs) * o.Job.Duration
		}
		busy += held.Seconds()
		m.AvgSlowdown += Slowdown(o)
		if o.Job.Submit.Before(first) {
			first = o.Job.Submit
		}
		if o.End.After(lastEnd) {
			lastEnd = o.End
		}
		p := per[o.Job.User]
		per[o.Job.User] = [2]float64{p[0] + Slowdown(o), p[1] + 1}
	}
	n := time.Duration(len(out))
	m.AvgJCT, m.AvgWait = sumJ/n, sumW/n
	slices.Sort(jct)
	slices.Sort(wait)
	m.P50JCT, m.P95JCT, m.P99JCT = percentile(jct, 50), percentile(jct, 95), percentile(jct, 99)
	m.P50Wait, m.P95Wait, m.P99Wait = percentile(wait, 50), percentile(wait, 95), percentile(wait, 99)
	m.AvgSlowdown /= float64(len(out))
	estimates(&m, out)
	m.Makespan = lastEnd.Sub(first)
	if totalGPUs > 0 && m.Makespan > 0 {
		m.Utilisation = busy / (float64(totalGPUs) * m.Makespan.Seconds())
	}
	names := make([]string, 0, len(per))
	for u := range per {
		names = append(names, u)
	}
	slices.SortFunc(names, cmp.Compare)
	xs := make([]float64, len(names))
	for i, u := range names {
		xs[i] = per[u][0] / per[u][1]
	}
	m.Jain = Jain(xs)
	return m
}

// estimates fills the estimate-accuracy metrics from the outcomes that carry one.
func estimates(m *Metrics, out []Outcome) {
	var errs []time.Duration
	var rel []float64
	for _, o := range out {
		if o.Estimate.IsZero() {
			continue
		}
		e := o.Estimate.Sub(o.Start).Abs()
		errs = append(errs, e)
		if w := o.Start.Sub(o.Job.Submit); w > 0 {
			rel = append(rel, e.Seconds()/w.Seconds())
		}
	}
	m.Estimates = len(errs)
	slices.Sort(errs)
	m.EstMedianErr, m.EstP90Err = percentile(errs, 50), percentile(errs, 90)
	if len(rel) > 0 {
		slices.Sort(rel)
		m.EstMedianRel = rel[(len(rel)-1)/2]
	}
}
