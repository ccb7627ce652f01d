package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/job"
)

// haltScript traps SIGUSR1 and exits with 123, as imec's restartable example does.
const haltScript = `trap 'echo "saw SIGUSR1"; exit 123' USR1
echo "restart count ${GPULAB_RESTART_COUNT} initial ${GPULAB_RESTART_INITIAL_JOB_ID}"
while true; do sleep 0.2; done`

func TestHaltTrappedRestartsAndIgnoredFails(t *testing.T) {
	e := newEnv(t)
	e.startSlave(slaveOpts{name: "s1", cluster: 1})
	restartable := func(r map[string]any) {
		r["scheduling"] = map[string]any{"restartable": true, "minDuration": "1 minute", "maxDuration": "1 hour"}
	}
	id := e.submit(e.jobFile("halter", haltScript, restartable))
	e.waitFor(id, job.StatusRunning)
	e.waitLog(id, "restart count 0 initial "+id)
	e.put(id, "MUSTHALT")
	j := e.waitFor(id, job.StatusHalted)
	if j.State.Resources.ExitCode == nil || *j.State.Resources.ExitCode != 123 {
		t.Errorf("halted exit code: %+v", j.State.Resources)
	}
	if j.State.EventTimes[job.StatusHalting].IsZero() {
		t.Errorf("no HALTING event time")
	}
	e.waitLog(id, "saw SIGUSR1")
	// The restart job: a new job, same request, restart count 1, seen inside its container.
	var restart *job.Job
	waitUntil(t, "a restart job for "+id, func() bool {
		_, data, _ := e.m.Do(e.alice, "GET", v31+"/jobs?pending=true&running=true", nil)
		var list []job.Job
		_ = json.Unmarshal(data, &list)
		for i := range list {
			if list[i].RestartInfo != nil && list[i].RestartInfo.InitialJobUUID == id {
				restart = &list[i]
			}
		}
		return restart != nil
	})
	if restart.RestartInfo.RestartCount != 1 || restart.UUID == id {
		t.Fatalf("no restart job for %s: %+v", id, restart)
	}
	if max := time.Duration(restart.Request.Scheduling.MaxDuration); max >= time.Hour || max < 58*time.Minute {
		t.Errorf("restart job's maxDuration %s, want 1 hour minus the time run", max)
	}
	e.waitFor(restart.UUID, job.StatusRunning)
	e.waitLog(restart.UUID, fmt.Sprintf("restart count 1 initial %s", id))
	e.put(restart.UUID, "CANCELLED")

	// A job that ignores SIGUSR1 is killed after 15 s and FAILED.
	id = e.submit(e.jobFile("stubborn", `trap '' USR1; echo started; while true; do sleep 0.2; done`, restartable))
	e.waitFor(id, job.StatusRunning)
	e.waitLog(id, "started")
	start := time.Now()
	e.put(id, "MUSTHALT")
	j = e.waitFor(id, job.StatusFailed)
	if took := time.Since(start); took < 15*time.Second {
		t.Errorf("a job ignoring SIGUSR1 failed after %s, before the 15 s halt grace", took)
	}
	if ev := e.events(id); !strings.Contains(ev, "123") {
		t.Errorf("the failure does not say why: %s", ev)
	}
	_ = j
}

func TestCancelRunningJob(t *testing.T) {
	e := newEnv(t)
	e.startSlave(slaveOpts{name: "s1", cluster: 1})
	id := e.submit(e.jobFile("sleeper", `trap 'echo got TERM; exit 0' TERM; echo sleeping; while true; do sleep 0.2; done`, nil))
	e.waitFor(id, job.StatusRunning)
	e.waitLog(id, "sleeping")
	e.put(id, "CANCELLED")
	e.waitLog(id, "got TERM")
	waitUntil(t, "the removal of the cancelled job's container", func() bool { return countContainers(t, e.docker, slaveName("s1")) == 0 })
	if j := e.job(id); j.State.Status != job.StatusCancelled {
		t.Fatalf("status %s", j.State.Status)
	}
}

// A slave that dies mid-job and comes back re-attaches to the container: the job finishes with
// its whole log.
func TestSlaveRestartKeepsJobAndLog(t *testing.T) {
	e := newEnv(t)
	s := e.startSlave(slaveOpts{name: "s1", cluster: 1})
	id := e.submit(e.jobFile("counter", `for i in $(seq 1 40); do echo line $i; sleep 0.1; done`, nil))
	e.waitFor(id, job.StatusRunning)
	e.waitLog(id, "line 3\n")
	s.stop(t)
	time.Sleep(1500 * time.Millisecond) // the job goes on without its slave
	e.startSlave(slaveOpts{name: "s1", cluster: 1})
	e.waitFor(id, job.StatusFinished)
	l := e.waitLog(id, "line 40\n")
	var want strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if l != want.String() {
		t.Fatalf("log after a slave restart is not whole and in order:\n%s", l)
	}
}

// A slave killed between creating a job's container and starting it leaves a container that
// never ran. The restarted slave must not report it done (its exit code reads 0, a success):
// it removes it before it registers, and the master queues the job again at the registration
// (not after the missing grace, which the STARTING lease could outlast), and it then runs.
func TestSlaveRestartWithContainerNeverStarted(t *testing.T) {
	e := newEnv(t)
	s := e.startSlave(slaveOpts{name: "s1", cluster: 1})
	id := e.submit(e.jobFile("cut-short", `echo running; while true; do sleep 0.2; done`, nil))
	e.waitFor(id, job.StatusRunning)
	s.stop(t)
	// Make the slave's container of the job one that was created and never started (the state
	// a SIGKILL between create and start leaves), and the job STARTING again on the master.
	ctx := context.Background()
	name := "gpulab-" + id
	info, err := e.docker.ContainerInspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.docker.ContainerRemove(ctx, info.ID, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	created, err := e.docker.ContainerCreate(ctx, info.Config, info.HostConfig, nil, nil, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Store.DB().ExecContext(ctx, `UPDATE jobs SET status = 'STARTING', lease_expires_at = now() + interval '3 minutes' WHERE uuid = $1`, id); err != nil {
		t.Fatal(err)
	}
	e.startSlave(slaveOpts{name: "s1", cluster: 1})
	waitUntil(t, "the never-started container removed", func() bool {
		_, err := e.docker.ContainerInspect(ctx, created.ID)
		return err != nil
	})
	waitUntil(t, "the job queued again", func() bool {
		evs := e.statusEvents(id)
		if evs[job.StatusFinished] > 0 || evs[job.StatusFailed] > 0 {
			t.Fatalf("the job that never ran ended: %s", e.events(id))
		}
		return evs[job.StatusQueued] >= 2
	})
	if ev := e.events(id); !strings.Contains(ev, "restarted and found no container of the job") {
		t.Fatalf("the job was not queued again at the slave's registration: %s", ev)
	}
	e.waitFor(id, job.StatusRunning)
	waitUntil(t, "the job's new container running", func() bool { return e.containerRunning(id) })
	if evs := e.statusEvents(id); evs[job.StatusFinished] > 0 || evs[job.StatusFailed] > 0 {
		t.Fatalf("the job that never ran ended: %s", e.events(id))
	}
}

// A slave that goes away for good: its jobs fail with `worker lost` (restartable ones restart),
// once the test master's offline and job graces have passed (25 s).
func TestSlaveGoneWorkerLost(t *testing.T) {
	e := newEnv(t)
	s := e.startSlave(slaveOpts{name: "s1", cluster: 1})
	id := e.submit(e.jobFile("lost", `echo running; while true; do sleep 0.2; done`, func(r map[string]any) {
		r["scheduling"] = map[string]any{"restartable": true}
	}))
	e.waitFor(id, job.StatusRunning)
	s.stop(t)
	e.waitFor(id, job.StatusFailed)
	if ev := e.events(id); !strings.Contains(ev, "worker lost") {
		t.Fatalf("failure reason: %s", ev)
	}
	_, data, _ := e.m.Do(e.alice, "GET", v31+"/jobs?pending=true", nil)
	var list []job.Job
	_ = json.Unmarshal(data, &list)
	if len(list) != 1 || list[0].RestartInfo == nil || list[0].RestartInfo.InitialJobUUID != id {
		t.Fatalf("no restart job queued after worker lost: %s", data)
	}
}

// Two slaves in two clusters with different (fake) GPU models: jobs land where clusterId and
// gpuModel say, and an impossible request fails at once.
func TestPlacementByClusterAndModel(t *testing.T) {
	e := newEnv(t)
	e.startSlave(slaveOpts{name: "v100s", cluster: 1, fakeGPUs: "2xV100-32GB"})
	e.startSlave(slaveOpts{name: "a100s", cluster: 2, fakeGPUs: "2xA100-40GB"})
	gpuJob := func(name string, res map[string]any) string {
		return e.submit(e.jobFile(name, "echo ok", func(r map[string]any) {
			rr := r["resources"].(map[string]any)
			rr["gpus"] = 1
			for k, v := range res {
				rr[k] = v
			}
		}))
	}
	byModel := gpuJob("by-model", map[string]any{"gpuModel": "a100"})
	byCluster := gpuJob("by-cluster", map[string]any{"clusterId": 1})
	for id, want := range map[string]string{byModel: slaveName("a100s"), byCluster: slaveName("v100s")} {
		var got string
		waitUntil(t, "the placement of job "+id, func() bool {
			got = e.job(id).State.Scheduling.AssignedSlaveName
			return got != ""
		})
		if got != want {
			t.Errorf("job %s placed on %q, want %s", id, got, want)
		}
	}
	impossible := gpuJob("impossible", map[string]any{"gpuModel": "H100"})
	e.waitFor(impossible, job.StatusFailed)
	if ev := e.events(impossible); !strings.Contains(ev, "H100") {
		t.Errorf("failure does not name the model: %s", ev)
	}
}

// On an engine with the NVIDIA hook (a stub), the container sees exactly its assigned GPUs.
func TestGPUHandOff(t *testing.T) {
	e := newEnv(t)
	gpuDocker, _ := testenv.GPUDocker(t)
	e.image = testenv.BusyboxImageOn(t, gpuDocker)
	e.startSlave(slaveOpts{name: "gpuslave", cluster: 1, fakeGPUs: "4xV100-32GB", docker: gpuDocker, deviceRequests: true})
	id := e.submit(e.jobFile("gpus", "echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES", func(r map[string]any) {
		r["resources"].(map[string]any)["gpus"] = 2
	}))
	j := e.waitFor(id, job.StatusFinished)
	l := e.waitLog(id, "NVIDIA_VISIBLE_DEVICES=")
	var gpus []struct {
		UUID string `json:"uuid"`
	}
	if err := json.Unmarshal(j.State.Resources.GPUDetails, &gpus); err != nil || len(gpus) != 2 {
		t.Fatalf("gpu details %s: %v", j.State.Resources.GPUDetails, err)
	}
	want := "NVIDIA_VISIBLE_DEVICES=" + gpus[0].UUID + "," + gpus[1].UUID + "\n"
	if l != want {
		t.Fatalf("inside the container %q, want %q", l, want)
	}
}

// A job that has run its maxDuration is cancelled by the master and its container stopped.
// (The clock is moved by back-dating the RUNNING time: a real minute is too long for a test.)
func TestMaxDurationCancels(t *testing.T) {
	e := newEnv(t)
	e.startSlave(slaveOpts{name: "s1", cluster: 1})
	id := e.submit(e.jobFile("long", `echo running; while true; do sleep 0.2; done`, func(r map[string]any) {
		r["scheduling"] = map[string]any{"maxDuration": "2 minutes"}
	}))
	e.waitFor(id, job.StatusRunning)
	if _, err := e.m.Store.DB().Exec(`UPDATE jobs SET event_times = jsonb_set(event_times, '{RUNNING}', to_jsonb(now() - interval '3 minutes')) WHERE uuid = $1`, id); err != nil {
		t.Fatal(err)
	}
	e.waitFor(id, job.StatusCancelled)
	if ev := e.events(id); !strings.Contains(ev, "maxDuration (2 minutes) reached") {
		t.Errorf("cancel reason: %s", ev)
	}
	waitUntil(t, "the removal of the expired job's container", func() bool { return countContainers(t, e.docker, slaveName("s1")) == 0 })
}

// A job that cannot be placed now says why in queuedExplanations, and starts when room frees.
func TestQueuedExplanation(t *testing.T) {
	e := newEnv(t)
	e.startSlave(slaveOpts{name: "s1", cluster: 1, fakeGPUs: "2xV100-32GB"})
	gpus2 := func(r map[string]any) { r["resources"].(map[string]any)["gpus"] = 2 }
	first := e.submit(e.jobFile("holder", `echo holding; while true; do sleep 0.2; done`, gpus2))
	e.waitFor(first, job.StatusRunning)
	second := e.submit(e.jobFile("waiter", "echo my turn", gpus2))
	var expl []string
	waitUntil(t, "a queued explanation for "+second, func() bool {
		expl = e.job(second).State.Scheduling.QueuedExplanations
		return len(expl) > 0
	})
	if !strings.Contains(strings.Join(expl, " "), "2 GPUs") {
		t.Fatalf("queued explanation: %q", expl)
	}
	// The estimate: when the holder reaches its maxDuration (2 weeks after it started running).
	holder := e.job(first)
	var est *time.Time
	waitUntil(t, "an estimated start for "+second, func() bool {
		est = e.job(second).State.Scheduling.EstimatedStart
		return est != nil
	})
	if want := holder.State.EventTimes[job.StatusRunning].Add(14 * 24 * time.Hour); est == nil || est.Sub(want).Abs() > time.Second {
		t.Errorf("estimated start %v, want %v (the holder's end by maxDuration)", est, want)
	}
	if ex := strings.Join(e.job(second).State.Scheduling.QueuedExplanations, " "); !strings.Contains(ex, "expected start") || !strings.Contains(ex, first[:8]) {
		t.Errorf("explanation does not give the expected start: %q", ex)
	}
	e.put(first, "CANCELLED")
	e.waitFor(second, job.StatusFinished)
	if j := e.job(second); len(j.State.Scheduling.QueuedExplanations) != 0 {
		t.Errorf("a started job keeps its queued explanation: %q", j.State.Scheduling.QueuedExplanations)
	}
}

// A job cancelled while its slave was down: the slave, back, removes the container.
func TestSlaveBackRemovesContainerOfEndedJob(t *testing.T) {
	e := newEnv(t)
	s := e.startSlave(slaveOpts{name: "s1", cluster: 1})
	id := e.submit(e.jobFile("orphan", `echo running; while true; do sleep 0.2; done`, nil))
	e.waitFor(id, job.StatusRunning)
	s.stop(t)
	e.put(id, "CANCELLED")
	if n := countContainers(t, e.docker, slaveName("s1")); n != 1 {
		t.Fatalf("%d containers while the slave is down, want the job's 1", n)
	}
	e.startSlave(slaveOpts{name: "s1", cluster: 1})
	waitUntil(t, "the removal of the container of the job cancelled while its slave was down", func() bool { return countContainers(t, e.docker, slaveName("s1")) == 0 })
}
