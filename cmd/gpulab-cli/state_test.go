package main

import (
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/job"
)

func TestStateCommands(t *testing.T) {
	tests := []struct {
		cmd      string
		from     job.Status
		wantBody string
		want     job.Status
	}{
		{"cancel", job.StatusRunning, "CANCELLED", job.StatusCancelled},
		{"halt", job.StatusRunning, "MUSTHALT", job.StatusMustHalt},
		{"hold", job.StatusQueued, "ONHOLD", job.StatusOnHold},
		{"release", job.StatusOnHold, "QUEUED", job.StatusQueued},
	}
	for _, tt := range tests {
		t.Run(tt.cmd, func(t *testing.T) {
			e := newTestEnv(t)
			j := queuedJob(queuedID, aliceURN)
			j.State.Status = tt.from
			e.m.add(j)
			r := e.run(tt.cmd, queuedID[:8])
			if r.code != exitOK || r.stdout != queuedID[:8]+"\n" {
				t.Fatalf("%s:\n%s", tt.cmd, r)
			}
			reqs := e.m.reqs("PUT", "jobs/"+queuedID[:8]+"/state/status")
			if len(reqs) != 1 || reqs[0].Body != tt.wantBody || reqs[0].UserURN != aliceURN {
				t.Errorf("requests = %+v, want one PUT with %q", reqs, tt.wantBody)
			}
			if got := e.m.job(t, queuedID).State.Status; got != tt.want {
				t.Errorf("status = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestStateCommandConflicts(t *testing.T) {
	e := newTestEnv(t)
	done := queuedJob(queuedID, aliceURN)
	done.State.Status = job.StatusFinished
	e.m.add(done)
	e.m.add(queuedJob(bobsID, aliceURN))
	r := e.run("cancel", queuedID, bobsID, "nosuchjob")
	if r.code != exitError {
		t.Fatalf("cancel with one good and two bad IDs:\n%s", r)
	}
	if r.stdout != bobsID+"\n" {
		t.Errorf("stdout must list only the job cancelled: %q", r.stdout)
	}
	for _, w := range []string{
		"Error: set job " + queuedID + " to CANCELLED: job is FINISHED: an ended job cannot become CANCELLED",
		"no job nosuchjob", "cancel failed for 2 of 3 jobs",
	} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
		}
	}
	r = e.run("hold", queuedID)
	if r.code != exitError || strings.Count(r.stderr, "Error:") != 1 {
		t.Errorf("a single failure is reported once:\n%s", r)
	}
}

func TestHoldAndReleaseAll(t *testing.T) {
	e := newTestEnv(t)
	e.m.add(queuedJob(queuedID, aliceURN))
	e.m.add(queuedJob(bobsID, bobURN))
	r := e.run("hold", "--all")
	if r.code != exitOK || r.stdout != queuedID+"\n" {
		t.Fatalf("hold --all must hold only alice's queued job:\n%s", r)
	}
	if e.m.job(t, bobsID).State.Status != job.StatusQueued {
		t.Error("another user's job was held")
	}
	r = e.run("release", "-a")
	if r.code != exitOK || r.stdout != queuedID+"\n" || e.m.job(t, queuedID).State.Status != job.StatusQueued {
		t.Errorf("release -a:\n%s", r)
	}
	r = e.run("release", "-a")
	if r.code != exitOK || r.stdout != "" || !strings.Contains(r.stderr, "no ONHOLD jobs") {
		t.Errorf("release -a with nothing on hold:\n%s", r)
	}
}

func TestRm(t *testing.T) {
	e := newTestEnv(t)
	done := queuedJob(queuedID, aliceURN)
	done.State.Status = job.StatusFinished
	e.m.add(done)
	r := e.run("rm", queuedID, "-f", "-r", "-F")
	if r.code != exitOK || r.stdout != queuedID+"\n" {
		t.Fatalf("rm:\n%s", r)
	}
	q := e.m.reqs("DELETE", "jobs/"+queuedID)[0].Query
	for _, k := range []string{"finished", "real", "force"} {
		if strings.Join(q[k], "") != "true" {
			t.Errorf("query %s = %v", k, q[k])
		}
	}
	r = e.run("rm", queuedID, "--finished")
	if q := e.m.reqs("DELETE", "jobs/"+queuedID)[1].Query; len(q) != 1 || strings.Join(q["finished"], "") != "true" {
		t.Errorf("rm --finished sent %v\n%s", q, r)
	}
}

func TestRmAllFinished(t *testing.T) {
	e := newTestEnv(t)
	ids := map[string]job.Status{
		"a0000001-0000-4000-8000-000000000001": job.StatusFinished,
		"a0000002-0000-4000-8000-000000000002": job.StatusFailed,
		"a0000003-0000-4000-8000-000000000003": job.StatusRunning,
		"a0000004-0000-4000-8000-000000000004": job.StatusCancelled,
	}
	for id, st := range ids {
		j := queuedJob(id, aliceURN)
		j.State.Status = st
		e.m.add(j)
	}
	bobs := queuedJob(bobsID, bobURN)
	bobs.State.Status = job.StatusFinished
	e.m.add(bobs)
	r := e.run("rm", "--all-finished")
	if r.code != exitOK {
		t.Fatalf("rm --all-finished:\n%s", r)
	}
	for id, st := range ids {
		got := e.m.job(t, id).State.Status
		if st.Ended() && got != job.StatusDeleted || !st.Ended() && got != st {
			t.Errorf("job %s was %s, now %s", id, st, got)
		}
	}
	if e.m.job(t, bobsID).State.Status != job.StatusFinished {
		t.Error("another user's job was deleted")
	}
	if n := strings.Count(r.stdout, "\n"); n != 3 {
		t.Errorf("%d IDs printed, want 3:\n%s", n, r.stdout)
	}
}
