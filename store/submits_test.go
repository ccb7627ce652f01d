package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
)

// Submissions that wait while others are stored are stored together, in one statement, each
// as it would be alone: its row, its first event, its key (a key used before, or twice in the
// batch, gives the one job), its reservations, cluster and restart; one whose caller gave up
// before the batch left is not stored; a job the statement cannot store (no such project)
// fails alone, the others stored one by one.
func TestSubmitsTogether(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "proj")
	before := createJob(t, st, u, p, job.StatusQueued) // stored alone
	if _, err := st.DB().ExecContext(ctx, `UPDATE jobs SET submit_key = 'k-old' WHERE uuid = $1`, before.UUID); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		j        *job.Job
		existing string
		err      error
	}
	newJob := func(name string) *job.Job {
		j, err := job.Parse([]byte(helloWorld), job.DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		j.UUID, j.Name = uuid.NewString(), name
		j.Owner = job.Owner{UserURN: u.URN, UserEmail: u.Email, ProjectURN: p.URN}
		j.State.Status = job.StatusQueued
		return j
	}
	run := func(batch map[string]func() (*job.Job, int64, string), gaveUp string) (map[string]outcome, int64, int64) {
		t.Helper()
		statements, jobs := st.SubmitStats()
		waiting, release := st.HoldSubmits()
		var wg sync.WaitGroup
		var mu sync.Mutex
		got := map[string]outcome{}
		cctx, cancel := context.WithCancel(ctx)
		for name, mk := range batch {
			j, project, key := mk()
			c := ctx
			if name == gaveUp {
				c = cctx
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				existing, err := st.SubmitJob(c, j, u.ID, project, "submitted by "+name, key)
				mu.Lock()
				got[name] = outcome{j, existing, err}
				mu.Unlock()
			}()
		}
		for waiting() < len(batch) {
			time.Sleep(time.Millisecond)
		}
		if gaveUp != "" {
			cancel()
			for {
				mu.Lock()
				n := len(got)
				mu.Unlock()
				if n == 1 {
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
		release()
		wg.Wait()
		cancel()
		after, stored := st.SubmitStats()
		t.Logf("%d submissions: %d statements, %d jobs stored", len(batch), after-statements, stored-jobs)
		return got, after - statements, stored - jobs
	}

	plain := func(name string) func() (*job.Job, int64, string) {
		return func() (*job.Job, int64, string) { return newJob(name), p.ID, "" }
	}
	keyed := func(name, key string) func() (*job.Job, int64, string) {
		return func() (*job.Job, int64, string) { return newJob(name), p.ID, key }
	}
	resID := uuid.NewString()
	got, statements, jobs := run(map[string]func() (*job.Job, int64, string){
		"a": plain("a"), "b": plain("b"), "c": plain("c"),
		"twice-1": keyed("twice-1", "k-twice"), "twice-2": keyed("twice-2", "k-twice"),
		"old key": keyed("old key", "k-old"),
		"reserved": func() (*job.Job, int64, string) {
			j := newJob("reserved")
			j.Request.Scheduling.ReservationIDs = []string{resID}
			j.RestartInfo = &job.RestartInfo{InitialJobUUID: before.UUID, RestartCount: 2}
			return j, p.ID, ""
		},
		"gave up": plain("gave up"),
	}, "gave up")
	if statements != 1 || jobs != 5 {
		t.Errorf("SubmitStats: %d statements, %d jobs; want the held submissions in 1 statement, 5 jobs stored (a, b, c, reserved and one of twice)", statements, jobs)
	}
	if o := got["gave up"]; o.err == nil || o.j.State.Created.IsZero() == false {
		t.Errorf("a submission given up on before its batch left: %+v", o)
	}
	if n := jobRows(t, st, got["gave up"].j.UUID); n != 0 {
		t.Errorf("the submission given up on was stored")
	}
	for _, name := range []string{"a", "b", "c", "reserved"} {
		o := got[name]
		if o.err != nil || o.existing != "" || o.j.State.Created.IsZero() {
			t.Fatalf("%s: %+v", name, o)
		}
		rec, err := st.GetJob(ctx, o.j.UUID)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if rec.Job.Name != name || rec.Job.State.Status != job.StatusQueued || !rec.Job.State.Created.Equal(o.j.State.Created) ||
			rec.Job.Request.Resources.ClusterID != 1 || rec.Job.Request.Resources.GPUs != 1 || !rec.Job.Request.Scheduling.Interactive {
			t.Errorf("%s stored as %+v", name, rec.Job)
		}
		if n := rowsOfJob(t, st, "job_events", o.j.UUID); n != 1 {
			t.Errorf("%s has %d events, want its first", name, n)
		}
		var msg string
		if err := st.DB().QueryRowContext(ctx, `SELECT message FROM job_events WHERE job_uuid = $1`, o.j.UUID).Scan(&msg); err != nil || msg != "submitted by "+name {
			t.Errorf("%s's first event says %q (%v)", name, msg, err)
		}
	}
	var initial string
	var count int
	var resText string
	if err := st.DB().QueryRowContext(ctx, `SELECT reservation_ids::text FROM jobs WHERE uuid = $1`, got["reserved"].j.UUID).Scan(&resText); err != nil || resText != "{"+resID+"}" {
		t.Errorf("reservations stored as %q (%v), want {%s}", resText, err, resID)
	}
	if err := st.DB().QueryRowContext(ctx, `SELECT restart_initial_uuid::text, restart_count FROM jobs WHERE uuid = $1`,
		got["reserved"].j.UUID).Scan(&initial, &count); err != nil || initial != before.UUID || count != 2 {
		t.Errorf("restart stored as %s, %d (%v)", initial, count, err)
	}
	var none string
	if err := st.DB().QueryRowContext(ctx, `SELECT reservation_ids::text FROM jobs WHERE uuid = $1`, got["a"].j.UUID).Scan(&none); err != nil || none != "{}" {
		t.Errorf("no reservations stored as %q (%v)", none, err)
	}
	if o := got["old key"]; o.err != nil || o.existing != before.UUID {
		t.Errorf("a key used before: %+v, want job %s", o, before.UUID)
	}
	t1, t2 := got["twice-1"], got["twice-2"]
	if t1.err != nil || t2.err != nil || (t1.existing == "") == (t2.existing == "") {
		t.Fatalf("a key twice in one batch: %+v and %+v; want one job made and the other answered with it", t1, t2)
	}
	made, answered := t1, t2
	if made.existing != "" {
		made, answered = t2, t1
	}
	if answered.existing != made.j.UUID {
		t.Errorf("the second submission of a key got %s, want %s", answered.existing, made.j.UUID)
	}

	// A job of no project fails the batch's statement: it fails alone.
	got, _, jobs = run(map[string]func() (*job.Job, int64, string){
		"d": plain("d"), "e": plain("e"),
		"nowhere": func() (*job.Job, int64, string) { return newJob("nowhere"), p.ID + 1000, "" },
	}, "")
	if jobs != 2 {
		t.Errorf("%d jobs stored, want the 2 of a project", jobs)
	}
	if o := got["nowhere"]; o.err == nil {
		t.Errorf("a job of no project was stored: %+v", o)
	}
	for _, name := range []string{"d", "e"} {
		if o := got[name]; o.err != nil || jobRows(t, st, o.j.UUID) != 1 || rowsOfJob(t, st, "job_events", o.j.UUID) != 1 {
			t.Errorf("%s, in a batch with a job that cannot be stored: %+v", name, o)
		}
	}
}

// jobRows counts the jobs of uuid id (0 or 1).
func jobRows(t *testing.T, st *store.Store, id string) int {
	t.Helper()
	var n int
	if err := st.DB().QueryRow(`SELECT count(*) FROM jobs WHERE uuid = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
