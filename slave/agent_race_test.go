package slave

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/slave/container"
)

// The agent is stopped (its context cancelled) at random points of its jobs' lives: while
// registering, starting, running, cancelling and halting them, re-attaching after a restart.
// Run with -race: every access the agent's goroutines make is checked, and nothing of an agent
// may touch the master, the runtime or the log once its Run returned (in the end-to-end tests
// that is after the test's cleanup, where a late log line fails the test binary).
//
// The seed is logged; GPULAB_TEST_SEED=<seed> gives the same stopping points and fake master
// again (the goroutines' interleaving is the scheduler's, so a replay is likelier, not sure, to
// fail the same way).
func TestAgentStopsAtAnyPoint(t *testing.T) {
	t.Parallel()
	deadline := time.Now().Add(3 * time.Second)
	rng := rand.New(rand.NewPCG(testenv.Seed(t), 1))
	w := newWorld(rng.Uint64())
	defer w.shutdown()
	runs := 0
	for ; runs < 400 && time.Now().Before(deadline); runs++ {
		e := &epoch{w: w}
		a := New(e, &epochRuntime{e}, fakeSampler{}, protocol.Inventory{Name: "s", InstanceID: fmt.Sprint(runs)},
			Config{PollWait: 5 * time.Millisecond, LogFlush: time.Millisecond, LogChunk: 64, LogLimit: 4 << 10},
			slog.New(slog.NewTextHandler(epochWriter{e}, nil)))
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(40_000))*time.Microsecond)
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		select {
		case err := <-done:
			if err != nil && ctx.Err() == nil {
				t.Fatalf("run %d: Run: %v", runs, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("run %d: Run did not return within a minute after its context ended", runs)
		}
		cancel()
		e.closed.Store(true)
		time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond) // room for stragglers
		if n := e.late.Load(); n > 0 {
			t.Fatalf("run %d: %d calls or log lines of the agent after Run returned: %s", runs, n, e.lateWhat())
		}
	}
	t.Logf("%d agent runs, %d jobs", runs, w.jobCount())
}

// world is the master's and the engine's state, kept across agent restarts.
type world struct {
	mu      sync.Mutex
	rng     *rand.Rand
	jobs    map[string]*fakeJob
	n       int
	engine  map[string]*fakeContainer // by container id
	writers sync.WaitGroup            // the fake engine's log writers
}

type fakeJob struct {
	status  job.Status
	noSig   bool
	nextSeq int
	size    int64
}

type fakeContainer struct {
	id, job string
	exit    chan struct{}
	once    sync.Once
	code    int
}

func (c *fakeContainer) stop(code int) {
	c.once.Do(func() { c.code = code; close(c.exit) })
}

func (c *fakeContainer) running() bool {
	select {
	case <-c.exit:
		return false
	default:
		return true
	}
}

func newWorld(seed uint64) *world {
	return &world{rng: rand.New(rand.NewPCG(seed, 2)), jobs: map[string]*fakeJob{}, engine: map[string]*fakeContainer{}}
}

func (w *world) jobCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.jobs)
}

func (w *world) shutdown() {
	w.mu.Lock()
	for _, c := range w.engine {
		c.stop(137)
	}
	w.mu.Unlock()
	w.writers.Wait()
}

func (w *world) intn(n int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rng.IntN(n)
}

// pause takes up to max microseconds, or less when ctx ends.
func (w *world) pause(ctx context.Context, max int) error {
	if max > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(w.intn(max)) * time.Microsecond):
		}
	}
	return ctx.Err()
}

// epoch is one agent run's view of the world: it counts what the agent does after Run
// returned.
type epoch struct {
	w      *world
	closed atomic.Bool
	late   atomic.Int64
	mu     sync.Mutex
	what   []string
}

func (e *epoch) check(what string) {
	if e.closed.Load() {
		e.late.Add(1)
		e.mu.Lock()
		e.what = append(e.what, what)
		e.mu.Unlock()
	}
}

func (e *epoch) lateWhat() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return fmt.Sprint(e.what)
}

var errConflict = &protocol.StatusError{Status: http.StatusConflict, Message: "state changed"}

func (e *epoch) Register(ctx context.Context, inv protocol.Inventory) (protocol.Registration, error) {
	e.check("Register")
	if err := e.w.pause(ctx, 500); err != nil {
		return protocol.Registration{}, err
	}
	e.w.mu.Lock()
	defer e.w.mu.Unlock()
	reg := protocol.Registration{HeartbeatInterval: time.Millisecond}
	for id, j := range e.w.jobs {
		reg.Jobs = append(reg.Jobs, protocol.JobState{JobUUID: id, Status: j.status})
	}
	return reg, nil
}

// stops orders a random running job to stop, the way the master's loop does.
func (e *epoch) stops() []protocol.StopOrder {
	e.w.mu.Lock()
	defer e.w.mu.Unlock()
	var out []protocol.StopOrder
	for id, j := range e.w.jobs {
		if e.w.rng.IntN(8) != 0 {
			continue
		}
		switch j.status {
		case job.StatusRunning:
			if e.w.rng.IntN(2) == 0 {
				j.status = job.StatusCancelled
				out = append(out, protocol.StopOrder{JobUUID: id, Mode: protocol.StopCancel, Reason: "test"})
			} else {
				j.status = job.StatusMustHalt
				out = append(out, protocol.StopOrder{JobUUID: id, Mode: protocol.StopHalt, Reason: "test"})
			}
		case job.StatusMustHalt, job.StatusHalting:
			out = append(out, protocol.StopOrder{JobUUID: id, Mode: protocol.StopHalt, Reason: "test"})
		case job.StatusCancelled:
			out = append(out, protocol.StopOrder{JobUUID: id, Mode: protocol.StopCancel, Reason: "test"})
		}
	}
	return out
}

func (e *epoch) Heartbeat(ctx context.Context, hb protocol.Heartbeat) (protocol.HeartbeatReply, error) {
	e.check("Heartbeat")
	if err := e.w.pause(ctx, 300); err != nil {
		return protocol.HeartbeatReply{}, err
	}
	return protocol.HeartbeatReply{Interval: time.Millisecond, Stops: e.stops()}, nil
}

func (e *epoch) Next(ctx context.Context, req protocol.NextRequest) (protocol.Work, error) {
	e.check("Next")
	if err := e.w.pause(ctx, 2000); err != nil {
		return protocol.Work{}, err
	}
	work := protocol.Work{Stops: e.stops()}
	e.w.mu.Lock()
	defer e.w.mu.Unlock()
	for range e.w.rng.IntN(3) {
		e.w.n++
		id := fmt.Sprintf("job-%d", e.w.n)
		j := &fakeJob{status: job.StatusAssigned, noSig: e.w.rng.IntN(2) == 0}
		e.w.jobs[id] = j
		as := protocol.Assignment{Job: job.Job{UUID: id}, CPUIDs: []int{0}, MemoryGb: 1}
		as.Job.Request.Scheduling.AllowHaltWithoutSignal = j.noSig
		for g := range e.w.rng.IntN(3) {
			as.GPUs = append(as.GPUs, protocol.GPU{Index: g, UUID: fmt.Sprint("GPU-", g), Fake: true})
		}
		work.Assignments = append(work.Assignments, as)
	}
	return work, nil
}

func (e *epoch) Update(ctx context.Context, u protocol.StateUpdate) error {
	e.check("Update")
	if err := e.w.pause(ctx, 300); err != nil {
		return err
	}
	e.w.mu.Lock()
	defer e.w.mu.Unlock()
	j := e.w.jobs[u.JobUUID]
	if j == nil || j.status != u.From {
		return errConflict
	}
	j.status = u.To
	return nil
}

func (e *epoch) Log(ctx context.Context, c protocol.LogChunk) error {
	e.check("Log")
	if err := e.w.pause(ctx, 200); err != nil {
		return err
	}
	e.w.mu.Lock()
	defer e.w.mu.Unlock()
	j := e.w.jobs[c.JobUUID]
	if j == nil || c.Seq < j.nextSeq {
		return errConflict
	}
	if c.Seq > j.nextSeq {
		return &protocol.StatusError{Status: http.StatusBadRequest, Message: fmt.Sprintf("log chunk %d before %d", c.Seq, j.nextSeq)}
	}
	j.nextSeq++
	j.size += int64(len(c.Data))
	return nil
}

func (e *epoch) LogState(ctx context.Context, id string) (protocol.LogState, error) {
	e.check("LogState")
	if err := e.w.pause(ctx, 200); err != nil {
		return protocol.LogState{}, err
	}
	e.w.mu.Lock()
	defer e.w.mu.Unlock()
	j := e.w.jobs[id]
	if j == nil {
		return protocol.LogState{}, &protocol.StatusError{Status: http.StatusNotFound, Message: "no such job"}
	}
	return protocol.LogState{NextSeq: j.nextSeq, Size: j.size}, nil
}

func (e *epoch) Done(ctx context.Context, d protocol.Completion) error {
	e.check("Done")
	if err := e.w.pause(ctx, 300); err != nil {
		return err
	}
	e.w.mu.Lock()
	defer e.w.mu.Unlock()
	j := e.w.jobs[d.JobUUID]
	if j == nil || j.status != d.From {
		return errConflict
	}
	j.status = d.To
	return nil
}

// epochRuntime is the fake engine as one agent run sees it.
type epochRuntime struct{ e *epoch }

func (r *epochRuntime) Start(ctx context.Context, a protocol.Assignment) (*container.Started, error) {
	r.e.check("Start")
	if err := r.e.w.pause(ctx, 3000); err != nil {
		return nil, &container.StartError{Reason: "start: " + err.Error(), Err: err}
	}
	w := r.e.w
	w.mu.Lock()
	defer w.mu.Unlock()
	c := &fakeContainer{id: "c-" + a.Job.UUID, job: a.Job.UUID, exit: make(chan struct{})}
	if old := w.engine[c.id]; old != nil && old.running() {
		return nil, &container.StartError{Reason: "create: running already"}
	}
	w.engine[c.id] = c
	if w.rng.IntN(3) == 0 { // a short job; the others run until stopped
		life := time.Duration(w.rng.IntN(20_000)) * time.Microsecond
		time.AfterFunc(life, func() { c.stop(w.intn(2)) })
	}
	return &container.Started{ContainerID: c.id}, nil
}

func (r *epochRuntime) get(id string) *fakeContainer {
	r.e.w.mu.Lock()
	defer r.e.w.mu.Unlock()
	return r.e.w.engine[id]
}

func (r *epochRuntime) Wait(ctx context.Context, id string) (int, error) {
	r.e.check("Wait")
	c := r.get(id)
	if c == nil {
		return -1, container.ErrNotFound
	}
	select {
	case <-c.exit:
		return c.code, nil
	case <-ctx.Done():
		return -1, ctx.Err()
	}
}

// Logs streams a line every few hundred microseconds until the container exits, like a
// followed log; closing the reader or ending ctx stops it.
func (r *epochRuntime) Logs(ctx context.Context, id string, follow bool) (io.ReadCloser, error) {
	r.e.check("Logs")
	c := r.get(id)
	if c == nil {
		return nil, container.ErrNotFound
	}
	pr, pw := io.Pipe()
	w := r.e.w
	w.writers.Add(1)
	go func() {
		defer w.writers.Done()
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(pw, "line %d of %s\n", i, id); err != nil {
				return
			}
			select {
			case <-c.exit:
				_ = pw.Close()
				return
			case <-ctx.Done():
				_ = pw.CloseWithError(ctx.Err())
				return
			case <-time.After(time.Duration(w.intn(500)) * time.Microsecond):
			}
		}
	}()
	return pr, nil
}

func (r *epochRuntime) Cancel(ctx context.Context, id string) error {
	r.e.check("Cancel")
	if err := r.e.w.pause(ctx, 500); err != nil {
		return err
	}
	if c := r.get(id); c != nil {
		c.stop(137)
	}
	return nil
}

func (r *epochRuntime) Halt(ctx context.Context, id string) (bool, int, error) {
	r.e.check("Halt")
	c := r.get(id)
	if c == nil {
		return false, -1, container.ErrNotFound
	}
	if r.e.w.intn(2) == 0 {
		c.stop(container.HaltExitCode)
	}
	select {
	case <-c.exit:
		return c.code == container.HaltExitCode, c.code, nil
	case <-ctx.Done():
		return false, -1, ctx.Err()
	case <-time.After(2 * time.Millisecond): // the halt grace
		c.stop(137)
		return false, 137, nil
	}
}

func (r *epochRuntime) Remove(ctx context.Context, id string) error {
	r.e.check("Remove")
	if err := r.e.w.pause(ctx, 200); err != nil {
		return err
	}
	r.e.w.mu.Lock()
	defer r.e.w.mu.Unlock()
	if c := r.e.w.engine[id]; c != nil {
		c.stop(137)
		delete(r.e.w.engine, id)
	}
	return nil
}

func (r *epochRuntime) List(ctx context.Context) ([]container.Container, error) {
	r.e.check("List")
	if err := r.e.w.pause(ctx, 300); err != nil {
		return nil, err
	}
	r.e.w.mu.Lock()
	defer r.e.w.mu.Unlock()
	var out []container.Container
	for _, c := range r.e.w.engine {
		out = append(out, container.Container{ID: c.id, JobUUID: c.job, Running: c.running()})
	}
	return out, nil
}

func (r *epochRuntime) Usage(ctx context.Context, id string) (protocol.Usage, error) {
	r.e.check("Usage")
	if err := r.e.w.pause(ctx, 300); err != nil {
		return protocol.Usage{}, err
	}
	if r.get(id) == nil {
		return protocol.Usage{}, errors.New("no such container")
	}
	return protocol.Usage{CPUPercent: 50, MemoryMiB: 10}, nil
}

type fakeSampler struct{}

func (fakeSampler) Sample(indices ...int) []protocol.GPUUsage {
	return []protocol.GPUUsage{{Index: 0, UtilPercent: 10}, {Index: 1, UtilPercent: 20}}
}

// epochWriter is the agent's log: a line written after Run returned counts as late.
type epochWriter struct{ e *epoch }

func (w epochWriter) Write(p []byte) (int, error) {
	w.e.check("log: " + string(p))
	return len(p), nil
}
