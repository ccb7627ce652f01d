package scheduler

import (
	"time"
)

// Least attained service (PolicyLAS), after Tiresias (Gu et al., NSDI 2019): without knowing
// run times, a job that has received little GPU time is likely short, so it goes first and may
// halt jobs that have received much more. Attained service is counted in coarse levels, as
// Tiresias' discretised queues do, so that two jobs of similar age never halt each other back
// and forth: a victim must be at least one level above the starter. Ties within a level go to
// the older submission, which keeps long jobs from starving behind a stream of new ones.

// lasLevels are the upper bounds of the attained-service levels (GPU time): level 0 below the
// first, level len(lasLevels) beyond the last. A factor of 10 between levels, as in Tiresias'
// published configuration.
var lasLevels = []time.Duration{time.Hour, 10 * time.Hour, 100 * time.Hour}

// lasLevel is the level of an attained GPU time.
func lasLevel(a time.Duration) int {
	for i, b := range lasLevels {
		if a < b {
			return i
		}
	}
	return len(lasLevels)
}

// attained is a running job's attained GPU time now.
func (p *planner) attained(pl *Placed) time.Duration {
	if pl.Started.IsZero() {
		return pl.Attained
	}
	return pl.Attained + time.Duration(len(pl.GPUIndices))*p.now.Sub(pl.Started)
}

// LASLevel is the attained-service level PolicyLAS orders by, exported so that the simulator
// can pre-sort a long queue the way Plan will (sim.trim) without a copy of the levels.
func LASLevel(attained time.Duration) int { return lasLevel(attained) }
