package scheduler

import (
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
)

// TestNoHalts: the option the simulator uses to measure the fair order without halting.
func TestNoHalts(t *testing.T) {
	s := Snapshot{Now: t0, Tallies: map[int64]float64{1: 1, 2: 10}, HaltNonRestartable: true,
		Slaves:  []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 1)...))},
		Running: []Placed{ran("heavy-1", "gpu1", 0, 2, 2*time.Hour, time.Hour)},
		Queued:  []Job{mkJob("light", 1, 1, 1, user(1))}}
	if p := s.Plan(); len(p.Halts) != 1 {
		t.Fatalf("halting on: halts %v, want one", p.Halts)
	}
	s.NoHalts = true
	if p := s.Plan(); len(p.Halts) != 0 {
		t.Fatalf("NoHalts: halts %v", p.Halts)
	}
}

// TestLAS: least attained service orders by level (then age) and halts only a job at least a
// level above the starter, whatever the owners' tallies.
func TestLAS(t *testing.T) {
	one := []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 1)...))}
	attained := func(d time.Duration) jobOpt { return func(j *Job) { j.Attained = d } }
	// Queue order: the new job (level 0) before the older one with 20 GPU-hours (level 2).
	s := Snapshot{Now: t0, Policy: PolicyLAS, HaltNonRestartable: true, Slaves: []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 2)...))},
		Queued: []Job{mkJob("old", 2, 1, 1, submitted(-time.Hour), attained(20*time.Hour)), mkJob("new", 2, 1, 1)}}
	if p := s.Plan(); len(p.Assignments) != 1 || p.Assignments[0].JobUUID != "new" {
		t.Fatalf("assignments %+v, want new first", p.Assignments)
	}
	for _, c := range []struct {
		name    string
		running Placed
		starter time.Duration
		halt    bool
	}{
		// Running 2 h on one GPU: level 1 (1 to 10 GPU-hours).
		{"a level-0 starter halts a level-1 job", ran("big", "gpu1", 0, 2, 2*time.Hour, time.Hour), 0, true},
		{"the same level does not halt", ran("big", "gpu1", 0, 2, 2*time.Hour, time.Hour), 90 * time.Minute, false},
		{"minDuration still holds", ran("big", "gpu1", 0, 2, 2*time.Hour, 3*time.Hour), 0, false},
		{"attained before the run counts", func() Placed {
			pl := ran("big", "gpu1", 0, 2, 5*time.Minute, 0)
			pl.Attained = 50 * time.Hour
			return pl
		}(), 2 * time.Hour, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := Snapshot{Now: t0, Policy: PolicyLAS, HaltNonRestartable: true, Tallies: map[int64]float64{1: 100}, Slaves: one,
				Running: []Placed{c.running}, Queued: []Job{mkJob("small", 1, 1, 1, user(1), attained(c.starter))}}
			p := s.Plan()
			if got := len(p.Halts) == 1; got != c.halt {
				t.Fatalf("halts %+v, want a halt: %v", p.Halts, c.halt)
			}
			if c.halt && (p.Halts[0].JobUUID != "big" || p.Halts[0].VictimScore <= p.Halts[0].StarterScore) {
				t.Fatalf("halt %+v: want big, at a higher level than the starter", p.Halts[0])
			}
		})
	}
}

// TestHaltOptions: HaltFactor asks the victim for that many times the starter's fair rank
// ((tally + 1) × hours of maxDuration (left); both 14 days here, so ranks go as tally + 1);
// SCORE halts spare non-restartable victims (unless HaltNonRestartable), except for
// interactive starters.
func TestHaltOptions(t *testing.T) {
	snap := func(victimTally float64, opts ...runningOpt) Snapshot {
		return Snapshot{Now: t0, Tallies: map[int64]float64{1: 1, 2: victimTally}, HaltNonRestartable: true,
			Slaves:  []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 1)...))},
			Running: []Placed{ran("heavy-1", "gpu1", 0, 2, 2*time.Hour, time.Hour, opts...)},
			Queued:  []Job{mkJob("light", 1, 1, 1, user(1))}}
	}
	for _, c := range []struct {
		name string
		s    Snapshot
		halt bool
	}{
		{"factor 2, victim 1.5 times", func() Snapshot { s := snap(2); s.HaltFactor = 2; return s }(), false},
		{"factor 2, victim 2 times", func() Snapshot { s := snap(3); s.HaltFactor = 2; return s }(), true},
		{"factor 0 is 2", snap(2), false},
		{"factor 1", func() Snapshot { s := snap(1.5); s.HaltFactor = 1; return s }(), true},
		{"restartable only, not restartable", func() Snapshot { s := snap(10); s.HaltNonRestartable = false; return s }(), false},
		{"restartable only, restartable", func() Snapshot { s := snap(10, restartable()); s.HaltNonRestartable = false; return s }(), true},
		{"restartable only, interactive starter", func() Snapshot {
			s := snap(10)
			s.HaltNonRestartable = false
			s.Queued[0].Request.Scheduling.Interactive = true
			return s
		}(), true},
	} {
		if got := len(c.s.Plan().Halts) == 1; got != c.halt {
			t.Errorf("%s: halt %v, want %v", c.name, got, c.halt)
		}
	}
}

// TestHaltShortJobOfHeavyUser: a SCORE halt compares fair ranks, a running job's by the
// maxDuration it has left: a heavy user's one-hour job halts a lighter user's job that has a
// week left, and not one that has an hour left.
func TestHaltShortJobOfHeavyUser(t *testing.T) {
	snap := func(left time.Duration) Snapshot {
		victim := ran("week-1", "gpu1", 0, 1, 2*time.Hour, time.Hour, restartable())
		victim.Ends = t0.Add(left)
		starter := mkJob("heavy-short", 1, 1, 1, user(2))
		starter.Request.Scheduling.MaxDuration = job.Duration(time.Hour)
		return Snapshot{Now: t0, Tallies: map[int64]float64{1: 1, 2: 9},
			Slaves:  []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 1)...))},
			Running: []Placed{victim}, Queued: []Job{starter}}
	}
	// Ranks: starter (9 + 1) × 1 = 10; victim (1 + 1) × 168 = 336, or 2 with an hour left.
	p := snap(168 * time.Hour).Plan()
	if len(p.Halts) != 1 || p.Halts[0].VictimScore != 1 || p.Halts[0].StarterScore != 9 {
		t.Fatalf("a week left: halts %+v, want week-1 halted (tallies 1 and 9 recorded)", p.Halts)
	}
	if why := p.Explanations["heavy-short"][0]; !strings.Contains(why, "times its maxDuration") {
		t.Fatalf("explanation %q does not say that the lengths decided", why)
	}
	if p := snap(time.Hour).Plan(); len(p.Halts) != 0 {
		t.Fatalf("an hour left: halts %+v, want none", p.Halts)
	}
}
