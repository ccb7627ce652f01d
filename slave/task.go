package slave

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/slave/container"
)

// task is one job on this slave, from its assignment (or re-attachment) to the removal of its
// container. The agent keeps it (and reports it in every heartbeat) until the container is
// confirmed gone, so the master never frees what a live container holds.
type task struct {
	id      string
	attempt int
	orders  chan protocol.StopOrder
	// fenced is closed when the slave fences itself: retries of calls to the master give up
	// and the job is stopped without them.
	fenced    chan struct{}
	fenceOnce sync.Once

	mu                sync.Mutex
	st                job.Status // the state the master has, as far as this slave knows ("" for a container being removed)
	containerID       string
	logBase           int64 // the master's log size when the container started (container.LabelLogBase)
	gpuIndices        []int
	allowHaltNoSignal bool
	restartable       bool
	// stoppedForHalt records that a halt stopped the job without the signal.
	stoppedForHalt bool
	// fenceReason is set when the slave stopped the job on its own.
	fenceReason string
	usage       usageStats
	last        *protocol.Usage
}

func newTask(id string, attempt int, st job.Status) *task {
	return &task{id: id, attempt: attempt, st: st, orders: make(chan protocol.StopOrder, 4), fenced: make(chan struct{})}
}

// track makes a task visible to the heartbeats and the stop orders, unless the job has one
// already (false). Set every field read without t.mu before: tracking publishes them.
func (a *Agent) track(t *task) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, busy := a.tasks[t.id]; busy {
		return false
	}
	a.tasks[t.id] = t
	return true
}

// dropTask forgets a task whose container is gone, and sends a heartbeat soon so the master
// frees what the job held.
func (a *Agent) dropTask(t *task) {
	a.mu.Lock()
	if a.tasks[t.id] == t {
		delete(a.tasks, t.id)
	}
	a.mu.Unlock()
	if id := t.container(); id != "" {
		a.forgetContainer(id)
	}
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

func (t *task) status() job.Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.st
}

func (t *task) setStatus(st job.Status) {
	t.mu.Lock()
	t.st = st
	t.mu.Unlock()
}

func (t *task) container() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.containerID
}

func (t *task) hasGPU(i int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Contains(t.gpuIndices, i)
}

func (t *task) addSample(u protocol.Usage) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.usage.add(u)
	t.last = &u
}

func (t *task) finalUsage() *protocol.Usage {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.usage.summary()
}

// report is the task as a heartbeat lists it.
func (t *task) report() protocol.RunningJob {
	t.mu.Lock()
	defer t.mu.Unlock()
	return protocol.RunningJob{JobUUID: t.id, Attempt: t.attempt, ContainerID: t.containerID, Status: t.st, Usage: t.last}
}

// order passes a stop order to the task without blocking the caller (a repeated order while
// one is being carried out is dropped).
func (t *task) order(s protocol.StopOrder) {
	select {
	case t.orders <- s:
	default:
	}
}

// fence stops the job on the slave's own decision: halted if it may be (restartable, running),
// else cancelled; calls to the master waiting on retries give up.
func (t *task) fence(after time.Duration) {
	t.fenceOnce.Do(func() {
		t.mu.Lock()
		t.fenceReason = fmt.Sprintf("stopped by its slave, which reached no master for %s (self-fencing)", after)
		mode := protocol.StopCancel
		if t.restartable && (t.st == job.StatusRunning || t.st == job.StatusMustHalt) {
			mode = protocol.StopHalt
		}
		t.mu.Unlock()
		close(t.fenced)
		t.order(protocol.StopOrder{JobUUID: t.id, Mode: mode, Reason: "self-fencing"})
	})
}

func (t *task) isFenced() bool {
	select {
	case <-t.fenced:
		return true
	default:
		return false
	}
}

// startJob runs a newly assigned job in its own goroutine.
func (a *Agent) startJob(ctx context.Context, as protocol.Assignment) {
	t := newTask(as.Job.UUID, as.Attempt, job.StatusAssigned)
	t.allowHaltNoSignal = as.Job.Request.Scheduling.AllowHaltWithoutSignal
	t.restartable = as.Job.Request.Scheduling.Restartable
	t.logBase = as.Log.Size
	for _, g := range as.GPUs {
		t.gpuIndices = append(t.gpuIndices, g.Index)
	}
	if !a.track(t) {
		return // running already (or an old container of the job is being removed)
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.run(ctx, t, as)
	}()
}

// run takes a job from ASSIGNED to its end. No container is made before the master has the
// job STARTING in this attempt: an assignment given up by the master can never start.
func (a *Agent) run(ctx context.Context, t *task, as protocol.Assignment) {
	log := a.log.With("job", t.id, "attempt", t.attempt)
	if err := a.update(ctx, t, job.StatusAssigned, job.StatusStarting, "picked up by slave "+a.inv.Name, nil); err != nil {
		log.Info("job not started", "err", err)
		a.dropTask(t)
		return
	}
	started, err := a.rt.Start(ctx, as)
	if err != nil {
		if ctx.Err() != nil {
			// The slave stops: the master requeues the job (no container) at the next start.
			a.dropTask(t)
			return
		}
		reason := err.Error()
		var se *container.StartError
		if errors.As(err, &se) {
			reason = se.Reason
		}
		log.Warn("job failed to start", "reason", reason)
		a.done(ctx, t, job.StatusFailed, nil, reason)
		a.dropTask(t)
		return
	}
	t.mu.Lock()
	t.containerID = started.ContainerID
	t.mu.Unlock()
	res := &job.StateResources{ClusterID: as.ClusterID, CPUIDs: as.CPUIDs, CPUMemoryGb: as.MemoryGb,
		SlaveName: a.inv.Name, SlaveHost: hostOf(a.inv), SlaveInstanceID: a.inv.InstanceID, PortMappings: started.Ports}
	res.GPUIDs = append([]int{}, t.gpuIndices...)
	if as.Job.State.Resources != nil {
		res.GPUDetails = as.Job.State.Resources.GPUDetails
	}
	err = a.update(ctx, t, job.StatusStarting, job.StatusRunning, "container "+shortID(started.ContainerID)+" started", res)
	switch {
	case err == nil:
		log.Info("job running", "container", shortID(started.ContainerID), "ports", started.Ports)
		a.supervise(ctx, t, as.Log)
	case ctx.Err() != nil:
		// The slave stops; the container is re-attached (or removed) at the next start.
	case errors.Is(err, errFenced):
		// Cut off while reporting the start: the container runs unreported; stop it.
		log.Warn("stopping a job whose start could not be reported", "err", err)
		a.supervise(ctx, t, as.Log)
	default:
		// The master ended the job (or gave it to another attempt) while it started.
		log.Info("job ended while starting; stopping its container", "err", err)
		if a.removeContainer(ctx, t, true) {
			a.dropTask(t)
		}
	}
}

// resume continues a job whose container was found at start.
func (a *Agent) resume(ctx context.Context, t *task) {
	log := a.log.With("job", t.id, "attempt", t.attempt)
	state, err := a.logState(ctx, t.id)
	if err != nil {
		log.Warn("cannot read the log state; the log will be resent from the start", "err", err)
	}
	if t.status() == job.StatusStarting {
		if err := a.update(ctx, t, job.StatusStarting, job.StatusRunning, "re-attached after a slave restart", nil); err != nil && !errors.Is(err, errFenced) {
			if ctx.Err() == nil {
				log.Info("job ended meanwhile", "err", err)
				if a.removeContainer(ctx, t, true) {
					a.dropTask(t)
				}
			}
			return
		}
	}
	switch t.status() {
	case job.StatusMustHalt, job.StatusHalting:
		t.order(protocol.StopOrder{JobUUID: t.id, Mode: protocol.StopHalt, Reason: "halt in progress before the slave restarted"})
	}
	a.supervise(ctx, t, state)
}

func (a *Agent) logState(ctx context.Context, id string) (protocol.LogState, error) {
	var st protocol.LogState
	err := a.retry(ctx, "log state", func(ctx context.Context) error {
		var err error
		st, err = a.master.LogState(ctx, id)
		return err
	})
	return st, err
}

// supervise ships the log and waits for the container to end, carrying out stop orders, then
// reports the end and removes the container. master is how much of the job's log the master
// has (the container's output starts at t.logBase of it).
func (a *Agent) supervise(ctx context.Context, t *task, master protocol.LogState) {
	log := a.log.With("job", t.id, "attempt", t.attempt)
	id := t.container()
	shipped := make(chan error, 1)
	go func() { shipped <- a.shipLog(ctx, t, master) }()
	exited := make(chan waitResult, 1)
	go func() {
		code, err := a.rt.Wait(ctx, id)
		exited <- waitResult{code, err}
	}()
	var haltDone chan struct{}  // closed when halt() returned; nil while no halt started
	var stopping sync.WaitGroup // cancels in progress: they end before supervise returns
	defer stopping.Wait()
	if t.isFenced() {
		// Fenced before supervision began (a start that could not be reported).
		t.order(protocol.StopOrder{JobUUID: t.id, Mode: protocol.StopCancel, Reason: "self-fencing"})
	}

	var cancelled, halting bool
	var why string
	var res waitResult
wait:
	for {
		select {
		case <-ctx.Done():
			// The slave stops; the container keeps running and is re-attached at the next
			// start. The helpers end with ctx: wait for them, so that nothing of this job
			// outlives Run (a log line or a call to the master after the agent returned).
			<-shipped
			<-exited
			if haltDone != nil {
				<-haltDone
			}
			return
		case res = <-exited:
			break wait
		case o := <-t.orders:
			switch {
			case o.Mode == protocol.StopCancel && !cancelled:
				cancelled, why = true, o.Reason
				log.Info("cancelling job", "reason", o.Reason)
				stopping.Add(1)
				go func() {
					defer stopping.Done()
					if err := a.rt.Cancel(ctx, id); err != nil && ctx.Err() == nil {
						log.Warn("cancel container", "err", err)
					}
				}()
			case o.Mode == protocol.StopHalt && !halting && !cancelled:
				halting = true
				haltDone = make(chan struct{})
				go func() { defer close(haltDone); a.halt(ctx, t, o) }()
			}
		}
	}
	if haltDone != nil {
		// The container exited; halt() ends at once (its wait returns) and has then set the
		// state the end is reported from (HALTING).
		<-haltDone
	}
	if err := <-shipped; err != nil && ctx.Err() == nil {
		log.Warn("shipping the log failed", "err", err)
	}
	if ctx.Err() != nil {
		return
	}
	switch {
	case halting:
		a.haltEnd(ctx, t, res)
	case cancelled:
		// Usually the master ended the job already and the report is a conflict, which
		// still tells it the container is gone; a self-fenced job is reported as such.
		a.done(ctx, t, job.StatusFailed, codeOf(res), "stopped: "+why)
	case res.err != nil:
		a.done(ctx, t, job.StatusFailed, nil, "waiting for the container failed: "+res.err.Error())
	case res.code == 0:
		a.done(ctx, t, job.StatusFinished, &res.code, "")
	default:
		a.done(ctx, t, job.StatusFailed, &res.code, "")
	}
	if a.removeContainer(ctx, t, false) {
		a.dropTask(t)
	}
	log.Info("job done", "exit_code", res.code, "cancelled", cancelled, "halted", halting)
}

func codeOf(res waitResult) *int {
	if res.err != nil {
		return nil
	}
	return &res.code
}

type waitResult struct {
	code int
	err  error
}

// halt carries out the halt procedure (SPEC 4): MUSTHALT→HALTING, then SIGUSR1 and 15 s to
// exit with 123, or, with allowHaltWithoutSignal, an immediate stop. A fenced slave halts
// without telling the master (it cannot).
func (a *Agent) halt(ctx context.Context, t *task, o protocol.StopOrder) {
	log := a.log.With("job", t.id, "attempt", t.attempt)
	if !t.isFenced() {
		if t.status() == job.StatusRunning {
			t.setStatus(job.StatusMustHalt) // the order means the master has it MUSTHALT
		}
		if t.status() == job.StatusMustHalt {
			err := a.update(ctx, t, job.StatusMustHalt, job.StatusHalting, "halt procedure started: "+o.Reason, nil)
			if err != nil && !errors.Is(err, errFenced) {
				log.Info("halt not started", "err", err)
				var c *protocol.Conflict
				if errors.As(err, &c) && c.Gone(t.attempt) {
					t.order(protocol.StopOrder{JobUUID: t.id, Mode: protocol.StopCancel, Reason: "job is " + string(c.Status)})
				}
				return
			}
		}
	}
	t.mu.Lock()
	noSignal := t.allowHaltNoSignal
	t.mu.Unlock()
	if noSignal {
		t.mu.Lock()
		t.stoppedForHalt = true
		t.mu.Unlock()
		if err := a.rt.Cancel(ctx, t.container()); err != nil {
			log.Warn("stop container for halt", "err", err)
		}
		return
	}
	halted, code, err := a.rt.Halt(ctx, t.container())
	log.Info("halt procedure ended", "halted", halted, "exit_code", code, "err", err)
}

// haltEnd reports the end of a halted job: HALTED when it exited with 123 (or may halt
// without the signal), FAILED otherwise.
func (a *Agent) haltEnd(ctx context.Context, t *task, res waitResult) {
	t.mu.Lock()
	noSignal := t.stoppedForHalt
	t.mu.Unlock()
	switch {
	case t.isFenced():
		a.done(ctx, t, job.StatusFailed, codeOf(res), "halted")
	case noSignal:
		a.done(ctx, t, job.StatusHalted, &res.code, "stopped at once (allowHaltWithoutSignal)")
	case res.err == nil && res.code == 123:
		a.done(ctx, t, job.StatusHalted, &res.code, "exited with 123 after SIGUSR1")
	default:
		a.done(ctx, t, job.StatusFailed, &res.code, "did not exit with 123 within the halt grace after SIGUSR1")
	}
}

// update reports a state change, retrying on network errors (a retry of a change the master
// made already is answered as a success). A *protocol.Conflict tells the state the master
// holds instead; errFenced that the slave gave up reporting it.
func (a *Agent) update(ctx context.Context, t *task, from, to job.Status, reason string, res *job.StateResources) error {
	err := a.retryUntil(ctx, t.fenced, "update", func(ctx context.Context) error {
		return a.master.Update(ctx, protocol.StateUpdate{JobUUID: t.id, Attempt: t.attempt, From: from, To: to, Reason: reason, Resources: res})
	})
	if err == nil {
		t.setStatus(to)
	}
	return err
}

// done reports the end of a job: the container has exited, so the master frees what it held.
// When the master holds the job in another live state of this attempt (a report of the slave
// lost on the way), the end is reported from that state; when the master ended it already (or
// gave it to another attempt) there is nothing to report, and the conflict itself tells the
// master the container exited. A fenced job ends FAILED and is restarted as after a lost
// worker, whatever it was asked.
func (a *Agent) done(ctx context.Context, t *task, to job.Status, exitCode *int, reason string) {
	t.mu.Lock()
	from, fenced := t.st, t.fenceReason
	t.mu.Unlock()
	if fenced != "" {
		to, reason = job.StatusFailed, fenced+": "+reason
	}
	for range 3 {
		d := protocol.Completion{JobUUID: t.id, Attempt: t.attempt, From: from, To: to, ExitCode: exitCode, Reason: reason,
			Usage: t.finalUsage(), Fenced: fenced != ""}
		err := a.retry(ctx, "done", func(ctx context.Context) error { return a.master.Done(ctx, d) })
		var c *protocol.Conflict
		switch {
		case err == nil:
			t.setStatus(to)
			return
		case errors.As(err, &c) && !c.Gone(t.attempt) && c.Status != from:
			if ok, _ := job.CanTransition(c.Status, to, job.ActorSlave); ok {
				from = c.Status
				continue
			}
			if ok, _ := job.CanTransition(c.Status, job.StatusFailed, job.ActorSlave); ok {
				from, to = c.Status, job.StatusFailed
				continue
			}
		}
		a.log.Info("job end not recorded", "job", t.id, "to", to, "err", err)
		return
	}
}

// removeContainer stops (when asked) and removes the task's container, retrying until the
// engine confirms it gone or the slave stops (false: the container may still be there).
func (a *Agent) removeContainer(ctx context.Context, t *task, stop bool) bool {
	id := t.container()
	if id == "" {
		return true
	}
	b := a.backoff(time.Second)
	for {
		err := error(nil)
		if stop {
			err = a.rt.Cancel(ctx, id)
			if errors.Is(err, container.ErrNotFound) {
				return true
			}
		}
		if err == nil {
			if err = a.rt.Remove(ctx, id); err == nil {
				return true
			}
		}
		if ctx.Err() != nil {
			return false
		}
		wait := b.NextBackOff()
		a.log.Warn("removing the container failed, retrying", "job", t.id, "container", shortID(id), "err", err, "retry_in", wait.Round(time.Millisecond))
		sleep(ctx, wait)
	}
}

// shipLog sends the container's output to the master in order, in chunks gathered for at most
// LogFlush, skipping what the master already has (after a restart), and dropping what goes
// beyond LogLimit (the log then says how much was dropped).
func (a *Agent) shipLog(ctx context.Context, t *task, from protocol.LogState) error {
	t.mu.Lock()
	base := t.logBase
	t.mu.Unlock()
	seq, total := from.NextSeq, from.Size
	var dropped int64
	send := func(data []byte) error {
		if len(data) == 0 {
			return nil
		}
		chunk := protocol.LogChunk{JobUUID: t.id, Attempt: t.attempt, Seq: seq, Data: data}
		err := a.retry(ctx, "log", func(ctx context.Context) error { return a.master.Log(ctx, chunk) })
		var c *protocol.Conflict
		if errors.As(err, &c) {
			return fmt.Errorf("the master takes no more log of this attempt: %w", err)
		}
		if err != nil && !errors.Is(err, protocol.ErrConflict) {
			return err
		}
		seq++
		return nil
	}
	pieces := make(chan []byte, 16)
	readErr := make(chan error, 1)
	rctx, stopReading := context.WithCancel(ctx)
	readerDone := make(chan struct{})
	defer func() {
		// Stop the reader (ending rctx closes the stream it reads) and wait for it: it must
		// not outlive the job, nor stay blocked on pieces after an early return.
		stopReading()
		<-readerDone
	}()
	go func() {
		defer close(readerDone)
		defer close(pieces)
		// What the master has of this container's output: its log beyond what earlier
		// attempts wrote.
		if err := a.readLog(rctx, t.container(), max(from.Size-base, 0), pieces); err != nil && rctx.Err() == nil {
			readErr <- err
		}
	}()
	var pending []byte
	// This task's share of the agent's log backlog (LogBacklog): what it read and the master
	// has not yet taken.
	var shown int64
	note := func() {
		n := int64(len(pending))
		a.logBacklog.Add(n - shown)
		shown = n
	}
	defer func() { a.logBacklog.Add(-shown) }()
	flush := time.NewTimer(a.cfg.LogFlush)
	defer flush.Stop()
	for {
		select {
		case p, ok := <-pieces:
			if !ok {
				if dropped > 0 {
					pending = append(pending, fmt.Sprintf("\n[gpulab: log limit of %d bytes reached: %d bytes dropped]\n", a.cfg.LogLimit, dropped)...)
				}
				if err := send(pending); err != nil {
					return err
				}
				select {
				case err := <-readErr:
					return err
				default:
					return nil
				}
			}
			if keep := a.cfg.LogLimit - total; keep < int64(len(p)) {
				dropped += int64(len(p)) - max(keep, 0)
				p = p[:max(keep, 0)]
			}
			total += int64(len(p))
			pending = append(pending, p...)
			note()
			for len(pending) >= a.cfg.LogChunk {
				if err := send(pending[:a.cfg.LogChunk]); err != nil {
					return err
				}
				pending = append([]byte{}, pending[a.cfg.LogChunk:]...)
				note()
			}
		case <-flush.C:
			if err := send(pending); err != nil {
				return err
			}
			pending = nil
			note()
			flush.Reset(a.cfg.LogFlush)
		case <-ctx.Done():
			// The slave stops; what the master lacks is sent after the restart.
			return ctx.Err()
		}
	}
}

// logReopenAfter is how long a log reader whose followed stream ended waits for the container
// to stop before it follows the log again.
const logReopenAfter = time.Second

// readLog sends the container's output, from byte offset from of it, to pieces in order, until
// the container has stopped and all of its output has been sent. Docker's followed stream can
// end as the container exits before it has passed on the last lines (a job's last line was
// missing from its log once in a chaos run), and can end early while the container runs (the
// daemon restarting): so whenever the stream ends, the log is read again from where the reader
// got to, followed again while the container runs, once more without following when it has
// stopped. Whether it has stopped is one Wait for the whole read, not one per stream: an
// engine slower to answer than logReopenAfter would otherwise never be seen to have stopped.
func (a *Agent) readLog(ctx context.Context, id string, from int64, pieces chan<- []byte) error {
	wctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_, _ = a.rt.Wait(wctx, id) // an error (no such container) ends the following too
	}()
	defer func() { cancel(); <-stopped }()
	for follow := true; ; {
		n, err := a.readLogOnce(ctx, id, from, follow, pieces)
		from += n
		if err != nil || !follow {
			return err
		}
		select {
		case <-stopped:
			follow = false // what is left is all there
		case <-time.After(logReopenAfter):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// readLogOnce reads one stream of the container's log, skipping its first from bytes, and
// sends the rest to pieces; n is how many bytes it sent. Ending ctx closes the stream.
func (a *Agent) readLogOnce(ctx context.Context, id string, from int64, follow bool, pieces chan<- []byte) (n int64, err error) {
	rc, err := a.rt.Logs(ctx, id, follow)
	if err != nil {
		return 0, fmt.Errorf("read container log: %w", err)
	}
	defer context.AfterFunc(ctx, func() { _ = rc.Close() })()
	defer func() { _ = rc.Close() }()
	if _, err := io.CopyN(io.Discard, rc, from); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, nil // nothing beyond what was sent
		}
		return 0, fmt.Errorf("skip the log already sent: %w", err)
	}
	for {
		buf := make([]byte, 32<<10)
		m, err := rc.Read(buf)
		if m > 0 {
			select {
			case pieces <- buf[:m]:
				n += int64(m)
			case <-ctx.Done():
				return n, ctx.Err()
			}
		}
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("read container log: %w", err)
		}
	}
}

func hostOf(inv protocol.Inventory) string {
	if inv.DNSName != "" {
		return inv.DNSName
	}
	return inv.Host
}

// usageStats accumulates usage samples into the job's final statistics.
type usageStats struct {
	n         int
	cpuSum    float64
	memMax    int64
	gpuSum    map[int]float64
	gpuMemMax map[int]int64
}

func (s *usageStats) add(u protocol.Usage) {
	s.n++
	s.cpuSum += u.CPUPercent
	s.memMax = max(s.memMax, u.MemoryMiB)
	if s.gpuSum == nil {
		s.gpuSum, s.gpuMemMax = map[int]float64{}, map[int]int64{}
	}
	for _, g := range u.GPUs {
		s.gpuSum[g.Index] += g.UtilPercent
		s.gpuMemMax[g.Index] = max(s.gpuMemMax[g.Index], g.MemoryUsedMiB)
	}
}

// summary is the mean CPU and GPU utilisation and the peak memory over the samples.
func (s *usageStats) summary() *protocol.Usage {
	if s.n == 0 {
		return nil
	}
	u := &protocol.Usage{CPUPercent: s.cpuSum / float64(s.n), MemoryMiB: s.memMax}
	idx := make([]int, 0, len(s.gpuSum))
	for i := range s.gpuSum {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	for _, i := range idx {
		u.GPUs = append(u.GPUs, protocol.GPUUsage{Index: i, UtilPercent: s.gpuSum[i] / float64(s.n), MemoryUsedMiB: s.gpuMemMax[i]})
	}
	return u
}
