package leader

import (
	"testing"

	"github.com/opengpulab/gpulab/scheduler"
)

// The forecaster gets its own copy of a snapshot's running jobs: the next pass fills the same
// slice again (Loop.running) while the forecaster may still plan the one handed off; a full
// pass's queue is copied too. Only one forecast waits at a time.
func TestHandOffCopiesWhatTheNextPassReuses(t *testing.T) {
	l := &Loop{forecasts: make(chan forecastJob, 1)}
	running := []scheduler.Placed{{JobUUID: "a", SlaveName: "node1"}}
	queued := []scheduler.Job{{UUID: "q"}}
	if !l.handOff(scheduler.Snapshot{Running: running, Queued: queued}, false) {
		t.Fatal("nothing handed off to an idle forecaster")
	}
	if l.handOff(scheduler.Snapshot{Running: running, Queued: queued}, false) {
		t.Error("a second snapshot handed off while the first still waits")
	}
	f := <-l.forecasts
	running[0], queued[0] = scheduler.Placed{JobUUID: "b", SlaveName: "node2"}, scheduler.Job{UUID: "r"} // the next pass
	if got := f.snap.Running[0]; got.JobUUID != "a" || got.SlaveName != "node1" {
		t.Errorf("the forecaster's running job changed with the next pass: %+v", got)
	}
	if f.snap.Queued[0].UUID != "q" {
		t.Errorf("the forecaster's queue changed with the next pass: %+v", f.snap.Queued[0])
	}
}
