package leader

import (
	"context"
	"iter"
	"slices"
	"time"

	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/store"
)

// ReadQueue is one pass's read of the queued jobs, for the tests of the leader's memory.
func (l *Loop) ReadQueue(ctx context.Context) ([]scheduler.Job, error) {
	jobs, _, err := l.ReadJobs(ctx)
	return jobs, err
}

// ReadJobs is one pass's read of the queued jobs and of what is held (next, store.ReadPass,
// take), for the tests of the leader's memory.
func (l *Loop) ReadJobs(ctx context.Context) ([]scheduler.Job, []store.Held, error) {
	n := l.queue.next(ctx, l.st)
	r, err := l.st.ReadPass(ctx, l.cfg.TallyHalfLife, store.PassFeeds{Jobs: !n.full, JobsFrom: n.from, Also: n.also})
	if err != nil {
		return nil, nil, err
	}
	jobs, held, err := l.queue.take(ctx, l.st, n, r.Jobs, r.Releasing, r.Mark)
	return slices.Clone(jobs), slices.AppendSeq(make([]store.Held, 0, held.len()), held.all()), err
}

// ReadAgain is what a pass does with the jobs its conditional writes found changed.
func (l *Loop) ReadAgain(ids ...string) { l.queue.readAgain(ids...) }

// CheckQueueNow runs a check's full read now, as a read starts one beside the passes, and waits
// for it; the next read compares the memory with it.
func (l *Loop) CheckQueueNow() {
	l.queue.check.start(context.Background(), l.st, readMemory(l.st, 0))
	l.queue.check.wait()
}

// StartQueueCheck starts a check's read with ctx, as a read does when a check is due.
func (l *Loop) StartQueueCheck(ctx context.Context) {
	l.queue.check.start(ctx, l.st, readMemory(l.st, 0))
}

// WaitQueueCheck waits for a running check to end.
func (l *Loop) WaitQueueCheck() { l.queue.check.wait() }

// ForgetQueue forgets the queue's memory, as a new term does.
func (l *Loop) ForgetQueue() { l.queue.reset() }

// HoldQueueCheck waits for the check a read started (or starts one) to end and holds its
// outcome back until deliver, as if the check took that long: reads meanwhile go on with the
// feed.
func (l *Loop) HoldQueueCheck(start bool) (deliver func()) {
	if start {
		l.queue.check.start(context.Background(), l.st, readMemory(l.st, 0))
	}
	l.queue.check.wait()
	o := <-l.queue.check.out
	return func() { l.queue.check.out <- o }
}

// Snapshot is a pass's read of the cluster, for the tests of what the configuration sets.
func (l *Loop) Snapshot(ctx context.Context) (scheduler.Snapshot, error) {
	snap, _, err := l.snapshot(ctx)
	return snap, err
}

// ForgetEstimates forgets what estimates the term wrote, as if they had been changed behind its
// back (which only tests do).
func (l *Loop) ForgetEstimates() { l.forgetWritten(); l.explained = explained{} }

// HoldFleetCheck runs a check's read of the slaves now and holds its outcome back until
// deliver, as if the check took that long: reads meanwhile go on with the feed.
func (l *Loop) HoldFleetCheck() (deliver func()) {
	l.fleet.check.start(context.Background(), l.st, readFleet(l.st))
	l.fleet.check.wait()
	o := <-l.fleet.check.out
	return func() { l.fleet.check.out <- o }
}

// CheckFleetNow makes the next read of the slaves start a check, and waits for its read; the
// read after it compares the memory with it.
func (l *Loop) CheckFleetNow() {
	l.fleet.check.start(context.Background(), l.st, readFleet(l.st))
	l.fleet.check.wait()
}

// ForecastNow makes the next pass forecast and write estimates, whatever Config.ForecastEvery.
func (l *Loop) ForecastNow() { l.forecastAt = time.Time{} }

// LearnEvery makes the loop check its learned inputs every `every` and read them again when
// older than `after` (RatioRefresh), for tests that cannot wait minutes.
func (l *Loop) LearnEvery(every, after time.Duration) { l.learnEvery, l.learnAfter = every, after }

// Learned says when the ratios were last read (the database's clock), how many reads were
// made when needed (by a pass alone or the forecaster), not in the background, and the
// global ratio read.
func (l *Loop) Learned() (ratiosAt time.Time, demandReads int, global scheduler.RunRatio) {
	l.learned.mu.Lock()
	defer l.learned.mu.Unlock()
	return l.learned.ratiosAt, l.learned.demandReads, l.learned.ratios.Global
}

// PassBetweenHousekeepings is a pass of Run's that comes within HousekeepEvery of the last
// housekeeping: the housekeeping left out.
func (l *Loop) PassBetweenHousekeepings(ctx context.Context, lead store.Leadership) error {
	return l.pass(ctx, lead, false)
}

// WriteForecast reads a snapshot as a pass does, plans it with ranges and writes the estimates
// as the forecaster does (writeForecast), returning how many jobs it wrote.
func (l *Loop) WriteForecast(ctx context.Context, lead store.Leadership) (int, error) {
	snap, _, err := l.snapshot(ctx)
	if err != nil {
		return 0, err
	}
	return l.writeForecast(ctx, lead, snap.Plan(), forecastJob{snap: snap, at: time.Now()})
}

// The size from which a plan's assignments are written in parts, and how many parts.
const (
	AssignSplitFrom = assignSplitFrom
	AssignParts     = assignParts
)

// EarlyPart is the size of the parts a full plan commits while it is planned.
const EarlyPart = earlyPart

// BeforeEarlyPart has f called with each part a full plan commits early, before its statement:
// what f changes in the database is a change made while the plan was being decided.
func (l *Loop) BeforeEarlyPart(f func([]scheduler.Assignment)) { l.beforeEarlyPart = f }

// ExplainInParts writes explanations as a leading term's pass does (explainInParts).
func (l *Loop) ExplainInParts(ctx context.Context, lead store.Leadership, news, refreshed map[string][]string) error {
	return l.explainInParts(ctx, lead, news, refreshed)
}

// ExplainSplitFrom is how many explanations are written as AssignParts statements at once.
const ExplainSplitFrom = explainSplitFrom

// SetForecastReach has the forecasts between far ones cover the first near waiting jobs, and
// far ones come every farEvery at the least (zero: the defaults).
func (l *Loop) SetForecastReach(near int, farEvery time.Duration) {
	l.nearReach, l.farEveryAtLeast = near, farEvery
}

// all yields everything held, oldest first, as the store reads it (the tests' view; a pass
// uses placed).
func (h heldList) all() iter.Seq[store.Held] {
	return func(yield func(store.Held) bool) {
		i := 0
		for _, r := range h.releasing {
			for ; i < len(h.live) && compareHeld(&h.live[i].SchedJob, &r) <= 0; i++ {
				if !yield(h.live[i].Held) {
					return
				}
			}
			if !yield(r.Held) {
				return
			}
		}
		for _, l := range h.live[i:] {
			if !yield(l.Held) {
				return
			}
		}
	}
}

// OfflineLookedAgo sets the loop's last look for silent slaves (offlineEvery) d before now.
func (l *Loop) OfflineLookedAgo(d time.Duration) { l.offlineAt = time.Now().Add(-d) }

// OfflineEvery is offlineEvery.
var OfflineEvery = offlineEvery

// MarksAhead moves the marks the jobs' and the slaves' feeds go on from by ids ahead, as marks
// taken before Postgres recovered from a crash and gave out lower ids again are.
func (l *Loop) MarksAhead(ids uint64) {
	l.queue.mark.Next += ids
	l.fleet.mark.Next += ids
}

// DatabaseRestarted makes the next pass find the database started at another time than the
// last pass found.
func (l *Loop) DatabaseRestarted() { l.dbStarted = l.dbStarted.Add(-time.Hour) }

// WantTallyWeights asks the next snapshot for the tally weights, as an accrual that used them
// does.
func (l *Loop) WantTallyWeights() { l.weightsWanted.Store(true) }

// TallyWeightsHeld are the tally weights by user of the running jobs, as the term's accrual
// would use them now (nil before the first snapshot).
func (l *Loop) TallyWeightsHeld() map[int64]float64 {
	if w := l.weights.Load(); w != nil {
		return *w
	}
	return nil
}

// ExplanationWriter writes a pass's explanations: news with an event each, refreshed without.
type ExplanationWriter = func(ctx context.Context, lead store.Leadership, news, refreshed map[string][]string) error

// WrapExplanationWriter has the explainer of the terms led from now on write through wrap's
// writer, given the real one.
func (l *Loop) WrapExplanationWriter(wrap func(real ExplanationWriter) ExplanationWriter) {
	l.writeExplanations = wrap(l.explainInParts)
}
