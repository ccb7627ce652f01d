package slave

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
)

// logMaster keeps the log chunks it is sent, in the order it takes them.
type logMaster struct {
	*scriptMaster
	mu  sync.Mutex
	log strings.Builder
}

func (m *logMaster) Log(ctx context.Context, c protocol.LogChunk) error {
	if err := m.answer(); err != nil {
		return err
	}
	m.mu.Lock()
	m.log.Write(c.Data)
	m.mu.Unlock()
	m.signal()
	return nil
}

func (m *logMaster) text() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.log.String()
}

// shortStreamEngine's followed log streams end early: each returns the output written so far
// less its last cut bytes, and ends, whether the container runs or not (Docker's stream ending
// at the container's exit before it passed on the last line, or a daemon restarting). A read
// without following returns all of the output.
type shortStreamEngine struct {
	*slowEngine
	mu     sync.Mutex
	output string
	cut    int
	slow   time.Duration // every Wait answers this late (a Docker Engine under load)
}

func (e *shortStreamEngine) Wait(ctx context.Context, id string) (int, error) {
	select {
	case <-time.After(e.slow):
	case <-ctx.Done():
		return -1, ctx.Err()
	}
	return e.slowEngine.Wait(ctx, id)
}

func (e *shortStreamEngine) write(s string) {
	e.mu.Lock()
	e.output += s
	e.mu.Unlock()
}

func (e *shortStreamEngine) Logs(ctx context.Context, id string, follow bool) (io.ReadCloser, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.output
	if follow {
		out = out[:max(len(out)-e.cut, 0)]
	}
	return io.NopCloser(strings.NewReader(out)), nil
}

func runLogged(t *testing.T, eng *shortStreamEngine) *logMaster {
	t.Helper()
	m := &logMaster{scriptMaster: newScriptMaster(assignment("job-1", false))}
	a := New(m, eng, nil, protocol.Inventory{Name: "s", InstanceID: "i"}, Config{PollWait: 20 * time.Millisecond, LogFlush: 10 * time.Millisecond}, quietLog(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return m
}

// A followed stream that ends as the container exits, without the container's last line: the
// line is read without following once the container has stopped, before the end is reported.
func TestLastLineShippedWhenTheStreamEndsEarly(t *testing.T) {
	lastLineShipped(t, 0)
}

// The same with an engine that answers Wait later than the reader waits before it follows the
// log again (chaos slow-docker): the container is still seen to have stopped, the last line
// read, and the end reported.
func TestLastLineShippedWithASlowEngine(t *testing.T) {
	lastLineShipped(t, logReopenAfter*3/2)
}

func lastLineShipped(t *testing.T, slowWait time.Duration) {
	t.Helper()
	eng := &shortStreamEngine{slowEngine: newSlowEngine(), output: "start\nlast line\n", cut: len("last line\n"), slow: slowWait}
	m := runLogged(t, eng)
	m.waitUntil(t, "job running", func() bool { return m.status["job-1"] == job.StatusRunning })
	eng.exit("c-job-1", 0)
	m.waitUntil(t, "job finished", func() bool { return m.done["job-1"].To == job.StatusFinished })
	if got, want := m.text(), "start\nlast line\n"; got != want {
		t.Fatalf("log %q at the end, want %q", got, want)
	}
}

// A followed stream that ends while the container runs is followed again from where it got
// to: later output is shipped while the job runs, and nothing twice.
func TestLogFollowedAgainWhileTheContainerRuns(t *testing.T) {
	eng := &shortStreamEngine{slowEngine: newSlowEngine(), output: "one\n"}
	m := runLogged(t, eng)
	m.waitUntil(t, "first line shipped", func() bool { return m.text() == "one\n" })
	eng.write("two\n")
	m.waitUntil(t, "second line shipped while the job runs", func() bool { return m.text() == "one\ntwo\n" })
	eng.mu.Lock()
	eng.cut = len("three\n") // the last stream misses the last line again
	eng.mu.Unlock()
	eng.write("three\n")
	eng.exit("c-job-1", 0)
	m.waitUntil(t, "job finished", func() bool { return m.done["job-1"].To == job.StatusFinished })
	if got, want := m.text(), "one\ntwo\nthree\n"; got != want {
		t.Fatalf("log %q at the end, want %q", got, want)
	}
}
