package leader

import (
	"context"
	"errors"
	"time"

	"github.com/opengpulab/gpulab/store"
)

// explainBatch is what one pass tells its waiting jobs (explained.changed): news, written with
// an event each; refreshed, without.
type explainBatch struct {
	news, refreshed map[string][]string
}

// explainer writes the passes' explanations of the waiting jobs (explainInParts), off the
// passes, in the order the passes made them, for as long as this term lasts. Written by the
// pass itself, after its assignments, they were the pass's third-longest step in B8x (5,000
// slaves, 25,000 queued: p50 15–19 ms, p99 114–120 ms, 14 % of the passes' time; 3 Dec), and
// the next pass waited for them. They go to job_waits and job_events, whose rows an assignment
// does not wait for (it leaves a job_waits row being written, as it does the forecaster's,
// for retention to delete), and their statement writes only jobs still QUEUED at its start:
// a batch a later pass overtook by assigning its job writes nothing for it. A failed batch
// (explainLost) makes the next pass write every explanation again, as a pass's own failed
// write did.
func (l *Loop) explainer(ctx context.Context, lead store.Leadership, in <-chan explainBatch) {
	write := l.explainInParts
	if l.writeExplanations != nil {
		write = l.writeExplanations
	}
	for {
		select {
		case <-ctx.Done():
			return
		case b := <-in:
			t := time.Now()
			err := write(ctx, lead, b.news, b.refreshed)
			switch {
			case err == nil:
				l.log.Debug("explanations written", "news", len(b.news), "refreshed", len(b.refreshed), "took", time.Since(t))
			case ctx.Err() != nil:
				return
			case errors.Is(err, store.ErrNotLeader):
				// The term is over; its passes see it too and end it (and this goroutine).
			default:
				l.explainLost.Store(true)
				l.log.Warn("writing the waiting jobs' explanations failed; the next pass writes them all again", "err", err)
			}
		}
	}
}

// explain hands a pass's explanations to the explainer. It waits only while the last pass's
// are still waiting for it (the explainer writes another's): no pass's explanations are
// dropped or merged into another's, whose events would be lost.
func (l *Loop) explain(ctx context.Context, b explainBatch) error {
	select {
	case l.explains <- b:
		return nil
	default:
	}
	t := time.Now()
	select {
	case l.explains <- b:
		l.timed("explanations waited", t)
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
