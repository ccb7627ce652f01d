package store_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
)

func TestTalliesAccrueAndDecay(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	alice, p := fixture(t, st, "alice", "vision")
	bob, _ := fixture(t, st, "bob", "vision")
	createJob(t, st, alice, p, job.StatusRunning) // 1 GPU, 2 CPUs, 1 GB
	w := store.DefaultTallyWeights
	week := 7 * 24 * time.Hour
	if err := st.AccrueTallies(ctx, w, week); err != nil {
		t.Fatal(err)
	}
	// Pretend the last update was an hour ago for alice, a week ago for bob who had 10.
	if _, err := st.DB().ExecContext(ctx, `UPDATE user_tallies SET updated_at = now() - interval '1 hour' WHERE user_id = $1`, alice.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DB().ExecContext(ctx, `UPDATE user_tallies SET tally = 10, updated_at = now() - interval '7 days' WHERE user_id = $1`, bob.ID); err != nil {
		t.Fatal(err)
	}
	if err := st.AccrueTallies(ctx, w, week); err != nil {
		t.Fatal(err)
	}
	tallies, err := st.Tallies(ctx, week)
	if err != nil {
		t.Fatal(err)
	}
	wantAlice := w.Weight(1, 2, 1) // one hour of 1 GPU, 2 CPUs, 1 GB
	if got := tallies[alice.ID]; math.Abs(got-wantAlice) > 0.01 {
		t.Errorf("alice's tally after an hour of her job: %.4f, want %.4f", got, wantAlice)
	}
	if got := tallies[bob.ID]; math.Abs(got-5) > 0.01 {
		t.Errorf("bob's tally of 10 after one half-life: %.4f, want 5", got)
	}
}
