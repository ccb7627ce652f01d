// Package storetest gives tests of any package a migrated store on the test Postgres, so that
// each package does not write its own set-up.
package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/store"
)

// New opens a store on a fresh database of the test Postgres (testenv.PostgresURL: it fails
// the test, or skips it when services are not required, without one), migrated to the latest
// schema and closed when the test ends.
func New(t testing.TB) *store.Store {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return st
}

// Member makes user (name, e-mail name@example.org) a member of project, creating either when
// new, and returns both.
func Member(t testing.TB, st *store.Store, user, project string) (store.User, store.Project) {
	t.Helper()
	ctx := context.Background()
	u, err := st.UpsertUser(ctx, "urn:publicid:IDN+test+user+"+user, user, user+"@example.org", false)
	if err != nil {
		t.Fatal(err)
	}
	p, err := st.GetProjectByName(ctx, project)
	if errors.Is(err, store.ErrNotFound) {
		p, err = st.CreateProject(ctx, "urn:publicid:IDN+test+project+"+project, project, "", 0)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := st.AddMember(ctx, p.ID, u.ID); err != nil {
		t.Fatal(err)
	}
	return u, p
}
