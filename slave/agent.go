// Package slave is the GPULab slave daemon: it registers its inventory with the master,
// heartbeats, long-polls for assigned jobs, runs each in a Docker container (package
// container) with its storage (package storage) and GPUs (package gpu), ships the logs in
// order and reports every state change conditionally. After a restart it re-attaches to its
// containers by their job label instead of losing them, and removes the containers of jobs the
// master has ended.
package slave

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

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
	// PollWait is how long a Next call may wait for work.
	PollWait time.Duration
	// LogChunk is the largest log chunk sent at once; LogFlush how long output is gathered
	// before it is sent.
	LogChunk int
	LogFlush time.Duration
	// LogLimit is the most log kept per job; beyond it output is dropped and counted.
	LogLimit int64
	// RetryMax bounds the back-off between retries of a failed call to the master.
	RetryMax time.Duration
}

func (c *Config) defaults() {
	if c.PollWait <= 0 {
		c.PollWait = 25 * time.Second
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
	wg    sync.WaitGroup
}

// New makes an agent for the slave described by inv.
func New(master protocol.Master, rt Runtime, gpus GPUSampler, inv protocol.Inventory, cfg Config, log *slog.Logger) *Agent {
	cfg.defaults()
	return &Agent{master: master, rt: rt, gpus: gpus, inv: inv, cfg: cfg, log: log, tasks: map[string]*task{}}
}

// Run registers, re-attaches to the containers left by an earlier run, and then serves the
// master until ctx ends. Running containers are left running on exit: the next start
// re-attaches to them.
func (a *Agent) Run(ctx context.Context) error {
	containers, err := a.rt.List(ctx)
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	a.inv.RunningJobs = nil
	for _, c := range containers {
		a.inv.RunningJobs = append(a.inv.RunningJobs, c.JobUUID)
	}
	var reg protocol.Registration
	err = a.retry(ctx, "register", func(ctx context.Context) error {
		var err error
		reg, err = a.master.Register(ctx, a.inv)
		return err
	})
	if err != nil {
		return err
	}
	a.log.Info("registered with the master", "instance", a.inv.InstanceID, "gpus", len(a.inv.GPUs), "gpu_status", a.inv.GPUStatus,
		"heartbeat", reg.HeartbeatInterval, "containers", len(containers))
	a.reattach(ctx, containers, reg.Jobs)

	hbDone := make(chan struct{})
	go func() { defer close(hbDone); a.heartbeats(ctx, reg.HeartbeatInterval) }()
	a.poll(ctx)
	<-hbDone
	a.wg.Wait()
	return nil
}

// reattach resumes the jobs whose containers survived a restart and removes the containers of
// jobs the master has ended (or never knew).
func (a *Agent) reattach(ctx context.Context, containers []container.Container, known []protocol.JobState) {
	states := map[string]job.Status{}
	for _, j := range known {
		states[j.JobUUID] = j.Status
	}
	for _, c := range containers {
		st, ok := states[c.JobUUID]
		if !ok || st.Ended() || st == job.StatusAssigned {
			a.log.Info("removing container of an ended job", "job", c.JobUUID, "status", st, "container", shortID(c.ID))
			if c.Running {
				if err := a.rt.Cancel(ctx, c.ID); err != nil {
					a.log.Warn("stop container", "job", c.JobUUID, "err", err)
				}
			}
			if err := a.rt.Remove(ctx, c.ID); err != nil {
				a.log.Warn("remove container", "job", c.JobUUID, "err", err)
			}
			continue
		}
		a.log.Info("re-attaching to job", "job", c.JobUUID, "status", st, "container", shortID(c.ID), "running", c.Running)
		t := newTask(c.JobUUID, st)
		t.containerID = c.ID
		if !a.track(t) {
			continue // a second container of the same job: the first one is resumed
		}
		a.wg.Add(1)
		go func() { defer a.wg.Done(); a.resume(ctx, t) }()
	}
}

func (a *Agent) running() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	ids := make([]string, 0, len(a.tasks))
	for id := range a.tasks {
		ids = append(ids, id)
	}
	return ids
}

// poll long-polls the master for work until ctx ends.
func (a *Agent) poll(ctx context.Context) {
	backoff := time.Second
	for ctx.Err() == nil {
		work, err := a.master.Next(ctx, protocol.NextRequest{InstanceID: a.inv.InstanceID, Wait: a.cfg.PollWait, Running: a.running()})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, protocol.ErrUnknownSlave) {
				a.log.Warn("master does not know this instance", "err", err)
			}
			a.log.Warn("asking the master for work failed", "err", err, "retry_in", backoff)
			sleep(ctx, backoff)
			backoff = min(backoff*2, a.cfg.RetryMax)
			continue
		}
		backoff = time.Second
		a.handleStops(ctx, work.Stops)
		for _, as := range work.Assignments {
			a.startJob(ctx, as)
		}
	}
}

// heartbeats reports running jobs and usage every interval (the master's reply sets the next).
func (a *Agent) heartbeats(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = 5 * time.Second
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
		reply, err := a.master.Heartbeat(ctx, protocol.Heartbeat{InstanceID: a.inv.InstanceID, Jobs: a.runningJobs(ctx), Accepting: true})
		if err != nil {
			if ctx.Err() == nil {
				a.log.Warn("heartbeat failed", "err", err)
			}
			continue
		}
		if reply.Interval > 0 {
			interval = reply.Interval
		}
		a.handleStops(ctx, reply.Stops)
	}
}

// runningJobs lists the running jobs with a usage sample each.
func (a *Agent) runningJobs(ctx context.Context) []protocol.RunningJob {
	a.mu.Lock()
	tasks := make([]*task, 0, len(a.tasks))
	for _, t := range a.tasks {
		tasks = append(tasks, t)
	}
	a.mu.Unlock()
	var gpuSamples []protocol.GPUUsage
	if a.gpus != nil {
		gpuSamples = a.gpus.Sample()
	}
	out := make([]protocol.RunningJob, 0, len(tasks))
	for _, t := range tasks {
		rj := protocol.RunningJob{JobUUID: t.id, ContainerID: t.container(), Status: t.status()}
		if id := t.container(); id != "" {
			if u, err := a.rt.Usage(ctx, id); err == nil {
				for _, g := range gpuSamples {
					if t.hasGPU(g.Index) {
						u.GPUs = append(u.GPUs, g)
					}
				}
				t.addSample(u)
				rj.Usage = &u
			}
		}
		out = append(out, rj)
	}
	return out
}

func (a *Agent) handleStops(ctx context.Context, stops []protocol.StopOrder) {
	for _, s := range stops {
		a.mu.Lock()
		t := a.tasks[s.JobUUID]
		a.mu.Unlock()
		if t == nil {
			continue
		}
		t.order(s)
	}
}

// retry calls fn until it succeeds, ctx ends, or the error is not worth retrying (a conflict
// or a refusal).
func (a *Agent) retry(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	backoff := 500 * time.Millisecond
	for {
		err := fn(ctx)
		if err == nil || !retryable(err) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		a.log.Warn("call to the master failed, retrying", "call", what, "err", err, "retry_in", backoff)
		sleep(ctx, backoff)
		backoff = min(backoff*2, a.cfg.RetryMax)
	}
}

func retryable(err error) bool {
	var se *protocol.StatusError
	if errors.As(err, &se) {
		return se.Temporary()
	}
	return !errors.Is(err, context.Canceled)
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
