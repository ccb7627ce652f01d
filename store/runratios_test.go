package store_test

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/store"
)

// TestRunRatiosAgreeWithLearnRatios: the SQL aggregate gives, for every group (user and
// maxDuration class, class, user, everyone), the mean and quantiles scheduler.LearnRatios
// computes from the same ended jobs (the simulator learns as the master does), with classes at
// their edges (60, 61, 128 and 129 minutes; under a minute; a day) and jobs created before the
// window left out. A user's group in a class, weighed by recency as the leader does
// (scheduler.RecentRatio over Recent), agrees too, running and halting jobs counted there for
// what they ran so far and halted ones as cut short; and Recent holds the group's latest starts
// first, as many as asked.
func TestRunRatiosAgreeWithLearnRatios(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(testenv.Seed(t), 16))
	alice, p := fixture(t, st, "alice", "vision")
	bob, _ := fixture(t, st, "bob", "vision")
	const minJobs = 3
	var samples []scheduler.RatioSample
	// Every job starts a second after the one before, two days ago: the order of the starts
	// is the order of the samples.
	started := time.Now().Add(-48 * time.Hour).Truncate(time.Millisecond)
	set := func(u store.User, maxDur time.Duration, ranMs int64, status job.Status, created time.Time) {
		j := createJob(t, st, u, p, status)
		started = started.Add(time.Second)
		// A job that still runs has no end yet (nor an event of its status but RUNNING).
		var ended *time.Time
		if status != job.StatusRunning && status != job.StatusHalting {
			e := started.Add(time.Duration(ranMs) * time.Millisecond)
			ended = &e
		}
		if _, err := st.DB().ExecContext(ctx, `UPDATE jobs SET max_duration_s = $2, created_at = $5,
    event_times = jsonb_build_object('RUNNING', $3::timestamptz) || jsonb_strip_nulls(jsonb_build_object(status, $4::timestamptz))
WHERE uuid = $1`, j.UUID, int64(maxDur/time.Second), started, ended, created); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range []store.User{alice, bob} {
		for _, maxDur := range []time.Duration{30 * time.Second, time.Hour, 61 * time.Minute, 128 * time.Minute, 129 * time.Minute, 24 * time.Hour} {
			n := minJobs - 1 + rng.IntN(3) // some groups too small
			for range n {
				ranMs := rng.Int64N(int64(maxDur/time.Millisecond) * 11 / 10) // some past their maxDuration
				status := []job.Status{job.StatusFinished, job.StatusFailed, job.StatusCancelled, job.StatusHalted}[rng.IntN(4)]
				set(u, maxDur, ranMs, status, time.Now())
				samples = append(samples, scheduler.RatioSample{UserID: u.ID, MaxDuration: maxDur,
					Ratio: float64(ranMs) / float64(maxDur/time.Millisecond), Started: started, Halted: status == job.StatusHalted})
			}
			// Running (or halting) for two days: past any maxDuration here, so their ratio so
			// far is 1 whatever the clock says.
			for range rng.IntN(3) {
				status := []job.Status{job.StatusRunning, job.StatusHalting}[rng.IntN(2)]
				set(u, maxDur, 0, status, time.Now())
				samples = append(samples, scheduler.RatioSample{UserID: u.ID, MaxDuration: maxDur, Ratio: 1, Started: started, Running: true})
			}
		}
		set(u, time.Hour, 1000, job.StatusQueued, time.Now())                      // never ran
		set(u, time.Hour, 1000, job.StatusFinished, time.Now().Add(-48*time.Hour)) // before the window
	}
	rows, err := st.RunRatios(ctx, time.Now().Add(-time.Hour), minJobs, scheduler.RatioQuantiles, scheduler.RatioRecentJobs)
	if err != nil {
		t.Fatal(err)
	}
	want := scheduler.LearnRatios(samples, minJobs)
	if n := 1 + len(want.Users) + len(want.Classes) + len(want.UserClasses); len(rows) != n {
		t.Fatalf("%d rows, want %d: %+v", len(rows), n, rows)
	}
	latestOf := func(user int64, class, n int) (runs []scheduler.RatioRun) {
		for i := len(samples) - 1; i >= 0 && len(runs) < n; i-- {
			if s := samples[i]; s.UserID == user && scheduler.DurationClass(s.MaxDuration) == class {
				runs = append(runs, scheduler.RatioRun{Ratio: min(1, s.Ratio), Censored: s.Running || s.Halted})
			}
		}
		return runs
	}
	for _, r := range rows {
		var w scheduler.RunRatio
		var ok bool
		switch {
		case r.UserID != 0 && r.Class >= 0:
			w, ok = want.UserClasses[scheduler.UserClass{UserID: r.UserID, Class: r.Class}]
			runs := latestOf(r.UserID, r.Class, scheduler.RatioRecentJobs)
			if len(r.Recent) != len(runs) || len(r.Censored) != len(runs) {
				t.Fatalf("row user %d class %d: %d recent ratios, %d censored flags, want %d", r.UserID, r.Class, len(r.Recent), len(r.Censored), len(runs))
			}
			got := make([]scheduler.RatioRun, len(runs))
			for i := range runs {
				got[i] = scheduler.RatioRun{Ratio: r.Recent[i], Censored: r.Censored[i]}
				if got[i].Censored != runs[i].Censored || math.Abs(got[i].Ratio-runs[i].Ratio) > 1e-9 {
					t.Fatalf("row user %d class %d: recent %v, want %v", r.UserID, r.Class, got, runs)
				}
			}
			rr := scheduler.RecentRatio(got, scheduler.NewRunRatio(r.Mid, r.Q))
			if math.Abs(rr.Low-w.Low) > 1e-9 {
				t.Fatalf("row user %d class %d: low %g, LearnRatios says %g", r.UserID, r.Class, rr.Low, w.Low)
			}
			r.Mid, r.Q = rr.Mid, rr.Q
		case len(r.Recent) > 0:
			t.Fatalf("row %+v: recent ratios outside a user's class", r)
		case r.UserID != 0:
			w, ok = want.Users[r.UserID]
		case r.Class >= 0:
			w, ok = want.Classes[r.Class]
		default:
			w, ok = want.Global, true
		}
		if !ok || r.Jobs < minJobs || math.Abs(r.Mid-w.Mid) > 1e-9 || len(r.Q) != len(w.Q) {
			t.Fatalf("row %+v, want %+v (found: %v)", r, w, ok)
		}
		for k := range r.Q {
			if math.Abs(r.Q[k]-w.Q[k]) > 1e-9 {
				t.Fatalf("row user %d class %d: quantile %d is %g, LearnRatios says %g", r.UserID, r.Class, k, r.Q[k], w.Q[k])
			}
		}
	}
	// Asked for the latest two, each user's group in a class gets its two latest starts.
	rows, err = st.RunRatios(ctx, time.Now().Add(-time.Hour), minJobs, scheduler.RatioQuantiles, 2)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range rows {
		if r.UserID == 0 || r.Class < 0 {
			continue
		}
		n++
		runs := latestOf(r.UserID, r.Class, 2)
		if len(r.Recent) != 2 || math.Abs(r.Recent[0]-runs[0].Ratio) > 1e-9 || math.Abs(r.Recent[1]-runs[1].Ratio) > 1e-9 ||
			r.Censored[0] != runs[0].Censored || r.Censored[1] != runs[1].Censored {
			t.Fatalf("user %d class %d: latest two %v %v, want %v", r.UserID, r.Class, r.Recent, r.Censored, runs)
		}
	}
	if n != len(want.UserClasses) {
		t.Fatalf("%d user and class rows, want %d", n, len(want.UserClasses))
	}
}
