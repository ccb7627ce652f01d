package web

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
)

// BenchmarkGrowStacks checks a heartbeat's body (job.CheckJSON, where a heartbeat's stack is
// deepest) in a new goroutine below frames standing in for the server's and the middleware's,
// as HTTP/2 runs each request, with and without growing the stack first (growStacks).
func BenchmarkGrowStacks(b *testing.B) {
	hb := protocol.Heartbeat{InstanceID: "3f9c2a7d11e04b6a", Accepting: true}
	for i := range 8 {
		hb.Jobs = append(hb.Jobs, protocol.RunningJob{JobUUID: fmt.Sprintf("5d7c3f0e-0000-4000-8000-%012d", i), Attempt: 1, Status: job.StatusRunning,
			Usage: &protocol.Usage{CPUPercent: 100.25, MemoryMiB: 2048, GPUs: []protocol.GPUUsage{{Index: i, UtilPercent: 87.5, MemoryUsedMiB: 30211}}}})
	}
	doc, err := json.Marshal(hb)
	if err != nil {
		b.Fatal(err)
	}
	lim := job.Limits{DocumentBytes: len(doc) + 1, StringBytes: 4096, ListItems: 1000}
	for _, grow := range []bool{false, true} {
		b.Run(fmt.Sprintf("grow=%v", grow), func(b *testing.B) {
			done := make(chan error)
			for b.Loop() {
				go func() {
					if grow {
						growStack()
					}
					done <- below(20, func() error { return job.CheckJSON(doc, lim) })
				}()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// below calls f under depth frames of 256 bytes each.
//
//go:noinline
func below(depth int, f func() error) error {
	var pad [256]byte
	keepFrame(pad[:])
	if depth == 0 {
		return f()
	}
	return below(depth-1, f)
}
