package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
)

// A whole-slave reservation for alice, booked while bob's long job runs there and starting a
// few seconds later. Before the start, bob's next job is kept off the free GPU (its
// maxDuration reaches into the window; a job that ends before it is a table test, since
// maxDuration is at least a minute); alice's job waits for the start. At the start alice's
// two-GPU job halts bob's job (reason RESERVATION), which is past its minDuration, and runs;
// bob's long job still waits, and says why.
func TestReservationWindow(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	bob := e.m.AddUser("bob", false, "", "audio")
	admin := e.m.AddUser("dave", true, "", "admins")
	e.startSlave(slaveOpts{name: "s1", cluster: 1, fakeGPUs: "2xV100-32GB"})
	bobSubmits := func(name, script string, gpus int, sched map[string]any) string {
		t.Helper()
		status, data, _ := e.m.Do(bob, "POST", v31+"/jobs", strings.NewReader(e.jobFile(name, script, func(r map[string]any) {
			r["resources"].(map[string]any)["gpus"] = gpus
			r["scheduling"] = sched
		})))
		if status != 201 {
			t.Fatalf("bob submits %s: %d %s", name, status, data)
		}
		return strings.TrimSpace(string(data))
	}
	// bob's jobs are in another project: alice cannot see them, so they are watched in the store.
	stored := func(id string) *job.Job {
		t.Helper()
		rec, err := e.m.Store.GetJob(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Job
	}
	waitStored := func(id string, want job.Status) *job.Job {
		t.Helper()
		deadline := time.Now().Add(waitLimit)
		for time.Now().Before(deadline) {
			if j := stored(id); j.State.Status == want {
				return j
			}
			time.Sleep(100 * time.Millisecond)
		}
		evs, _ := e.m.Store.ListJobEvents(ctx, id)
		t.Fatalf("job %s did not reach %s within %s (it is %s); events: %+v", id, want, waitLimit, stored(id).State.Status, evs)
		return nil
	}

	squatter := bobSubmits("squatter", haltScript, 1, map[string]any{"restartable": true, "minDuration": "1 minute", "maxDuration": "1 day"})
	waitStored(squatter, job.StatusRunning)
	// Its minDuration has passed (back-dated: a real minute is too long for a test).
	if _, err := e.m.Store.DB().Exec(`UPDATE jobs SET event_times = jsonb_set(event_times, '{RUNNING}', to_jsonb(now() - interval '10 minutes')) WHERE uuid = $1`, squatter); err != nil {
		t.Fatal(err)
	}

	start := time.Now().Add(8 * time.Second).UTC().Truncate(time.Second)
	body := fmt.Sprintf(`{"name": "demo day", "slaveNames": [%q], "start": %q, "end": %q, "users": ["alice"]}`,
		slaveName("s1"), start.Format(time.RFC3339), start.Add(time.Hour).Format(time.RFC3339))
	status, data, _ := e.m.Do(admin, "POST", v31+"/reservations", strings.NewReader(body))
	if status != 201 {
		t.Fatalf("create reservation: %d %s", status, data)
	}
	var res struct{ ID string }
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}

	long := bobSubmits("long", "echo long done", 1, map[string]any{"maxDuration": "1 day"})
	mine := e.submit(e.jobFile("mine", "echo demo runs", func(r map[string]any) {
		r["resources"].(map[string]any)["gpus"] = 2
		r["scheduling"] = map[string]any{"reservationIds": []string{res.ID}}
	}))
	// Before the window: bob's long job is kept off the free GPU and alice's job waits for the
	// window, each saying so once a pass has explained the queue. On a slow machine the window
	// may start before any pass did: then there is nothing to check.
	const longWhy, mineWhy = `reservation "demo day"`, "waiting for reservation"
	var longJob, mineJob *job.Job
	explained := func(j *job.Job, why string) bool {
		return strings.Contains(strings.Join(j.State.Scheduling.QueuedExplanations, "\n"), why)
	}
	for time.Now().Before(start) {
		longJob, mineJob = stored(long), e.job(mine)
		if longJob.State.Status != job.StatusQueued || mineJob.State.Status != job.StatusQueued {
			break // wrong unless the window has started: checked below
		}
		if explained(longJob, longWhy) && explained(mineJob, mineWhy) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if time.Now().Before(start) || longJob != nil && len(longJob.State.Scheduling.QueuedExplanations) > 0 {
		if longJob.State.Status != job.StatusQueued || !explained(longJob, longWhy) {
			t.Errorf("before the window, bob's long job is %s: %q", longJob.State.Status, longJob.State.Scheduling.QueuedExplanations)
		}
		if mineJob.State.Status != job.StatusQueued || !explained(mineJob, mineWhy) {
			t.Errorf("before the window, alice's job is %s: %q", mineJob.State.Status, mineJob.State.Scheduling.QueuedExplanations)
		}
	} else {
		t.Log("the window started before a pass explained the queue (slow machine): skipping the before-the-window checks")
	}

	h := waitStored(squatter, job.StatusHalted)
	if len(h.State.Scheduling.HaltEvents) == 0 || h.State.Scheduling.HaltEvents[0].Reason != "RESERVATION" {
		t.Errorf("halt events of bob's job: %+v", h.State.Scheduling.HaltEvents)
	}
	m := e.waitFor(mine, job.StatusFinished)
	if m.State.Scheduling.AssignedSlaveName != slaveName("s1") || m.State.EventTimes[job.StatusRunning].Before(start) {
		t.Errorf("alice's job ran on %q at %v; the window starts %v", m.State.Scheduling.AssignedSlaveName, m.State.EventTimes[job.StatusRunning], start)
	}
	// Explanations are refreshed by the next pass after alice's job ended.
	waitUntil(t, "the explanation that the slave is reserved, for bob's long job", func() bool {
		j := stored(long)
		return j.State.Status == job.StatusQueued && explained(j, "slave "+slaveName("s1")+" is reserved")
	})
}
