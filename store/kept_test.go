package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
)

// RecentClusters serves the list it read lately without a statement; the store's own changes
// show at once, another master's within RecentClustersAge.
func TestRecentClusters(t *testing.T) {
	ctx := context.Background()
	url := testenv.PostgresURL(t)
	open := func() *store.Store {
		st, err := store.Open(ctx, url)
		if err != nil {
			t.Fatalf("open store: %v", err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	a, b := open(), open()
	if _, err := a.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	start := time.Now()
	names := func(st *store.Store) (map[int]store.Cluster, int64) {
		t.Helper()
		cctx, count := store.CountStatements(ctx)
		cs, err := st.RecentClusters(cctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[int]store.Cluster{}
		for _, c := range cs {
			out[c.ID] = c
		}
		if len(cs) > 0 {
			cs[0].Name = "changed by a caller" // must not reach the kept list
		}
		return out, count()
	}
	// No cluster at all is a list to keep too.
	if got, n := names(a); len(got) != 0 || n != 1 {
		t.Fatalf("first read of no clusters: %d statements, %v", n, got)
	}
	if got, n := names(a); len(got) != 0 || (n != 0 && time.Since(start) < store.RecentClustersAge) {
		t.Errorf("second read of no clusters: %d statements, %v; want the kept empty list", n, got)
	}
	if _, err := a.CreateCluster(ctx, store.Cluster{ID: 70, Name: "zeroth"}); err != nil {
		t.Fatal(err)
	}
	names(a) // a list kept before the next create, which that create must drop
	if _, err := a.CreateCluster(ctx, store.Cluster{ID: 71, Name: "first"}); err != nil {
		t.Fatal(err)
	}
	read := time.Now() // before the list is kept
	if got, _ := names(a); got[71].Name != "first" {
		t.Fatalf("a's own new cluster not listed: %v", got)
	}
	got, n := names(a)
	// A machine so loaded that the kept list aged meanwhile may read it again.
	if (n != 0 && time.Since(read) < store.RecentClustersAge) || got[71].Name != "first" {
		t.Errorf("second read: %d statements, %v; want the kept list, unchanged by the caller", n, got)
	}
	if err := a.SetClusterPrivate(ctx, 71, true); err != nil {
		t.Fatal(err)
	}
	if got, n := names(a); n == 0 || !got[71].Private {
		t.Errorf("after a's own change: %d statements, %+v; want it read again, private", n, got[71])
	}
	// Another master's new cluster shows once the list is RecentClustersAge old.
	if _, err := b.CreateCluster(ctx, store.Cluster{ID: 72, Name: "second"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * store.RecentClustersAge)
	for {
		got, _ := names(a)
		if _, ok := got[72]; ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b's new cluster not listed by a after %s", 10*store.RecentClustersAge)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ProjectsByID gives the projects in the order asked, leaves out ids of no project, and reads
// only the projects it has not read before.
func TestProjectsByID(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	_, a := fixture(t, st, "alice", "zebra")
	_, b := fixture(t, st, "bob", "antelope")
	get := func(ids ...int64) ([]string, int64) {
		t.Helper()
		cctx, count := store.CountStatements(ctx)
		ps, err := st.ProjectsByID(cctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range ps {
			names = append(names, p.Name)
		}
		return names, count()
	}
	if names, n := get(a.ID, 999999, b.ID); !slices.Equal(names, []string{"zebra", "antelope"}) || n != 1 {
		t.Errorf("first read: %v in %d statements; want [zebra antelope] in 1", names, n)
	}
	if names, n := get(b.ID, a.ID); !slices.Equal(names, []string{"antelope", "zebra"}) || n != 0 {
		t.Errorf("second read: %v in %d statements; want [antelope zebra] from memory", names, n)
	}
	c, err := st.CreateProject(ctx, "urn:publicid:IDN+test+project+yak", "yak", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if names, n := get(a.ID, c.ID); !slices.Equal(names, []string{"zebra", "yak"}) || n != 1 {
		t.Errorf("with a new project: %v in %d statements; want [zebra yak], the new one read", names, n)
	}
}

// A start estimate never waits for a job's row: with a job held by another transaction (a state
// change), every estimate is written, the held job's too (estimates live apart from the job's
// row: job_waits). A waiting forecaster and a pass deadlocked on the rows they both wrote
// (bench/ B8x).
func TestEstimatesNeverWaitForJobs(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	held, free := createJob(t, st, u, p, job.StatusQueued), createJob(t, st, u, p, job.StatusQueued)
	locked, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- st.WithTx(ctx, func(tx *store.Store) error {
			if _, err := tx.TransitionJob(ctx, held.UUID, []job.Status{job.StatusQueued}, job.StatusQueued,
				store.Event{Actor: "test", Message: "hold the row"}); err != nil {
				return err
			}
			close(locked)
			<-release
			return nil
		})
	}()
	<-locked
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second) // a wait would last until the hold ends: never
	err := st.SetStartEstimatesAmong(wctx, map[string]job.StartEstimate{held.UUID: {Start: start}, free.UUID: {Start: start}},
		[]string{held.UUID, free.UUID})
	cancel()
	close(release)
	if err != nil {
		t.Fatalf("estimates waited for the held job: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{held.UUID: true, free.UUID: true} {
		rec, err := st.GetJob(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got := rec.Job.State.Scheduling.EstimatedStart
		if (got != nil) != want || (got != nil && !got.Equal(start)) {
			t.Errorf("job %s: estimated start %v, want it set: %v", id, got, want)
		}
	}
}
