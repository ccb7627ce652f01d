package leader

import (
	"maps"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/store"
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
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	e := explained{}
	first := map[string][]string{"a": {"waits for GPUs", "behind jobs"}, "b": {"waits"}}
	if news, refreshed := e.changed(first, now); !reflect.DeepEqual(news, first) || len(refreshed) != 0 {
		t.Fatalf("unknown jobs: news %v refreshed %v, want all news", news, refreshed)
	}
	e.record(first, now)
	second := map[string][]string{"a": {"waits for GPUs", "behind jobs"}, "b": {"waits", "longer"}, "c": {"new"}}
	if got, want := news(e, second, now), map[string][]string{"b": {"waits", "longer"}, "c": {"new"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("after a pass: %v, want %v", got, want)
	}
	// Lines are hashed apart: moving a word from one line to the next is a change.
	if got := news(e, map[string][]string{"a": {"waits for GPUs behind", "jobs"}}, now); len(got) != 1 {
		t.Errorf("lines split elsewhere count as unchanged")
	}
	e.forget(func(id string) bool { return id != "a" })
	if got := news(e, map[string][]string{"a": first["a"]}, now); len(got) != 1 {
		t.Errorf("a forgotten job's explanation is not sent again")
	}
}

func news(e explained, expl map[string][]string, now time.Time) map[string][]string {
	n, _ := e.changed(expl, now)
	return n
}

// An explanation whose details alone moved (a count, a time, a name: a word with a digit, or an
// aside in parentheses) is written again only ExplainDetailEvery after the last write, and as a
// refresh (no event); a change of reason is written at once, whenever the last write was.
func TestExplainedDetailsWaitTheirTurn(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	head := "needs 4 GPUs, at most 2 free on a slave (sim-0042)"
	held := "held back so that job 3f2a9c1b can start at 2026-12-12T08:59:00Z (it needs the room this job would take)"
	e := explained{}
	e.record(map[string][]string{"a": {head}, "b": {held}, "c": {head}}, t0)
	cases := []struct {
		name            string
		after           time.Duration
		expl            map[string][]string
		news, refreshed []string
	}{
		{"a count and a name move", time.Second,
			map[string][]string{"a": {"needs 4 GPUs, at most 3 free on a slave (sim-1234)"}}, nil, nil},
		{"another head job, another time", time.Second,
			map[string][]string{"b": {"held back so that job 9a0b1c2d can start at 2026-12-13T01:00:00Z (it needs the room this job would take)"}}, nil, nil},
		{"the aside changes", time.Second,
			map[string][]string{"b": {"held back so that job 3f2a9c1b can start at 2026-12-12T08:59:00Z (it waits)"}}, nil, nil},
		{"the same details a minute on", ExplainDetailEvery,
			map[string][]string{"a": {"needs 4 GPUs, at most 3 free on a slave (sim-1234)"}, "c": {head}}, nil, []string{"a"}},
		{"another reason", time.Second,
			map[string][]string{"a": {"needs 4 GPUs, none free on the 4999 slaves"}}, []string{"a"}, nil},
		{"several slaves have the most", time.Second,
			map[string][]string{"c": {"needs 4 GPUs, at most 2 free on a slave (37 slaves have 2)"}}, nil, nil},
		{"a line more", time.Second,
			map[string][]string{"c": {head, "expected start 2026-12-12T08:59:00Z when job 3f2a9c1b reaches its maxDuration"}}, []string{"c"}, nil},
		{"a word without a digit", time.Second,
			map[string][]string{"a": {"needs 4 GPUs, at most 2 free on a matching slave (sim-0042)"}}, []string{"a"}, nil},
	}
	for _, c := range cases {
		news, refreshed := e.changed(c.expl, t0.Add(c.after))
		if !slices.Equal(slices.Sorted(maps.Keys(news)), c.news) || !slices.Equal(slices.Sorted(maps.Keys(refreshed)), c.refreshed) {
			t.Errorf("%s: news %v, refreshed %v; want %v and %v", c.name, slices.Sorted(maps.Keys(news)), slices.Sorted(maps.Keys(refreshed)), c.news, c.refreshed)
		}
	}
	// A refresh restarts the wait.
	moved := map[string][]string{"a": {"needs 4 GPUs, at most 3 free on a slave (sim-1234)"}}
	e.record(moved, t0.Add(ExplainDetailEvery))
	back := map[string][]string{"a": {head}}
	if news, refreshed := e.changed(back, t0.Add(ExplainDetailEvery+time.Second)); len(news)+len(refreshed) != 0 {
		t.Errorf("written again a second after a refresh: %v %v", news, refreshed)
	}
	if _, refreshed := e.changed(back, t0.Add(2*ExplainDetailEvery)); len(refreshed) != 1 {
		t.Errorf("not refreshed a minute after the last refresh")
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

// TestRatiosOfWeighsTheLatest: a user's ratio for a class is weighed by recency from the latest
// ratios the store returns with it (scheduler.RecentRatio), the window's early end kept; the
// other groups are the window's as read.
func TestRatiosOfWeighsTheLatest(t *testing.T) {
	q := make([]float64, scheduler.RatioQuantiles+1)
	for k := range q {
		q[k] = 0.1
	}
	recent := make([]float64, 300)
	for i := range recent {
		recent[i] = 0.9
	}
	rows := []store.RunRatio{
		{UserID: 7, Class: 6, Jobs: 1000, Mid: 0.1, Q: q, Recent: recent},
		{UserID: 0, Class: 6, Jobs: 1000, Mid: 0.1, Q: q},
		{UserID: 0, Class: -1, Jobs: 1000, Mid: 0.1, Q: q},
	}
	r := ratiosOf(rows, RatioMinJobs)
	uc := r.UserClasses[scheduler.UserClass{UserID: 7, Class: 6}]
	if math.Abs(uc.Mid-0.9) > 1e-9 || uc.Low != 0.1 {
		t.Errorf("user 7's class: mid %.3f low %.3f, want his latest 0.9 and the window's low 0.1", uc.Mid, uc.Low)
	}
	if c := r.Classes[6]; c.Mid != 0.1 || r.Global.Mid != 0.1 {
		t.Errorf("class %.3f, global %.3f: want the window's 0.1", c.Mid, r.Global.Mid)
	}
}
