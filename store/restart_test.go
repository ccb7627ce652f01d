package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/faults"
	"github.com/opengpulab/gpulab/store"
)

// A pass's basics tell a database that restarted from one that did not (PassBasics.Started),
// also when it recovered from the crash of one of its server processes: Postgres then loses
// what was committed without waiting for the disk but does not restart its postmaster, so the
// postmaster's start time alone stayed the same. A clean restart moves it too. (On a private
// cluster: the project's tests share one, which must not crash.)
func TestReadPassSeesARestart(t *testing.T) {
	t.Parallel()
	pg := faults.StartPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st, err := store.Open(ctx, pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	started := func(what string) time.Time {
		t.Helper()
		for {
			r, err := st.ReadPass(ctx, time.Hour, store.PassFeeds{})
			if err == nil {
				return r.Started
			}
			if ctx.Err() != nil {
				t.Fatalf("%s: %v", what, err)
			}
			time.Sleep(50 * time.Millisecond) // the pool's connections were cut: the next are new
		}
	}
	first := started("first read")
	if again := started("second read"); !again.Equal(first) {
		t.Fatalf("the database started at %v, then at %v without a restart", first, again)
	}
	if err := pg.KillBackend(ctx); err != nil {
		t.Fatal(err)
	}
	recovered := started("after the crash")
	if !recovered.After(first) {
		t.Errorf("after a server process's crash the database started at %v, as before (%v)", recovered, first)
	}
	if err := pg.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if restarted := started("after the restart"); !restarted.After(recovered) {
		t.Errorf("after a restart the database started at %v, before it was %v", restarted, recovered)
	}
}
