package leader

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"time"

	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/store"
)

// forecastJob is a pass's snapshot for the forecaster: the jobs the pass planned, and whether
// the pass was narrowed (see writeEstimates), or the whole queue for a far forecast.
type forecastJob struct {
	snap     scheduler.Snapshot
	narrowed bool
	far      bool
	at       time.Time // when the pass handed it off
}

// A forecast covers the first scheduler.ForecastCap waiting jobs in queue order: enough for
// the next hours of most queues, and bounded, since the forecaster replays it every
// Config.ForecastEvery. Far forecasts answer the rest: every FarForecastEvery the forecaster
// plans the whole queue (up to FarForecastReach jobs), or less often when planning one took
// longer than FarForecastShare of that time (farEvery: on the clock, its writes not counted).
// The jobs beyond the first ForecastCap keep what it wrote until the next (a near forecast
// leaves them alone: estimated), written again only when they moved by farTolerance. Without
// them, a job behind 5,000 others had no start estimate at all: in B8x, some 3,300 of the
// 8,300 queued by the 30th minute, most of them 2–4-GPU jobs of the two users with the
// largest tallies (30 Nov). Planning B8x's queue of 9,000–10,000 jobs took the forecaster
// 40–430 ms once a minute at 2,000 slaves.
const (
	FarForecastEvery = time.Minute
	FarForecastShare = 0.05
	FarForecastReach = 100_000
)

// farEvery is how long after a far forecast the next is due: FarForecastEvery, or the last
// one's planning time over FarForecastShare when longer.
func (l *Loop) farEvery() time.Duration {
	every := FarForecastEvery
	if l.farEveryAtLeast > 0 {
		every = l.farEveryAtLeast
	}
	return max(every, time.Duration(float64(l.farTook.Load())/FarForecastShare))
}

// handOff gives the forecaster the snapshot a pass just planned, when it is not busy with the
// last one (the next pass tries again then); for a far forecast, with all of the queue (all:
// the pass's before it was narrowed). A pass's queue is the leader's memory (a full pass),
// which the next pass changes in place, or the narrowed plan's jobs, which the next narrowed
// plan fills again (narrowScratch), and the running jobs' slice is filled again by the next
// snapshot: the forecaster gets copies.
func (l *Loop) handOff(snap scheduler.Snapshot, all []scheduler.Job, narrowed, far bool) bool {
	if len(l.forecasts) == cap(l.forecasts) {
		return false // the last one still waits; passes are the only senders
	}
	snap.ForecastReach = l.nearReach
	if far {
		snap.Queued, snap.ForecastReach, narrowed = all, FarForecastReach, false
	}
	snap.Queued = slices.Clone(snap.Queued)
	snap.Running = slices.Clone(snap.Running)
	snap.NoRanges, snap.Sweep, snap.Decide = false, 0, nil
	snap.ForecastWorkers = forecastWorkers(runtime.GOMAXPROCS(0))
	l.forecasts <- forecastJob{snap: snap, narrowed: narrowed, far: far, at: time.Now()}
	return true
}

// forecastWorkers is how many of a forecast's replays run at once on a master of procs cores:
// all but one, so that a core stays for the heartbeats, the requests and the passes. On B8x's
// 2-core machine the replays of one forecast (five on a learned queue of 5,000) ran side by side
// on both cores every --forecast-every; each handler that became ready then waited for a core
// behind them, and the heartbeats' p99 went from 14–53 ms to 154–188 ms as the replays
// lengthened in the soak's last minutes (30 Nov). A forecast is not waited for: it may take
// longer.
func forecastWorkers(procs int) int {
	return max(1, procs-1)
}

// forecaster forecasts the waiting jobs' starts and writes the estimates, off the passes, for
// as long as this term lasts. The forecast replays the queue (scheduler.ForecastSamples times
// over up to scheduler.ForecastCap jobs) and writes what moved: at B8x's size that was
// 0.2–0.4 s added to every fifth pass, much of the pass p99. Here it plans the snapshot a pass
// handed off again, with ranges, and writes the estimates in transactions of its own that
// prove the lease, EstimatesPerWrite jobs each (writeForecast). A pass goes on meanwhile; an
// estimate written for a job a later pass assigned is skipped by the store (it writes only
// QUEUED jobs), and the job's entry in the written memory is dropped by a following pass (it
// is no longer queued). A job assigned and queued again before that may keep no estimate until
// its forecast moves by the tolerance (closeEstimates): a rare, short-lived gap, taken for
// passes that never wait on a forecast.
func (l *Loop) forecaster(ctx context.Context, lead store.Leadership, in <-chan forecastJob) {
	for {
		select {
		case <-ctx.Done():
			return
		case f := <-in:
			// Read first (at a term's first forecast) and not timed with the plan: farTook
			// spaces the far forecasts by what planning costs.
			f.snap.Ratios, f.snap.Arrivals = l.forForecast(ctx, f.snap.Now)
			t := time.Now()
			plan := f.snap.Plan()
			planned := time.Since(t)
			if f.far {
				l.farTook.Store(int64(planned))
			}
			t = time.Now()
			wrote, err := l.writeForecast(ctx, lead, plan, f)
			switch {
			case err == nil:
				l.log.Debug("forecast written", "far", f.far, "plan", planned, "write", time.Since(t), "planned", len(f.snap.Queued),
					"ranges", len(plan.Ranges), "unreached", len(plan.Unreached), "written", wrote, "after_pass", t.Sub(f.at))
			case ctx.Err() != nil:
				return
			case errors.Is(err, store.ErrNotLeader):
				// The term is over; its passes see it too and end it (and this goroutine).
				l.forgetWritten()
			default:
				l.forgetWritten() // what the database holds is unknown again
				l.log.Warn("writing start estimates failed", "err", err)
			}
		}
	}
}

// EstimatesPerWrite bounds the estimates the forecaster writes in one transaction. Each row
// written stays locked to the commit, and a pass that assigns one of those jobs waits for it:
// the forecast after a full read writes every queued job's estimate (25,000 at B8x's size, 2.6
// s), and the pass beside it waited 1.2 s for its assignments (29 Nov), the minute's p99.
const EstimatesPerWrite = 500

// writeForecast writes a forecast's estimates that moved (writeEstimates), at most
// EstimatesPerWrite jobs to a transaction, each proving the lease, and notes each part written
// as it commits. It returns how many jobs it wrote.
func (l *Loop) writeForecast(ctx context.Context, lead store.Leadership, plan scheduler.Plan, f forecastJob) (int, error) {
	tol := nearTolerance
	if f.far {
		tol = farTolerance
	}
	est, write := l.estimatesToWrite(plan, estimated(f.snap.Queued, plan, f.far), f.narrowed, f.snap.Now, tol)
	for part := range slices.Chunk(write, EstimatesPerWrite) {
		err := l.st.AsLeader(ctx, lead, func(tx *store.Store) error {
			return tx.SetStartEstimatesAmong(ctx, subEstimates(est, part), part)
		})
		if err != nil {
			return 0, err
		}
		l.recordWritten(est, part)
	}
	return len(write), nil
}
