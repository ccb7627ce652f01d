package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/opengpulab/gpulab/scheduler"
)

// Estimate accuracy (issue 15): every job's start range from Plan's forecast (Plan.Ranges), made
// at the first pass after its submission and again as it waits, set against when it really
// started. The forecast learns run-time ratios from the jobs the replay has ended so far, as the
// master learns them from its store (scheduler.LearnRatios), so its first estimates know
// nothing and later ones know the trace's habits.

// Accuracy is what the estimates were worth.
type Accuracy struct {
	// Waited counts the jobs (first runs only, restarts aside) that did not start at their first
	// pass and so were given an estimate then, or would have been; AtOnce those that started at
	// their first pass (no wait, nothing to estimate); NoRange those of Waited that got no
	// range (no start followed from known ends).
	Waited, AtOnce, NoRange int
	// MedianErr and P90Err are the absolute errors |likely − actual start| of the estimates
	// made at submission; MedianRel the median of that error over the job's wait (the goal:
	// ≤ 0.3); InRange the share of those jobs that started within [early, late] (the goal:
	// ≥ 0.8), Early and Late the shares that started before early or after late.
	MedianErr, P90Err      time.Duration
	MedianRel              float64
	InRange, Early, Late   float64
	MedianWidth            time.Duration // of the range (late − early), median
	ByHorizon              []HorizonAccuracy
	ForecastPasses, Ranges int // passes that forecast, and ranges recorded (cost)
}

// HorizonAccuracy is the accuracy of estimates made when the job was still Upto away from its
// start (and more than the previous bucket's Upto): later estimates should be closer.
type HorizonAccuracy struct {
	Upto      time.Duration // 0: unbounded
	N         int
	MedianErr time.Duration
	MedianRel float64 // error over the time left to the start
	InRange   float64
}

// Horizons are the buckets of ByHorizon.
var Horizons = []time.Duration{10 * time.Minute, time.Hour, 4 * time.Hour, 12 * time.Hour, 0}

// estSample is one estimate of a job's start, made at a pass.
type estSample struct {
	at time.Time
	r  scheduler.Range
}

// estJob is what the estimator keeps of one trace job until its first start.
type estJob struct {
	passed  bool // has had its first pass
	atOnce  bool // started at it
	ok      bool // sub is set
	sub     scheduler.Range
	samples []estSample // sub first, then at growing intervals (see sampleGap)
	next    time.Time   // when the next sample is due
	start   time.Time
}

// sampleGap is the least time between two recorded estimates of a job: they are taken at
// submission, then 10 minutes later, and then at doubling intervals (as long again as the job
// has waited), so a job that waits days keeps a dozen, not thousands.
func sampleGap(waited time.Duration) time.Duration { return max(10*time.Minute, waited) }

// estimator follows the estimates of one run.
type estimator struct {
	jobs    []estJob
	pending int       // jobs queued that have not had their first pass
	due     time.Time // the earliest a waiting job's next sample is due (zero: none)
	last    time.Time // the last forecasting pass
	acc     Accuracy
	learn   ratioLearner
	every   int // one job in every is measured (Config.EstimateEvery)
}

func newEstimator(n, every int) *estimator {
	return &estimator{jobs: make([]estJob, n), every: max(every, 1)}
}

// sampled says whether trace job i's estimates are measured: one job in every.
func (e *estimator) sampled(i int) bool { return i%e.every == 0 }

// arrived notes a job's submission (its first run only).
func (e *estimator) arrived(i int) {
	if e.sampled(i) {
		e.pending++
	}
}

// wants says whether this pass should forecast every queued job.
func (e *estimator) wants(now time.Time) bool {
	if e.pending > 0 {
		return true
	}
	// Samples of waiting jobs are taken at the passes that forecast for arrivals; a pass of its
	// own only when none has for sampleGap(0).
	return !e.due.IsZero() && !now.Before(e.due) && now.Sub(e.last) >= sampleGap(0)
}

// rangesFor lists the sampled jobs among considered whose range observe records if the pass
// leaves them waiting: on their first pass, when a sample is due, or while none was recorded
// (Snapshot.RangesFor). idx is observe's.
func (e *estimator) rangesFor(now time.Time, considered []*scheduler.Job, idx func(uuid string) (int, bool)) []string {
	out := []string{}
	for _, q := range considered {
		i, ok := idx(q.UUID)
		if !ok || !e.sampled(i) {
			continue
		}
		if ej := &e.jobs[i]; !ej.passed || ej.next.IsZero() || !now.Before(ej.next) {
			out = append(out, q.UUID)
		}
	}
	return out
}

// observe records a forecasting pass: considered are the jobs the pass saw (decided or only
// forecast), idx maps their uuids to trace indices, first says whether the job is on its first
// run and has not started.
func (e *estimator) observe(now time.Time, plan scheduler.Plan, considered []*scheduler.Job, idx func(uuid string) (int, bool)) {
	e.acc.ForecastPasses++
	e.last = now
	assigned := make(map[string]bool, len(plan.Assignments))
	for _, a := range plan.Assignments {
		assigned[a.JobUUID] = true
	}
	e.due = time.Time{}
	for _, q := range considered {
		i, ok := idx(q.UUID)
		if !ok || !e.sampled(i) {
			continue
		}
		ej := &e.jobs[i]
		r, has := plan.Ranges[q.UUID]
		if !ej.passed {
			ej.passed = true
			e.pending--
			switch {
			case assigned[q.UUID]:
				ej.atOnce = true
				continue
			case has:
				ej.ok, ej.sub = true, r
			}
		}
		if assigned[q.UUID] {
			continue
		}
		if has && (ej.next.IsZero() || !now.Before(ej.next)) {
			ej.samples = append(ej.samples, estSample{at: now, r: r})
			e.acc.Ranges++
			ej.next = now.Add(sampleGap(now.Sub(q.Submitted)))
		}
		if !ej.next.IsZero() && (e.due.IsZero() || ej.next.Before(e.due)) {
			e.due = ej.next
		}
		if ej.next.IsZero() && (e.due.IsZero() || now.Add(sampleGap(0)).Before(e.due)) {
			e.due = now.Add(sampleGap(0)) // no range yet: try again later
		}
	}
}

// started notes a job's first start.
func (e *estimator) started(i int, at time.Time) {
	if ej := &e.jobs[i]; ej.start.IsZero() {
		ej.start = at
	}
}

// summary computes the accuracy over the jobs that started; submits are their submissions.
func (e *estimator) summary(submit func(i int) time.Time) Accuracy {
	a := e.acc
	var errs []time.Duration
	var widths []time.Duration
	var rel []float64
	var in, early, late int
	type hb struct {
		errs []time.Duration
		rel  []float64
		in   int
	}
	hs := make([]hb, len(Horizons))
	for i := range e.jobs {
		ej := &e.jobs[i]
		if ej.start.IsZero() || !ej.passed {
			continue
		}
		if ej.atOnce {
			a.AtOnce++
			continue
		}
		a.Waited++
		if !ej.ok {
			a.NoRange++
			continue
		}
		err := ej.sub.Likely.Sub(ej.start).Abs()
		errs = append(errs, err)
		widths = append(widths, ej.sub.Late.Sub(ej.sub.Early))
		if w := ej.start.Sub(submit(i)); w > 0 {
			rel = append(rel, err.Seconds()/w.Seconds())
		}
		switch {
		case ej.start.Before(ej.sub.Early):
			early++
		case ej.start.After(ej.sub.Late):
			late++
		default:
			in++
		}
		for _, s := range ej.samples {
			left := ej.start.Sub(s.at)
			k := horizonOf(left)
			e := s.r.Likely.Sub(ej.start).Abs()
			hs[k].errs = append(hs[k].errs, e)
			if left > 0 {
				hs[k].rel = append(hs[k].rel, e.Seconds()/left.Seconds())
			}
			if !ej.start.Before(s.r.Early) && !ej.start.After(s.r.Late) {
				hs[k].in++
			}
		}
	}
	if n := len(errs); n > 0 {
		slices.Sort(errs)
		slices.Sort(widths)
		a.MedianErr, a.P90Err, a.MedianWidth = percentile(errs, 50), percentile(errs, 90), percentile(widths, 50)
		a.MedianRel = median(rel)
		a.InRange, a.Early, a.Late = float64(in)/float64(n), float64(early)/float64(n), float64(late)/float64(n)
	}
	for k, h := range hs {
		ha := HorizonAccuracy{Upto: Horizons[k], N: len(h.errs)}
		if ha.N > 0 {
			slices.Sort(h.errs)
			ha.MedianErr, ha.MedianRel, ha.InRange = percentile(h.errs, 50), median(h.rel), float64(h.in)/float64(ha.N)
		}
		a.ByHorizon = append(a.ByHorizon, ha)
	}
	return a
}

// horizonOf is the bucket of Horizons that a time left to the start falls in.
func horizonOf(left time.Duration) int {
	for k, h := range Horizons {
		if h == 0 || left <= h {
			return k
		}
	}
	return len(Horizons) - 1
}

// median is the lower median of xs (sorted in place); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	return xs[(len(xs)-1)/2]
}

// HorizonString is the horizon breakdown in one line.
func (a Accuracy) HorizonString() string {
	s := ""
	for _, h := range a.ByHorizon {
		name := "> 12h"
		if h.Upto > 0 {
			name = "≤ " + fmtHorizon(h.Upto)
		}
		if s != "" {
			s += "; "
		}
		s += fmt.Sprintf("%s: %d est., err p50 %.0f s (%.2f of time left), %.0f %% in range", name, h.N, h.MedianErr.Seconds(), h.MedianRel, 100*h.InRange)
	}
	return s
}

func fmtHorizon(d time.Duration) string {
	if d < time.Hour {
		return fmt.Sprintf("%.0fm", d.Minutes())
	}
	return fmt.Sprintf("%.0fh", d.Hours())
}

// ratioLearner learns run-time ratios from the runs of the replay, as the master's loop does
// from its store: runs created within ratioWindow, ratioMinJobs ended per group (user and
// maxDuration class, class, user, everyone), read again every ratioRefresh. The month's groups
// are read again every ratioRefresh while there are few samples and every ratioRefreshLong
// after (they drift slowly once learned, and sorting weeks of samples every five simulated
// minutes would cost more than the replay); a user's ratio for a class, which weighs his latest
// runs most and counts those still running (scheduler.RecentRatio), and so moves with each of
// them, is read again every ratioRefresh for the groups that started or ended a run since or
// have one running, against the month's distribution of the last full read.
type ratioLearner struct {
	samples []ratioSample // ended, in end order: those of the window at the last refresh and after
	runs    int           // runs ended so far
	cur     scheduler.RunRatios
	at      time.Time
	n       int // runs ended at the last refresh
	// latest holds each user and class's latest runs in start order (at most
	// 2·RatioRecentJobs), live how many of them run, changed the groups that started or ended
	// one since the last refresh, wide their month's ratio at the last full read, recentAt the
	// last refresh of the recent ratios.
	latest   map[scheduler.UserClass][]*learnRun
	live     map[scheduler.UserClass]int
	changed  map[scheduler.UserClass]bool
	wide     map[scheduler.UserClass]scheduler.RunRatio
	recentAt time.Time
}

type ratioSample struct {
	created time.Time
	s       scheduler.RatioSample
}

// learnRun is one run for the recent ratios: when its job (or restart) was queued, when it
// started, when it ended (zero while it runs), its maxDuration, whether it was halted.
type learnRun struct {
	created, started, ended time.Time
	maxDur                  time.Duration
	halted                  bool
	uc                      scheduler.UserClass
}

// The master loop's learning parameters (its RatioWindow, RatioMinJobs and RatioRefresh),
// repeated here: the simulator must not import the loop, which needs a database.
const (
	ratioWindow      = 30 * 24 * time.Hour
	ratioMinJobs     = 20
	ratioRefresh     = 5 * time.Minute
	ratioRefreshLong = 24 * time.Hour
)

// started records a run's start (nil: a job without maxDuration, which teaches nothing); its
// end is given to ended.
func (l *ratioLearner) started(created, at time.Time, user int64, maxDur time.Duration) *learnRun {
	if maxDur <= 0 {
		return nil
	}
	if l.latest == nil {
		l.latest, l.live, l.changed = map[scheduler.UserClass][]*learnRun{}, map[scheduler.UserClass]int{}, map[scheduler.UserClass]bool{}
	}
	r := &learnRun{created: created, started: at, maxDur: maxDur, uc: scheduler.UserClass{UserID: user, Class: scheduler.DurationClass(maxDur)}}
	g := append(l.latest[r.uc], r)
	if len(g) > 2*scheduler.RatioRecentJobs {
		g = append(g[:0], g[len(g)-scheduler.RatioRecentJobs:]...)
	}
	l.latest[r.uc] = g
	l.live[r.uc]++
	l.changed[r.uc] = true
	return r
}

// ended records the end of a run that started, halted or on its own.
func (l *ratioLearner) ended(r *learnRun, at time.Time, halted bool) {
	if r == nil || !r.ended.IsZero() {
		return
	}
	r.ended, r.halted = at, halted
	l.live[r.uc]--
	l.changed[r.uc] = true
	l.runs++
	l.samples = append(l.samples, ratioSample{created: r.created, s: scheduler.RatioSample{UserID: r.uc.UserID, MaxDuration: r.maxDur,
		Ratio: at.Sub(r.started).Seconds() / r.maxDur.Seconds(), Started: r.started, Halted: halted}})
}

// ratios returns the ratios as of now.
func (l *ratioLearner) ratios(now time.Time) scheduler.RunRatios {
	every := ratioRefresh
	if l.n >= 20*ratioMinJobs {
		every = ratioRefreshLong
	}
	if !l.at.IsZero() && now.Sub(l.at) < every {
		if now.Sub(l.recentAt) >= ratioRefresh {
			l.refreshRecent(now, false)
		}
		return l.cur
	}
	// The window only moves forward: samples older than it are dropped for good, so that a
	// replay of months does not go over every ended job at every refresh.
	from := now.Add(-ratioWindow)
	kept := l.samples[:0]
	in := make([]scheduler.RatioSample, 0, len(l.samples))
	perUC := map[scheduler.UserClass][]float64{}
	for _, s := range l.samples {
		if !s.created.Before(from) {
			kept = append(kept, s)
			in = append(in, s.s)
			k := scheduler.UserClass{UserID: s.s.UserID, Class: scheduler.DurationClass(s.s.MaxDuration)}
			perUC[k] = append(perUC[k], s.s.Ratio)
		}
	}
	clear(l.samples[len(kept):])
	l.samples = kept
	l.cur, l.at, l.n = scheduler.LearnRatios(in, ratioMinJobs), now, l.runs
	l.wide = make(map[scheduler.UserClass]scheduler.RunRatio, len(perUC))
	for k, rs := range perUC {
		if len(rs) >= ratioMinJobs {
			l.wide[k] = scheduler.WindowRatio(rs)
		}
	}
	l.refreshRecent(now, true)
	return l.cur
}

// refreshRecent learns again the users' ratios for their classes from their latest runs in the
// window (scheduler.RecentRatio, as LearnRatios does): every group after a full read (all), else
// those that started or ended a run since the last refresh or have one running (what it has run
// so far grows).
func (l *ratioLearner) refreshRecent(now time.Time, all bool) {
	l.recentAt = now
	from := now.Add(-ratioWindow)
	uc := make(map[scheduler.UserClass]scheduler.RunRatio, len(l.cur.UserClasses)+len(l.changed))
	for k, r := range l.cur.UserClasses { // a new map: a snapshot handed out keeps its own
		if _, ok := l.wide[k]; ok {
			uc[k] = r
		}
	}
	var latest []scheduler.RatioRun
	for k, g := range l.latest {
		if !all && !l.changed[k] && l.live[k] == 0 {
			continue
		}
		wide, ok := l.wide[k]
		if !ok {
			// Fewer than ratioMinJobs ended in the window at the last full read: no ratio of
			// its own until the next (as the master's HAVING).
			continue
		}
		latest = latest[:0]
		for i := len(g) - 1; i >= 0 && len(latest) < scheduler.RatioRecentJobs; i-- {
			r := g[i]
			switch {
			case r.created.Before(from):
			case r.ended.IsZero():
				latest = append(latest, scheduler.RatioRun{Ratio: now.Sub(r.started).Seconds() / r.maxDur.Seconds(), Censored: true})
			default:
				latest = append(latest, scheduler.RatioRun{Ratio: r.ended.Sub(r.started).Seconds() / r.maxDur.Seconds(), Censored: r.halted})
			}
		}
		uc[k] = scheduler.RecentRatio(latest, wide)
	}
	clear(l.changed)
	l.cur.UserClasses = uc
}

// waitingBeside copies the queued jobs that are not candidates of the pass, for
// scheduler.Snapshot.Waiting.
func waitingBeside(queued, cand []*scheduler.Job) []scheduler.Job {
	in := make(map[*scheduler.Job]bool, len(cand))
	for _, c := range cand {
		in[c] = true
	}
	out := make([]scheduler.Job, 0, len(queued)-len(cand))
	for _, q := range queued {
		if !in[q] {
			out = append(out, *q)
		}
	}
	return out
}

// considered lists the jobs a forecasting pass saw.
func considered(given, waiting []scheduler.Job) []*scheduler.Job {
	out := make([]*scheduler.Job, 0, len(given)+len(waiting))
	for i := range given {
		out = append(out, &given[i])
	}
	for i := range waiting {
		out = append(out, &waiting[i])
	}
	return out
}
