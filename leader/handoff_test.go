package leader

import (
	"runtime"
	"testing"

	"github.com/opengpulab/gpulab/scheduler"
)

// The forecaster gets its own copy of a snapshot's running jobs: the next pass fills the same
// slice again (Loop.running) while the forecaster may still plan the one handed off; a pass's
// queue is copied too, a full pass's (the leader's memory) and a narrowed one's (the next
// narrowed plan fills it again: narrowScratch), and so is the whole queue a far forecast gets.
// Only one forecast waits at a time.
func TestHandOffCopiesWhatTheNextPassReuses(t *testing.T) {
	for _, c := range []struct{ narrowed, far bool }{{false, false}, {true, false}, {true, true}} {
		l := &Loop{forecasts: make(chan forecastJob, 1)}
		running := []scheduler.Placed{{JobUUID: "a", SlaveName: "node1"}}
		queued := []scheduler.Job{{UUID: "q"}}
		all := []scheduler.Job{{UUID: "q"}, {UUID: "w"}}
		if !l.handOff(scheduler.Snapshot{Running: running, Queued: queued}, all, c.narrowed, c.far) {
			t.Fatal("nothing handed off to an idle forecaster")
		}
		if l.handOff(scheduler.Snapshot{Running: running, Queued: queued}, all, c.narrowed, c.far) {
			t.Error("a second snapshot handed off while the first still waits")
		}
		f := <-l.forecasts
		running[0], queued[0], all[0] = scheduler.Placed{JobUUID: "b", SlaveName: "node2"}, scheduler.Job{UUID: "r"}, scheduler.Job{UUID: "r"} // the next pass
		if got := f.snap.Running[0]; got.JobUUID != "a" || got.SlaveName != "node1" {
			t.Errorf("%+v: the forecaster's running job changed with the next pass: %+v", c, got)
		}
		want, reach := 1, 0
		if c.far {
			want, reach = 2, FarForecastReach
		}
		if len(f.snap.Queued) != want || f.snap.Queued[0].UUID != "q" {
			t.Errorf("%+v: the forecaster's queue is %+v, want %d jobs from q (unchanged by the next pass)", c, f.snap.Queued, want)
		}
		if f.far != c.far || f.narrowed != (c.narrowed && !c.far) || f.snap.ForecastReach != reach {
			t.Errorf("%+v: handed off far %v, narrowed %v, reach %d", c, f.far, f.narrowed, f.snap.ForecastReach)
		}
	}
}

// The forecaster's replays leave a core to the handlers and the passes: all cores but one, and
// one on a machine of one or two.
func TestForecastLeavesACore(t *testing.T) {
	for procs, want := range map[int]int{1: 1, 2: 1, 3: 2, 16: 15} {
		if got := forecastWorkers(procs); got != want {
			t.Errorf("%d cores: %d replays at once, want %d", procs, got, want)
		}
	}
	l := &Loop{forecasts: make(chan forecastJob, 1)}
	l.handOff(scheduler.Snapshot{}, nil, false, false)
	if f := <-l.forecasts; f.snap.ForecastWorkers != forecastWorkers(runtime.GOMAXPROCS(0)) {
		t.Errorf("the forecaster's snapshot runs %d replays at once on %d cores", f.snap.ForecastWorkers, runtime.GOMAXPROCS(0))
	}
}
