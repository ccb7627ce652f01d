package slave

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
)

// refusingMaster is a scriptMaster that can answer 401 to everything (the slave's certificate
// revoked at every master).
type refusingMaster struct {
	*scriptMaster
	refuse atomic.Bool
}

func (m *refusingMaster) refused() error {
	if m.refuse.Load() {
		return &protocol.StatusError{Status: 401, Message: "client certificate 42 is revoked"}
	}
	return nil
}

func (m *refusingMaster) Heartbeat(ctx context.Context, hb protocol.Heartbeat) (protocol.HeartbeatReply, error) {
	if err := m.refused(); err != nil {
		return protocol.HeartbeatReply{}, err
	}
	return m.scriptMaster.Heartbeat(ctx, hb)
}

func (m *refusingMaster) Next(ctx context.Context, req protocol.NextRequest) (protocol.Work, error) {
	if err := m.refused(); err != nil {
		return protocol.Work{}, err
	}
	return m.scriptMaster.Next(ctx, req)
}

func (m *refusingMaster) Update(ctx context.Context, u protocol.StateUpdate) error {
	if err := m.refused(); err != nil {
		return err
	}
	return m.scriptMaster.Update(ctx, u)
}

func (m *refusingMaster) Log(ctx context.Context, c protocol.LogChunk) error {
	if err := m.refused(); err != nil {
		return err
	}
	return m.scriptMaster.Log(ctx, c)
}

func (m *refusingMaster) Done(ctx context.Context, d protocol.Completion) error {
	if err := m.refused(); err != nil {
		return err
	}
	return m.scriptMaster.Done(ctx, d)
}

// A slave every master refuses (401: its certificate revoked) fences itself as a cut-off one
// does: it stops its jobs and takes no new ones, although the masters answer.
func TestSlaveFencesItselfWhenRefused(t *testing.T) {
	sm, eng := newScriptMaster(assignment("plain", false)), newSlowEngine()
	close(eng.blocked)
	m := &refusingMaster{scriptMaster: sm}
	a := New(m, eng, nil, protocol.Inventory{Name: "s", InstanceID: "i"}, Config{PollWait: 20 * time.Millisecond, RetryMax: 50 * time.Millisecond,
		ListEvery: 10 * time.Millisecond}, quietLog(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	sm.waitUntil(t, "the job running", func() bool { return sm.status["plain"] == job.StatusRunning })
	m.refuse.Store(true)
	waitFor(t, "the refused slave stopping its job", func() bool {
		eng.mu.Lock()
		defer eng.mu.Unlock()
		return eng.cancelled["c-plain"]
	})
	if !a.isFenced() {
		t.Fatal("the refused slave stopped its job but is not fenced")
	}
}
