package leader_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/leader"
)

// TestNarrowedPassOnPostgres: on a full one-GPU slave with three jobs waiting, a pass after the
// first plans only the sweep (1 here) and the jobs never planned; it rewrites the estimates of
// the jobs it planned and leaves the others' alone (a full pass clears or rewrites every
// queued job's).
func TestNarrowedPassOnPostgres(t *testing.T) {
	w := newEstimateWorld(t)
	ctx := context.Background()
	w.oneGPUSlave()
	var ids []string
	for range 4 {
		ids = append(ids, w.submit(time.Hour))
	}
	loop := w.loop(leader.Config{Sweep: 1, FullReadEvery: time.Hour}, nil)
	pass := func(wantPlanned int) {
		t.Helper()
		if err := loop.Pass(ctx, w.lead); err != nil {
			t.Fatalf("pass: %v", err)
		}
		if p := loop.LastPass(); p.Planned != wantPlanned {
			t.Fatalf("pass planned %d of %d queued jobs, want %d", p.Planned, p.Queued, wantPlanned)
		}
	}
	estimate := func(id string) time.Time {
		t.Helper()
		rec, err := w.st.GetJob(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if e := rec.Job.State.Scheduling.EstimatedStart; e != nil {
			return *e
		}
		return time.Time{}
	}
	pass(4) // the first pass of a term plans everything
	if rec, err := w.st.GetJob(ctx, ids[0]); err != nil || rec.Job.State.Status != job.StatusAssigned {
		t.Fatalf("first job: %v, want ASSIGNED", err)
	}
	first := estimate(ids[1])
	if first.IsZero() || estimate(ids[3]).IsZero() {
		t.Fatalf("estimates after the full pass: %v, %v", first, estimate(ids[3]))
	}
	far := "2030-01-01T00:00:00Z"
	for _, id := range []string{ids[1], ids[3]} {
		if _, err := w.st.DB().ExecContext(ctx, `UPDATE job_waits SET estimate = estimate || jsonb_build_object('estimatedStart', $2::text) WHERE job_uuid = $1`, id, far); err != nil {
			t.Fatal(err)
		}
	}

	// Written behind the leader's back, which only tests do: the leader forgets what it wrote,
	// or it would not write again estimates it knows unchanged.
	loop.ForgetEstimates()
	pass(1) // the sweep: the first waiting job
	if got := estimate(ids[1]); got.Sub(first).Abs() > time.Minute {
		t.Errorf("the swept job's estimate is %v, want it rewritten to about %v", got, first)
	}
	if got := estimate(ids[3]); got.Format(time.RFC3339) != far {
		t.Errorf("the estimate of a job beyond the sweep became %v: a narrowed pass must leave it alone", got)
	}

	fresh := w.submit(time.Hour)
	pass(2) // the sweep and the new job
	if estimate(fresh).IsZero() {
		t.Errorf("the new job got no estimate")
	}
}

// A pass sends only the explanations that changed since its term wrote them: one changed
// behind the leader's back stays as it is (which shows the pass did not send it), until the
// leader forgets what it wrote.
func TestUnchangedExplanationsAreNotSentAgain(t *testing.T) {
	w := newEstimateWorld(t)
	ctx := context.Background()
	w.oneGPUSlave()
	var ids []string
	for range 3 {
		ids = append(ids, w.submit(time.Hour))
	}
	loop := w.loop(leader.Config{FullReadEvery: time.Hour}, nil)
	explanation := func(id string) []string {
		t.Helper()
		rec, err := w.st.GetJob(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Job.State.Scheduling.QueuedExplanations
	}
	// The job's history gets the explanation as a scheduler event when it is new or its
	// reason changes, not at every pass.
	events := func(id string) []string {
		t.Helper()
		evs, err := w.st.ListJobEvents(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range evs {
			if e.Kind == "scheduler" {
				out = append(out, e.Message)
			}
		}
		return out
	}
	pass := func() { t.Helper(); w.pass(loop) }
	pass()
	want := explanation(ids[2])
	if len(want) == 0 {
		t.Fatalf("a waiting job has no explanation after the first pass")
	}
	if got := events(ids[2]); !slices.Equal(got, []string{strings.Join(want, "; ")}) {
		t.Errorf("after the first pass the job's scheduler events are %q, want its explanation once", got)
	}
	pass()
	if got := events(ids[2]); len(got) != 1 {
		t.Errorf("a pass that changed nothing added events: %q", got)
	}
	if _, err := w.st.DB().ExecContext(ctx, `UPDATE job_waits SET explanations = '{"queuedExplanations": ["behind the back"]}' WHERE job_uuid = $1`, ids[2]); err != nil {
		t.Fatal(err)
	}
	pass()
	if got := explanation(ids[2]); !slices.Equal(got, []string{"behind the back"}) {
		t.Errorf("an unchanged explanation was sent again: %q", got)
	}
	loop.ForgetEstimates()
	pass()
	if got := explanation(ids[2]); !slices.Equal(got, want) {
		t.Errorf("after the leader forgot what it wrote: %q, want %q", got, want)
	}
}

// With ForecastEvery, passes between two forecasts write explanations but no estimate: a new
// job is explained at once and gets its estimate at the next forecast; a term's first pass
// forecasts.
func TestForecastEvery(t *testing.T) {
	w := newEstimateWorld(t)
	ctx := context.Background()
	w.oneGPUSlave()
	w.submit(time.Hour)
	waiting := w.submit(time.Hour)
	loop := w.loop(leader.Config{FullReadEvery: time.Hour, ForecastEvery: time.Hour}, nil)
	state := func(id string) (estimate *time.Time, explained bool) {
		t.Helper()
		rec, err := w.st.GetJob(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Job.State.Scheduling.EstimatedStart, len(rec.Job.State.Scheduling.QueuedExplanations) > 0
	}
	pass := func() { t.Helper(); w.pass(loop) }
	pass()
	if e, x := state(waiting); e == nil || !x {
		t.Fatalf("after the term's first pass: estimate %v, explained %v", e, x)
	}
	fresh := w.submit(time.Hour)
	pass()
	if e, x := state(fresh); e != nil || !x {
		t.Errorf("a pass between forecasts: the new job's estimate %v (want none yet), explained %v (want it)", e, x)
	}
	loop.ForecastNow()
	pass()
	if e, _ := state(fresh); e == nil {
		t.Errorf("the next forecast gave the new job no estimate")
	}
}
