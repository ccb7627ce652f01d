package e2e

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/store"
)

// lossyMaster is the slave's connection to the master with replies lost on the way back: the
// master did the work (committed), the slave sees a network error and retries. It loses the
// first reply of every kind of call for every job, and of every third heartbeat and poll.
type lossyMaster struct {
	protocol.Master
	mu    sync.Mutex
	seen  map[string]int
	drops map[string]int // by call kind
}

func newLossy(m protocol.Master) *lossyMaster {
	return &lossyMaster{Master: m, seen: map[string]int{}, drops: map[string]int{}}
}

var errReplyLost = errors.New("connection reset by peer (reply lost: injected)")

// lose decides whether the reply of a call that reached the master is lost.
func (l *lossyMaster) lose(kind, key string, every int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen[kind+" "+key]++
	if n := l.seen[kind+" "+key]; (every == 0 && n == 1) || (every > 0 && n%every == 1) {
		l.drops[kind]++
		return true
	}
	return false
}

func (l *lossyMaster) dropped() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for k, v := range l.drops {
		out[k] = v
	}
	return out
}

func (l *lossyMaster) Register(ctx context.Context, inv protocol.Inventory) (protocol.Registration, error) {
	r, err := l.Master.Register(ctx, inv)
	if err == nil && l.lose("register", inv.InstanceID, 0) {
		return protocol.Registration{}, errReplyLost
	}
	return r, err
}

func (l *lossyMaster) Heartbeat(ctx context.Context, hb protocol.Heartbeat) (protocol.HeartbeatReply, error) {
	r, err := l.Master.Heartbeat(ctx, hb)
	if err == nil && l.lose("heartbeat", "", 3) {
		return protocol.HeartbeatReply{}, errReplyLost
	}
	return r, err
}

func (l *lossyMaster) Next(ctx context.Context, req protocol.NextRequest) (protocol.Work, error) {
	w, err := l.Master.Next(ctx, req)
	if err == nil && len(w.Assignments)+len(w.Stops) > 0 && l.lose("next", "", 2) {
		return protocol.Work{}, errReplyLost
	}
	return w, err
}

func (l *lossyMaster) Update(ctx context.Context, u protocol.StateUpdate) error {
	err := l.Master.Update(ctx, u)
	if err == nil && l.lose("update", u.JobUUID+string(u.To), 0) {
		return errReplyLost
	}
	return err
}

func (l *lossyMaster) Log(ctx context.Context, c protocol.LogChunk) error {
	err := l.Master.Log(ctx, c)
	if err == nil && l.lose("log", c.JobUUID, 0) {
		return errReplyLost
	}
	return err
}

func (l *lossyMaster) LogState(ctx context.Context, id string) (protocol.LogState, error) {
	s, err := l.Master.LogState(ctx, id)
	if err == nil && l.lose("logstate", id, 0) {
		return protocol.LogState{}, errReplyLost
	}
	return s, err
}

func (l *lossyMaster) Done(ctx context.Context, d protocol.Completion) error {
	err := l.Master.Done(ctx, d)
	if err == nil && l.lose("done", d.JobUUID, 0) {
		return errReplyLost
	}
	return err
}

// statusEvents counts a job's transitions into each state, from its events.
func (e *env) statusEvents(id string) map[job.Status]int {
	e.t.Helper()
	evs, err := e.m.Store.ListJobEvents(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[job.Status]int{}
	for _, ev := range evs {
		if ev.Kind == store.EventStatus {
			out[job.Status(ev.ToStatus)]++
		}
	}
	return out
}

// A reply lost after the master acted, at every call of the protocol: every job still runs
// once and ends once, in the state it should, with its whole log, and no container is left.
func TestLostRepliesAtEveryCall(t *testing.T) {
	e := newEnv(t)
	var lossy []*lossyMaster
	wrap := func(m protocol.Master) protocol.Master { l := newLossy(m); lossy = append(lossy, l); return l }
	s := e.startSlave(slaveOpts{name: "lossy", cluster: 1, cpus: runtime.NumCPU(), wrap: wrap})
	restartable := func(r map[string]any) {
		r["scheduling"] = map[string]any{"restartable": true, "minDuration": "1 minute", "maxDuration": "1 hour"}
	}
	finishes := e.submit(e.jobFile("finishes", `for i in 1 2 3 4 5; do echo line $i; sleep 0.2; done`, nil))
	fails := e.submit(e.jobFile("fails", `echo failing; exit 3`, nil))
	halts := e.submit(e.jobFile("halts", haltScript, restartable))
	cancels := e.submit(e.jobFile("cancels", `echo running; while true; do sleep 0.2; done`, nil))

	e.waitFor(finishes, job.StatusFinished)
	if l := e.waitLog(finishes, "line 5\n"); l != "line 1\nline 2\nline 3\nline 4\nline 5\n" {
		t.Errorf("log with lost replies: %q", l)
	}
	if j := e.waitFor(fails, job.StatusFailed); j.State.Resources.ExitCode == nil || *j.State.Resources.ExitCode != 3 {
		t.Errorf("exit code: %+v", j.State.Resources)
	}
	e.waitFor(halts, job.StatusRunning)
	e.waitLog(halts, "restart count 0")
	e.put(halts, "MUSTHALT")
	e.waitFor(halts, job.StatusHalted)
	e.waitFor(cancels, job.StatusRunning)
	e.waitLog(cancels, "running")
	e.put(cancels, "CANCELLED")

	// The slave restarts (its registration's reply lost too) while the restart job runs.
	restart := e.waitRestartOf(halts)
	e.waitFor(restart, job.StatusRunning)
	s.stop(t)
	e.startSlave(slaveOpts{name: "lossy", cluster: 1, cpus: runtime.NumCPU(), wrap: wrap})
	e.waitLog(restart, "restart count 1")
	// The log line may have been shipped before the stop: cancel only once the new slave has
	// resumed the job (it asks how much of the log the master has, a reply the lossy master
	// drops), or the cancel could come first and nothing would be resumed.
	waitUntil(t, "the restarted slave to resume the restart job", func() bool {
		n := 0
		for _, l := range lossy {
			n += l.dropped()["logstate"]
		}
		return n > 0
	})
	e.put(restart, "CANCELLED")

	want := map[string][]job.Status{
		finishes: {job.StatusAssigned, job.StatusStarting, job.StatusRunning, job.StatusFinished},
		fails:    {job.StatusAssigned, job.StatusStarting, job.StatusRunning, job.StatusFailed},
		halts:    {job.StatusAssigned, job.StatusStarting, job.StatusRunning, job.StatusMustHalt, job.StatusHalting, job.StatusHalted},
		cancels:  {job.StatusAssigned, job.StatusStarting, job.StatusRunning, job.StatusCancelled},
		restart:  {job.StatusAssigned, job.StatusStarting, job.StatusRunning, job.StatusCancelled},
	}
	for id, path := range want {
		got := e.statusEvents(id)
		for _, st := range path {
			if got[st] != 1 {
				t.Errorf("job %s: %d transitions to %s, want 1 (%v)\n%s", id, got[st], st, got, e.events(id))
			}
		}
		ends := 0
		for st, n := range got {
			if st.Ended() {
				ends += n
			}
		}
		if ends != 1 {
			t.Errorf("job %s ended %d times: %v", id, ends, got)
		}
	}
	e.waitNoContainers(slaveName("lossy"))
	// The master frees a job's resources when the slave confirms its container gone, which
	// it learns at the slave's next call that gets through (replies are being lost): wait.
	var held []store.Held
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		held, _ = e.m.Store.ListHeld(context.Background())
		if len(held) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(held) != 0 {
		t.Errorf("resources still held two minutes after every job ended: %+v", held)
	}
	lost := map[string]int{}
	for _, l := range lossy {
		for k, n := range l.dropped() {
			lost[k] += n
		}
	}
	t.Logf("replies lost: %v", lost)
	for _, kind := range []string{"register", "heartbeat", "next", "update", "log", "logstate", "done"} {
		if lost[kind] == 0 {
			t.Errorf("no reply of %s was lost: the test did not cover it", kind)
		}
	}
}

// waitRestartOf waits for the restart job of a halted job and returns its uuid.
func (e *env) waitRestartOf(id string) string {
	e.t.Helper()
	restart := ""
	waitUntil(e.t, "the restart job of "+id, func() bool {
		recs, err := e.m.Store.ListJobs(context.Background(), store.JobFilter{})
		if err != nil {
			e.t.Fatal(err)
		}
		for _, r := range recs {
			if r.Job.RestartInfo != nil && r.Job.RestartInfo.InitialJobUUID == id {
				restart = r.Job.UUID
			}
		}
		return restart != ""
	})
	return restart
}

// waitNoContainers waits until slave (its full name) has no container left.
func (e *env) waitNoContainers(slave string) {
	e.t.Helper()
	waitUntil(e.t, "the removal of every container of slave "+slave, func() bool { return countContainers(e.t, e.docker, slave) == 0 })
}

// containerRunning reports whether a job's container exists and runs.
func (e *env) containerRunning(id string) bool {
	info, err := e.docker.ContainerInspect(context.Background(), "gpulab-"+id)
	return err == nil && info.State != nil && info.State.Running
}

// A cancelled job's GPU goes to the next job only once its container is gone: here the job
// takes 3 s to stop after SIGTERM, and the job waiting for its only GPU stays queued until
// then.
func TestCancelledJobHoldsItsGPUUntilItsContainerIsGone(t *testing.T) {
	e := newEnv(t)
	e.startSlave(slaveOpts{name: "onegpu", cluster: 1, fakeGPUs: "1xV100-32GB"})
	oneGPU := func(r map[string]any) { r["resources"].(map[string]any)["gpus"] = 1 }
	slow := e.submit(e.jobFile("slow-to-stop", `trap 'echo stopping; sleep 3; echo stopped; exit 0' TERM; echo running; while true; do sleep 0.2; done`, oneGPU))
	e.waitFor(slow, job.StatusRunning)
	e.waitLog(slow, "running")
	next := e.submit(e.jobFile("next", `echo my turn`, oneGPU))
	e.put(slow, "CANCELLED")
	deadline := time.Now().Add(waitLimit)
	for e.containerRunning(slow) {
		if st := e.job(next).State.Status; st != job.StatusQueued {
			t.Fatalf("the next job is %s while the cancelled job's container still runs on the GPU", st)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled job's container did not stop within %s", waitLimit)
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.waitFor(next, job.StatusFinished)
	if l := e.waitLog(slow, "stopped"); !strings.Contains(l, "stopping") {
		t.Errorf("log of the cancelled job: %q", l)
	}
	if ev := e.events(slow); !strings.Contains(ev, "resources are free") {
		t.Errorf("no event says when the resources were freed: %s", ev)
	}
}

// An assignment the slave does not take goes back to the queue (not FAILED), with an event
// saying why, and runs on a slave that takes it: one never asked for within the hand-over
// lease, one handed over (a poll returned it) and not taken within the assigned lease, which
// runs from the hand-over.
func TestUntakenAssignmentIsQueuedAgain(t *testing.T) {
	leases := store.DefaultLeases
	leases.Assigned, leases.HandOver = 2*time.Second, 4*time.Second
	e := newEnvWith(t, testmaster.Options{Leases: &leases})
	// A slave that registers and heartbeats but does not ask for work (until told to, once).
	cert := e.m.SlaveCert(slaveName("deaf"), 1)
	caPEM := mustReadFile(t, e.m.CAFile)
	deaf, err := protocol.NewClient(e.m.URL, caPEM, &cert)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stopDeaf := context.WithCancel(context.Background())
	defer stopDeaf()
	if _, err := deaf.Register(ctx, protocol.Inventory{InstanceID: "deaf1", CPUs: 4, MemoryMiB: 8192}); err != nil {
		t.Fatal(err)
	}
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		for ctx.Err() == nil {
			_, _ = deaf.Heartbeat(ctx, protocol.Heartbeat{InstanceID: "deaf1", Accepting: true})
			time.Sleep(300 * time.Millisecond)
		}
	}()
	id := e.submit(e.jobFile("untaken", `echo taken at last`, nil))
	waitUntil(t, "the assignment never asked for queued again", func() bool {
		return strings.Contains(e.events(id), "did not ask for the job within 4s: queued again")
	})
	if strings.Contains(e.events(id), "did not take the job") {
		t.Fatalf("a job never handed over was said not taken: %s", e.events(id))
	}
	// Assigned to it again: this time the slave asks, is handed the job, and does not take it.
	waitUntil(t, "the job handed to the deaf slave", func() bool {
		work, err := deaf.Next(ctx, protocol.NextRequest{InstanceID: "deaf1", Wait: time.Second})
		return err == nil && len(work.Assignments) == 1 && work.Assignments[0].Job.UUID == id
	})
	waitUntil(t, "the assignment handed over queued again", func() bool {
		return strings.Contains(e.events(id), "did not take the job within 2s: queued again")
	})
	if st := e.job(id).State.Status; st.Ended() {
		t.Fatalf("an untaken assignment ended %s", st)
	}
	stopDeaf()
	<-beating
	e.startSlave(slaveOpts{name: "taker", cluster: 1})
	j := e.waitFor(id, job.StatusFinished)
	if j.State.Scheduling.AssignedSlaveName != slaveName("taker") {
		t.Errorf("ran on %q", j.State.Scheduling.AssignedSlaveName)
	}
	if n := e.statusEvents(id)[job.StatusQueued]; n < 3 {
		t.Errorf("queued %d times", n)
	}
	e.waitLog(id, "taken at last")
}

// A slave whose heartbeats list a job it was handed (its STARTING update on the way to an
// overloaded master) keeps it past the assigned lease: each heartbeat renews the lease, up to
// the hand-over lease after the assignment, after which it is queued again all the same.
func TestAssignmentBeingTakenIsKept(t *testing.T) {
	leases := store.DefaultLeases
	leases.Assigned, leases.HandOver = 2*time.Second, 8*time.Second
	e := newEnvWith(t, testmaster.Options{Leases: &leases})
	cert := e.m.SlaveCert(slaveName("slow"), 1)
	slow, err := protocol.NewClient(e.m.URL, mustReadFile(t, e.m.CAFile), &cert)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	if _, err := slow.Register(ctx, protocol.Inventory{InstanceID: "slow1", CPUs: 4, MemoryMiB: 8192}); err != nil {
		t.Fatal(err)
	}
	id := e.submit(e.jobFile("slowly-taken", `echo taken`, nil))
	var attempt int
	waitUntil(t, "the job handed to the slave", func() bool {
		work, err := slow.Next(ctx, protocol.NextRequest{InstanceID: "slow1", Wait: time.Second})
		if err == nil && len(work.Assignments) == 1 && work.Assignments[0].Job.UUID == id {
			attempt = work.Assignments[0].Attempt
			return true
		}
		return false
	})
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		for ctx.Err() == nil {
			_, _ = slow.Heartbeat(ctx, protocol.Heartbeat{InstanceID: "slow1", Accepting: true,
				Jobs: []protocol.RunningJob{{JobUUID: id, Attempt: attempt, Status: job.StatusAssigned}}})
			time.Sleep(200 * time.Millisecond)
		}
	}()
	// Renewed: the lease runs past the assigned lease after the hand-over, the job still ASSIGNED.
	waitUntil(t, "the lease renewed by the heartbeats", func() bool {
		var renewed bool
		err := e.m.Store.DB().QueryRowContext(ctx, `SELECT status = 'ASSIGNED' AND lease_expires_at > handed_over_at + interval '2.5 seconds'
FROM jobs WHERE uuid = $1`, id).Scan(&renewed)
		return err == nil && renewed
	})
	if strings.Contains(e.events(id), "queued again") {
		t.Fatalf("a job its slave lists as being taken was queued again: %s", e.events(id))
	}
	// Bounded: listed for ever, it is queued again once the hand-over lease has passed.
	waitUntil(t, "the job queued again at the bound", func() bool {
		return strings.Contains(e.events(id), "did not take the job within 2s: queued again")
	})
	stop()
	<-beating
}

func mustReadFile(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
