package sim

import (
	"reflect"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/scheduler"
)

// haltCfg is one slave with one GPU under the fair order with halting.
var haltCfg = Config{Policy: scheduler.PolicyFair, Halting: true, Slaves: 1, GPUsPerSlave: 1}

// heavyLight: heavy's 10-hour job (minDuration 1h) holds the only GPU when light's one-hour
// job arrives at 2h; light's tally is 0, so Plan halts heavy's job.
func heavyLight(restartable bool, minDur time.Duration) []TraceJob {
	a := tj(0, 10*time.Hour, 1, "heavy")
	a.MinDuration, a.Restartable = minDur, restartable
	return []TraceJob{a, tj(2*time.Hour, time.Hour, 1, "light")}
}

func TestHaltRestartable(t *testing.T) {
	r := Run(haltCfg, heavyLight(true, time.Hour))
	g := DefaultHaltGrace
	if r.Halts != 1 || r.HaltedEarly != 0 || r.Lost != 0 || len(r.Outcomes) != 2 || r.GraceGPUTime != g {
		t.Fatalf("halts %d early %d lost %d outcomes %d grace %s", r.Halts, r.HaltedEarly, r.Lost, len(r.Outcomes), r.GraceGPUTime)
	}
	heavy, light := r.Outcomes[0], r.Outcomes[1]
	// Light starts once heavy has stopped, a grace after the halt; heavy comes back when light
	// ends, with the 8 hours its checkpoint at 2h left: the grace is the only loss.
	if light.Start != t0.Add(2*time.Hour+g) || light.End != t0.Add(3*time.Hour+g) {
		t.Fatalf("light ran %s..%s", light.Start.Sub(t0), light.End.Sub(t0))
	}
	if heavy.Start != t0 || heavy.End != t0.Add(11*time.Hour+g) || heavy.Halts != 1 || heavy.Held != 10*time.Hour+g {
		t.Fatalf("heavy ran %s..%s, %d halts, held %s", heavy.Start.Sub(t0), heavy.End.Sub(t0), heavy.Halts, heavy.Held)
	}
	if m := r.Metrics; m.HaltsPerJob != 0.5 || m.Utilisation != 1 {
		t.Fatalf("halts per job %v, utilisation %v", m.HaltsPerJob, m.Utilisation)
	}
}

// TestRestartMaxDuration: the restart's maxDuration is reduced by the time run, as
// job.RestartOf does, so a job halted with less than a minute of it left is not restarted.
func TestRestartMaxDuration(t *testing.T) {
	jobs := heavyLight(true, time.Hour)
	jobs[0].Duration = 2*time.Hour + 10*time.Second // ends within the grace
	jobs[0].MaxDuration = 10 * time.Hour
	r := Run(haltCfg, jobs)
	if r.Halts != 1 || r.Lost != 0 || len(r.Outcomes) != 2 || r.Outcomes[0].End != t0.Add(jobs[0].Duration) {
		t.Fatalf("a job ending within its grace: halts %d lost %d outcomes %+v", r.Halts, r.Lost, r.Outcomes)
	}
	jobs[0].Duration = 3 * time.Hour // 1h of work left, but 45 s of maxDuration
	jobs[0].MaxDuration = 2*time.Hour + time.Minute
	// A job with a minute of maxDuration left ranks far below a one-hour job (FairRank), so it
	// is halted only for an interactive starter.
	jobs[1].Interactive = true
	r = Run(haltCfg, jobs)
	if r.Lost != 1 || len(r.Outcomes) != 1 || r.LostGPUTime != 2*time.Hour+DefaultHaltGrace {
		t.Fatalf("too little maxDuration left: lost %d (%s), outcomes %d", r.Lost, r.LostGPUTime, len(r.Outcomes))
	}
}

func TestHaltNonRestartable(t *testing.T) {
	r := Run(haltCfg, heavyLight(false, time.Hour))
	if r.Halts != 1 || r.Lost != 1 || r.GraceGPUTime != 0 || len(r.Outcomes) != 1 || r.Outcomes[0].Job.User != "light" {
		t.Fatalf("halts %d lost %d grace %s outcomes %+v", r.Halts, r.Lost, r.GraceGPUTime, r.Outcomes)
	}
	// Everything heavy ran, its grace included, is lost.
	if want := 2*time.Hour + DefaultHaltGrace; r.LostGPUTime != want {
		t.Fatalf("lost GPU time %s, want %s", r.LostGPUTime, want)
	}
}

// TestNoHaltBeforeMinDuration: with a 5-hour minDuration, light waits until heavy's promise
// is kept; the simulator plans again at that instant, so the halt comes then, not later.
func TestNoHaltBeforeMinDuration(t *testing.T) {
	r := Run(haltCfg, heavyLight(true, 5*time.Hour))
	if r.Halts != 1 || r.HaltedEarly != 0 {
		t.Fatalf("halts %d, early %d", r.Halts, r.HaltedEarly)
	}
	if got := r.Outcomes[1].Start; got != t0.Add(5*time.Hour+DefaultHaltGrace) {
		t.Fatalf("light started at %s, want 5h + grace", got.Sub(t0))
	}
	// Without halting light waits for heavy's end.
	cfg := haltCfg
	cfg.Halting = false
	if r := Run(cfg, heavyLight(true, 5*time.Hour)); r.Halts != 0 || r.Outcomes[1].Start != t0.Add(10*time.Hour) {
		t.Fatalf("no halting: %d halts, light at %s", r.Halts, r.Outcomes[1].Start.Sub(t0))
	}
}

// TestInteractiveFails: an interactive job that cannot start fails at once; one that can, runs.
func TestInteractiveFails(t *testing.T) {
	busy := tj(0, 10*time.Hour, 1, "a")
	busy.MinDuration = 20 * time.Hour
	note := tj(time.Hour, time.Hour, 1, "b")
	note.Interactive = true
	for _, p := range []scheduler.Policy{scheduler.PolicyFIFO, scheduler.PolicyFair} {
		r := Run(Config{Policy: p, Halting: true, Slaves: 1, GPUsPerSlave: 1}, []TraceJob{busy, note})
		if r.InteractiveFailed != 1 || r.Failed != 0 || len(r.Outcomes) != 1 {
			t.Fatalf("%s: interactive failed %d, failed %d, outcomes %d", p, r.InteractiveFailed, r.Failed, len(r.Outcomes))
		}
		r = Run(Config{Policy: p, Slaves: 2, GPUsPerSlave: 1}, []TraceJob{busy, note})
		if r.InteractiveFailed != 0 || len(r.Outcomes) != 2 {
			t.Fatalf("%s with room: interactive failed %d, outcomes %d", p, r.InteractiveFailed, len(r.Outcomes))
		}
	}
}

// TestSeeded: the assignment rules are reproducible from the seed and follow their shares; a
// replay with halting is deterministic, and never halts a job before its minDuration.
func TestSeeded(t *testing.T) {
	var jobs []TraceJob
	x := uint32(11)
	for i := range 2000 {
		x = x*1664525 + 1013904223
		jobs = append(jobs, tj(time.Duration(i)*time.Minute, time.Duration(x>>16%20000+1)*time.Second, []int{1, 1, 2, 4}[x>>30], string(rune('a'+x>>8%5))))
	}
	rules := DefaultRules
	t.Logf("rules: %s", rules)
	a, b := Assign(jobs, rules), Assign(jobs, rules)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different assignments")
	}
	rules.Seed++
	if reflect.DeepEqual(a, Assign(jobs, rules)) {
		t.Fatal("another seed, same assignments")
	}
	restartable, interactive := 0, 0
	for _, j := range a {
		if j.Restartable {
			restartable++
		}
		if j.Interactive {
			interactive++
			if j.GPUs != 1 || j.Duration > rules.InteractiveMax {
				t.Fatalf("interactive job %+v outside the rule", j)
			}
		}
		if j.MaxDuration != Estimate(j.Duration) || j.MinDuration != min(j.MaxDuration, max(rules.MinFloor, j.MaxDuration/10)) {
			t.Fatalf("durations of %+v", j)
		}
	}
	if restartable < 900 || restartable > 1100 || interactive == 0 {
		t.Fatalf("%d restartable, %d interactive of 2000", restartable, interactive)
	}
	for _, p := range []scheduler.Policy{scheduler.PolicyFair, scheduler.PolicyLAS} {
		cfg := Config{Policy: p, Halting: true, Slaves: 4, GPUsPerSlave: 8}
		r1, r2 := Run(cfg, a[:600]), Run(cfg, a[:600])
		r1.Wall, r2.Wall = 0, 0
		if !reflect.DeepEqual(r1, r2) {
			t.Fatalf("%s: two runs differ", p)
		}
		if r1.Halts == 0 || r1.HaltedEarly != 0 {
			t.Fatalf("%s: %d halts, %d before minDuration", p, r1.Halts, r1.HaltedEarly)
		}
		t.Logf("%s: %d halts, %d lost, %d interactive failed", p, r1.Halts, r1.Lost, r1.InteractiveFailed)
	}
}
