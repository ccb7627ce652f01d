package job

import (
	"testing"
	"time"
)

func TestRestartOf(t *testing.T) {
	j := mustParse(t, []byte(`{"name": "r", "request": {"resources": {"cpus": 1, "gpus": 0, "cpuMemoryGb": 1},
	  "docker": {"image": "debian:stable"}, "scheduling": {"restartable": true, "minDuration": "1 hour", "maxDuration": "8 hours"}}}`))
	j.UUID = "11111111-1111-4111-8111-111111111111"
	j.State.Status = StatusHalted
	r, err := RestartOf(j, "22222222-2222-4222-8222-222222222222", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if r.UUID == j.UUID || r.State.Status != StatusQueued || time.Duration(r.Request.Scheduling.MaxDuration) != 7*time.Hour {
		t.Fatalf("restart job: uuid %s status %s max %s", r.UUID, r.State.Status, r.Request.Scheduling.MaxDuration)
	}
	if r.RestartInfo == nil || r.RestartInfo.InitialJobUUID != j.UUID || r.RestartInfo.RestartCount != 1 {
		t.Fatalf("restart info %+v", r.RestartInfo)
	}
	r.State.Status = StatusHalted
	r2, err := RestartOf(r, "33333333-3333-4333-8333-333333333333", 6*time.Hour+30*time.Minute)
	if err != nil || r2.RestartInfo.InitialJobUUID != j.UUID || r2.RestartInfo.RestartCount != 2 ||
		time.Duration(r2.Request.Scheduling.MaxDuration) != 30*time.Minute || time.Duration(r2.Request.Scheduling.MinDuration) != 30*time.Minute {
		t.Fatalf("second restart: %+v %v %+v", r2.RestartInfo, err, r2.Request.Scheduling)
	}
	if _, err := RestartOf(r2, "x", 30*time.Minute); err == nil {
		t.Fatal("a job with no maxDuration left was restarted")
	}
	j.Request.Scheduling.Restartable = false
	if _, err := RestartOf(j, "x", 0); err == nil {
		t.Fatal("a non-restartable job was restarted")
	}
	if j.Request.Scheduling.Restartable || time.Duration(j.Request.Scheduling.MaxDuration) != 8*time.Hour {
		t.Fatal("RestartOf changed the original job")
	}
}
