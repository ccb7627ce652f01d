package faults

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	jobcontainer "github.com/opengpulab/gpulab/slave/container"
)

// Run is one stretch of a container's life, from its start event to its die event (or its
// destroy event when no die came). A zero End means it is still running.
type Run struct {
	Start, End time.Time
}

// open reports whether the run has not ended.
func (r Run) open() bool { return r.End.IsZero() }

// Container is what a Timeline learnt of one container: who it is (labels: the job's UUID,
// the slave), what it held (GPUs), and when it ran, in the engine's own event timestamps.
type Container struct {
	ID     string
	Name   string
	Labels map[string]string
	Job    string // label gpulab.job
	Slave  string // label gpulab.slave
	// GPUs are the GPU UUIDs handed to the container: its NVIDIA_VISIBLE_DEVICES, or the
	// device IDs of its nvidia device request when that variable is absent ("void" and "none"
	// mean no GPU).
	GPUs []string
	// Inspected is set once GPUs (and Labels) were read by inspecting the container;
	// InspectErr says why that failed (say, the container was already gone).
	Inspected  bool
	InspectErr error
	// Runs are the container's lives, in order; a container started twice has two.
	Runs      []Run
	Destroyed bool
}

// Alive reports whether the container's last run has not ended.
func (c Container) Alive() bool { return len(c.Runs) > 0 && c.Runs[len(c.Runs)-1].open() }

// Ended reports whether the container ran and is no longer running.
func (c Container) Ended() bool { return len(c.Runs) > 0 && !c.Alive() }

func (c Container) clone() Container {
	c.Labels = maps.Clone(c.Labels)
	c.GPUs = slices.Clone(c.GPUs)
	c.Runs = slices.Clone(c.Runs)
	return c
}

// String names the container for a violation: its name, job and slave.
func (c Container) String() string {
	s := c.Name
	if s == "" {
		s = shortID(c.ID)
	}
	if c.Job != "" {
		s += " (job " + c.Job + ")"
	}
	return s
}

// Timeline watches the Docker engine's events for the containers that carry a label (the
// slaves' job containers) and records each one's life, so that a chaos scenario can check
// afterwards that no two containers held the same GPU, or ran the same job, at once. It
// follows the event stream rather than polling, so a container that lived for a moment is
// still seen, and it records the engine's own timestamps.
type Timeline struct {
	cli    *client.Client
	key    string
	values map[string]bool // label values to record; empty: any
	cancel context.CancelFunc
	done   chan struct{}
	wg     sync.WaitGroup // inspections in flight

	mu      sync.Mutex
	byID    map[string]*tlContainer
	order   []string        // ids, first seen first
	seen    map[string]bool // events already applied (a reconnection replays some)
	changed chan struct{}   // closed and replaced at each change
	err     error           // the event stream's last error, if it had to reconnect
}

// eventActions are the container events a Timeline needs.
var eventActions = []events.Action{events.ActionCreate, events.ActionStart, events.ActionDie, events.ActionDestroy}

// WatchSlaves records the job containers of the named slaves (label gpulab.slave).
func WatchSlaves(ctx context.Context, cli *client.Client, slaves ...string) (*Timeline, error) {
	return WatchLabel(ctx, cli, jobcontainer.LabelSlave, slaves...)
}

// WatchLabel records the containers that carry label key with one of values (any value when
// none is given): those already there, and each one created until ctx ends or Close. The
// engine filters on the key; several values are matched here, as the engine's label filters
// only combine with "and".
func WatchLabel(ctx context.Context, cli *client.Client, key string, values ...string) (*Timeline, error) {
	if _, err := cli.Ping(ctx); err != nil {
		return nil, fmt.Errorf("watch containers: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	tl := &Timeline{
		cli: cli, key: key, values: map[string]bool{}, cancel: cancel, done: make(chan struct{}),
		byID: map[string]*tlContainer{}, seen: map[string]bool{}, changed: make(chan struct{}),
	}
	for _, v := range values {
		tl.values[v] = true
	}
	since := time.Now()
	msgs, errs := cli.Events(ctx, events.ListOptions{Since: eventTime(since), Filters: tl.filters()})
	if err := tl.recordExisting(ctx, since); err != nil {
		cancel()
		return nil, err
	}
	go tl.follow(ctx, since, msgs, errs)
	return tl, nil
}

// Close stops watching and waits for the watch's goroutines. What was recorded stays.
func (tl *Timeline) Close() {
	tl.cancel()
	<-tl.done
	tl.wg.Wait()
}

// Containers returns what was recorded so far, first seen first.
func (tl *Timeline) Containers() []Container {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	out := make([]Container, 0, len(tl.order))
	for _, id := range tl.order {
		out = append(out, tl.byID[id].clone())
	}
	return out
}

// Err is the event stream's last error when it had to reconnect (the engine restarted, or
// is slowed down behind a SlowDocker), else nil; events are replayed from the last one seen.
func (tl *Timeline) Err() error {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return tl.err
}

// WaitFor waits until cond holds for the recorded containers (say, every container ran and
// ended, and was inspected), or ctx ends. Scenarios wait on what they expect instead of
// sleeping: events arrive a little after the fact.
func (tl *Timeline) WaitFor(ctx context.Context, cond func([]Container) bool) error {
	for {
		tl.mu.Lock()
		changed := tl.changed
		tl.mu.Unlock()
		if cond(tl.Containers()) {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("timeline: %w", ctx.Err())
		}
	}
}

// Alive returns the recorded containers that started and have not ended.
func (tl *Timeline) Alive() []Container {
	var out []Container
	for _, c := range tl.Containers() {
		if c.Alive() {
			out = append(out, c)
		}
	}
	return out
}

// Leftovers asks the engine which containers with the watched label still exist (running
// or not), one line each: at the end of a scenario, every job container should be gone.
func (tl *Timeline) Leftovers(ctx context.Context) ([]string, error) {
	list, err := tl.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: tl.labelFilter()})
	if err != nil {
		return nil, fmt.Errorf("list leftover containers: %w", err)
	}
	var out []string
	for _, c := range list {
		if !tl.wanted(c.Labels) {
			continue
		}
		name := shortID(c.ID)
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		out = append(out, fmt.Sprintf("container %s (job %s, slave %s) is still there: %s",
			name, c.Labels[jobcontainer.LabelJob], c.Labels[jobcontainer.LabelSlave], c.Status))
	}
	return out, nil
}

// OverlapsByGPU reports each two containers that held the same GPU of the same slave at
// the same time, and each container whose GPUs could not be read (an unchecked container
// would let a double allocation pass unseen).
func (tl *Timeline) OverlapsByGPU() []string {
	cs := tl.Containers()
	var out []string
	byGPU := map[string][]Container{}
	for _, c := range cs {
		if len(c.Runs) == 0 {
			continue
		}
		if !c.Inspected {
			why := "not inspected yet"
			if c.InspectErr != nil {
				why = c.InspectErr.Error()
			}
			out = append(out, fmt.Sprintf("container %s: its GPUs are unknown (%s)", c, why))
			continue
		}
		for _, g := range c.GPUs {
			k := fmt.Sprintf("GPU %s of slave %q", g, c.Slave)
			byGPU[k] = append(byGPU[k], c)
		}
	}
	return append(out, overlaps(byGPU)...)
}

// OverlapsBy reports each two containers with the same key that ran at the same time: with
// a key of the job's lineage (its first job's UUID, which the scenario knows), two runs of
// one job at once. An empty key leaves a container out.
func (tl *Timeline) OverlapsBy(key func(Container) string) []string {
	groups := map[string][]Container{}
	for _, c := range tl.Containers() {
		if k := key(c); k != "" {
			groups[k] = append(groups[k], c)
		}
	}
	return overlaps(groups)
}

// overlaps reports, per group, each pair of containers with runs that overlap in time.
// Runs that touch (one ends at the instant the other starts) do not overlap.
func overlaps(groups map[string][]Container) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(groups)) {
		cs := groups[k]
		for i := range cs {
			for j := i + 1; j < len(cs); j++ {
				if cs[i].ID == cs[j].ID {
					continue
				}
				for _, a := range cs[i].Runs {
					for _, b := range cs[j].Runs {
						if runsOverlap(a, b) {
							out = append(out, fmt.Sprintf("%s: %s %s and %s %s overlap",
								k, cs[i], runString(a), cs[j], runString(b)))
						}
					}
				}
			}
		}
	}
	return out
}

func runsOverlap(a, b Run) bool {
	endsAfter := func(r Run, t time.Time) bool { return r.open() || r.End.After(t) }
	return endsAfter(a, b.Start) && endsAfter(b, a.Start)
}

func runString(r Run) string {
	const layout = "15:04:05.000000"
	end := "running"
	if !r.open() {
		end = r.End.Format(layout)
	}
	return "[" + r.Start.Format(layout) + " – " + end + "]"
}

// filters selects the events of containers with the watched label.
func (tl *Timeline) filters() filters.Args {
	f := tl.labelFilter()
	f.Add("type", string(events.ContainerEventType))
	for _, a := range eventActions {
		f.Add("event", string(a))
	}
	return f
}

// labelFilter is the engine-side label filter: key=value for one value, else the key alone.
func (tl *Timeline) labelFilter() filters.Args {
	if len(tl.values) == 1 {
		for v := range tl.values {
			return filters.NewArgs(filters.Arg("label", tl.key+"="+v))
		}
	}
	return filters.NewArgs(filters.Arg("label", tl.key))
}

func (tl *Timeline) wanted(labels map[string]string) bool {
	v, ok := labels[tl.key]
	return ok && (len(tl.values) == 0 || tl.values[v])
}

// recordExisting records the containers that were there before the watch began, with the
// run that began before it; what happened since, the replayed events tell.
func (tl *Timeline) recordExisting(ctx context.Context, since time.Time) error {
	list, err := tl.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: tl.labelFilter()})
	if err != nil {
		return fmt.Errorf("watch containers: list: %w", err)
	}
	for _, s := range list {
		if !tl.wanted(s.Labels) {
			continue
		}
		info, err := tl.cli.ContainerInspect(ctx, s.ID)
		if err != nil {
			continue // gone meanwhile; its events say the rest
		}
		tl.mu.Lock()
		c := tl.containerLocked(s.ID, s.Labels)
		tl.applyInspectLocked(c, info)
		if run, ok := runBefore(info.State, since); ok {
			c.Runs = append(c.Runs, run)
		}
		tl.changedLocked()
		tl.mu.Unlock()
	}
	return nil
}

// runBefore is the container's last run if it began before since and had not ended then.
func runBefore(st *container.State, since time.Time) (Run, bool) {
	if st == nil {
		return Run{}, false
	}
	start, err := time.Parse(time.RFC3339Nano, st.StartedAt)
	if err != nil || start.IsZero() || !start.Before(since) {
		return Run{}, false
	}
	if st.Running {
		return Run{Start: start}, true
	}
	end, err := time.Parse(time.RFC3339Nano, st.FinishedAt)
	if err != nil || !end.After(since) {
		return Run{}, false
	}
	return Run{Start: start, End: end}, true
}

// follow applies events until ctx ends, reconnecting (and replaying from the last event
// seen) when the stream breaks.
func (tl *Timeline) follow(ctx context.Context, since time.Time, msgs <-chan events.Message, errs <-chan error) {
	defer close(tl.done)
	for {
		select {
		case m := <-msgs:
			since = time.Unix(0, m.TimeNano)
			tl.apply(ctx, m)
			continue
		case err := <-errs:
			if ctx.Err() != nil {
				return
			}
			tl.mu.Lock()
			tl.err = err
			tl.mu.Unlock()
		case <-ctx.Done():
			return
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return
		}
		msgs, errs = tl.cli.Events(ctx, events.ListOptions{Since: eventTime(since), Filters: tl.filters()})
	}
}

// apply records one event.
func (tl *Timeline) apply(ctx context.Context, m events.Message) {
	attrs := m.Actor.Attributes
	if !tl.wanted(attrs) {
		return
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	mark := fmt.Sprintf("%s %s %d", m.Actor.ID, m.Action, m.TimeNano)
	if tl.seen[mark] {
		return
	}
	tl.seen[mark] = true
	labels := maps.Clone(attrs)
	for _, k := range []string{"image", "name", "exitCode", "execDuration"} { // not labels
		delete(labels, k)
	}
	c := tl.containerLocked(m.Actor.ID, labels)
	if name := attrs["name"]; name != "" {
		c.Name = name
	}
	at := time.Unix(0, m.TimeNano)
	switch m.Action {
	case events.ActionStart:
		c.Runs = append(c.Runs, Run{Start: at})
	case events.ActionDie, events.ActionDestroy:
		if c.Alive() {
			c.Runs[len(c.Runs)-1].End = at
		}
		c.Destroyed = c.Destroyed || m.Action == events.ActionDestroy
	}
	if !c.Inspected && c.InspectErr == nil && m.Action != events.ActionDestroy && !c.inspecting {
		c.inspecting = true
		tl.wg.Add(1)
		go tl.inspect(ctx, c.ID)
	}
	tl.changedLocked()
}

// inspect reads the container's GPUs, as soon as its create (or start) event arrives: the
// container may not live long.
func (tl *Timeline) inspect(ctx context.Context, id string) {
	defer tl.wg.Done()
	info, err := tl.cli.ContainerInspect(ctx, id)
	tl.mu.Lock()
	defer tl.mu.Unlock()
	c := tl.byID[id]
	c.inspecting = false
	if err != nil {
		c.InspectErr = fmt.Errorf("inspect %s: %w", shortID(id), err)
	} else {
		tl.applyInspectLocked(c, info)
	}
	tl.changedLocked()
}

func (tl *Timeline) applyInspectLocked(c *tlContainer, info container.InspectResponse) {
	c.Inspected = true
	if info.Config != nil {
		c.Labels = maps.Clone(info.Config.Labels)
		c.Job, c.Slave = c.Labels[jobcontainer.LabelJob], c.Labels[jobcontainer.LabelSlave]
		c.GPUs = gpusOf(info.Config.Env, info.HostConfig)
	}
	if n := strings.TrimPrefix(info.Name, "/"); n != "" {
		c.Name = n
	}
}

// tlContainer is a record being written.
type tlContainer struct {
	Container
	inspecting bool
}

// containerLocked returns the record of id, made on first sight with the labels known then.
func (tl *Timeline) containerLocked(id string, labels map[string]string) *tlContainer {
	if c, ok := tl.byID[id]; ok {
		return c
	}
	c := &tlContainer{Container: Container{ID: id, Labels: labels,
		Job: labels[jobcontainer.LabelJob], Slave: labels[jobcontainer.LabelSlave]}}
	tl.byID[id] = c
	tl.order = append(tl.order, id)
	return c
}

func (tl *Timeline) changedLocked() {
	close(tl.changed)
	tl.changed = make(chan struct{})
}

// gpusOf reads the GPUs a container was given from its environment, or else from its
// nvidia device request.
func gpusOf(env []string, hc *container.HostConfig) []string {
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "NVIDIA_VISIBLE_DEVICES="); ok {
			var gpus []string
			for _, g := range strings.Split(v, ",") {
				if g = strings.TrimSpace(g); g != "" && g != "void" && g != "none" {
					gpus = append(gpus, g)
				}
			}
			return gpus
		}
	}
	if hc != nil {
		for _, r := range hc.DeviceRequests {
			if r.Driver == jobcontainer.NvidiaDriver {
				return slices.Clone(r.DeviceIDs)
			}
		}
	}
	return nil
}

// eventTime writes t as the events API's "since": seconds.nanoseconds.
func eventTime(t time.Time) string { return fmt.Sprintf("%d.%09d", t.Unix(), t.Nanosecond()) }

func shortID(id string) string { return id[:min(12, len(id))] }
