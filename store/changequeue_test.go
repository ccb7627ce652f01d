package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
)

// TestChangesTogether: state changes that wait while others are made are made together, in one
// statement (the change queue), each with the outcome it gets alone: a slave's start made, a
// refused certificate, a job that does not exist or is not the slave's, a conflict naming the
// state found, an end with its exit code, final usage and what the job still holds on its
// slave, and the same job's change twice (a slave's retry beside its first try: the second
// waits for the next statement and finds the change made). A change the statement cannot make
// (a job id that is not a uuid) fails alone, the others made one by one.
func TestChangesTogether(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	node1(t, st)
	slaveCerts(t, st)
	var assigned []string
	attempts := map[string]int{}
	for i := range 4 {
		j := createJob(t, st, u, p, job.StatusQueued)
		attempts[j.UUID] = placeOn(t, st, j.UUID, i, job.StatusAssigned)
		assigned = append(assigned, j.UUID)
	}
	running := createJob(t, st, u, p, job.StatusQueued).UUID
	attempts[running] = placeOn(t, st, running, 5, job.StatusRunning)
	queued := createJob(t, st, u, p, job.StatusQueued).UUID
	unknown := "00000000-0000-4000-8000-000000000000"

	type call struct {
		id string
		c  store.Change
	}
	slaveChange := func(id string, from, to job.Status, cert string) store.Change {
		return store.Change{From: []job.Status{from}, To: to, Attempt: store.Attempt(attempts[id]), Slave: "node1", CertSerial: cert,
			Event: store.Event{Actor: "slave node1", Message: "reported " + string(to)}}
	}
	start := func(id string) call {
		return call{id, slaveChange(id, job.StatusAssigned, job.StatusStarting, "c-valid")}
	}
	exit := 3
	end := slaveChange(running, job.StatusRunning, job.StatusFailed, "c-valid")
	end.ExitCode, end.Usage, end.WakeScheduler = &exit, json.RawMessage(`{"gpuUtilization": 0.5}`), true
	type outcome struct {
		place store.JobPlace
		err   error
	}
	run := func(calls map[string]call) map[string]outcome {
		t.Helper()
		waiting, release := st.HoldChanges()
		var wg sync.WaitGroup
		var mu sync.Mutex
		got := map[string]outcome{}
		for name, c := range calls {
			wg.Go(func() {
				place, _, err := st.SlaveChangeJob(ctx, c.id, c.c)
				mu.Lock()
				got[name] = outcome{place, err}
				mu.Unlock()
			})
		}
		for waiting() < len(calls) {
			time.Sleep(time.Millisecond)
		}
		release()
		wg.Wait()
		return got
	}

	statements, changes := st.ChangeStats()
	wakes := st.WakesAsked()
	got := run(map[string]call{
		"start 0": start(assigned[0]), "start 0 again": start(assigned[0]), "start 1": start(assigned[1]), "start 2": start(assigned[2]),
		"revoked":         {assigned[3], slaveChange(assigned[3], job.StatusAssigned, job.StatusStarting, "c-revoked")},
		"unknown job":     {unknown, slaveChange(unknown, job.StatusAssigned, job.StatusStarting, "c-valid")},
		"not the slave's": {queued, slaveChange(queued, job.StatusAssigned, job.StatusStarting, "")},
		"conflict":        {assigned[3], slaveChange(assigned[3], job.StatusRunning, job.StatusHalting, "")},
		"end":             {running, end},
	})
	s2, c2 := st.ChangeStats()
	// The same job's two changes cannot share a statement: two statements for the nine.
	if s2-statements != 2 || c2-changes != 9 {
		t.Errorf("%d statements for %d changes, want 2 for 9", s2-statements, c2-changes)
	}

	for _, name := range []string{"start 1", "start 2"} {
		if o := got[name]; o.err != nil || o.place.Status != job.StatusAssigned || o.place.Slave != "node1" || !o.place.QueuedAt.Valid {
			t.Errorf("%s: %+v, want the place it left (ASSIGNED on node1)", name, o)
		}
	}
	// One of the start's two tries made it, the other finds it made (a conflict naming it).
	made, again := got["start 0"], got["start 0 again"]
	if made.err != nil {
		made, again = again, made
	}
	var sc *store.StateConflict
	if made.err != nil || made.place.Status != job.StatusAssigned ||
		!errors.As(again.err, &sc) || sc.Current != job.StatusStarting || sc.Attempt != attempts[assigned[0]] {
		t.Errorf("the start and its retry: %+v and %+v, want one made, the other a conflict naming STARTING", made, again)
	}
	var re *store.CertificateRefusedError
	if o := got["revoked"]; !errors.As(o.err, &re) || re.State != "revoked" {
		t.Errorf("a revoked certificate: %+v", o)
	}
	var we *store.WrongSlaveError
	if o := got["unknown job"]; !errors.As(o.err, &we) || we.Found {
		t.Errorf("an unknown job: %+v, want a *WrongSlaveError not found", o)
	}
	if o := got["not the slave's"]; !errors.As(o.err, &we) || !we.Found || we.Place.Slave != "" {
		t.Errorf("a queued job: %+v, want a *WrongSlaveError found on no slave", o)
	}
	if o := got["conflict"]; !errors.As(o.err, &sc) || sc.Current != job.StatusAssigned || sc.Wanted != job.StatusHalting {
		t.Errorf("a conflict: %+v, want one naming ASSIGNED", o)
	}
	if o := got["end"]; o.err != nil || o.place.Status != job.StatusRunning {
		t.Errorf("the end: %+v", o)
	}

	for _, id := range assigned[:3] {
		events, err := st.ListJobEvents(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		last := events[len(events)-1]
		if p, _ := st.JobPlace(ctx, id, ""); p.Status != job.StatusStarting || last.ToStatus != string(job.StatusStarting) || last.Actor != "slave node1" || last.Message != "reported STARTING" {
			t.Errorf("job %s: %s, last event %+v, want STARTING with its event", id, p.Status, last)
		}
	}
	if p, _ := st.JobPlace(ctx, assigned[3], ""); p.Status != job.StatusAssigned {
		t.Errorf("the job of the refused and the conflicting changes: %s, want it still ASSIGNED", p.Status)
	}
	rec, err := st.GetJob(ctx, running)
	if err != nil {
		t.Fatal(err)
	}
	if s := rec.Job.State; s.Status != job.StatusFailed || s.Resources == nil || s.Resources.ExitCode == nil || *s.Resources.ExitCode != 3 ||
		len(s.Resources.GPUIDs) != 1 || s.Resources.GPUIDs[0] != 5 || string(s.FinalUsageStatistics) != `{"gpuUtilization": 0.5}` {
		t.Errorf("the ended job: %+v", s)
	}
	releases, err := st.ListReleases(ctx, "node1")
	if err != nil {
		t.Fatal(err)
	}
	if len(releases) != 1 || releases[0].JobUUID != running || releases[0].Attempt != attempts[running] {
		t.Errorf("releases %+v, want the ended job's GPUs held until its slave confirms its container gone", releases)
	}
	if st.WakesAsked() == wakes {
		t.Error("the end asked the scheduler to wake: no wake asked")
	}
	// The statement of several changes takes arrays: its connections keep its plan.
	if generic, custom, err := st.ChangePlans(ctx); err != nil || generic == 0 || custom != 0 {
		t.Errorf("the statements of several changes: %d executions of a kept plan, %d planned for themselves (%v), want none of the latter", generic, custom, err)
	}

	// A job id that is not a uuid fails the statement: each change is then made alone.
	got = run(map[string]call{
		"not a uuid": {"not-a-uuid", store.Change{From: []job.Status{job.StatusAssigned}, To: job.StatusQueued}},
		"run 1":      {assigned[1], slaveChange(assigned[1], job.StatusStarting, job.StatusRunning, "c-valid")},
	})
	if o := got["not a uuid"]; o.err == nil || errors.Is(o.err, store.ErrStateConflict) {
		t.Errorf("a change of job \"not-a-uuid\": %+v, want its statement's error", o)
	}
	if o := got["run 1"]; o.err != nil || o.place.Status != job.StatusStarting {
		t.Errorf("the change beside it: %+v, want it made", o)
	}
}
