// Package slave is the GPULab slave daemon: it registers its inventory with the master,
// heartbeats, long-polls for assigned jobs, runs each in a Docker container (package
// container) with its storage (package storage) and GPUs (package gpu), ships the logs in
// order and reports every state change conditionally. After a restart it re-attaches to its
// containers by their job label instead of losing them, and removes the containers of jobs the
// master has ended.
//
// Its duties never wait on each other: heartbeats go out on their own timer with the latest
// usage samples and container listing, which other goroutines refresh with a timeout on every
// engine call, so a slow Docker Engine never makes a live slave look dead. A slave that reaches
// no master for FenceAfter stops its jobs on its own (self-fencing, see package protocol).
package slave

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/slave/container"
)

// Runtime is what the agent needs of the container runtime (*container.Runtime).
type Runtime interface {
	Start(ctx context.Context, a protocol.Assignment) (*container.Started, error)
	Wait(ctx context.Context, containerID string) (int, error)
	Logs(ctx context.Context, containerID string, follow bool) (io.ReadCloser, error)
	Cancel(ctx context.Context, containerID string) error
	Halt(ctx context.Context, containerID string) (bool, int, error)
	Remove(ctx context.Context, containerID string) error
	List(ctx context.Context) ([]container.Container, error)
	Usage(ctx context.Context, containerID string) (protocol.Usage, error)
}

// GPUSampler samples GPU utilisation (*gpu.Sampler); nil means no GPU samples.
type GPUSampler interface {
	Sample(indices ...int) []protocol.GPUUsage
}

// Config tunes the agent.
type Config struct {
	// PollWait is how long a Next call may wait for work (default protocol.PollWait).
	PollWait time.Duration
	// LogChunk is the largest log chunk sent at once; LogFlush how long output is gathered
	// before it is sent.
	LogChunk int
	LogFlush time.Duration
	// LogLimit is the most log kept per job; beyond it output is dropped and counted.
	LogLimit int64
	// RetryMax bounds the back-off between retries of a failed call to the master.
	RetryMax time.Duration
	// FenceAfter is how long the slave may reach no master before it stops its jobs, until
	// the master says otherwise (default 5 minutes, the master's default job grace).
	FenceAfter time.Duration
	// CallTimeout bounds a heartbeat call (default 10 s).
	CallTimeout time.Duration
	// SampleTimeout bounds one usage sample of one container (default 5 s); SampleConcurrency
	// is how many containers are sampled at once (default 4).
	SampleTimeout     time.Duration
	SampleConcurrency int
	// ListEvery is how often the engine's containers are listed (default 10 s), ListTimeout
	// how long one listing may take (default 30 s).
	ListEvery   time.Duration
	ListTimeout time.Duration
}

func (c *Config) defaults() {
	if c.PollWait <= 0 {
		c.PollWait = protocol.PollWait
	}
	if c.LogChunk <= 0 {
		c.LogChunk = 256 << 10
	}
	if c.LogFlush <= 0 {
		c.LogFlush = 250 * time.Millisecond
	}
	if c.LogLimit <= 0 {
		c.LogLimit = 50 << 20
	}
	if c.RetryMax <= 0 {
		c.RetryMax = 10 * time.Second
	}
	if c.FenceAfter <= 0 {
		c.FenceAfter = 5 * time.Minute
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 10 * time.Second
	}
	if c.SampleTimeout <= 0 {
		c.SampleTimeout = 5 * time.Second
	}
	if c.SampleConcurrency <= 0 {
		c.SampleConcurrency = 4
	}
	if c.ListEvery <= 0 {
		c.ListEvery = 10 * time.Second
	}
	if c.ListTimeout <= 0 {
		c.ListTimeout = 30 * time.Second
	}
}

// Agent runs one slave.
type Agent struct {
	master protocol.Master
	rt     Runtime
	gpus   GPUSampler
	inv    protocol.Inventory
	cfg    Config
	log    *slog.Logger

	mu    sync.Mutex
	tasks map[string]*task
	// containers is the latest listing of the engine: what the heartbeats report besides the
	// tasks, so that a container without a task is never forgotten.
	containers []container.Container
	interval   time.Duration // the heartbeat interval the master asked for
	fenceAfter time.Duration
	contact    time.Time // the last answer of a master (any but a 5xx or a network failure)
	fenced     bool

	kick chan struct{} // asks for a heartbeat now: a task ended and what it held can be freed
	wg   sync.WaitGroup

	logBacklog atomic.Int64 // bytes of container output read and not yet taken by the master
}

// LogBacklog is how many bytes of its jobs' output the slave has read and the master has not
// yet taken (for /metrics: it grows while the master is unreachable or slow).
func (a *Agent) LogBacklog() int64 { return a.logBacklog.Load() }

// New makes an agent for the slave described by inv.
func New(master protocol.Master, rt Runtime, gpus GPUSampler, inv protocol.Inventory, cfg Config, log *slog.Logger) *Agent {
	cfg.defaults()
	return &Agent{master: master, rt: rt, gpus: gpus, inv: inv, cfg: cfg, log: log, tasks: map[string]*task{},
		fenceAfter: cfg.FenceAfter, kick: make(chan struct{}, 1)}
}

// Run registers, re-attaches to the containers left by an earlier run, and then serves the
// master until ctx ends. Running containers are left running on exit: the next start
// re-attaches to them.
func (a *Agent) Run(ctx context.Context) error {
	containers, err := a.rt.List(ctx)
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	containers = a.removeUnstarted(ctx, containers)
	a.setContainers(containers)
	// A slave that restarts while cut off from every master must not let the containers it
	// found run on past the fence time: the master gives their jobs up after it.
	fenceCtx, registered := context.WithCancel(ctx)
	fenceDone := make(chan struct{})
	go func() { defer close(fenceDone); a.fenceUnregistered(fenceCtx, containers) }()
	reg, err := a.register(ctx)
	registered()
	<-fenceDone
	if err != nil {
		return err
	}
	a.log.Info("registered with the master", "instance", a.inv.InstanceID, "gpus", len(a.inv.GPUs), "gpu_status", a.inv.GPUStatus,
		"heartbeat", reg.HeartbeatInterval, "fence_after", a.fence(), "containers", len(containers))
	a.reattach(ctx, containers, reg.Jobs)

	var duties sync.WaitGroup
	for _, duty := range []func(context.Context){a.heartbeats, a.sampleUsage, a.listContainers, a.watchFence} {
		duties.Add(1)
		go func() { defer duties.Done(); duty(ctx) }()
	}
	a.poll(ctx)
	duties.Wait()
	a.wg.Wait()
	return nil
}

// removeUnstarted removes the containers a previous agent created and never started (it died
// between the two calls): their jobs never ran. Gone before the registration, they are not in
// it, so the master queues their jobs again at once. Left for reattach, they were listed in the
// registration and the master waited the missing grace before it queued them: on a loaded
// slave the STARTING lease could run out first, and the job, which never ran, ended FAILED
// (seen in CI's chaos slave-kill). One the engine will not remove now is kept: it is listed
// and reattach reaps it, as before.
func (a *Agent) removeUnstarted(ctx context.Context, containers []container.Container) []container.Container {
	kept := make([]container.Container, 0, len(containers))
	for _, c := range containers {
		if c.State != "created" {
			kept = append(kept, c)
			continue
		}
		if err := a.rt.Remove(ctx, c.ID); err != nil {
			a.log.Warn("removing a container created and never started failed; it is reaped after the registration",
				"job", c.JobUUID, "attempt", c.Attempt, "container", shortID(c.ID), "err", err)
			kept = append(kept, c)
			continue
		}
		a.log.Info("removed a container created and never started: the start was cut short by the slave's restart",
			"job", c.JobUUID, "attempt", c.Attempt, "container", shortID(c.ID))
	}
	return kept
}

// fenceUnregistered stops the running containers found at start if no master has answered the
// registration within the fence time (the master's is not known yet: the configured one).
// They stay on the engine, so their jobs are reported (or removed) once a master answers.
func (a *Agent) fenceUnregistered(ctx context.Context, containers []container.Container) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(a.cfg.FenceAfter):
	}
	a.log.Error("no master has answered the registration for longer than the fence time: stopping the containers found",
		"fence_after", a.cfg.FenceAfter, "containers", len(containers))
	for _, c := range containers {
		if !c.Running {
			continue
		}
		if err := a.rt.Cancel(ctx, c.ID); err != nil && ctx.Err() == nil {
			a.log.Warn("stop container", "job", c.JobUUID, "err", err)
		}
	}
}

// register reports the inventory with every job the slave holds (containers found, tasks) and
// takes the master's answer: the heartbeat interval, the fence time and the master's view.
func (a *Agent) register(ctx context.Context) (protocol.Registration, error) {
	inv := a.inv
	inv.Containers = a.held(false)
	var reg protocol.Registration
	err := a.retry(ctx, "register", func(ctx context.Context) error {
		var err error
		reg, err = a.master.Register(ctx, inv)
		return err
	})
	if err != nil {
		return reg, err
	}
	a.mu.Lock()
	a.interval = reg.HeartbeatInterval
	if a.interval <= 0 {
		a.interval = 5 * time.Second
	}
	if reg.FenceAfter > 0 {
		a.fenceAfter = reg.FenceAfter
	}
	a.mu.Unlock()
	return reg, nil
}

// reattach resumes the jobs whose containers the master has on this slave in the same attempt,
// and removes every other container (jobs ended, given to another attempt, or unknown).
func (a *Agent) reattach(ctx context.Context, containers []container.Container, view []protocol.JobState) {
	states := map[string]protocol.JobState{}
	for _, j := range view {
		states[j.JobUUID] = j
	}
	for _, c := range containers {
		if a.task(c.JobUUID) != nil {
			continue // a task carries it already
		}
		st, ok := states[c.JobUUID]
		if !ok || st.Attempt != c.Attempt || st.Status == job.StatusAssigned {
			why := "the master does not have the job on this slave"
			if ok {
				why = fmt.Sprintf("the job is %s in attempt %d, the container is of attempt %d", st.Status, st.Attempt, c.Attempt)
			}
			a.reap(ctx, c, why)
			continue
		}
		if c.State == "created" {
			// The previous agent died between creating the container and starting it, and
			// removeUnstarted could not remove it: the job never ran. Reported done, its exit
			// code (0, never set) would read as a success; removed, the slave no longer holds
			// the job and the master queues it again (after the missing grace).
			a.reap(ctx, c, "created but never started: the start was cut short by the slave's restart")
			continue
		}
		a.log.Info("re-attaching to job", "job", c.JobUUID, "status", st.Status, "attempt", c.Attempt, "container", shortID(c.ID), "running", c.Running)
		t := newTask(c.JobUUID, c.Attempt, st.Status)
		t.containerID, t.logBase = c.ID, c.LogBase
		if !a.track(t) {
			continue // a second container of the same job: the first one is resumed
		}
		a.wg.Add(1)
		go func() { defer a.wg.Done(); a.resume(ctx, t) }()
	}
}

// reap stops and removes a container no task carries, retrying until the engine confirms it
// gone (the heartbeats list it until then, so what it holds stays taken on the master).
func (a *Agent) reap(ctx context.Context, c container.Container, why string) {
	a.mu.Lock()
	if a.tasks[c.JobUUID] != nil {
		a.mu.Unlock()
		return
	}
	// A placeholder task keeps a second reap, and a new assignment of the same job, away
	// until the container is gone.
	t := newTask(c.JobUUID, c.Attempt, "")
	t.containerID = c.ID
	a.tasks[c.JobUUID] = t
	a.mu.Unlock()
	a.log.Info("removing container", "job", c.JobUUID, "attempt", c.Attempt, "container", shortID(c.ID), "why", why)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if a.removeContainer(ctx, t, c.Running) {
			a.dropTask(t)
		}
	}()
}

// heldJobs lists what the slave holds: its tasks and the containers of its latest listing
// without a task (usage included for tasks when withUsage).
func (a *Agent) held(withUsage bool) []protocol.RunningJob {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]protocol.RunningJob, 0, len(a.tasks)+len(a.containers))
	for _, t := range a.tasks {
		rj := t.report()
		if !withUsage {
			rj.Usage = nil
		}
		out = append(out, rj)
	}
	for _, c := range a.containers {
		if _, ok := a.tasks[c.JobUUID]; !ok {
			out = append(out, protocol.RunningJob{JobUUID: c.JobUUID, Attempt: c.Attempt, ContainerID: c.ID})
		}
	}
	return out
}

func (a *Agent) setContainers(cs []container.Container) {
	a.mu.Lock()
	a.containers = cs
	a.mu.Unlock()
}

// forgetContainer drops a container the slave removed from its listing at once, so the next
// heartbeat frees what its job held without waiting for the next listing.
func (a *Agent) forgetContainer(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, c := range a.containers {
		if c.ID == id {
			a.containers = append(a.containers[:i:i], a.containers[i+1:]...)
			return
		}
	}
}

func (a *Agent) task(id string) *task {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tasks[id]
}

func (a *Agent) heartbeatInterval() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.interval
}

func (a *Agent) fence() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.fenceAfter
}

// poll long-polls the master for work until ctx ends.
func (a *Agent) poll(ctx context.Context) {
	b := a.backoff(time.Second)
	for ctx.Err() == nil {
		work, err := a.master.Next(ctx, protocol.NextRequest{InstanceID: a.inv.InstanceID, Wait: a.cfg.PollWait, Jobs: a.held(false)})
		a.note(err)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			wait := b.NextBackOff()
			a.log.Warn("asking the master for work failed", "err", err, "retry_in", wait.Round(time.Millisecond))
			sleep(ctx, wait)
			continue
		}
		b.Reset()
		a.handleStops(ctx, work.Stops)
		for _, as := range work.Assignments {
			if a.isFenced() {
				break // no new work while cut off; the master offers it again
			}
			a.startJob(ctx, as)
		}
	}
}

// heartbeats reports what the slave holds every interval (the master's reply sets the next),
// and at once when a task ended. It never waits on the engine: it sends what the samplers and
// the listing have gathered so far.
func (a *Agent) heartbeats(ctx context.Context) {
	timer := time.NewTimer(a.heartbeatInterval())
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-a.kick:
		}
		hb := protocol.Heartbeat{InstanceID: a.inv.InstanceID, Jobs: a.held(true), Accepting: !a.isFenced()}
		cctx, cancel := context.WithTimeout(ctx, a.cfg.CallTimeout)
		reply, err := a.master.Heartbeat(cctx, hb)
		cancel()
		a.note(err)
		var se *protocol.StatusError
		switch {
		case err == nil:
			a.mu.Lock()
			if reply.Interval > 0 {
				a.interval = reply.Interval
			}
			if reply.FenceAfter > 0 {
				a.fenceAfter = reply.FenceAfter
			}
			a.mu.Unlock()
			a.handleStops(ctx, reply.Stops)
			a.adopt(ctx, reply.Jobs)
		case ctx.Err() != nil:
			return
		case errors.As(err, &se) && se.Status == 409:
			// The master does not know this instance (another registered with the name, or
			// its database was restored): register again with everything held.
			a.log.Warn("the master does not know this instance: registering again", "err", err)
			if _, err := a.register(ctx); err != nil && ctx.Err() == nil {
				a.log.Warn("register again", "err", err)
			}
		default:
			a.log.Warn("heartbeat failed", "err", err)
		}
		timer.Reset(a.heartbeatInterval())
	}
}

// adopt re-attaches to containers of the current listing that no task carries although the
// master has their job on this slave in their attempt (a task lost by a slave restart that the
// registration did not see), so nothing runs unsupervised.
func (a *Agent) adopt(ctx context.Context, view []protocol.JobState) {
	a.mu.Lock()
	var orphans []container.Container
	for _, c := range a.containers {
		if _, ok := a.tasks[c.JobUUID]; !ok {
			orphans = append(orphans, c)
		}
	}
	a.mu.Unlock()
	for _, c := range orphans {
		for _, j := range view {
			if j.JobUUID == c.JobUUID && j.Attempt == c.Attempt && j.Status != job.StatusAssigned {
				a.reattach(ctx, []container.Container{c}, view)
			}
		}
	}
}

// sampleUsage samples every task's container every heartbeat interval, a few at a time and each
// with a timeout, and keeps the latest sample on the task for the next heartbeat.
func (a *Agent) sampleUsage(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(a.heartbeatInterval()):
		}
		a.mu.Lock()
		tasks := make([]*task, 0, len(a.tasks))
		for _, t := range a.tasks {
			if t.container() != "" && t.status() != "" {
				tasks = append(tasks, t)
			}
		}
		a.mu.Unlock()
		var gpuSamples []protocol.GPUUsage
		if a.gpus != nil && len(tasks) > 0 {
			gpuSamples = a.gpus.Sample()
		}
		sem := make(chan struct{}, a.cfg.SampleConcurrency)
		var wg sync.WaitGroup
		for _, t := range tasks {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				sctx, cancel := context.WithTimeout(ctx, a.cfg.SampleTimeout)
				u, err := a.rt.Usage(sctx, t.container())
				cancel()
				if err != nil {
					return
				}
				for _, g := range gpuSamples {
					if t.hasGPU(g.Index) {
						u.GPUs = append(u.GPUs, g)
					}
				}
				t.addSample(u)
			}()
		}
		wg.Wait()
	}
}

// listContainers lists the engine's job containers every ListEvery, with a timeout.
func (a *Agent) listContainers(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(a.cfg.ListEvery):
		}
		lctx, cancel := context.WithTimeout(ctx, a.cfg.ListTimeout)
		cs, err := a.rt.List(lctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				a.log.Warn("listing the engine's containers failed; the last listing stays", "err", err)
			}
			continue
		}
		a.setContainers(cs)
	}
}

// watchFence stops every job when no master has answered for FenceAfter (self-fencing): the
// master starts a lost slave's jobs elsewhere after that time plus a margin, and the old copy
// must be gone by then. Jobs that may halt are halted (SIGUSR1), the others stopped. No new
// job is taken until a master answers again.
func (a *Agent) watchFence(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		a.mu.Lock()
		silent, after, fenced := time.Since(a.contact), a.fenceAfter, a.fenced
		switch {
		case !fenced && silent > after:
			a.fenced = true
			tasks := make([]*task, 0, len(a.tasks))
			for _, t := range a.tasks {
				tasks = append(tasks, t)
			}
			a.mu.Unlock()
			a.log.Error("no master has answered for longer than the fence time: stopping every job", "silent", silent.Round(time.Second),
				"fence_after", after, "jobs", len(tasks))
			for _, t := range tasks {
				t.fence(after)
			}
			continue
		case fenced && silent < after:
			a.fenced = false
			a.mu.Unlock()
			a.log.Warn("a master answers again: taking jobs again")
			continue
		}
		a.mu.Unlock()
	}
}

func (a *Agent) isFenced() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.fenced
}

// note records an answer of a master for the self-fencing: any answer but a 5xx (which says
// the master cannot act: its database is away) shows a master that could act on the slave's
// jobs, and so one that knows the slave is alive. A 401 or 403 (the slave's certificate revoked)
// is no contact either: when every master refuses the slave, it fences itself as when cut off.
func (a *Agent) note(err error) {
	var se *protocol.StatusError
	if err != nil && !errors.As(err, &se) && !errors.Is(err, protocol.ErrConflict) {
		return // no answer
	}
	if se != nil && (se.Temporary() || se.Refused()) {
		return
	}
	a.mu.Lock()
	a.contact = time.Now()
	a.mu.Unlock()
}

func (a *Agent) handleStops(ctx context.Context, stops []protocol.StopOrder) {
	for _, s := range stops {
		a.mu.Lock()
		t := a.tasks[s.JobUUID]
		var orphan *container.Container
		if t == nil {
			for i, c := range a.containers {
				if c.JobUUID == s.JobUUID {
					orphan = &a.containers[i]
				}
			}
		}
		a.mu.Unlock()
		switch {
		case t != nil:
			t.order(s)
		case orphan != nil:
			a.reap(ctx, *orphan, s.Reason)
		}
	}
}

// backoff is exponential back-off with jitter, from first up to RetryMax, for ever.
func (a *Agent) backoff(first time.Duration) *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(backoff.WithInitialInterval(first), backoff.WithMaxInterval(a.cfg.RetryMax),
		backoff.WithRandomizationFactor(0.5), backoff.WithMultiplier(2), backoff.WithMaxElapsedTime(0))
}

// retry calls fn until it succeeds, ctx ends, or the error is not worth retrying (a conflict
// or a refusal), with back-off and jitter between attempts.
func (a *Agent) retry(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	return a.retryUntil(ctx, nil, what, fn)
}

// errFenced ends a retry that the slave's self-fencing cut short.
var errFenced = errors.New("the slave is fencing itself: no master answers")

// retryUntil is retry that also gives up (errFenced) when stop is closed.
func (a *Agent) retryUntil(ctx context.Context, stop <-chan struct{}, what string, fn func(ctx context.Context) error) error {
	b := a.backoff(500 * time.Millisecond)
	for {
		err := fn(ctx)
		a.note(err)
		if err == nil || !retryable(err) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		wait := b.NextBackOff()
		a.log.Warn("call to the master failed, retrying", "call", what, "err", err, "retry_in", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, err)
		case <-stop:
			return fmt.Errorf("%s: %w", what, errFenced)
		case <-time.After(wait):
		}
	}
}

func retryable(err error) bool {
	var se *protocol.StatusError
	if errors.As(err, &se) {
		return se.Temporary()
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, protocol.ErrConflict)
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
