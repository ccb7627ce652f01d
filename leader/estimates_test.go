package leader

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
)

// TestWrittenEstimates: an estimate is written again when it is unknown, appears, disappears,
// or moves (its start or either end of its range) by the tolerance or more; not when it moves
// less.
func TestWrittenEstimates(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { x := t0.Add(d); return &x }
	est := func(start, early, late time.Duration) job.StartEstimate {
		return job.StartEstimate{Start: t0.Add(start), Earliest: at(early), Latest: at(late)}
	}
	w := written{}
	first := map[string]job.StartEstimate{"a": est(time.Hour, 0, 2*time.Hour), "b": {Start: t0}}
	if got := w.changed(first, []string{"a", "b", "c"}); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("unknown jobs: %v, want all three written", got)
	}
	w.record(first, []string{"a", "b", "c"})
	if got := w.changed(first, []string{"a", "b", "c"}); len(got) != 0 {
		t.Fatalf("nothing moved: %v written", got)
	}
	small := time.Minute - time.Second
	cases := []struct {
		name string
		next map[string]job.StartEstimate
		want []string
	}{
		{"a moves less than the tolerance", map[string]job.StartEstimate{"a": est(time.Hour+small, small, 2*time.Hour-small), "b": {Start: t0}}, []string{}},
		{"a's start moves a minute", map[string]job.StartEstimate{"a": est(time.Hour+time.Minute, 0, 2*time.Hour), "b": {Start: t0}}, []string{"a"}},
		{"a's latest moves", map[string]job.StartEstimate{"a": est(time.Hour, 0, 3*time.Hour), "b": {Start: t0}}, []string{"a"}},
		{"b gains a range", map[string]job.StartEstimate{"a": est(time.Hour, 0, 2*time.Hour), "b": {Start: t0, Earliest: at(0), Latest: at(time.Hour)}}, []string{"b"}},
		{"b loses its estimate, c gains one", map[string]job.StartEstimate{"a": est(time.Hour, 0, 2*time.Hour), "c": {Start: t0}}, []string{"b", "c"}},
	}
	for _, c := range cases {
		if got := w.changed(c.next, []string{"a", "b", "c"}); !slices.Equal(got, c.want) {
			t.Errorf("%s: written %v, want %v", c.name, got, c.want)
		}
	}
	w.forget(func(id string) bool { return id != "a" })
	if got := w.changed(first, []string{"a", "b"}); !slices.Equal(got, []string{"a"}) {
		t.Errorf("a forgotten (it left the queue): %v, want it written again", got)
	}
}

// A pass sends only the explanations that changed since this term wrote them, and all of a job
// it does not know (new, forgotten, or after a failed write).
func TestExplainedSendsOnlyChanges(t *testing.T) {
	e := explained{}
	first := map[string][]string{"a": {"waits for 2 GPUs", "behind 3 jobs"}, "b": {"waits"}}
	if got := e.changed(first); !reflect.DeepEqual(got, first) {
		t.Fatalf("unknown jobs: %v, want all", got)
	}
	e.record(first)
	second := map[string][]string{"a": {"waits for 2 GPUs", "behind 3 jobs"}, "b": {"waits", "longer"}, "c": {"new"}}
	if got, want := e.changed(second), map[string][]string{"b": {"waits", "longer"}, "c": {"new"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("after a pass: %v, want %v", got, want)
	}
	// Lines are hashed apart: moving a word from one line to the next is a change.
	if got := e.changed(map[string][]string{"a": {"waits for 2", "GPUs behind 3 jobs"}}); len(got) != 1 {
		t.Errorf("lines split elsewhere count as unchanged")
	}
	e.forget(func(id string) bool { return id != "a" })
	if got := e.changed(map[string][]string{"a": first["a"]}); len(got) != 1 {
		t.Errorf("a forgotten job's explanation is not sent again")
	}
}

// After a slow pass the loop rests so that slow passes take at most MaxBusy of the time.
func TestRestAfter(t *testing.T) {
	for _, c := range []struct {
		took    time.Duration
		maxBusy float64
		want    time.Duration
	}{
		{100 * time.Millisecond, 0.5, 100 * time.Millisecond},
		{300 * time.Millisecond, 0.2, 1200 * time.Millisecond},
		{300 * time.Millisecond, 0, 0},
		{300 * time.Millisecond, 1, 0},
		{QuickPass - time.Millisecond, 0.2, 0}, // a quick pass never rests
		{0, 0.5, 0},
	} {
		if got := restAfter(c.took, c.maxBusy); got != c.want {
			t.Errorf("restAfter(%s, %g) = %s, want %s", c.took, c.maxBusy, got, c.want)
		}
	}
}
