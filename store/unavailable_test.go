package store_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
)

// TestDatabaseOutage cuts a real database off under an open store: reads, writes, transactions
// and the health check give ErrUnavailable (never a bare driver error), and once the database
// is back the same store works again, without being reopened.
func TestDatabaseOutage(t *testing.T) {
	ctx := context.Background()
	url := testenv.PostgresURL(t)
	st, err := store.Open(ctx, url)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	u, p := fixture(t, st, "alice", "demo")
	j := createJob(t, st, u, p, job.StatusQueued)
	projects := 0

	calls := []struct {
		name string
		call func() error
	}{
		{"ping", func() error { return st.Ping(ctx) }},
		{"get job", func() error { _, err := st.GetJob(ctx, j.UUID); return err }},
		{"list jobs", func() error { _, err := st.ListJobs(ctx, store.JobFilter{}); return err }},
		{"get user", func() error { _, _, err := st.GetUserWithProjects(ctx, u.URN); return err }},
		{"create project", func() error {
			projects++
			name := fmt.Sprintf("p%d", projects)
			_, err := st.CreateProject(ctx, "urn:publicid:IDN+test+project+"+name, name, "", 0)
			return err
		}},
		{"transition (transaction)", func() error {
			_, err := st.TransitionJob(ctx, j.UUID, []job.Status{job.StatusQueued, job.StatusOnHold}, job.StatusOnHold, store.Event{Actor: "test"})
			if err == nil {
				_, err = st.TransitionJob(ctx, j.UUID, []job.Status{job.StatusOnHold}, job.StatusQueued, store.Event{Actor: "test"})
			}
			return err
		}},
		{"schema version", func() error { _, err := st.SchemaVersion(ctx); return err }},
	}
	for _, c := range calls {
		if err := c.call(); err != nil {
			t.Fatalf("%s before the outage: %v", c.name, err)
		}
	}

	heal := testenv.DatabaseOutage(t, url)
	for _, c := range calls {
		// Twice: the first call finds its pooled connection terminated, the second has to open one.
		for i := range 2 {
			if err := c.call(); !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("%s during the outage (call %d): err = %v, want ErrUnavailable", c.name, i+1, err)
			}
		}
	}

	heal()
	for _, c := range calls {
		if err := c.call(); err != nil {
			t.Errorf("%s after the outage: %v", c.name, err)
		}
	}
}

// TestOpenUnreachable: a master started while its database is down learns so as ErrUnavailable.
func TestOpenUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // nothing listens there now: connection refused
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = store.Open(ctx, "postgres://gpulab@"+addr+"/gpulab?sslmode=disable")
	if !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Open on a closed port: err = %v, want ErrUnavailable", err)
	}
}
