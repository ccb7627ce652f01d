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
// less. Seen at a's start: a minute for it and its earliest, six for its latest an hour ahead.
func TestWrittenEstimates(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	now := t0.Add(time.Hour)
	at := func(d time.Duration) *time.Time { x := t0.Add(d); return &x }
	est := func(start, early, late time.Duration) job.StartEstimate {
		return job.StartEstimate{Start: t0.Add(start), Earliest: at(early), Latest: at(late)}
	}
	w := written{}
	first := map[string]job.StartEstimate{"a": est(time.Hour, 0, 2*time.Hour), "b": {Start: t0}}
	if got := w.changed(first, []string{"a", "b", "c"}, now, nearTolerance); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("unknown jobs: %v, want all three written", got)
	}
	w.record(first, []string{"a", "b", "c"})
	if got := w.changed(first, []string{"a", "b", "c"}, now, nearTolerance); len(got) != 0 {
		t.Fatalf("nothing moved: %v written", got)
	}
	small := time.Minute - time.Second
	cases := []struct {
		name string
		next map[string]job.StartEstimate
		want []string
	}{
		{"a moves less than the tolerance", map[string]job.StartEstimate{"a": est(time.Hour+small, small, 2*time.Hour-5*time.Minute), "b": {Start: t0}}, []string{}},
		{"a's start moves a minute", map[string]job.StartEstimate{"a": est(time.Hour+time.Minute, 0, 2*time.Hour), "b": {Start: t0}}, []string{"a"}},
		{"a's latest moves", map[string]job.StartEstimate{"a": est(time.Hour, 0, 3*time.Hour), "b": {Start: t0}}, []string{"a"}},
		{"a's latest moves a tenth of an hour", map[string]job.StartEstimate{"a": est(time.Hour, 0, 2*time.Hour+6*time.Minute), "b": {Start: t0}}, []string{"a"}},
		{"b gains a range", map[string]job.StartEstimate{"a": est(time.Hour, 0, 2*time.Hour), "b": {Start: t0, Earliest: at(0), Latest: at(time.Hour)}}, []string{"b"}},
		{"b loses its estimate, c gains one", map[string]job.StartEstimate{"a": est(time.Hour, 0, 2*time.Hour), "c": {Start: t0}}, []string{"b", "c"}},
	}
	for _, c := range cases {
		if got := w.changed(c.next, []string{"a", "b", "c"}, now, nearTolerance); !slices.Equal(got, c.want) {
			t.Errorf("%s: written %v, want %v", c.name, got, c.want)
		}
	}
	w.forget(func(id string) bool { return id != "a" })
	if got := w.changed(first, []string{"a", "b"}, now, nearTolerance); !slices.Equal(got, []string{"a"}) {
		t.Errorf("a forgotten (it left the queue): %v, want it written again", got)
	}
}

// TestWrittenEstimatesFarAhead: an estimate hours ahead is written again only when it moves by
// a tenth of how far ahead it lies (EstimateShare), the nearer of its two times counting, and
// as its start comes near the tolerance narrows to the minute.
func TestWrittenEstimatesFarAhead(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { x := t0.Add(d); return &x }
	est := func(start, early, late time.Duration) map[string]job.StartEstimate {
		return map[string]job.StartEstimate{"f": {Start: t0.Add(start), Earliest: at(early), Latest: at(late)}}
	}
	w := written{}
	w.record(est(10*time.Hour, 8*time.Hour, 20*time.Hour), []string{"f"})
	cases := []struct {
		name  string
		after time.Duration // from t0 to when the forecast is seen
		next  map[string]job.StartEstimate
		write bool
	}{
		{"each moves less than a tenth of its distance", 0, est(10*time.Hour+59*time.Minute, 8*time.Hour-40*time.Minute, 20*time.Hour+119*time.Minute), false},
		{"the start moves by more than a tenth", 0, est(11*time.Hour+time.Minute, 8*time.Hour, 20*time.Hour), true},
		{"the earliest moves by a tenth of its own distance", 0, est(10*time.Hour, 8*time.Hour+49*time.Minute, 20*time.Hour), true},
		{"the start brought to half its distance", 0, est(5*time.Hour, 5*time.Hour, 20*time.Hour), true},
		{"the start later by 58 minutes", 0, est(10*time.Hour+58*time.Minute, 8*time.Hour, 20*time.Hour), false},
		{"the start sooner by 58 minutes, a tenth of its new distance", 0, est(9*time.Hour+2*time.Minute, 8*time.Hour, 20*time.Hour), true},
		{"nine and a half hours on, the same move of five minutes", 9*time.Hour + 30*time.Minute, est(10*time.Hour+5*time.Minute, 8*time.Hour, 20*time.Hour), true},
		{"nine and a half hours on, a move of two minutes", 9*time.Hour + 30*time.Minute, est(10*time.Hour+2*time.Minute, 8*time.Hour, 20*time.Hour), false},
		{"past its start, a move of a minute", 11 * time.Hour, est(10*time.Hour+time.Minute, 8*time.Hour, 20*time.Hour), true},
	}
	for _, c := range cases {
		if got := w.changed(c.next, []string{"f"}, t0.Add(c.after), nearTolerance); (len(got) == 1) != c.write {
			t.Errorf("%s: written %v, want written %v", c.name, got, c.write)
		}
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
	e.record(first, now, true)
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

// An explanation whose details alone moved (a count, a time, a name: a word with a digit, an
// aside in parentheses, or how much of what a job needs is free where) is written again only
// ExplainDetailEvery after the last write, and as a refresh (no event); a change of reason is
// written at once, whenever the last write was.
func TestExplainedDetailsWaitTheirTurn(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	head := "needs 4 GPUs, at most 2 free on a slave (sim-0042)"
	held := "held back so that job 3f2a9c1b can start at 2026-12-12T08:59:00Z (it needs the room this job would take)"
	e := explained{}
	e.record(map[string][]string{"a": {head}, "b": {held}, "c": {head}}, t0, true)
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
		{"none free rather than a few", time.Second,
			map[string][]string{"a": {"needs 4 GPUs, none free on the 4999 slaves"}}, nil, nil},
		{"another reason", time.Second,
			map[string][]string{"a": {"needs 16 CPUs, at most 6 free (sim-0042)"}}, []string{"a"}, nil},
		{"held back rather than short", time.Second,
			map[string][]string{"a": {held}}, []string{"a"}, nil},
		{"several slaves have the most", time.Second,
			map[string][]string{"c": {"needs 4 GPUs, at most 2 free on a slave (37 slaves have 2)"}}, nil, nil},
		{"a line more", time.Second,
			map[string][]string{"c": {head, "expected start 2026-12-12T08:59:00Z when job 3f2a9c1b reaches its maxDuration"}}, []string{"c"}, nil},
		{"a word without a digit", time.Second,
			map[string][]string{"a": {"needs 4 GPUs matching A100, at most 2 free on a matching slave (sim-0042)"}}, []string{"a"}, nil},
	}
	for _, c := range cases {
		news, refreshed := e.changed(c.expl, t0.Add(c.after))
		if !slices.Equal(slices.Sorted(maps.Keys(news)), c.news) || !slices.Equal(slices.Sorted(maps.Keys(refreshed)), c.refreshed) {
			t.Errorf("%s: news %v, refreshed %v; want %v and %v", c.name, slices.Sorted(maps.Keys(news)), slices.Sorted(maps.Keys(refreshed)), c.news, c.refreshed)
		}
	}
	// A refresh restarts the wait.
	moved := map[string][]string{"a": {"needs 4 GPUs, at most 3 free on a slave (sim-1234)"}}
	e.record(moved, t0.Add(ExplainDetailEvery), false)
	back := map[string][]string{"a": {head}}
	if news, refreshed := e.changed(back, t0.Add(ExplainDetailEvery+time.Second)); len(news)+len(refreshed) != 0 {
		t.Errorf("written again a second after a refresh: %v %v", news, refreshed)
	}
	if _, refreshed := e.changed(back, t0.Add(2*ExplainDetailEvery)); len(refreshed) != 1 {
		t.Errorf("not refreshed a minute after the last refresh")
	}
}

// A job whose reason goes back and forth between two (held back for the backfill head, then
// short of GPUs when the next head's slave has none free) has the reason written each time,
// with an event for each of the two and again only once ReasonBackWithin has passed since the
// last; a third reason is an event at once.
func TestExplainedReasonsBackAndForth(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)
	short := []string{"needs 1 GPU, none free on the 5000 slaves"}
	held := []string{"held back so that job 3f2a9c1b can start at 2026-12-14T01:02:29Z (it needs the room this job would take)"}
	other := []string{"needs 1 GPU, none free on the 5000 slaves", "3 more matching slaves are offline (sim-1, sim-2, sim-3)"}
	e := explained{}
	at := t0
	// step writes lines at t0+after as a pass would, and says how: "news", "refreshed" or "".
	step := func(after time.Duration, lines []string) string {
		at = t0.Add(after)
		news, refreshed := e.changed(map[string][]string{"j": lines}, at)
		e.record(news, at, true)
		e.record(refreshed, at, false)
		switch {
		case len(news) == 1:
			return "news"
		case len(refreshed) == 1:
			return "refreshed"
		}
		return ""
	}
	for _, c := range []struct {
		after time.Duration
		lines []string
		want  string
	}{
		{0, short, "news"},
		{10 * time.Second, held, "news"},
		{20 * time.Second, short, "refreshed"}, // back to the reason before: written, no event
		{30 * time.Second, short, ""},
		{40 * time.Second, held, "refreshed"},
		{5 * time.Minute, short, "refreshed"},
		{ReasonBackWithin + 11*time.Second, held, "news"}, // flapping still: an event again
		{ReasonBackWithin + 20*time.Second, short, "refreshed"},
		{ReasonBackWithin + 30*time.Second, other, "news"}, // a third reason
		{ReasonBackWithin + 40*time.Second, held, "news"},  // not the one before the last change
	} {
		if got := step(c.after, c.lines); got != c.want {
			t.Errorf("at +%s, %q: %q, want %q", c.after, c.lines, got, c.want)
		}
	}
}

// The loop's passes that may rest take at most MaxBusy of the time, over time rather than pass
// by pass: a quick pass after a quiet spell goes without a rest, quick passes back to back rest
// like slow ones, a rest is never longer than the interval and leaves nothing owed beyond it, and
// a pass that may not rest neither rests nor spends.
func TestPacer(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	// passes runs back-to-back passes of took, each after the last one's rest, and returns the
	// share of the time they took.
	passes := func(p *pacer, at time.Time, took time.Duration, n int) (float64, time.Time) {
		var busy, all time.Duration
		for range n {
			rest := p.after(at, at.Add(took), true)
			busy, all = busy+took, all+took+rest
			at = at.Add(took + rest)
		}
		return busy.Seconds() / all.Seconds(), at
	}
	for _, took := range []time.Duration{ms(5), ms(60), ms(99), ms(300)} {
		p := pacer{maxBusy: 0.2, most: 5 * time.Second}
		share, _ := passes(&p, t0, took, int(20*time.Second/took)) // what the bank lends fades
		if share > 0.21 || share < 0.19 {
			t.Errorf("passes of %s back to back: busy %.3f, want 0.2", took, share)
		}
	}

	p := pacer{maxBusy: 0.2, most: 5 * time.Second}
	if rest := p.after(t0, t0.Add(ms(60)), true); rest != 0 {
		t.Errorf("a quick first pass rests %s", rest)
	}
	// A quiet minute banks PassBank, no more.
	at := t0.Add(time.Minute)
	if rest := p.after(at, at.Add(ms(300)), true); rest != ms(1000) {
		t.Errorf("a 300-ms pass after a quiet minute rests %s, want 1s", rest)
	}
	// A pass of seconds rests the interval, and the pass after that rest is not held for
	// what it left owed.
	p = pacer{maxBusy: 0.2, most: 5 * time.Second}
	if rest := p.after(t0, t0.Add(3*time.Second), true); rest != 5*time.Second {
		t.Errorf("a 3-s pass rests %s, want the interval", rest)
	}
	at = t0.Add(8 * time.Second)
	if rest := p.after(at, at.Add(ms(10)), true); rest > ms(50) {
		t.Errorf("a 10-ms pass after a full rest rests %s, want at most 4 × 10 ms", rest)
	}
	// A pass that may not rest spends nothing.
	p = pacer{maxBusy: 0.2, most: 5 * time.Second}
	for i := range 50 {
		at := t0.Add(time.Duration(i) * ms(30))
		if rest := p.after(at, at.Add(ms(30)), false); rest != 0 {
			t.Fatalf("a pass that may not rest rests %s", rest)
		}
	}
	at = t0.Add(50 * ms(30))
	if rest := p.after(at, at.Add(ms(30)), true); rest != 0 {
		t.Errorf("after passes that may not rest, a quick one rests %s", rest)
	}
	// No bound.
	for _, b := range []float64{0, 1} {
		p := pacer{maxBusy: b, most: 5 * time.Second}
		if share, _ := passes(&p, t0, ms(300), 10); share != 1 {
			t.Errorf("max busy %g: busy %.2f, want 1", b, share)
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

// TestEstimatedLeavesTheUnreached: a near forecast decides the estimates of the jobs it reached
// alone, in the order of the snapshot; a far one those of every queued job, the ones beyond
// its reach cleared.
func TestEstimatedLeavesTheUnreached(t *testing.T) {
	queued := []scheduler.Job{{UUID: "a"}, {UUID: "b"}, {UUID: "c"}, {UUID: "d"}}
	plan := scheduler.Plan{Unreached: []string{"d", "b"}}
	if got := estimated(queued, plan, false); !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("near: %v, want a, c", got)
	}
	if got := estimated(queued, plan, true); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Errorf("far: %v, want every queued job", got)
	}
	if got := estimated(queued, scheduler.Plan{}, false); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Errorf("near, every job reached: %v, want every queued job", got)
	}
}

// TestWrittenEstimatesOfAFarForecast: a far forecast writes an estimate again only when it
// moves by FarEstimateShare of how far ahead it lies, and by FarEstimateTolerance at the
// least: a job behind 5,000 others, estimated ten minutes ahead each minute while the jobs
// ranked ahead of it take every GPU freed, is not written again at every far forecast.
func TestWrittenEstimatesOfAFarForecast(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { x := t0.Add(d); return &x }
	est := func(start time.Duration) map[string]job.StartEstimate {
		return map[string]job.StartEstimate{"f": {Start: t0.Add(start), Earliest: at(start / 2), Latest: at(14 * 24 * time.Hour)}}
	}
	w := written{}
	w.record(est(10*time.Minute), []string{"f"})
	for _, c := range []struct {
		name  string
		after time.Duration
		next  map[string]job.StartEstimate
		near  bool // written by a near forecast
		far   bool // by a far one
	}{
		{"a minute on, ten minutes ahead again", time.Minute, est(11 * time.Minute), true, false},
		{"four minutes on, ten minutes ahead again", 4 * time.Minute, est(14 * time.Minute), true, false},
		{"five minutes on, ten minutes ahead again", 5 * time.Minute, est(15 * time.Minute), true, true},
		{"brought ten minutes closer", 0, est(0), true, true},
	} {
		now := t0.Add(c.after)
		if got := w.changed(c.next, []string{"f"}, now, nearTolerance); (len(got) == 1) != c.near {
			t.Errorf("%s: a near forecast writes %v, want written %v", c.name, got, c.near)
		}
		if got := w.changed(c.next, []string{"f"}, now, farTolerance); (len(got) == 1) != c.far {
			t.Errorf("%s: a far forecast writes %v, want written %v", c.name, got, c.far)
		}
	}
}
