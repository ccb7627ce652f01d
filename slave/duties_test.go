package slave

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/slave/container"
)

// scriptMaster is a master that hands out the given assignments once, records what the slave
// reports and can stop answering (a partition).
type scriptMaster struct {
	mu          sync.Mutex
	assignments []protocol.Assignment
	status      map[string]job.Status
	done        map[string]protocol.Completion
	heartbeats  int
	cut         bool
	changed     chan struct{} // a heartbeat or a report arrived
}

func newScriptMaster(as ...protocol.Assignment) *scriptMaster {
	m := &scriptMaster{assignments: as, status: map[string]job.Status{}, done: map[string]protocol.Completion{}, changed: make(chan struct{}, 1000)}
	for _, a := range as {
		m.status[a.Job.UUID] = job.StatusAssigned
	}
	return m
}

var errUnreachable = errors.New("dial tcp: connect: no route to host")

func (m *scriptMaster) answer() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cut {
		return errUnreachable
	}
	return nil
}

func (m *scriptMaster) signal() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

func (m *scriptMaster) setCut(cut bool) {
	m.mu.Lock()
	m.cut = cut
	m.mu.Unlock()
}

func (m *scriptMaster) Register(ctx context.Context, inv protocol.Inventory) (protocol.Registration, error) {
	return protocol.Registration{HeartbeatInterval: 20 * time.Millisecond, FenceAfter: time.Second}, m.answer()
}

func (m *scriptMaster) Heartbeat(ctx context.Context, hb protocol.Heartbeat) (protocol.HeartbeatReply, error) {
	if err := m.answer(); err != nil {
		return protocol.HeartbeatReply{}, err
	}
	m.mu.Lock()
	m.heartbeats++
	m.mu.Unlock()
	m.signal()
	return protocol.HeartbeatReply{Interval: 20 * time.Millisecond, FenceAfter: time.Second}, nil
}

func (m *scriptMaster) Next(ctx context.Context, req protocol.NextRequest) (protocol.Work, error) {
	if err := m.answer(); err != nil {
		return protocol.Work{}, err
	}
	m.mu.Lock()
	as := m.assignments
	m.assignments = nil
	m.mu.Unlock()
	if len(as) == 0 {
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return protocol.Work{Assignments: as}, ctx.Err()
}

func (m *scriptMaster) Update(ctx context.Context, u protocol.StateUpdate) error {
	if err := m.answer(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	defer m.signal()
	if m.status[u.JobUUID] != u.From {
		return &protocol.Conflict{JobUUID: u.JobUUID, Status: m.status[u.JobUUID], Attempt: u.Attempt, Message: "state changed"}
	}
	m.status[u.JobUUID] = u.To
	return nil
}

func (m *scriptMaster) Log(ctx context.Context, c protocol.LogChunk) error { return m.answer() }

func (m *scriptMaster) LogState(ctx context.Context, id string) (protocol.LogState, error) {
	return protocol.LogState{}, m.answer()
}

func (m *scriptMaster) Done(ctx context.Context, d protocol.Completion) error {
	if err := m.answer(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	defer m.signal()
	m.status[d.JobUUID] = d.To
	m.done[d.JobUUID] = d
	return nil
}

// waitUntil waits for cond, checked whenever the master hears from the slave.
func (m *scriptMaster) waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		m.mu.Lock()
		ok := cond()
		m.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-m.changed:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%s did not happen within 60 s", what)
		}
	}
}

// slowEngine runs containers that live until stopped; Usage and List block while blocked is
// set (an engine under load), and it records which containers were halted and cancelled.
type slowEngine struct {
	mu        sync.Mutex
	slow      bool          // engine calls hang from now on
	blocked   chan struct{} // closed to unblock
	inUsage   chan struct{} // receives when a Usage call waits
	exits     map[string]chan int
	halted    map[string]bool
	cancelled map[string]bool
}

func newSlowEngine() *slowEngine {
	return &slowEngine{blocked: make(chan struct{}), inUsage: make(chan struct{}, 100), exits: map[string]chan int{},
		halted: map[string]bool{}, cancelled: map[string]bool{}}
}

func (e *slowEngine) Start(ctx context.Context, a protocol.Assignment) (*container.Started, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	id := "c-" + a.Job.UUID
	e.exits[id] = make(chan int, 1)
	return &container.Started{ContainerID: id}, nil
}

func (e *slowEngine) exit(id string, code int) {
	e.mu.Lock()
	ch := e.exits[id]
	e.mu.Unlock()
	select {
	case ch <- code:
	default:
	}
}

func (e *slowEngine) Wait(ctx context.Context, id string) (int, error) {
	e.mu.Lock()
	ch := e.exits[id]
	e.mu.Unlock()
	select {
	case code := <-ch:
		ch <- code // later waits see it too
		return code, nil
	case <-ctx.Done():
		return -1, ctx.Err()
	}
}

func (e *slowEngine) Logs(ctx context.Context, id string, follow bool) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader("")), nil
}

func (e *slowEngine) Cancel(ctx context.Context, id string) error {
	e.mu.Lock()
	e.cancelled[id] = true
	e.mu.Unlock()
	e.exit(id, 143)
	return nil
}

func (e *slowEngine) Halt(ctx context.Context, id string) (bool, int, error) {
	e.mu.Lock()
	e.halted[id] = true
	e.mu.Unlock()
	e.exit(id, container.HaltExitCode)
	return true, container.HaltExitCode, nil
}

func (e *slowEngine) Remove(ctx context.Context, id string) error { return nil }

func (e *slowEngine) hangs() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.slow
}

func (e *slowEngine) List(ctx context.Context) ([]container.Container, error) {
	if !e.hangs() {
		return nil, nil
	}
	select {
	case <-e.blocked:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (e *slowEngine) Usage(ctx context.Context, id string) (protocol.Usage, error) {
	if !e.hangs() {
		return protocol.Usage{CPUPercent: 100}, nil
	}
	select {
	case e.inUsage <- struct{}{}:
	default:
	}
	select {
	case <-e.blocked:
		return protocol.Usage{CPUPercent: 100}, nil
	case <-ctx.Done():
		return protocol.Usage{}, ctx.Err()
	}
}

func assignment(id string, restartable bool) protocol.Assignment {
	a := protocol.Assignment{Job: job.Job{UUID: id}, Attempt: 1, CPUIDs: []int{0}, MemoryGb: 1}
	a.Job.Request.Scheduling.Restartable = restartable
	return a
}

func quietLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Heartbeats go out on their own timer while every engine call hangs: a slave whose Docker
// Engine is slow is never taken for a dead one.
func TestHeartbeatsDoNotWaitForTheEngine(t *testing.T) {
	var as []protocol.Assignment
	for i := range 5 {
		as = append(as, assignment(fmt.Sprintf("job-%d", i), false))
	}
	m, eng := newScriptMaster(as...), newSlowEngine()
	a := New(m, eng, nil, protocol.Inventory{Name: "s", InstanceID: "i"}, Config{PollWait: 20 * time.Millisecond,
		SampleTimeout: time.Hour, ListEvery: 10 * time.Millisecond, ListTimeout: time.Hour}, quietLog(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); close(eng.blocked); <-done }()
	m.waitUntil(t, "5 jobs running", func() bool {
		n := 0
		for _, st := range m.status {
			if st == job.StatusRunning {
				n++
			}
		}
		return n == 5
	})
	eng.mu.Lock()
	eng.slow = true
	eng.mu.Unlock()
	<-eng.inUsage // a usage sample hangs in the engine, and so does the listing
	m.mu.Lock()
	before := m.heartbeats
	m.mu.Unlock()
	m.waitUntil(t, "20 heartbeats while the engine hangs", func() bool { return m.heartbeats >= before+20 })
}

// A slave that reaches no master for FenceAfter stops its jobs on its own (halting the
// restartable one) and, once a master answers again, reports them as ended by the fence.
func TestSlaveFencesItselfWhenCutOff(t *testing.T) {
	m, eng := newScriptMaster(assignment("restartable", true), assignment("plain", false)), newSlowEngine()
	close(eng.blocked)
	a := New(m, eng, nil, protocol.Inventory{Name: "s", InstanceID: "i"}, Config{PollWait: 20 * time.Millisecond, RetryMax: 50 * time.Millisecond,
		ListEvery: 10 * time.Millisecond}, quietLog(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	m.waitUntil(t, "both jobs running", func() bool {
		return m.status["restartable"] == job.StatusRunning && m.status["plain"] == job.StatusRunning
	})
	m.setCut(true)
	waitFor(t, "the slave stopping its jobs", func() bool {
		eng.mu.Lock()
		defer eng.mu.Unlock()
		return eng.halted["c-restartable"] && eng.cancelled["c-plain"]
	})
	m.setCut(false)
	m.waitUntil(t, "the fenced jobs reported", func() bool { return len(m.done) == 2 })
	for id, d := range m.done {
		if !d.Fenced || d.To != job.StatusFailed || !strings.Contains(d.Reason, "self-fencing") {
			t.Errorf("job %s reported %+v, want FAILED by the fence", id, d)
		}
	}
	if !a.isFenced() {
		return
	}
	waitFor(t, "the slave taking jobs again", func() bool { return !a.isFenced() })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within 60 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
