package scheduler

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
)

// TestMatchingGPUsShortcut: the count of matching GPUs a slave gives without looking at them
// (a job naming no model and no more memory than its smallest GPU) is the count looking at
// each GPU gives, free or not, on slaves of mixed models and memories (seeded).
func TestMatchingGPUsShortcut(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	models := []string{"V100-32GB", "A100-80GB", "RTX 2080 Ti"}
	mems := []int64{11264, 32768, 81920}
	var slaves []Slave
	for i := range 40 {
		s := Slave{Name: fmt.Sprintf("s%02d", i), Online: true, Accepting: true, CPUs: 16, MemoryGb: 64}
		for k := range rng.IntN(9) {
			m := rng.IntN(len(models))
			if rng.IntN(2) == 0 && k > 0 {
				m = 0
			}
			s.GPUs = append(s.GPUs, protocol.GPU{Index: k, UUID: fmt.Sprintf("GPU-%d-%d", i, k), Model: models[m], MemoryMiB: mems[m]})
		}
		slaves = append(slaves, s)
	}
	p := newPlanner(Snapshot{Slaves: slaves})
	for i := range p.slaves {
		st := p.slaves[i]
		for k := range st.gpuFree {
			if rng.IntN(3) == 0 {
				st.gpuFree[k] = false
				st.nFree--
			}
		}
	}
	checked := 0
	for range 500 {
		var res job.Resources
		res.GPUs = 1 + rng.IntN(4)
		if rng.IntN(4) == 0 {
			res.GPUModel = []string{[]string{"v100", "a100", "2080"}[rng.IntN(3)]}
		}
		if rng.IntN(3) == 0 {
			res.GPUMemoryGb = []int{8, 11, 16, 32, 80}[rng.IntN(5)]
		}
		n := p.needOf(&Job{Request: job.Request{Resources: res}})
		for _, st := range p.slaves {
			for _, free := range []bool{false, true} {
				want := 0
				for k := range st.gpus {
					if (!free || st.gpuFree[k]) && st.gpuOK(&n, k) {
						want++
					}
				}
				if got := st.matchingGPUs(&n, free); got != want {
					t.Fatalf("slave %s (GPUs %+v, free %v), need %+v, free only %v: %d matching, counted %d", st.s.Name, st.gpus, st.gpuFree, res, free, got, want)
				}
				checked++
			}
		}
	}
	t.Logf("%d counts compared", checked)
}
