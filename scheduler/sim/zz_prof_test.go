package sim

import (
	"testing"

	"github.com/opengpulab/gpulab/scheduler"
)

func TestZZProf(t *testing.T) {
	jobs, _, _ := ReadTraceFile("/work/shared/traces/philly.csv", TraceOptions{Limit: 20000})
	r := Run(Config{Policy: scheduler.PolicyFIFO, Slaves: 60, GPUsPerSlave: 8}, jobs)
	t.Log(r.PlanCalls, r.Wall)
}
