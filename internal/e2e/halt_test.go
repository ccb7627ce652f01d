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

// A user with less usage needs the GPU that a heavy user's restartable job, past its
// minDuration, holds: the scheduler halts it (SCORE), it exits 123 on SIGUSR1, its restart job
// is queued, and the light user's job runs in the freed room.
func TestScoreHaltWithRestart(t *testing.T) {
	e := newEnv(t)
	bob := e.m.AddUser("bob", false, "", "vision")
	e.startSlave(slaveOpts{name: "s1", cluster: 1, fakeGPUs: "1xV100-32GB"})
	oneGPU := func(r map[string]any) {
		r["resources"].(map[string]any)["gpus"] = 1
		r["scheduling"] = map[string]any{"restartable": true, "minDuration": "1 minute", "maxDuration": "1 day"}
	}
	status, data, _ := e.m.Do(bob, "POST", v31+"/jobs", strings.NewReader(e.jobFile("heavy", haltScript, oneGPU)))
	if status != 201 {
		t.Fatalf("bob submit: %d %s", status, data)
	}
	heavy := strings.TrimSpace(string(data))
	e.waitFor(heavy, job.StatusRunning)
	// bob has used a lot lately, and his job has run past its minDuration (the clock is moved
	// by back-dating: a real minute is too long for a test).
	if _, err := e.m.Store.DB().Exec(`INSERT INTO user_tallies (user_id, tally) VALUES ($1, 500)
		ON CONFLICT (user_id) DO UPDATE SET tally = 500, updated_at = now()`, bob.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Store.DB().Exec(`UPDATE jobs SET event_times = jsonb_set(event_times, '{RUNNING}', to_jsonb(now() - interval '10 minutes')) WHERE uuid = $1`, heavy); err != nil {
		t.Fatal(err)
	}
	light := e.submit(e.jobFile("light", "echo light runs", func(r map[string]any) { r["resources"].(map[string]any)["gpus"] = 1 }))
	h := e.waitFor(heavy, job.StatusHalted)
	if len(h.State.Scheduling.HaltEvents) == 0 || h.State.Scheduling.HaltEvents[0].Reason != "SCORE" {
		t.Errorf("halt events of the halted job: %+v", h.State.Scheduling.HaltEvents)
	}
	e.waitFor(light, job.StatusFinished)
	l := e.job(light)
	if len(l.State.Scheduling.HaltEvents) == 0 || !strings.Contains(strings.Join(l.State.Scheduling.HaltEvents[0].HaltedJobs, ","), heavy) {
		t.Errorf("the started job does not record the halt it caused: %+v", l.State.Scheduling.HaltEvents)
	}
	_, data, _ = e.m.Do(bob, "GET", v31+"/jobs?pending=true&running=true", nil)
	var list []job.Job
	_ = json.Unmarshal(data, &list)
	found := false
	for _, j := range list {
		found = found || (j.RestartInfo != nil && j.RestartInfo.InitialJobUUID == heavy)
	}
	if !found {
		t.Errorf("no restart job for the halted job: %s", data)
	}
}

// A queued job whose notAfter passes before room frees fails with that reason.
func TestNotAfterFailsQueuedJob(t *testing.T) {
	e := newEnv(t)
	e.startSlave(slaveOpts{name: "s1", cluster: 1, fakeGPUs: "1xV100-32GB"})
	gpu := func(r map[string]any) { r["resources"].(map[string]any)["gpus"] = 1 }
	holder := e.submit(e.jobFile("holder", `while true; do sleep 0.2; done`, gpu))
	e.waitFor(holder, job.StatusRunning)
	// Far enough ahead that the submission, on a loaded machine, is still before it (a notAfter
	// in the past is refused).
	deadline := time.Now().Add(8 * time.Second).UTC().Format(time.RFC3339)
	late := e.submit(e.jobFile("late", "echo too late", func(r map[string]any) {
		gpu(r)
		r["scheduling"] = map[string]any{"notAfter": deadline}
	}))
	e.waitFor(late, job.StatusFailed)
	if ev := e.events(late); !strings.Contains(ev, "notAfter") {
		t.Errorf("failure reason: %s", ev)
	}
	e.put(holder, "CANCELLED")
}

// An interactive job of the project owning a private cluster halts a guest that has run its
// minDuration (reason CLUSTER), and starts in its place.
func TestInteractiveOwnerHaltsGuest(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	bob := e.m.AddUser("bob", false, "", "audio")
	e.startSlave(slaveOpts{name: "priv", cluster: 5, fakeGPUs: "1xV100-32GB"})
	vision, err := e.m.Store.GetProjectByName(ctx, "vision")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.m.Store.SetClusterPrivate(ctx, 5, true); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Store.AddClusterOwner(ctx, 5, vision.ID); err != nil {
		t.Fatal(err)
	}
	// bob's guest job: no clusterId, a short minDuration, restartable.
	status, data, _ := e.m.Do(bob, "POST", v31+"/jobs", strings.NewReader(e.jobFile("guest", haltScript, func(r map[string]any) {
		r["resources"].(map[string]any)["gpus"] = 1
		r["scheduling"] = map[string]any{"restartable": true, "minDuration": "10 minutes", "maxDuration": "1 day"}
	})))
	if status != 201 {
		t.Fatalf("bob submit: %d %s", status, data)
	}
	guest := strings.TrimSpace(string(data))
	// bob's job is not visible to alice (another project): watch it in the store.
	waitStore := func(id string, want job.Status) *job.Job {
		t.Helper()
		var j *job.Job
		waitUntil(t, fmt.Sprintf("job %s reaching %s", id, want), func() bool {
			rec, err := e.m.Store.GetJob(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			j = rec.Job
			return j.State.Status == want
		})
		return j
	}
	waitStore(guest, job.StatusRunning)
	if _, err := e.m.Store.DB().Exec(`UPDATE jobs SET event_times = jsonb_set(event_times, '{RUNNING}', to_jsonb(now() - interval '20 minutes')) WHERE uuid = $1`, guest); err != nil {
		t.Fatal(err)
	}
	mine := e.submit(e.jobFile("notebook", "echo owner runs", func(r map[string]any) {
		r["resources"].(map[string]any)["gpus"] = 1
		r["resources"].(map[string]any)["clusterId"] = 5
		r["scheduling"] = map[string]any{"interactive": true}
	}))
	g := waitStore(guest, job.StatusHalted)
	if len(g.State.Scheduling.HaltEvents) == 0 || g.State.Scheduling.HaltEvents[0].Reason != "CLUSTER" {
		t.Errorf("guest's halt events: %+v", g.State.Scheduling.HaltEvents)
	}
	e.waitFor(mine, job.StatusFinished)
}
