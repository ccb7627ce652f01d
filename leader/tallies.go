package leader

import (
	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/store"
)

// heldWeights is what the running jobs add to their owners' tallies per hour
// (store.TallyWeights.Weight of the GPUs, CPUs and memory each holds), by user: what the
// tallies' accrual sums from the jobs' rows (store.AccrueTallies), from the leader's memory. A
// job that ended but whose resources its slave has not yet released (Placed.Releasing) counts
// no more, as it no longer does there.
func heldWeights(running []scheduler.Placed, w store.TallyWeights) map[int64]float64 {
	out := map[int64]float64{}
	for i := range running {
		p := &running[i]
		if !p.Releasing {
			out[p.UserID] += w.Weight(len(p.GPUIndices), len(p.CPUIDs), p.MemoryGb)
		}
	}
	return out
}
