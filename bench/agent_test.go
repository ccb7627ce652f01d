package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/store"
)

// fakeHooks say what simulated slaves do with their jobs and tell the benchmark when things
// happen. Every field may be nil.
type fakeHooks struct {
	// delivered: an assignment reached the slave (its Next call returned it).
	delivered func(uuid string, at time.Time)
	// running: the slave's ASSIGNED→STARTING→RUNNING updates were both accepted.
	running func(uuid string, at time.Time)
	// finished: the slave's Done (FINISHED) was accepted.
	finished func(uuid string, at time.Time)
	// runFor is how long a job runs before it finishes; ≤ 0 (or nil): until the benchmark ends.
	runFor func(a *protocol.Assignment) time.Duration
}

// fakeSlave is a simulated slave: it speaks the real protocol (protocol.Client with its slave
// certificate: register, heartbeat with usage samples, long-poll Next, conditional Update, a log
// chunk, Done) in the order the real agent (package slave) does, but runs no container: a job
// is RUNNING as soon as it is assigned.
type fakeSlave struct {
	name  string
	mc    *protocol.Client
	inv   protocol.Inventory
	hooks *fakeHooks
	fails *failTally
	beats *samples // every heartbeat's round trip, failed ones too

	mu   sync.Mutex
	jobs map[string]*fakeJob
}

type fakeJob struct {
	status  job.Status
	attempt int
	gpus    []int
	timer   *time.Timer
}

// fleet is a set of simulated slaves.
type fleet struct {
	slaves []*fakeSlave
	fails  failTally // calls to the master that failed (besides expected conflicts)
	beats  samples   // heartbeat round trips, as the slaves saw them
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// fleetSpec sizes a fleet.
type fleetSpec struct {
	Slaves, GPUs, CPUs, MemoryGiB int
	// Clusters spreads the slaves over clusters 1..Clusters (round robin).
	Clusters int
	Prefix   string
}

// startFleet joins and registers spec.Slaves simulated slaves (registrations 32 at a time),
// starts their heartbeats (spread over the interval, as a real fleet's are) and long polls,
// and returns when all are registered. They stop when the test ends.
func startFleet(t testing.TB, m *master, spec fleetSpec, hooks *fakeHooks) *fleet {
	t.Helper()
	if spec.Prefix == "" {
		spec.Prefix = "sim"
	}
	if spec.Clusters < 1 {
		spec.Clusters = 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &fleet{cancel: cancel}
	t.Cleanup(f.stop)
	for c := 1; c <= spec.Clusters; c++ { // every cluster exists, even without slaves
		if _, err := m.Store.CreateCluster(ctx, store.Cluster{ID: c, Name: fmt.Sprintf("cluster%d", c)}); err != nil && !errors.Is(err, store.ErrConflict) {
			t.Fatalf("create cluster %d: %v", c, err)
		}
	}
	for i := range spec.Slaves {
		name := fmt.Sprintf("%s-%04d", spec.Prefix, i)
		cluster := 1 + i%spec.Clusters
		cert := m.slaveCert(name, cluster)
		mc, err := protocol.NewClient(m.URL, m.CA.CertPEM, &cert)
		if err != nil {
			t.Fatal(err)
		}
		gpus := make([]protocol.GPU, spec.GPUs)
		for k := range gpus {
			gpus[k] = protocol.GPU{Index: k, UUID: fmt.Sprintf("GPU-%s-%d", name, k), Model: "Simulated V100", MemoryMiB: 32 << 10, Fake: true}
		}
		inv := protocol.Inventory{Name: name, InstanceID: fmt.Sprintf("inst-%s-%d", name, time.Now().UnixNano()), ClusterID: cluster,
			Host: name + ".bench", DNSName: name + ".bench", Version: "bench", PID: 1, CPUs: spec.CPUs, MemoryMiB: int64(spec.MemoryGiB) << 10,
			GPUs: gpus, DriverVersion: "550.54.15", CudaVersion: "12.4", GPUStatus: "fake", StorageRoots: []string{"/project"}}
		f.slaves = append(f.slaves, &fakeSlave{name: name, mc: mc, inv: inv, hooks: hooks, fails: &f.fails, beats: &f.beats, jobs: map[string]*fakeJob{}})
	}
	sem := make(chan struct{}, 32)
	errs := make(chan error, len(f.slaves))
	var reg sync.WaitGroup
	for _, s := range f.slaves {
		reg.Add(1)
		sem <- struct{}{}
		go func() {
			defer reg.Done()
			defer func() { <-sem }()
			r, err := s.mc.Register(ctx, s.inv)
			if err != nil {
				errs <- fmt.Errorf("register %s: %w", s.name, err)
				return
			}
			f.wg.Add(2)
			go func() { defer f.wg.Done(); s.heartbeats(ctx, r.HeartbeatInterval) }()
			go func() { defer f.wg.Done(); s.poll(ctx) }()
		}()
	}
	reg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return f
}

// stop stops the fleet (once; also at the end of the test).
func (f *fleet) stop() { f.once.Do(f.stopNow) }

func (f *fleet) stopNow() {
	f.cancel()
	f.wg.Wait()
	for _, s := range f.slaves {
		s.mu.Lock()
		for _, j := range s.jobs {
			if j.timer != nil {
				j.timer.Stop()
			}
		}
		s.mu.Unlock()
	}
}

func (s *fakeSlave) failed(ctx context.Context, err error) {
	if err != nil && ctx.Err() == nil && !errors.Is(err, protocol.ErrConflict) {
		s.fails.add(err)
	}
}

// failTally counts failed protocol calls, and how often each kind of failure came (the error's
// text with job ids and numbers left out), so that a report names what failed.
type failTally struct {
	n      atomic.Int64
	mu     sync.Mutex
	byKind map[string]int
}

var failNoise = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f-]{27}|[0-9]+(\.[0-9]+)?`)

func (t *failTally) add(err error) {
	t.n.Add(1)
	kind := failNoise.ReplaceAllString(err.Error(), "N")
	if len(kind) > 160 {
		kind = kind[:160] + "…"
	}
	t.mu.Lock()
	if t.byKind == nil {
		t.byKind = map[string]int{}
	}
	t.byKind[kind]++
	t.mu.Unlock()
}

// failKinds is ", the commonest: …" naming t's three commonest failures, or "" when none.
func failKinds(t *failTally) string {
	if top := t.top(3); top != "" {
		return ", the commonest: " + top
	}
	return ""
}

// take returns the count and failKinds of the failures so far, and starts counting afresh.
func (t *failTally) take() (int64, string) {
	kinds := failKinds(t)
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.byKind)
	return t.n.Swap(0), kinds
}

// Load is the number of failed calls.
func (t *failTally) Load() int64 { return t.n.Load() }

// top names the n commonest kinds of failure with their counts ("" when none failed).
func (t *failTally) top(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	kinds := make([]string, 0, len(t.byKind))
	for k := range t.byKind {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(a, b string) int { return cmp.Or(t.byKind[b]-t.byKind[a], strings.Compare(a, b)) })
	var out []string
	for _, k := range kinds[:min(n, len(kinds))] {
		out = append(out, fmt.Sprintf("%d× %q", t.byKind[k], k))
	}
	return strings.Join(out, ", ")
}

func (s *fakeSlave) running() []protocol.RunningJob {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]protocol.RunningJob, 0, len(s.jobs))
	for id, j := range s.jobs {
		out = append(out, protocol.RunningJob{JobUUID: id, Attempt: j.attempt, Status: j.status})
	}
	return out
}

// heartbeats reports the jobs with a usage sample each, like the real agent, every interval
// after a random first delay.
func (s *fakeSlave) heartbeats(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = 5 * time.Second
	}
	delay := time.Duration(rand.Int64N(int64(interval)))
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = interval
		var hb protocol.Heartbeat
		hb.InstanceID, hb.Accepting = s.inv.InstanceID, true
		s.mu.Lock()
		for id, j := range s.jobs {
			rj := protocol.RunningJob{JobUUID: id, Attempt: j.attempt, ContainerID: "fake-" + id[:12], Status: j.status}
			if j.status == job.StatusRunning {
				u := &protocol.Usage{CPUPercent: 95, MemoryMiB: 2048}
				for _, g := range j.gpus {
					u.GPUs = append(u.GPUs, protocol.GPUUsage{Index: g, UtilPercent: 80, MemoryUsedMiB: 10 << 10})
				}
				rj.Usage = u
			}
			hb.Jobs = append(hb.Jobs, rj)
		}
		s.mu.Unlock()
		t0 := time.Now()
		reply, err := s.mc.Heartbeat(ctx, hb)
		if ctx.Err() == nil {
			s.beats.add(t0, time.Since(t0)) // a failure counts for the time it took (a timeout: 30 s)
		}
		s.failed(ctx, err)
		if err == nil {
			if reply.Interval > 0 {
				delay = reply.Interval
			}
			s.stops(reply.Stops)
		}
	}
}

// stops drops the jobs the master ordered stopped (a cancel: the master has ended them).
func (s *fakeSlave) stops(orders []protocol.StopOrder) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range orders {
		if j, ok := s.jobs[o.JobUUID]; ok && o.Mode == protocol.StopCancel {
			if j.timer != nil {
				j.timer.Stop()
			}
			delete(s.jobs, o.JobUUID)
		}
	}
}

// poll long-polls for work as the real agent does (25 s waits) and starts what it gets.
func (s *fakeSlave) poll(ctx context.Context) {
	b := agentBackoff(time.Second)
	for ctx.Err() == nil {
		work, err := s.mc.Next(ctx, protocol.NextRequest{InstanceID: s.inv.InstanceID, Wait: protocol.PollWait, Jobs: s.running()})
		if err != nil {
			s.failed(ctx, err)
			select {
			case <-ctx.Done():
			case <-time.After(b.NextBackOff()):
			}
			continue
		}
		b.Reset()
		now := time.Now()
		s.stops(work.Stops)
		for i := range work.Assignments {
			a := &work.Assignments[i]
			id := a.Job.UUID
			s.mu.Lock()
			_, busy := s.jobs[id]
			if !busy {
				j := &fakeJob{status: job.StatusAssigned, attempt: a.Attempt}
				for _, g := range a.GPUs {
					j.gpus = append(j.gpus, g.Index)
				}
				s.jobs[id] = j
			}
			s.mu.Unlock()
			if busy {
				continue
			}
			if s.hooks.delivered != nil {
				s.hooks.delivered(id, now)
			}
			go s.start(ctx, a)
		}
	}
}

func (s *fakeSlave) setStatus(id string, st job.Status) *fakeJob {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[id]
	if j != nil {
		j.status = st
	}
	return j
}

func (s *fakeSlave) drop(id string) {
	s.mu.Lock()
	delete(s.jobs, id)
	s.mu.Unlock()
}

// agentBackoff is the real agent's back-off between retries of a failed call (slave.Agent's
// backoff with its default RetryMax): exponential from first, with jitter, up to 10 s. A fake
// slave that gave up at the first refusal, or retried every second, would make an overloaded
// master's load worse than the agents do (B8x's fill: a shed update lost its job, which was
// queued again and assigned again).
func agentBackoff(first time.Duration) *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(backoff.WithInitialInterval(first), backoff.WithMaxInterval(10*time.Second),
		backoff.WithRandomizationFactor(0.5), backoff.WithMultiplier(2), backoff.WithMaxElapsedTime(0))
}

// retry calls fn until it succeeds or fails for good (a conflict, a refusal that is not
// temporary), as the agent retries its updates, counting each failure.
func (s *fakeSlave) retry(ctx context.Context, fn func(ctx context.Context) error) error {
	b := agentBackoff(500 * time.Millisecond)
	for {
		err := fn(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		s.failed(ctx, err)
		var se *protocol.StatusError
		if errors.Is(err, protocol.ErrConflict) || errors.As(err, &se) && !se.Temporary() {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(b.NextBackOff()):
		}
	}
}

// start moves a job to RUNNING as the real agent does (STARTING, then RUNNING with the
// resources it got) and arranges its end.
func (s *fakeSlave) start(ctx context.Context, a *protocol.Assignment) {
	id := a.Job.UUID
	err := s.retry(ctx, func(ctx context.Context) error {
		return s.mc.Update(ctx, protocol.StateUpdate{JobUUID: id, Attempt: a.Attempt, From: job.StatusAssigned, To: job.StatusStarting, Reason: "picked up by slave " + s.name})
	})
	if err != nil {
		s.drop(id)
		return
	}
	s.setStatus(id, job.StatusStarting)
	res := &job.StateResources{ClusterID: a.ClusterID, CPUIDs: a.CPUIDs, CPUMemoryGb: a.MemoryGb, SlaveName: s.name, SlaveHost: s.inv.DNSName,
		SlaveInstanceID: s.inv.InstanceID, PortMappings: []job.PortMapping{}}
	for _, g := range a.GPUs {
		res.GPUIDs = append(res.GPUIDs, g.Index)
	}
	if a.Job.State.Resources != nil {
		res.GPUDetails = a.Job.State.Resources.GPUDetails
	}
	err = s.retry(ctx, func(ctx context.Context) error {
		return s.mc.Update(ctx, protocol.StateUpdate{JobUUID: id, Attempt: a.Attempt, From: job.StatusStarting, To: job.StatusRunning,
			Reason: "container fake-" + id[:12] + " started", Resources: res})
	})
	if err != nil {
		s.drop(id)
		return
	}
	now := time.Now()
	if s.hooks.running != nil {
		s.hooks.running(id, now)
	}
	var d time.Duration
	if s.hooks.runFor != nil {
		d = s.hooks.runFor(a)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[id]
	if j == nil {
		return // stopped meanwhile
	}
	j.status = job.StatusRunning
	if d > 0 {
		j.timer = time.AfterFunc(d, func() { s.finish(ctx, id, a.Attempt) })
	}
}

// finish ships a line of log and reports FINISHED with exit code 0 and a usage summary.
func (s *fakeSlave) finish(ctx context.Context, id string, attempt int) {
	if ctx.Err() != nil {
		return
	}
	chunk := protocol.LogChunk{JobUUID: id, Attempt: attempt, Seq: 0, Data: []byte("epoch 1/1: loss 0.042 (" + strconv.Itoa(rand.IntN(1000)) + ")\n")}
	_ = s.retry(ctx, func(ctx context.Context) error { return s.mc.Log(ctx, chunk) })
	code := 0
	err := s.retry(ctx, func(ctx context.Context) error {
		return s.mc.Done(ctx, protocol.Completion{JobUUID: id, Attempt: attempt, From: job.StatusRunning, To: job.StatusFinished, ExitCode: &code,
			Usage: &protocol.Usage{CPUPercent: 95, MemoryMiB: 2048}})
	})
	s.drop(id)
	if err == nil && s.hooks.finished != nil {
		s.hooks.finished(id, time.Now())
	}
}
