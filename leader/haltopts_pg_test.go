package leader_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/opengpulab/gpulab/leader"
	"github.com/opengpulab/gpulab/scheduler"
)

// The master's halting options (--halt-factor, --halt-non-restartable) reach the planner's
// snapshot; unset, the planner's defaults apply.
func TestHaltOptionsReachThePlanner(t *testing.T) {
	w := newEstimateWorld(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, cfg := range []leader.Config{{}, {HaltFactor: 3, HaltNonRestartable: true}} {
		l := leader.NewLoop(w.st, cfg, log, scheduler.NewSignal(), scheduler.NewSignal())
		snap, err := l.Snapshot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if snap.HaltFactor != cfg.HaltFactor || snap.HaltNonRestartable != cfg.HaltNonRestartable {
			t.Errorf("config %+v gave the snapshot factor %g, non-restartable %v", cfg, snap.HaltFactor, snap.HaltNonRestartable)
		}
	}
}
