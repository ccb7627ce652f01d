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

// TestListReadsChangedRowsOnly: a page of jobs is read in two steps, the whole rows only of the
// jobs not listed before at the same version; what it lists is what one full read lists, in the
// same order, and any change (the job's row, its owner's or its project's) shows at once, with
// no caller's change to a listed record reaching the next list.
func TestListReadsChangedRowsOnly(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	for range 12 {
		createJob(t, st, u, p, job.StatusQueued)
	}
	page := store.JobFilter{UserIDs: []int64{u.ID}, Visible: &store.Visibility{UserID: u.ID, ProjectIDs: []int64{p.ID}}, Limit: 5, Offset: 2}
	full := page
	full.Limit, full.Offset = 0, 0 // read in one step
	want := func() []*store.JobRecord {
		t.Helper()
		recs, err := st.ListJobs(ctx, full)
		if err != nil {
			t.Fatal(err)
		}
		return recs[2:7]
	}
	check := func(when string, wantHits, wantMisses int64) []*store.JobRecord {
		t.Helper()
		h0, m0 := st.ListedStats()
		got, err := st.ListJobs(ctx, page)
		if err != nil {
			t.Fatal(err)
		}
		h, m := st.ListedStats()
		if h-h0 != wantHits || m-m0 != wantMisses {
			t.Errorf("%s: %d kept and %d read whole, want %d and %d", when, h-h0, m-m0, wantHits, wantMisses)
		}
		w := want()
		if len(got) != len(w) {
			t.Fatalf("%s: %d jobs, want %d", when, len(got), len(w))
		}
		for i := range got {
			if got[i].Version != w[i].Version || got[i].Job.UUID != w[i].Job.UUID || got[i].UserName != w[i].UserName ||
				got[i].Job.Request.Docker.Image != w[i].Job.Request.Docker.Image || got[i].Job.State.Status != w[i].Job.State.Status {
				t.Errorf("%s: job %d is %s (%s, %s, version %d), want %s (%s, %s, version %d)", when, i, got[i].Job.UUID, got[i].UserName,
					got[i].Job.State.Status, got[i].Version, w[i].Job.UUID, w[i].UserName, w[i].Job.State.Status, w[i].Version)
			}
		}
		return got
	}
	got := check("first list", 0, 5)
	got[0].Job.Request.Docker.Image = "changed by a caller"
	got[1].Job.State.EventTimes[job.StatusRunning] = time.Now()
	for _, when := range []string{"same list again", "and again"} { // records made, then records kept
		got = check(when, 5, 0)
		if got[0].Job.Request.Docker.Image != "debian:stable" || len(got[1].Job.State.EventTimes) != 1 {
			t.Errorf("%s: a caller's change reached the kept records: %q, %v", when, got[0].Job.Request.Docker.Image, got[1].Job.State.EventTimes)
		}
		got[0].Job.Request.Docker.Image = "changed by a caller"
		got[1].Job.State.EventTimes[job.StatusRunning] = time.Now()
	}
	if _, err := st.TransitionJob(ctx, got[2].Job.UUID, []job.Status{job.StatusQueued}, job.StatusCancelled, store.Event{Actor: "owner"}); err != nil {
		t.Fatal(err)
	}
	got = check("after a job's change", 4, 1)
	if got[2].Job.State.Status != job.StatusCancelled {
		t.Errorf("the change does not show: %s", got[2].Job.State.Status)
	}
	if _, err := st.DB().ExecContext(ctx, `UPDATE users SET name = 'alicia' WHERE id = $1`, u.ID); err != nil {
		t.Fatal(err)
	}
	got = check("after the owner's change", 0, 5)
	if got[0].UserName != "alicia" {
		t.Errorf("the owner's new name does not show: %q", got[0].UserName)
	}
	check("after the owner's change, again", 5, 0)
	if _, err := st.DB().ExecContext(ctx, `UPDATE projects SET name = 'sight', gid = 4343 WHERE id = $1`, p.ID); err != nil {
		t.Fatal(err)
	}
	got = check("after the project's change", 0, 5)
	if got[0].ProjectName != "sight" || got[0].ProjectGID != 4343 {
		t.Errorf("the project's new name does not show: %q %d", got[0].ProjectName, got[0].ProjectGID)
	}
	// Sorted by the owner's name, the list reads the users' rows too.
	byOwner := page
	byOwner.Sort = "-user"
	if recs, err := st.ListJobs(ctx, byOwner); err != nil || len(recs) != 5 || recs[0].UserName != "alicia" {
		t.Fatalf("sorted by owner: %d jobs, %v", len(recs), err)
	}
	// Without the generation's row (an operator's doing), nothing is taken for kept.
	if _, err := st.DB().ExecContext(ctx, `DELETE FROM identity_generation`); err != nil {
		t.Fatal(err)
	}
	check("without the generation", 0, 5)
	if _, err := st.DB().ExecContext(ctx, `UPDATE users SET name = 'ali' WHERE id = $1`, u.ID); err != nil {
		t.Fatal(err)
	}
	if got = check("without the generation, after the owner's change", 0, 5); got[0].UserName != "ali" {
		t.Errorf("without the generation, the owner's new name does not show: %q", got[0].UserName)
	}
	if _, err := st.DB().ExecContext(ctx, `INSERT INTO identity_generation (gen) VALUES (nextval('identity_generation_seq'))`); err != nil {
		t.Fatal(err)
	}
	check("with a generation again", 0, 5)
	check("with a generation again, twice", 5, 0)
	// Inside a transaction that changes a job (twice: the row keeps the transaction's xmin and
	// its now()), the list shows each change; after a rollback the job is listed as it was.
	err := st.WithTx(ctx, func(tx *store.Store) error {
		if _, err := tx.TransitionJob(ctx, got[3].Job.UUID, []job.Status{job.StatusQueued}, job.StatusCancelled, store.Event{Actor: "owner"}); err != nil {
			return err
		}
		recs, err := tx.ListJobs(ctx, page)
		if err != nil {
			return err
		}
		if recs[3].Job.State.Status != job.StatusCancelled {
			t.Errorf("inside the transaction: %s", recs[3].Job.State.Status)
		}
		if _, err := tx.TransitionJob(ctx, got[3].Job.UUID, []job.Status{job.StatusCancelled}, job.StatusDeleted, store.Event{Actor: "owner"}); err != nil {
			return err
		}
		if recs, err = tx.ListJobs(ctx, page); err != nil {
			return err
		}
		if recs[3].Job.State.Status != job.StatusDeleted {
			t.Errorf("inside the transaction, after a second change: %s", recs[3].Job.State.Status)
		}
		return errors.New("roll back")
	})
	if err == nil {
		t.Fatal("the transaction was not rolled back")
	}
	got = check("after the rollback", 5, 0)
	if got[3].Job.State.Status != job.StatusQueued {
		t.Errorf("after the rollback: %s", got[3].Job.State.Status)
	}
}

// A list for a caller that only reads (JobFilter.Shared) gets the kept records themselves, the
// same ones at every list while the rows stay as they are; any other list gets copies.
func TestSharedListsGetTheKeptRecords(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	for range 3 {
		createJob(t, st, u, p, job.StatusQueued)
	}
	f := store.JobFilter{UserIDs: []int64{u.ID}, Visible: &store.Visibility{UserID: u.ID, ProjectIDs: []int64{p.ID}}, Limit: 5}
	list := func(shared bool) []*store.JobRecord {
		t.Helper()
		f.Shared = shared
		recs, err := st.ListJobs(ctx, f)
		if err != nil || len(recs) != 3 {
			t.Fatalf("list: %d jobs, %v", len(recs), err)
		}
		return recs
	}
	list(false) // the records are made and kept
	a, b, c := list(true), list(true), list(false)
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("job %d: two shared lists got different records", i)
		}
		if c[i] == a[i] || c[i].Job == a[i].Job {
			t.Errorf("job %d: a list that may change its records got the kept one", i)
		}
	}
}
