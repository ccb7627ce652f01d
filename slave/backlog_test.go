package slave

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/protocol"
)

// slowLogMaster takes log chunks only once released (a master that is slow to store them).
type slowLogMaster struct {
	*scriptMaster
	release chan struct{}
}

func (m *slowLogMaster) Log(ctx context.Context, c protocol.LogChunk) error {
	select {
	case <-m.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loggingEngine's containers print a fixed output.
type loggingEngine struct {
	*slowEngine
	output string
}

func (e *loggingEngine) Logs(ctx context.Context, id string, follow bool) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader(e.output)), nil
}

// LogBacklog (gpulab_slave_log_backlog_bytes) counts the output read and not yet taken by the
// master, and falls back to zero once the master has it.
func TestLogBacklogCountsWhatTheMasterHasNotTaken(t *testing.T) {
	m := &slowLogMaster{scriptMaster: newScriptMaster(assignment("job-1", false)), release: make(chan struct{})}
	eng := &loggingEngine{slowEngine: newSlowEngine(), output: "hello backlog\n"}
	a := New(m, eng, nil, protocol.Inventory{Name: "s", InstanceID: "i"}, Config{PollWait: 20 * time.Millisecond, LogFlush: 10 * time.Millisecond}, quietLog(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); close(eng.blocked); <-done }()
	waitBacklog := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for a.LogBacklog() != want {
			if time.Now().After(deadline) {
				t.Fatalf("log backlog %d, want %d", a.LogBacklog(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitBacklog(int64(len(eng.output)))
	close(m.release)
	waitBacklog(0)
}
