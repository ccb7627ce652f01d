package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
)

// TestJobReadsAreCopies: the store keeps decoded jobs and prepared statements between calls,
// yet what it hands out may be changed freely, and a change in the database shows at once,
// inside transactions as outside.
func TestJobReadsAreCopies(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	j := createJob(t, st, u, p, job.StatusQueued)
	for range 3 { // the statements get prepared, then reused
		a, err := st.GetJob(ctx, j.UUID)
		if err != nil {
			t.Fatal(err)
		}
		if a.Job.Request.Docker.Image != "debian:stable" || a.Job.State.Status != job.StatusQueued || len(a.Job.State.EventTimes) != 1 {
			t.Fatalf("read %+v", a.Job)
		}
		a.Job.Request.Docker.Image = "changed"
		a.Job.Request.Docker.Environment = map[string]string{"X": "changed"}
		a.Job.State.EventTimes[job.StatusRunning] = time.Now()
		a.Job.State.Resources = &job.StateResources{SlaveName: "changed"}
	}
	if _, err := st.TransitionJob(ctx, j.UUID, []job.Status{job.StatusQueued}, job.StatusCancelled, store.Event{Actor: "owner"}); err != nil {
		t.Fatal(err)
	}
	err := st.WithTx(ctx, func(tx *store.Store) error {
		for range 3 {
			b, err := tx.GetJob(ctx, j.UUID)
			if err != nil {
				return err
			}
			if b.Job.Request.Docker.Image != "debian:stable" || b.Job.Request.Docker.Environment["X"] != "" || b.Job.State.Resources != nil {
				t.Errorf("a caller's change reached the store: %+v", b.Job)
			}
			if _, ok := b.Job.State.EventTimes[job.StatusCancelled]; b.Job.State.Status != job.StatusCancelled || !ok {
				t.Errorf("the transition does not show: %s %v", b.Job.State.Status, b.Job.State.EventTimes)
			}
			if _, err := tx.GetJob(ctx, uuid.NewString()); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("missing job: %v, want ErrNotFound", err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := st.ListJobs(ctx, store.JobFilter{UserIDs: []int64{u.ID}, Visible: &store.Visibility{UserID: u.ID, ProjectIDs: []int64{p.ID}}})
	if err != nil || len(recs) != 1 || recs[0].Job.State.Status != job.StatusCancelled {
		t.Fatalf("list own jobs: %v %v", recs, err)
	}
	for range 2 { // a unique violation through a prepared statement is still ErrConflict
		if _, err := st.CreateProject(ctx, "urn:publicid:IDN+test+project+other", p.Name, "", 0); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("duplicate project: %v, want ErrConflict", err)
		}
	}
}
