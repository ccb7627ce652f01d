package store_test

import (
	"context"
	"database/sql"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
)

// A tally decays with the half-life and grows by the weight of its user's running jobs, read
// from the jobs (AccrueTallies) or given by the leader's memory (AccrueTalliesOf), alike.
func TestTalliesAccrueAndDecay(t *testing.T) {
	w := store.DefaultTallyWeights
	week := 7 * 24 * time.Hour
	for _, way := range []struct {
		name   string
		accrue func(ctx context.Context, st *store.Store, alice store.User) error
	}{
		{"from the jobs", func(ctx context.Context, st *store.Store, _ store.User) error { return st.AccrueTallies(ctx, w, week) }},
		{"weights given", func(ctx context.Context, st *store.Store, alice store.User) error {
			return st.AccrueTalliesOf(ctx, map[int64]float64{alice.ID: w.Weight(1, 2, 1)}, week)
		}},
	} {
		t.Run(way.name, func(t *testing.T) {
			st := newStore(t)
			ctx := context.Background()
			alice, p := fixture(t, st, "alice", "vision")
			bob, _ := fixture(t, st, "bob", "vision")
			createJob(t, st, alice, p, job.StatusRunning) // 1 GPU, 2 CPUs, 1 GB
			if err := way.accrue(ctx, st, alice); err != nil {
				t.Fatal(err)
			}
			// Pretend the last update was an hour ago for alice, a week ago for bob who had 10.
			if _, err := st.DB().ExecContext(ctx, `UPDATE user_tallies SET updated_at = now() - interval '1 hour' WHERE user_id = $1`, alice.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := st.DB().ExecContext(ctx, `UPDATE user_tallies SET tally = 10, updated_at = now() - interval '7 days' WHERE user_id = $1`, bob.ID); err != nil {
				t.Fatal(err)
			}
			carol, _ := fixture(t, st, "carol", "vision") // no tally yet: gets one
			if err := way.accrue(ctx, st, alice); err != nil {
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
			if got, ok := tallies[carol.ID]; !ok || got != 0 {
				t.Errorf("carol's tally: %.4f (there: %t), want a tally of 0", got, ok)
			}
		})
	}
}

// A pass's basics in one round trip are what the four reads they replace return: the clock
// and a change mark, the tallies decayed to that clock, the reservations not ended (by start)
// and the clusters with their owners.
func TestReadPassBasics(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	alice, p := fixture(t, st, "alice", "vision")
	bob, _ := fixture(t, st, "bob", "vision")
	week := 7 * 24 * time.Hour
	if err := st.AccrueTallies(ctx, store.DefaultTallyWeights, week); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DB().ExecContext(ctx, `UPDATE user_tallies SET tally = 10, updated_at = now() - interval '7 days' WHERE user_id = $1`, bob.ID); err != nil {
		t.Fatal(err)
	}
	for _, c := range []store.Cluster{{ID: 1, Name: "one"}, {ID: 2, Name: "two", Private: true, GuestLimitS: 600}} {
		if _, err := st.CreateCluster(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.AddClusterOwner(ctx, 2, p.ID); err != nil {
		t.Fatal(err)
	}
	now, later, sooner := time.Now(), uuid.NewString(), uuid.NewString()
	for _, r := range []store.Reservation{
		{ID: later, Name: "later", GPUs: 2, Start: now.Add(2 * time.Hour), End: now.Add(3 * time.Hour), UserIDs: []int64{alice.ID},
			ClusterID: sql.NullInt64{Int64: 1, Valid: true}, CreatedBy: alice.ID},
		{ID: uuid.NewString(), Name: "ended", GPUs: 1, Start: now.Add(-2 * time.Hour), End: now.Add(-time.Hour),
			ClusterID: sql.NullInt64{Int64: 1, Valid: true}, CreatedBy: alice.ID},
		{ID: sooner, Name: "sooner", GPUs: 1, Start: now.Add(time.Hour), End: now.Add(3 * time.Hour), SlaveNames: []string{"node1"},
			ClusterID: sql.NullInt64{Int64: 2, Valid: true}, ProjectIDs: []int64{p.ID}, CreatedBy: alice.ID},
	} {
		if _, err := st.CreateReservation(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	before, err := st.TakeChangeMark(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.ReadPass(ctx, week, store.PassFeeds{})
	if err != nil {
		t.Fatal(err)
	}
	if b.Slaves != nil || b.Jobs != nil || b.Releasing != nil {
		t.Errorf("feeds read without being asked: %+v %+v %+v", b.Slaves, b.Jobs, b.Releasing)
	}
	if d := time.Since(b.Now); d < -time.Minute || d > time.Minute || b.Mark.Before(before) {
		t.Errorf("clock %s (%s from here), mark %s (one taken before: %s)", b.Now, d, b.Mark, before)
	}
	tallies, err := st.Tallies(ctx, week)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Tallies) != len(tallies) || len(tallies) != 2 || math.Abs(b.Tallies[bob.ID]-5) > 0.01 || math.Abs(b.Tallies[bob.ID]-tallies[bob.ID]) > 0.001 {
		t.Errorf("tallies %v, want %v (bob's 10 halved by a week)", b.Tallies, tallies)
	}
	reservations, err := st.ListReservations(ctx, b.Now)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Reservations) != 2 || !reflect.DeepEqual(b.Reservations, reservations) || b.Reservations[0].ID != sooner || b.Reservations[1].ID != later {
		t.Errorf("reservations %+v, want %+v (not ended, by start)", b.Reservations, reservations)
	}
	clusters, owners, err := st.ClustersWithOwners(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Clusters) != 2 || !reflect.DeepEqual(b.Clusters, clusters) || !reflect.DeepEqual(b.Owners, owners) || len(owners[2]) != 1 {
		t.Errorf("clusters %+v owners %v, want %+v and %v", b.Clusters, b.Owners, clusters, owners)
	}
}
