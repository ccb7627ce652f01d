package web_test

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestExplain(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	id := w.submit(t, w.alice, helloWorld, "")
	start := time.Date(2030, 1, 2, 14, 20, 0, 0, time.UTC)
	if err := w.m.Store.SetQueuedExplanations(ctx, map[string][]string{id: {"needs 1 GPUs, at most 0 free (gpu1)"}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.m.Store.SetEstimatedStarts(ctx, map[string]time.Time{id: start}); err != nil {
		t.Fatal(err)
	}
	status, data, _ := w.m.Do(w.alice, "GET", v31+"/jobs/"+id+"/explain", nil)
	e := decode[struct {
		Status         string
		Reasons        []string
		EstimatedStart *time.Time
	}](t, data)
	if status != 200 || e.Status != "QUEUED" || len(e.Reasons) != 1 || !strings.Contains(e.Reasons[0], "at most 0 free") ||
		e.EstimatedStart == nil || !e.EstimatedStart.Equal(start) {
		t.Fatalf("explain: %d %s", status, data)
	}
	// The job JSON carries the estimate too; a pass without one clears it.
	if _, j := w.get(t, w.alice, id); j["state"].(map[string]any)["scheduling"].(map[string]any)["estimatedStart"] == nil {
		t.Errorf("estimatedStart not in the job: %v", j["state"])
	}
	if err := w.m.Store.SetEstimatedStarts(ctx, map[string]time.Time{}); err != nil {
		t.Fatal(err)
	}
	_, data, _ = w.m.Do(w.alice, "GET", v31+"/jobs/"+id+"/explain", nil)
	if strings.Contains(string(data), "estimatedStart") {
		t.Errorf("estimate not cleared: %s", data)
	}
	w.m.Do(w.alice, "PUT", v31+"/jobs/"+id+"/state/status", strings.NewReader("ONHOLD"))
	_, data, _ = w.m.Do(w.alice, "GET", v31+"/jobs/"+id+"/explain", nil)
	if !strings.Contains(string(data), "on hold") {
		t.Errorf("explain of a held job: %s", data)
	}
	if status, _, _ := w.m.Do(w.bob, "GET", v31+"/jobs/"+id+"/explain", nil); status != 404 {
		t.Errorf("bob explains alice's job: %d", status)
	}
}
