package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
)

func TestEndJobRestartsHaltedRestartableJob(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	j, err := job.Parse([]byte(`{"name": "r", "request": {"resources": {"cpus": 1, "gpus": 0, "cpuMemoryGb": 1},
	  "docker": {"image": "debian:stable"}, "scheduling": {"restartable": true, "maxDuration": "1 hour"}}}`), job.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	j.UUID, j.State.Status = "aaaaaaaa-0000-4000-8000-000000000001", job.StatusQueued
	if err := st.CreateJob(ctx, j, u.ID, p.ID, "test"); err != nil {
		t.Fatal(err)
	}
	for _, step := range [][2]job.Status{{job.StatusQueued, job.StatusAssigned}, {job.StatusAssigned, job.StatusStarting}, {job.StatusStarting, job.StatusRunning}} {
		if _, err := st.TransitionJob(ctx, j.UUID, []job.Status{step[0]}, step[1], store.Event{}); err != nil {
			t.Fatal(err)
		}
	}
	// Pretend it has run for 10 minutes.
	if _, err := st.DB().ExecContext(ctx, `UPDATE jobs SET event_times = jsonb_set(event_times, '{RUNNING}', to_jsonb(now() - interval '10 minutes')) WHERE uuid = $1`, j.UUID); err != nil {
		t.Fatal(err)
	}
	code := 123
	_, restartID, err := st.ChangeJob(ctx, j.UUID, store.Change{From: []job.Status{job.StatusRunning}, To: job.StatusHalted, ExitCode: &code, Restart: true, Released: true})
	if err != nil || restartID == "" {
		t.Fatalf("EndJob: %q %v", restartID, err)
	}
	r, err := st.GetJob(ctx, restartID)
	if err != nil {
		t.Fatal(err)
	}
	left := time.Duration(r.Job.Request.Scheduling.MaxDuration)
	if r.Job.State.Status != job.StatusQueued || r.Job.RestartInfo == nil || r.Job.RestartInfo.RestartCount != 1 || left > 50*time.Minute+time.Second || left < 49*time.Minute {
		t.Fatalf("restart job: %s %+v maxDuration %s", r.Job.State.Status, r.Job.RestartInfo, left)
	}
	old, _ := st.GetJob(ctx, j.UUID)
	if old.Job.State.Resources == nil || old.Job.State.Resources.ExitCode == nil || *old.Job.State.Resources.ExitCode != 123 {
		t.Fatalf("exit code not kept: %+v", old.Job.State.Resources)
	}
}
