package leader_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/leader"
	"github.com/opengpulab/gpulab/store"
)

// TestExplanationsOffThePasses: while it leads, the loop's passes hand what the waiting jobs are
// told to a writer of its own and go on without waiting for it. A one-GPU slave busy with a
// job, a second job waiting: the writer is held with the waiting job's second explanation, and
// the passes go on meanwhile, the job told its first still. That write fails: the next pass
// hands over every explanation again (the job's, unchanged since), and that write lands, with
// an event for each of the job's two explanations.
func TestExplanationsOffThePasses(t *testing.T) {
	w := newEstimateWorld(t)
	w.oneGPUSlave()
	first, waiting := w.submit(time.Hour), w.submit(time.Hour)
	var passes atomic.Int32
	loop := w.loop(leader.Config{Interval: 10 * time.Millisecond, OnPass: func(time.Time, time.Duration, error) { passes.Add(1) }}, nil)
	batches := make(chan []string, 16)
	release := make(chan error)
	var writes atomic.Int32
	loop.WrapExplanationWriter(func(real leader.ExplanationWriter) leader.ExplanationWriter {
		return func(ctx context.Context, lead store.Leadership, news, refreshed map[string][]string) error {
			batches <- slices.Sorted(maps.Keys(news))
			if writes.Add(1) == 2 {
				select {
				case err := <-release:
					return err
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return real(ctx, lead, news, refreshed)
		}
	})
	defer w.leading(loop)()
	next := func(what string) []string {
		t.Helper()
		select {
		case ids := <-batches:
			return ids
		case <-time.After(2 * time.Minute):
			t.Fatalf("waited 2 minutes for %s", what)
			return nil
		}
	}
	// The first pass assigns the first job and explains the second; the next adds the second's
	// expected start (the first's maxDuration ahead) to its reason: that write is held.
	for _, what := range []string{"the first explanation", "the expected start"} {
		if ids := next(what); !slices.Equal(ids, []string{waiting}) {
			t.Fatalf("%s: explanations for %v, want the waiting job %s alone (the first, %s, assigned)", what, ids, waiting, first)
		}
	}
	told, _ := explanationOf(w, waiting)
	if !strings.Contains(told, "none free") || strings.Contains(told, "expected start") {
		t.Fatalf("the waiting job told %q after its first explanation, want none free without an expected start", told)
	}
	held := passes.Load()
	waitFor(t, "5 passes while the explanations' write is held", func() bool { return passes.Load() >= held+5 })
	if now, _ := explanationOf(w, waiting); now != told {
		t.Fatalf("the waiting job told %q while its explanation's write was held, want %q still", now, told)
	}
	release <- errors.New("the write failed")
	if ids := next("the explanations again"); !slices.Equal(ids, []string{waiting}) {
		t.Fatalf("after a failed write, explanations for %v, want the waiting job %s again (unchanged)", ids, waiting)
	}
	waitFor(t, "the waiting job told its expected start", func() bool {
		told, _ := explanationOf(w, waiting)
		return strings.Contains(told, "expected start")
	})
	if told, events := explanationOf(w, waiting); events != 2 {
		t.Errorf("the waiting job told %q with %d events, want two (one for each explanation)", told, events)
	}
}

// explanationOf is what job id is told while it waits, and how many scheduler events it has.
func explanationOf(w *estimateWorld, id string) (string, int) {
	rec, evs := w.jobAndEvents(id)
	n := 0
	for _, e := range evs {
		if e.Kind == store.EventScheduler {
			n++
		}
	}
	return strings.Join(rec.Job.State.Scheduling.QueuedExplanations, " | "), n
}
