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
// the pass was narrowed (see writeEstimates).
type forecastJob struct {
	snap     scheduler.Snapshot
	narrowed bool
	at       time.Time // when the pass handed it off
}

// handOff gives the forecaster the snapshot a pass just planned, when it is not busy with the
// last one (the next pass tries again then). A pass's queue is the leader's memory (a full
// pass), which the next pass changes in place, or the narrowed plan's jobs, which the next
// narrowed plan fills again (narrowScratch), and the running jobs' slice is filled again by the
// next snapshot: the forecaster gets copies.
func (l *Loop) handOff(snap scheduler.Snapshot, narrowed bool) bool {
	if len(l.forecasts) == cap(l.forecasts) {
		return false // the last one still waits; passes are the only senders
	}
	snap.Queued = slices.Clone(snap.Queued)
	snap.Running = slices.Clone(snap.Running)
	snap.NoRanges, snap.Sweep, snap.Decide = false, 0, nil
	snap.ForecastWorkers = forecastWorkers(runtime.GOMAXPROCS(0))
	l.forecasts <- forecastJob{snap: snap, narrowed: narrowed, at: time.Now()}
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
			t := time.Now()
			plan := f.snap.Plan()
			planned := time.Since(t)
			t = time.Now()
			wrote, err := l.writeForecast(ctx, lead, plan, f)
			switch {
			case err == nil:
				l.log.Debug("forecast written", "plan", planned, "write", time.Since(t), "planned", len(f.snap.Queued),
					"ranges", len(plan.Ranges), "written", wrote, "after_pass", t.Sub(f.at))
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
	est, write := l.estimatesToWrite(plan, f.snap.Queued, f.narrowed, f.snap.Now)
	if write == nil {
		write = queuedIDs(f.snap.Queued)
	}
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
