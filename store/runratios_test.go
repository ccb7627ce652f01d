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
// their edges (60, 61, 128 and 129 minutes; under a minute; a day) and jobs still running or
// created before the window left out.
func TestRunRatiosAgreeWithLearnRatios(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(testenv.Seed(t), 16))
	alice, p := fixture(t, st, "alice", "vision")
	bob, _ := fixture(t, st, "bob", "vision")
	const minJobs = 3
	var samples []scheduler.RatioSample
	set := func(u store.User, maxDur time.Duration, ranMs int64, status job.Status, created time.Time) {
		j := createJob(t, st, u, p, status)
		running := time.Now().Add(-48 * time.Hour).Truncate(time.Millisecond)
		if _, err := st.DB().ExecContext(ctx, `UPDATE jobs SET max_duration_s = $2, created_at = $5,
    event_times = jsonb_build_object('RUNNING', $3::timestamptz, status, $4::timestamptz) WHERE uuid = $1`,
			j.UUID, int64(maxDur/time.Second), running, running.Add(time.Duration(ranMs)*time.Millisecond), created); err != nil {
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
					Ratio: float64(ranMs) / float64(maxDur/time.Millisecond)})
			}
		}
		set(u, time.Hour, 1000, job.StatusRunning, time.Now())                     // not ended
		set(u, time.Hour, 1000, job.StatusFinished, time.Now().Add(-48*time.Hour)) // before the window
	}
	rows, err := st.RunRatios(ctx, time.Now().Add(-time.Hour), minJobs, scheduler.RatioQuantiles)
	if err != nil {
		t.Fatal(err)
	}
	want := scheduler.LearnRatios(samples, minJobs)
	if n := 1 + len(want.Users) + len(want.Classes) + len(want.UserClasses); len(rows) != n {
		t.Fatalf("%d rows, want %d: %+v", len(rows), n, rows)
	}
	for _, r := range rows {
		var w scheduler.RunRatio
		var ok bool
		switch {
		case r.UserID != 0 && r.Class >= 0:
			w, ok = want.UserClasses[scheduler.UserClass{UserID: r.UserID, Class: r.Class}]
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
}
