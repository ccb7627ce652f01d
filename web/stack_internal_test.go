package web

import (
	"fmt"
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/job"
)

// BenchmarkGrowStacks checks a heartbeat's body (job.CheckJSON, where a heartbeat's stack is
// deepest) in a new goroutine below frames standing in for the server's and the middleware's,
// as HTTP/2 runs each request, with and without growing the stack first (growStacks).
func BenchmarkGrowStacks(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"instanceId":"3f9c2a7d11e04b6a","jobs":[`)
	for i := range 8 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"jobUuid":"5d7c3f0e-0000-4000-8000-%012d","attempt":1,"status":"RUNNING",`+
			`"usage":{"cpuPercent":%d.25,"memoryMiB":%d,"gpus":[{"index":%d,"utilPercent":87.5,"memoryUsedMiB":30211}]}}`, i, 100+i, 2048*i, i)
	}
	sb.WriteString(`],"accepting":true}`)
	doc := []byte(sb.String())
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
