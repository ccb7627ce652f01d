package sim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Rules fill the columns a trace lacks (maxDuration, minDuration, restartable, interactive) so
// that halting, restarts and interactive failures can be replayed at all. They are drawn from a
// seeded generator in trace order, so the same trace, rules and seed give the same workload.
type Rules struct {
	// Seed seeds the draws.
	Seed uint64
	// Restartable is the share of jobs (0..1) that checkpoint and may be restarted after a halt.
	Restartable float64
	// MinFraction sets minDuration (the time promised before any halt) to this fraction of
	// maxDuration, at least MinFloor.
	MinFraction float64
	// MinFloor is the shortest minDuration a job gets.
	MinFloor time.Duration
	// Interactive is the share of one-GPU jobs up to InteractiveMax long that are interactive
	// (a notebook someone works in: it fails when it cannot start, and is never halted).
	Interactive float64
	// InteractiveMax is the longest run time of an interactive job.
	InteractiveMax time.Duration
	// MaxDurationSteps, when set, replace the steps a run time is rounded up to for its
	// maxDuration (see Estimate); past the last, whole weeks.
	MaxDurationSteps []time.Duration
}

// DefaultRules are the documented rules the README's table uses.
var DefaultRules = Rules{Seed: 1, Restartable: 0.5, MinFraction: 0.1, MinFloor: 10 * time.Minute,
	Interactive: 0.05, InteractiveMax: 4 * time.Hour}

// roundUp is Estimate with other steps (sorted; none: Estimate's).
func roundUp(d time.Duration, steps []time.Duration) time.Duration {
	if len(steps) == 0 {
		return Estimate(d)
	}
	for _, s := range steps {
		if d <= s {
			return s
		}
	}
	week := 7 * 24 * time.Hour
	return (d + week - 1) / week * week
}

// String states the rules, for the simulate command's output.
func (r Rules) String() string {
	steps := "1h/2h/4h/8h/1d/2d/1w/2w"
	if len(r.MaxDurationSteps) > 0 {
		var ss []string
		for _, s := range r.MaxDurationSteps {
			ss = append(ss, s.String())
		}
		steps = strings.Join(ss, "/")
	}
	return fmt.Sprintf("seed %d; maxDuration = run time rounded up to "+steps+" (then whole weeks); "+
		"minDuration = max(%s, %.0f %% of maxDuration); %.0f %% of jobs restartable; "+
		"%.0f %% of one-GPU jobs of at most %s interactive",
		r.Seed, r.MinFloor, 100*r.MinFraction, 100*r.Restartable, 100*r.Interactive, r.InteractiveMax)
}

// Assign returns a copy of jobs with the missing settings filled by the rules. Every job draws
// the same two numbers whatever its size, so changing one share does not reshuffle the others.
func Assign(jobs []TraceJob, r Rules) []TraceJob {
	rng := rand.New(rand.NewPCG(r.Seed, 0x9e3779b97f4a7c15))
	out := make([]TraceJob, len(jobs))
	for i, j := range jobs {
		pr, pi := rng.Float64(), rng.Float64()
		if j.MaxDuration == 0 {
			j.MaxDuration = roundUp(j.Duration, r.MaxDurationSteps)
		}
		if j.MinDuration == 0 {
			j.MinDuration = min(j.MaxDuration, max(r.MinFloor, time.Duration(r.MinFraction*float64(j.MaxDuration)).Round(time.Second)))
		}
		j.Restartable = pr < r.Restartable
		j.Interactive = j.GPUs == 1 && j.Duration <= r.InteractiveMax && pi < r.Interactive
		out[i] = j
	}
	return out
}
