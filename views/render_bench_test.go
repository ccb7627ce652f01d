package views

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/opengpulab/gpulab/job"
)

// BenchmarkJobsPage renders the Jobs page as B4's portal read gets it: 25 ended jobs of the
// viewer, each with its actions. The page's rows were 40 % of the master's CPU in B4.
func BenchmarkJobsPage(b *testing.B) {
	v := JobsView{Chrome: chrome(false, NavJobs), Query: JobsQuery{Scope: "mine"},
		Projects: []Choice{{"demo", "demo"}, {"ml", "ml"}}, Clusters: []Choice{{"1", "1 – local"}}, More: true}
	for i := range 25 {
		st := []job.Status{job.StatusFinished, job.StatusFailed, job.StatusCancelled}[i%3]
		j := testJob(fmt.Sprintf("%08x-0000-4000-8000-000000000000", i), fmt.Sprintf("sweep-%d", i), st)
		v.Rows = append(v.Rows, JobRow{Job: j, Full: true, CanTouch: true, User: "alice", Project: "demo"})
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := JobsPage(v).Render(ctx, io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}
