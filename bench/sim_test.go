package bench

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/scheduler/sim"
)

// runB7 replays the whole Philly trace through the simulator (the library behind `gpulab-master
// simulate`) for each policy. The goal's shape holds every job: 5 slaves × 128 GPUs (the trace's
// largest job needs 128; the same 640 GPUs as simulate's default 80 × 8). The default shape is
// replayed too, for the record of what it drops.
func runB7(t *testing.T, rep *report, sz sizes) {
	if _, err := os.Stat(sz.b7Trace); err != nil {
		t.Skipf("trace %s not found (GPULAB_BENCH_TRACE names another): %v", sz.b7Trace, err)
	}
	start := time.Now()
	jobs, st, err := sim.ReadTraceFile(sz.b7Trace, sim.TraceOptions{Limit: sz.b7Limit})
	if err != nil {
		t.Fatal(err)
	}
	read := time.Since(start)
	largest := 0
	for _, j := range jobs {
		largest = max(largest, j.GPUs)
	}
	rep.note("B7", "trace %s: %d rows, %d malformed skipped, %d jobs (largest %d GPUs), read in %s", sz.b7Trace, st.Rows, st.Malformed, st.Kept, largest, secs(read))
	shapes := []struct {
		slaves, gpus int
		goal         bool
	}{{640 / max(largest, 1), max(largest, 1), true}, {80, 8, false}}
	if sz.smoke {
		shapes = []struct {
			slaves, gpus int
			goal         bool
		}{{4, max(largest, 1), true}}
	}
	for _, shape := range shapes {
		for _, p := range []scheduler.Policy{scheduler.PolicyFair, scheduler.PolicyFIFO, scheduler.PolicySJFOracle} {
			r := sim.Run(sim.Config{Policy: p, Slaves: shape.slaves, GPUsPerSlave: shape.gpus}, slices.Clone(jobs))
			m := r.Metrics
			res := result{Scenario: "B7", Measure: fmt.Sprintf("replay %s, %d × %d GPUs: %d jobs run, %d dropped", p, shape.slaves, shape.gpus, m.Jobs, r.Dropped),
				Value: secs(r.Wall)}
			if shape.goal {
				res.Goal = "≤ 30 s, all jobs"
				res.Met = met(r.Wall <= 30*time.Second && r.Dropped == 0 && m.Jobs == len(jobs))
			}
			rep.add(res)
			rep.note("B7", "%s on %d × %d: %d Plan calls (%.0f µs each), avg JCT %.0f s, p99 wait %.0f s, GPU util %.1f %%, failed %d, stuck %d",
				p, shape.slaves, shape.gpus, r.PlanCalls, float64(r.Wall.Microseconds())/float64(max(r.PlanCalls, 1)), m.AvgJCT.Seconds(),
				m.P99Wait.Seconds(), 100*m.Utilisation, r.Failed, r.Stuck)
		}
	}
}
