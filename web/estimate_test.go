package web_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
)

// TestEstimateRangeShown: a queued job's estimated start range, as the scheduler stores it,
// is in the job JSON, in explain, on the job page and in the jobs list.
func TestEstimateRangeShown(t *testing.T) {
	p := newPortal(t)
	alice := p.m.AddUser("alice", false, "", "demo")
	id := p.submit(alice, jobDoc("waiter", projectURN("demo")))
	ctx := context.Background()
	// Today, so that the range reads as times only.
	day := time.Now().UTC().Truncate(24 * time.Hour)
	start, early, late := day.Add(14*time.Hour+40*time.Minute), day.Add(14*time.Hour+10*time.Minute), day.Add(15*time.Hour+30*time.Minute)
	if err := p.m.Store.SetStartEstimates(ctx, map[string]job.StartEstimate{id: {Start: start, Earliest: &early, Latest: &late}}); err != nil {
		t.Fatal(err)
	}
	const want = "likely 14:10–15:30"

	status, data, _ := p.m.Do(alice, "GET", v31+"/jobs/"+id+"/explain", nil)
	e := decode[struct {
		Reasons                []string
		EstimatedStart         *time.Time
		EstimatedStartEarliest *time.Time
		EstimatedStartLatest   *time.Time
	}](t, data)
	if status != 200 || e.EstimatedStart == nil || !e.EstimatedStart.Equal(start) || e.EstimatedStartEarliest == nil || !e.EstimatedStartEarliest.Equal(early) ||
		e.EstimatedStartLatest == nil || !e.EstimatedStartLatest.Equal(late) || !strings.Contains(strings.Join(e.Reasons, " "), want) {
		t.Errorf("explain: %d %s", status, data)
	}
	status, data, _ = p.m.Do(alice, "GET", v31+"/jobs/"+id, nil)
	if status != 200 || !strings.Contains(string(data), `"estimatedStartEarliest"`) || !strings.Contains(string(data), `"estimatedStartLatest"`) {
		t.Errorf("job JSON lacks the range: %d %s", status, data)
	}
	page := p.get(alice, "/jobs/"+id).expect(http.StatusOK)
	if got := textOf(page.one("data-testid", "job-estimate-range")); !strings.Contains(got, want) {
		t.Errorf("job page range %q, want %q", got, want)
	}
	list := p.get(alice, "/jobs").expect(http.StatusOK)
	if got := textOf(list.one("data-testid", "job-row-estimate")); got != want {
		t.Errorf("jobs list range %q, want %q", got, want)
	}

	// A pass without an estimate clears the range too.
	if err := p.m.Store.SetStartEstimates(ctx, map[string]job.StartEstimate{}); err != nil {
		t.Fatal(err)
	}
	if _, data, _ := p.m.Do(alice, "GET", v31+"/jobs/"+id, nil); strings.Contains(string(data), "estimatedStart") {
		t.Errorf("estimate not cleared: %s", data)
	}
}
