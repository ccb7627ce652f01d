package web_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptrace"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/leader"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/store"
)

// The master's side of the slave protocol, called as a slave calls it, with the scheduler off
// so each test places its jobs itself: retries of what happened succeed, conflicts tell the
// state the master holds, and master and slave reconcile what each holds.

type protoWorld struct {
	m     *testmaster.Master
	alice *testmaster.User
	slave *protocol.Client
	name  string
}

func newProtoWorld(t *testing.T) *protoWorld {
	t.Helper()
	m := testmaster.Start(t, testmaster.Options{MissingGrace: time.Second})
	w := &protoWorld{m: m, alice: m.AddUser("alice", false, "", "vision"), name: "proto1"}
	w.slave = w.slaveClient(t, w.name)
	if _, err := w.slave.Register(context.Background(), protocol.Inventory{InstanceID: "i1", CPUs: 8, MemoryMiB: 16384,
		GPUs: []protocol.GPU{{Index: 0, UUID: "GPU-a", Model: "Fake V100"}, {Index: 1, UUID: "GPU-b", Model: "Fake V100"}}}); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *protoWorld) slaveClient(t *testing.T, name string) *protocol.Client {
	t.Helper()
	cert := w.m.SlaveCert(name, 1)
	caPEM, err := os.ReadFile(w.m.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := protocol.NewClient(w.m.URL, caPEM, &cert)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// job submits a job as alice and places it on slave name with GPU gpu; it returns the uuid and
// the attempt.
func (w *protoWorld) job(t *testing.T, name string, gpu int, restartable bool) (string, int) {
	t.Helper()
	sched := ""
	if restartable {
		sched = `, "scheduling": {"restartable": true}`
	}
	status, data, _ := w.m.Do(w.alice, "POST", v31+"/jobs", strings.NewReader(`{"name": "p", "request": {"resources": {"cpus": 1, "gpus": 1, "cpuMemoryGb": 1},
	  "docker": {"image": "busybox"}`+sched+`}}`))
	if status != 201 {
		t.Fatalf("submit: %d %s", status, data)
	}
	id := strings.TrimSpace(string(data))
	ctx := context.Background()
	if _, err := w.m.Store.AssignJobs(ctx, []store.Assignment{{JobUUID: id, Placement: store.Placement{SlaveName: name, SlaveInstanceID: "i1", ClusterID: 1,
		Resources: job.StateResources{SlaveName: name, GPUIDs: []int{gpu}, CPUIDs: []int{gpu}, CPUMemoryGb: 1}}}}); err != nil {
		t.Fatal(err)
	}
	rec, err := w.m.Store.GetJob(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return id, rec.Attempt
}

// advance moves a job along ASSIGNED → … → to as its slave does.
func (w *protoWorld) advance(t *testing.T, c *protocol.Client, id string, attempt int, to job.Status) {
	t.Helper()
	path := []job.Status{job.StatusAssigned, job.StatusStarting, job.StatusRunning}
	for i := 1; i < len(path) && path[i-1] != to; i++ {
		if err := c.Update(context.Background(), protocol.StateUpdate{JobUUID: id, Attempt: attempt, From: path[i-1], To: path[i]}); err != nil {
			t.Fatalf("%s → %s: %v", path[i-1], path[i], err)
		}
	}
}

func (w *protoWorld) status(t *testing.T, id string) job.Status {
	t.Helper()
	rec, err := w.m.Store.GetJob(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return rec.Job.State.Status
}

func (w *protoWorld) events(t *testing.T, id string) []store.Event {
	t.Helper()
	evs, err := w.m.Store.ListJobEvents(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func countStatusEvents(evs []store.Event, to job.Status) int {
	n := 0
	for _, e := range evs {
		if e.Kind == store.EventStatus && e.ToStatus == string(to) {
			n++
		}
	}
	return n
}

// A slave that repeats a call whose reply it lost gets a success, and nothing happens twice.
func TestSlaveCallsAreIdempotent(t *testing.T) {
	w := newProtoWorld(t)
	ctx := context.Background()
	id, attempt := w.job(t, w.name, 0, false)
	for range 2 {
		if err := w.slave.Update(ctx, protocol.StateUpdate{JobUUID: id, Attempt: attempt, From: job.StatusAssigned, To: job.StatusStarting}); err != nil {
			t.Fatalf("ASSIGNED → STARTING (again): %v", err)
		}
	}
	res := &job.StateResources{SlaveName: w.name, GPUIDs: []int{0}, PortMappings: []job.PortMapping{{ContainerPort: 80, HostPort: 32001, HostIP: "0.0.0.0"}}}
	for range 2 {
		if err := w.slave.Update(ctx, protocol.StateUpdate{JobUUID: id, Attempt: attempt, From: job.StatusStarting, To: job.StatusRunning, Resources: res}); err != nil {
			t.Fatalf("STARTING → RUNNING (again): %v", err)
		}
	}
	for seq := range 2 {
		for range 2 {
			err := w.slave.Log(ctx, protocol.LogChunk{JobUUID: id, Attempt: attempt, Seq: seq, Data: []byte("line\n")})
			if err != nil && !errors.Is(err, protocol.ErrConflict) {
				t.Fatalf("log chunk %d: %v", seq, err)
			}
		}
	}
	code := 0
	for range 2 {
		if err := w.slave.Done(ctx, protocol.Completion{JobUUID: id, Attempt: attempt, From: job.StatusRunning, To: job.StatusFinished, ExitCode: &code}); err != nil {
			t.Fatalf("done (again): %v", err)
		}
	}
	evs := w.events(t, id)
	for _, st := range []job.Status{job.StatusStarting, job.StatusRunning, job.StatusFinished} {
		if n := countStatusEvents(evs, st); n != 1 {
			t.Errorf("%d %s events, want 1: %+v", n, st, evs)
		}
	}
	rec, _ := w.m.Store.GetJob(ctx, id)
	if rec.Job.State.Status != job.StatusFinished || len(rec.Job.State.Resources.PortMappings) != 1 {
		t.Fatalf("job %s %+v", rec.Job.State.Status, rec.Job.State.Resources)
	}
	if _, size, _ := w.m.Store.JobLogState(ctx, id); size != 10 {
		t.Fatalf("log of %d bytes, want 10 (two chunks, each stored once)", size)
	}
}

// A real conflict answers the state the master holds; a job the master ended tells the slave
// to let it go, and the slave's report that the container exited frees what it held. A slave
// never learns the state of another slave's job.
func TestSlaveConflictsTellTheState(t *testing.T) {
	w := newProtoWorld(t)
	ctx := context.Background()
	id, attempt := w.job(t, w.name, 0, false)
	w.advance(t, w.slave, id, attempt, job.StatusRunning)
	if status, data, _ := w.m.Do(w.alice, "PUT", v31+"/jobs/"+id+"/state/status", strings.NewReader("CANCELLED")); status != 200 {
		t.Fatalf("cancel: %d %s", status, data)
	}
	if held, _ := w.m.Store.ListHeld(ctx); len(held) != 1 || !held[0].Releasing {
		t.Fatalf("a cancelled job's GPU is free before its container is gone: %+v", held)
	}
	code := 143
	err := w.slave.Done(ctx, protocol.Completion{JobUUID: id, Attempt: attempt, From: job.StatusRunning, To: job.StatusFailed, ExitCode: &code})
	var c *protocol.Conflict
	if !errors.As(err, &c) || c.Status != job.StatusCancelled || c.Attempt != attempt || !c.Gone(attempt) {
		t.Fatalf("done of a cancelled job: %v, want a conflict naming CANCELLED", err)
	}
	if held, _ := w.m.Store.ListHeld(ctx); len(held) != 0 {
		t.Fatalf("the container exited but the job still holds: %+v", held)
	}

	// An attempt the master gave up.
	id2, attempt2 := w.job(t, w.name, 1, false)
	err = w.slave.Update(ctx, protocol.StateUpdate{JobUUID: id2, Attempt: attempt2 - 1, From: job.StatusAssigned, To: job.StatusStarting})
	if !errors.As(err, &c) || c.Attempt != attempt2 || !c.Gone(attempt2-1) {
		t.Fatalf("an old attempt's start: %v", err)
	}
	if err := w.slave.Log(ctx, protocol.LogChunk{JobUUID: id2, Attempt: attempt2 - 1, Data: []byte("x")}); !errors.As(err, &c) {
		t.Fatalf("an old attempt's log: %v", err)
	}
	if st := w.status(t, id2); st != job.StatusAssigned {
		t.Fatalf("an old attempt moved the job to %s", st)
	}

	// Another slave's job, and no job at all: gone, and nothing told.
	other := w.slaveClient(t, "proto2")
	if _, err := other.Register(ctx, protocol.Inventory{InstanceID: "j1", CPUs: 1, MemoryMiB: 1024}); err != nil {
		t.Fatal(err)
	}
	err = other.Update(ctx, protocol.StateUpdate{JobUUID: id2, Attempt: attempt2, From: job.StatusAssigned, To: job.StatusStarting})
	if !errors.As(err, &c) || c.Status != "" || !c.Gone(attempt2) {
		t.Fatalf("another slave's job: %v (%+v)", err, c)
	}
	err = w.slave.Update(ctx, protocol.StateUpdate{JobUUID: "00000000-0000-4000-8000-000000000000", Attempt: 1, From: job.StatusAssigned, To: job.StatusStarting})
	if !errors.As(err, &c) || c.Status != "" {
		t.Fatalf("an unknown job: %v", err)
	}
	err = w.slave.Update(ctx, protocol.StateUpdate{JobUUID: "../../x", Attempt: 1, From: job.StatusAssigned, To: job.StatusStarting})
	var se *protocol.StatusError
	if !errors.As(err, &se) || se.Status != 400 || !strings.Contains(se.Message, "jobUuid") {
		t.Fatalf("a job uuid that is not one: %v", err)
	}
}

// The heartbeat reconciles: jobs the slave stopped listing are requeued (never ran) or failed
// (ran, restartable ones restarted) after the missing grace; what ended jobs held is freed once
// the slave no longer lists them; the slave is told to stop what it must not hold.
func TestHeartbeatReconciles(t *testing.T) {
	w := newProtoWorld(t)
	ctx := context.Background()
	running, a1 := w.job(t, w.name, 0, true)
	w.advance(t, w.slave, running, a1, job.StatusRunning)
	starting, a2 := w.job(t, w.name, 1, false)
	w.advance(t, w.slave, starting, a2, job.StatusStarting)
	queued, _ := w.job(t, w.name, 1, false) // ASSIGNED, not taken yet: the assignment lease covers it
	ended, a4 := w.job(t, w.name, 0, false)
	w.advance(t, w.slave, ended, a4, job.StatusRunning)
	if _, err := w.m.Store.TransitionJob(ctx, ended, []job.Status{job.StatusRunning}, job.StatusCancelled, store.Event{Message: "test"}); err != nil {
		t.Fatal(err)
	}

	hb := func(jobs ...protocol.RunningJob) protocol.HeartbeatReply {
		t.Helper()
		reply, err := w.slave.Heartbeat(ctx, protocol.Heartbeat{InstanceID: "i1", Jobs: jobs, Accepting: true})
		if err != nil {
			t.Fatal(err)
		}
		return reply
	}
	// The slave still holds the cancelled job's container and a container of a job unknown to
	// the master: both are to stop; the cancelled job keeps its GPU.
	reply := hb(protocol.RunningJob{JobUUID: ended, Attempt: a4, ContainerID: "c4"},
		protocol.RunningJob{JobUUID: "00000000-0000-4000-8000-000000000001", Attempt: 1, ContainerID: "c5"})
	stops := map[string]string{}
	for _, s := range reply.Stops {
		stops[s.JobUUID] = string(s.Mode) + ": " + s.Reason
	}
	if !strings.HasPrefix(stops[ended], "cancel: job is CANCELLED") || !strings.Contains(stops["00000000-0000-4000-8000-000000000001"], "no such job") {
		t.Fatalf("stop orders: %v", stops)
	}
	if held := heldJobs(t, w.m.Store); !slices.Contains(held, ended) {
		t.Fatalf("the cancelled job's GPU was freed while its container is listed: %v", held)
	}
	var view []string
	for _, j := range reply.Jobs {
		view = append(view, j.JobUUID+"="+string(j.Status))
	}
	slices.Sort(view)
	want := []string{queued + "=ASSIGNED", running + "=RUNNING", starting + "=STARTING"}
	slices.Sort(want)
	if !slices.Equal(view, want) {
		t.Fatalf("master's view %v, want %v", view, want)
	}
	// Missing for less than the grace: nothing happens yet.
	if st := w.status(t, running); st != job.StatusRunning {
		t.Fatalf("a job missing from one heartbeat is %s", st)
	}
	deadline := time.Now().Add(30 * time.Second)
	for w.status(t, running) == job.StatusRunning || w.status(t, starting) == job.StatusStarting {
		if time.Now().After(deadline) {
			t.Fatalf("jobs missing from the heartbeats for longer than the grace are still %s and %s", w.status(t, running), w.status(t, starting))
		}
		time.Sleep(200 * time.Millisecond)
		hb()
	}
	if st := w.status(t, running); st != job.StatusFailed {
		t.Fatalf("a running job whose container is gone: %s, want FAILED", st)
	}
	if st := w.status(t, starting); st != job.StatusQueued {
		t.Fatalf("a starting job without a container: %s, want QUEUED", st)
	}
	if st := w.status(t, queued); st != job.StatusAssigned {
		t.Fatalf("an assignment not yet taken: %s, want ASSIGNED", st)
	}
	if evs := w.events(t, running); !strings.Contains(evs[len(evs)-1].Message+evs[len(evs)-2].Message, "container is gone") {
		t.Fatalf("no reason for the failure: %+v", evs)
	}
	recs, _ := w.m.Store.ListJobs(ctx, store.JobFilter{Statuses: []job.Status{job.StatusQueued}})
	restarted := false
	for _, r := range recs {
		restarted = restarted || (r.Job.RestartInfo != nil && r.Job.RestartInfo.InitialJobUUID == running)
	}
	if !restarted {
		t.Fatalf("the restartable job was not restarted")
	}
	if held := heldJobs(t, w.m.Store); len(held) != 1 || held[0] != queued {
		t.Fatalf("jobs the slave no longer holds still hold resources: %v", held)
	}
}

func heldJobs(t *testing.T, st *store.Store) []string {
	t.Helper()
	held, err := st.ListHeld(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, h := range held {
		out = append(out, h.UUID)
	}
	return out
}

// A slave that registers lists every container it found: the jobs it has no container of are
// given their outcome at once, the others are in the master's view.
func TestRegisterReconcilesAtOnce(t *testing.T) {
	w := newProtoWorld(t)
	ctx := context.Background()
	kept, a1 := w.job(t, w.name, 0, false)
	w.advance(t, w.slave, kept, a1, job.StatusRunning)
	gone, a2 := w.job(t, w.name, 1, false)
	w.advance(t, w.slave, gone, a2, job.StatusRunning)
	reg, err := w.slave.Register(ctx, protocol.Inventory{InstanceID: "i2", CPUs: 8, MemoryMiB: 16384,
		Containers: []protocol.RunningJob{{JobUUID: kept, Attempt: a1, ContainerID: "c1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(reg.Jobs) != 1 || reg.Jobs[0].JobUUID != kept || reg.Jobs[0].Attempt != a1 || reg.FenceAfter <= 0 {
		t.Fatalf("registration: %+v", reg)
	}
	if st := w.status(t, gone); st != job.StatusFailed {
		t.Fatalf("a job without a container after the slave restarted: %s", st)
	}
	if st := w.status(t, kept); st != job.StatusRunning {
		t.Fatalf("a job whose container survived: %s", st)
	}
}

// A heartbeat that lists a job as starting renews its start lease (an image pull in progress),
// but never past the start deadline.
func TestStartLeaseRenewedByHeartbeat(t *testing.T) {
	w := newProtoWorld(t)
	ctx := context.Background()
	id, attempt := w.job(t, w.name, 0, false)
	w.advance(t, w.slave, id, attempt, job.StatusStarting)
	lease := func() time.Duration {
		var left float64
		if err := w.m.Store.DB().QueryRowContext(ctx, `SELECT EXTRACT(EPOCH FROM lease_expires_at - now()) FROM jobs WHERE uuid = $1`, id).Scan(&left); err != nil {
			t.Fatal(err)
		}
		return time.Duration(left * float64(time.Second))
	}
	if _, err := w.m.Store.DB().ExecContext(ctx, `UPDATE jobs SET lease_expires_at = now() + interval '5 seconds' WHERE uuid = $1`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := w.slave.Heartbeat(ctx, protocol.Heartbeat{InstanceID: "i1", Jobs: []protocol.RunningJob{{JobUUID: id, Attempt: attempt, Status: job.StatusStarting}}}); err != nil {
		t.Fatal(err)
	}
	if left := lease(); left < time.Minute {
		t.Fatalf("start lease after a heartbeat listing the job as starting: %s left", left)
	}
	// Started an hour ago: the deadline caps the renewal.
	if _, err := w.m.Store.DB().ExecContext(ctx, `UPDATE jobs SET lease_expires_at = now() + interval '5 seconds',
		event_times = jsonb_set(event_times, '{STARTING}', to_jsonb(now() - interval '59 minutes 50 seconds')) WHERE uuid = $1`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := w.slave.Heartbeat(ctx, protocol.Heartbeat{InstanceID: "i1", Jobs: []protocol.RunningJob{{JobUUID: id, Attempt: attempt, Status: job.StatusStarting}}}); err != nil {
		t.Fatal(err)
	}
	if left := lease(); left > 15*time.Second {
		t.Fatalf("start lease renewed past the start deadline: %s left", left)
	}
}

// Two masters on one database: a submit on the master without the scheduler wakes the leader
// on the other (its timer would not for an hour), and the leader's assignment wakes the
// slave's long poll waiting on the first (a poll looks again only when woken, by default).
func TestNotificationsWakeOtherMasters(t *testing.T) {
	leader := testmaster.Start(t, testmaster.Options{Scheduler: true, Loop: leader.Config{Interval: time.Hour}})
	front := testmaster.Start(t, testmaster.Options{DatabaseURL: leader.DatabaseURL, MaxLongPoll: time.Minute})
	alice := front.AddUser("alice", false, "", "vision")
	cert := front.SlaveCert("n1", 1)
	caPEM, err := os.ReadFile(front.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	sl, err := protocol.NewClient(front.URL, caPEM, &cert)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := sl.Register(ctx, protocol.Inventory{InstanceID: "i1", CPUs: 4, MemoryMiB: 8192}); err != nil {
		t.Fatal(err)
	}
	// The leader's first pass ran at its start; wait until it holds the lease, so the next
	// pass can only come from a wake.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s did not happen within 60 s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor("a scheduler leader", func() bool {
		var n int
		_ = front.Store.DB().QueryRowContext(ctx, `SELECT count(*) FROM scheduler_leader WHERE expires_at > now()`).Scan(&n)
		return n == 1
	})
	work := make(chan protocol.Work, 1)
	go func() {
		w, err := sl.Next(ctx, protocol.NextRequest{InstanceID: "i1", Wait: time.Minute})
		if err != nil {
			t.Error(err)
		}
		work <- w
	}()
	status, data, _ := front.Do(alice, "POST", v31+"/jobs", strings.NewReader(`{"name": "n", "request": {"resources": {"cpus": 1, "gpus": 0, "cpuMemoryGb": 1},
	  "docker": {"image": "busybox"}}}`))
	if status != 201 {
		t.Fatalf("submit: %d %s", status, data)
	}
	id := strings.TrimSpace(string(data))
	w := <-work
	if len(w.Assignments) != 1 || w.Assignments[0].Job.UUID != id {
		t.Fatalf("the long poll on the other master returned %+v, want the assignment of %s", w, id)
	}
}

// TestSlaveSessionsResume: a slave's new connection resumes its TLS session instead of a full
// handshake with certificates (a tenth of the master's CPU with 1,000 slaves in B2x), and on the
// resumed session it is still the same slave, whose certificate the master still checks at

// TestSlavesSpeakHTTP2: a slave's calls go over HTTP/2 on one connection, its long poll beside
// its heartbeats and job calls at once; a client that offers only HTTP/1.1 (a browser of old,
// curl --http1.1, imec's CLI) is still served.
func TestSlavesSpeakHTTP2(t *testing.T) {
	w := newProtoWorld(t)
	ctx := context.Background()
	c := w.slaveClient(t, "multiplexer")
	var mu sync.Mutex
	protos := map[string]int{}
	conns := map[string]bool{} // local addresses of the connections used
	c.WrapTransport(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
				mu.Lock()
				conns[info.Conn.LocalAddr().String()] = true
				mu.Unlock()
			}}
			resp, err := rt.RoundTrip(r.WithContext(httptrace.WithClientTrace(r.Context(), trace)))
			if err == nil {
				mu.Lock()
				protos[resp.Proto]++
				mu.Unlock()
			}
			return resp, err
		})
	})
	if _, err := c.Register(ctx, protocol.Inventory{InstanceID: "m1", CPUs: 4, MemoryMiB: 8192}); err != nil {
		t.Fatal(err)
	}
	polled := make(chan error, 1)
	go func() {
		_, err := c.Next(ctx, protocol.NextRequest{InstanceID: "m1", Wait: 2 * time.Second})
		polled <- err
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			if _, err := c.Heartbeat(ctx, protocol.Heartbeat{InstanceID: "m1", Accepting: true}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("heartbeat beside the long poll: %v", err)
	}
	if err := <-polled; err != nil {
		t.Fatalf("long poll: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if protos["HTTP/2.0"] != 10 || len(protos) != 1 {
		t.Errorf("protocols of the slave's 10 calls: %v, want all HTTP/2.0", protos)
	}
	if len(conns) != 1 {
		t.Errorf("the slave's calls used %d connections (%v), want 1", len(conns), conns)
	}

	// A client without HTTP/2.
	caPEM, err := os.ReadFile(w.m.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	old := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}}}}
	resp, err := old.Get(w.m.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.Proto != "HTTP/1.1" || resp.StatusCode >= 500 {
		t.Errorf("an HTTP/1.1 client got %s %d", resp.Proto, resp.StatusCode)
	}
}

// every call: revoked, it is refused at the next call, resumed or not.
func TestSlaveSessionsResume(t *testing.T) {
	w := newProtoWorld(t)
	ctx := context.Background()
	c := w.slaveClient(t, "resumer")
	var inner http.RoundTripper
	var mu sync.Mutex
	var resumed []bool
	c.WrapTransport(func(rt http.RoundTripper) http.RoundTripper {
		inner = rt
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil && resp.TLS != nil {
				mu.Lock()
				resumed = append(resumed, resp.TLS.DidResume)
				mu.Unlock()
			}
			return resp, err
		})
	})
	fresh := func() { inner.(interface{ CloseIdleConnections() }).CloseIdleConnections() }
	if _, err := c.Register(ctx, protocol.Inventory{InstanceID: "r1", CPUs: 4, MemoryMiB: 8192}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		fresh()
		if _, err := c.Heartbeat(ctx, protocol.Heartbeat{InstanceID: "r1", Accepting: true}); err != nil {
			t.Fatalf("heartbeat on a new connection: %v", err)
		}
	}
	mu.Lock()
	got := slices.Clone(resumed)
	mu.Unlock()
	if len(got) != 3 || got[0] || !got[1] || !got[2] {
		t.Fatalf("sessions resumed %v, want a full handshake, then two resumed", got)
	}

	if revoked, err := w.m.Store.RevokeCertificatesOf(ctx, store.CertSlave, "resumer"); err != nil || len(revoked) != 1 {
		t.Fatalf("revoke the slave's certificate: %v %v", revoked, err)
	}
	fresh()
	_, err := c.Heartbeat(ctx, protocol.Heartbeat{InstanceID: "r1", Accepting: true})
	var se *protocol.StatusError
	if !errors.As(err, &se) || se.Status != http.StatusUnauthorized {
		t.Fatalf("heartbeat with a revoked certificate on a resumed session: %v, want 401", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !resumed[len(resumed)-1] {
		t.Errorf("the refused call did not resume its session: the check above proves nothing of resumed sessions")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The intervals told to a slave are spread within ±10 % of --heartbeat-interval (to the
// millisecond), so that slaves answered together do not heartbeat together ever after; with
// the spread off they are exactly the interval.
func TestHeartbeatIntervalsSpread(t *testing.T) {
	for _, tc := range []struct {
		name   string
		jitter float64 // testmaster's: 0 serve's default, negative none
		spread bool
	}{{"default", 0, true}, {"off", -1, false}} {
		t.Run(tc.name, func(t *testing.T) {
			const every = 5 * time.Second
			m := testmaster.Start(t, testmaster.Options{HeartbeatInterval: every, HeartbeatJitter: tc.jitter})
			w := &protoWorld{m: m, name: "spread-" + tc.name}
			w.slave = w.slaveClient(t, w.name)
			ctx := context.Background()
			reg, err := w.slave.Register(ctx, protocol.Inventory{InstanceID: "i1", CPUs: 4, MemoryMiB: 8192})
			if err != nil {
				t.Fatal(err)
			}
			told := []time.Duration{reg.HeartbeatInterval}
			for range 40 {
				reply, err := w.slave.Heartbeat(ctx, protocol.Heartbeat{InstanceID: "i1", Accepting: true})
				if err != nil {
					t.Fatal(err)
				}
				told = append(told, reply.Interval)
			}
			distinct := map[time.Duration]bool{}
			for _, d := range told {
				distinct[d] = true
				if d%time.Millisecond != 0 {
					t.Errorf("interval %v is not whole milliseconds", d)
				}
				if tc.spread && (d < every*9/10 || d > every*11/10) {
					t.Errorf("interval %v outside 4.5 s to 5.5 s", d)
				}
				if !tc.spread && d != every {
					t.Errorf("interval %v with the spread off, want %v", d, every)
				}
			}
			// 41 draws among 1,001 values: fewer than 20 distinct ones is all but impossible
			// for a uniform draw, and certain for an interval told exactly.
			if tc.spread && len(distinct) < 20 {
				t.Errorf("only %d distinct intervals in %d replies: %v", len(distinct), len(told), told)
			}
		})
	}
}

// A job placed again is handed out with the log its earlier attempt left, so that the new
// attempt's chunks go on after it; a first attempt is handed out with none.
func TestPlacedAgainGoesOnWithItsLog(t *testing.T) {
	w := newProtoWorld(t)
	ctx := context.Background()
	id, first := w.job(t, w.name, 0, false)
	w.advance(t, w.slave, id, first, job.StatusRunning)
	for seq, chunk := range []string{"first ", "attempt\n"} {
		if err := w.slave.Log(ctx, protocol.LogChunk{JobUUID: id, Attempt: first, Seq: seq, Data: []byte(chunk)}); err != nil {
			t.Fatal(err)
		}
	}
	// The master gives the attempt up (as a lost slave's housekeeping does) and places it again.
	if _, _, err := w.m.Store.ChangeJob(ctx, id, store.Change{From: []job.Status{job.StatusRunning}, To: job.StatusQueued,
		Attempt: store.Attempt(first), Released: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.m.Store.AssignJobs(ctx, []store.Assignment{{JobUUID: id, Placement: store.Placement{SlaveName: w.name, SlaveInstanceID: "i1", ClusterID: 1,
		Resources: job.StateResources{SlaveName: w.name, GPUIDs: []int{0}, CPUIDs: []int{0}, CPUMemoryGb: 1}}}}); err != nil {
		t.Fatal(err)
	}
	fresh, _ := w.job(t, w.name, 1, false)
	work, err := w.slave.Next(ctx, protocol.NextRequest{InstanceID: "i1"})
	if err != nil || len(work.Assignments) != 2 {
		t.Fatalf("the poll: %+v %v, want both jobs", work, err)
	}
	for _, a := range work.Assignments {
		switch a.Job.UUID {
		case id:
			if a.Attempt != first+1 || a.Log.NextSeq != 2 || a.Log.Size != 14 {
				t.Errorf("the job placed again: attempt %d, log %+v; want attempt %d going on after 2 chunks of 14 bytes", a.Attempt, a.Log, first+1)
			}
		case fresh:
			if a.Log.NextSeq != 0 || a.Log.Size != 0 {
				t.Errorf("a first attempt handed out with log %+v", a.Log)
			}
		}
	}
	if err := w.slave.Log(ctx, protocol.LogChunk{JobUUID: id, Attempt: first + 1, Seq: 2, Data: []byte("second\n")}); err != nil {
		t.Fatalf("the second attempt's first chunk: %v", err)
	}
}
