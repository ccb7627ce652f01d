package scheduler

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/opengpulab/gpulab/protocol"
)

// Backfill (SPEC 7.2, last bullet). A greedy pass lets small jobs overtake a big one for ever:
// whenever a little room frees up, the next small job takes it. So the first job that could run
// on some slave but finds it busy (the head) gets a planned start: the earliest time at which
// running jobs reaching their maxDuration (Placed.Ends) leave enough room on one slave, and the
// exact GPUs, CPU ids and memory it would take there. Later jobs still start now, as long as they
// cannot delay that plan: they end (by their own maxDuration) before it, or they keep off the
// reserved resources. Only Ends of the snapshot's running jobs count: jobs assigned earlier in
// the same pass are taken to hold their resources past the estimate, which errs on the late side.

// reservation is the head job's planned start, kept for the rest of the pass.
type reservation struct {
	head    string // the head job's uuid
	st      *slaveState
	start   time.Time
	blocker string // the running job whose end makes the room
	gpuK    []int  // positions in st.gpus the head will take
	cpuIDs  []int
	// spareMem is the memory free at start beyond what the head needs: what long jobs backfilled
	// onto the slave may still take without delaying it.
	spareMem int

	// heldBackLine is heldBack's line, made once: thousands of jobs may be held back a pass.
	heldBackLine string

	// Scratch for mask/unmask: what mask took away, so that unmask gives back exactly that.
	maskedGPU, maskedCPU []int
	maskedMem            int
}

// guarded says whether a job must keep off the reservation: interactive jobs never wait for
// backfill (they are first in line anyway), and a job that ends by its maxDuration before the
// head starts cannot be in its way. A job without maxDuration may run for ever.
func (p *planner) guarded(j *Job) bool {
	if p.reserved == nil || j.Request.Scheduling.Interactive {
		return false
	}
	d := j.Request.Scheduling.MaxDuration.Std()
	return d <= 0 || p.now.Add(d).After(p.reserved.start)
}

// reserve plans the head job's start on the busy slaves that could take it (ms, in slave
// order); the earliest start wins, ties to the first slave. It returns nil when no start follows
// from known Ends. Only the winner's reservation is built; a slave whose first known end is not
// before the best start so far cannot win and is not simulated (a head is planned at every pass,
// over every busy slave).
func (p *planner) reserve(j *Job, n *need, ms []miss) *reservation {
	var best *slaveState
	var bestStart time.Time
	for _, m := range ms {
		if best != nil && !p.firstEnd(m.st).Before(bestStart) {
			continue
		}
		if start, ok, _ := p.simulate(m.st, n, false); ok && (best == nil || start.Before(bestStart)) {
			best, bestStart = m.st, start
		}
	}
	if best == nil {
		return nil
	}
	_, _, r := p.simulate(best, n, true)
	r.head = j.UUID
	return r
}

// firstEnd is the earliest a job may start on the slave by backfill's plan: the first known end
// of a job there (now if overdue), zero when none is known.
func (p *planner) firstEnd(st *slaveState) time.Time {
	var first time.Time
	for _, pl := range st.held {
		if !pl.Ends.IsZero() && (first.IsZero() || pl.Ends.Before(first)) {
			first = pl.Ends
		}
	}
	if !first.IsZero() && first.Before(p.now) {
		first = p.now
	}
	return first
}

// simulate releases the slave's running jobs in the order they end and stops at the first
// release after which the job fits, returning that start (ok false when none), and with build
// the reservation that plans it. It works on scratch copies: the pass's state stays as it is.
func (p *planner) simulate(st *slaveState, n *need, build bool) (start time.Time, ok bool, r *reservation) {
	ending := p.ending[:0]
	for _, pl := range st.held {
		if !pl.Ends.IsZero() {
			ending = append(ending, pl)
		}
	}
	p.ending = ending
	if len(ending) == 0 {
		return time.Time{}, false, nil
	}
	slices.SortStableFunc(ending, func(a, b *Placed) int {
		if c := a.Ends.Compare(b.Ends); c != 0 {
			return c
		}
		return cmp.Compare(a.JobUUID, b.JobUUID)
	})
	gpuFree, cpuFree := append(p.gpuScratch[:0], st.gpuFree...), append(p.cpuScratch[:0], st.cpuFree...)
	p.gpuScratch, p.cpuScratch = gpuFree, cpuFree
	cpusFree, memFree := st.cpus(true), st.s.MemoryGb-st.memUsed
	for _, pl := range ending {
		cpusFree, memFree = st.release(pl, gpuFree, cpuFree, cpusFree, memFree)
		gpusFree := 0
		if st.s.CudaMajor >= n.cuda {
			for k := range st.gpus {
				if gpuFree[k] && st.gpuOK(n, k) {
					gpusFree++
				}
			}
		}
		if gpusFree < n.gpus || cpusFree < n.cpus || memFree < n.memGb {
			continue
		}
		start = pl.Ends
		if start.Before(p.now) { // overdue: it should stop any moment
			start = p.now
		}
		if !build {
			return start, true, nil
		}
		r = &reservation{st: st, start: start, blocker: pl.JobUUID, spareMem: memFree - n.memGb}
		for k := range st.gpus {
			if len(r.gpuK) < n.gpus && gpuFree[k] && st.gpuOK(n, k) {
				r.gpuK = append(r.gpuK, k)
			}
		}
		for id := range cpuFree {
			if len(r.cpuIDs) < n.cpus && cpuFree[id] {
				r.cpuIDs = append(r.cpuIDs, id)
			}
		}
		return start, true, r
	}
	return time.Time{}, false, nil
}

// gpuPos is the position in st.gpus of the GPU with that Index, or -1.
func (st *slaveState) gpuPos(idx int) int {
	// GPUs are mostly indexed 0..n-1: then the position is the index, known without reading
	// the list (a slave found so when the pass began), or found so now (the first with it, as
	// the list is sorted).
	if st.direct {
		if idx >= 0 && idx < len(st.gpus) {
			return idx
		}
		return -1
	}
	if g := st.gpus; idx >= 0 && idx < len(g) && g[idx].Index == idx && (idx == 0 || g[idx-1].Index != idx) {
		return idx
	}
	return slices.IndexFunc(st.gpus, func(g protocol.GPU) bool { return g.Index == idx })
}

// mask hides the reserved resources from the slave's free state, so that the ordinary filters,
// ranking and take keep a guarded job off them; unmask must follow before anything else looks.
// Reserved ids already busy need no hiding: jobs ending before the start free them. Memory is
// a count, so what stays visible is the spare at the start, or what is free now if less.
func (r *reservation) mask() {
	st := r.st
	r.maskedGPU, r.maskedCPU = r.maskedGPU[:0], r.maskedCPU[:0]
	for _, k := range r.gpuK {
		if st.gpuFree[k] {
			st.gpuFree[k] = false
			st.nFree--
			r.maskedGPU = append(r.maskedGPU, k)
		}
	}
	for _, id := range r.cpuIDs {
		if st.cpuFree[id] {
			st.cpuFree[id] = false
			st.cpusUsed++
			r.maskedCPU = append(r.maskedCPU, id)
		}
	}
	free := st.memory(true)
	r.maskedMem = free - max(0, min(free, r.spareMem))
	st.memUsed += r.maskedMem
}

func (r *reservation) unmask() {
	st := r.st
	for _, k := range r.maskedGPU {
		st.gpuFree[k] = true
		st.nFree++
	}
	for _, id := range r.maskedCPU {
		st.cpuFree[id] = true
		st.cpusUsed--
	}
	st.memUsed -= r.maskedMem
}

// expected is the line added to the head job's explanation.
func (r *reservation) expected() string {
	return fmt.Sprintf("expected start %s when job %s reaches its maxDuration", fmtTime(r.start), shortID(r.blocker))
}

// heldBack is the explanation of a job that would fit now, but only on the head's room.
func (r *reservation) heldBack() string {
	if r.heldBackLine == "" {
		r.heldBackLine = fmt.Sprintf("held back so that job %s can start at %s (it needs the room this job would take)", shortID(r.head), fmtTime(r.start))
	}
	return r.heldBackLine
}

func fmtTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// shortID is the first 8 characters of a uuid, as users see it in listings.
func shortID(uuid string) string {
	if len(uuid) > 8 {
		return uuid[:8]
	}
	return uuid
}
