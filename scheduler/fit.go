package scheduler

import (
	"cmp"
	"slices"
	"strings"
	"sync"

	"github.com/opengpulab/gpulab/protocol"
)

// slaveState is a slave during one pass: its inventory (read-only, from the snapshot) and what
// is still free after Running and the assignments made so far.
type slaveState struct {
	s *Slave
	// online, accepting and memGb are the Slave's, kept here because every job's scan reads
	// them on every capable slave: one memory load less each (B1x: 5,000 slaves).
	online, accepting bool
	memGb             int
	cluster           *Cluster       // nil when the snapshot does not list the slave's cluster: public
	gpus              []protocol.GPU // a sorted copy (by Index), so the snapshot is never reordered
	direct            bool           // gpus[k].Index == k for every k: gpuPos needs no look
	modelID           []int          // per gpus[i]: index into planner.models
	gpuFree           []bool         // per gpus[i]
	nFree             int            // how many of gpuFree are set: a full slave is passed over at once
	pos               int32          // its place in planner.slaves (and SlaveIndex.states)
	cpuFree           []bool         // per CPU id
	cpusUsed          int
	memUsed           int
	held              []*Placed // the snapshot's running jobs here, read-only: backfill releases them
	// halting: some held job is halting; haltable: some could be halted (halt.go's haltable).
	halting, haltable bool
	// haltables are the held jobs halt.go's haltable accepts, found once per pass: makeRoom
	// looks for victims among them for every waiting job.
	haltables []*Placed
	// topScore is the highest haltScore among the haltables that a SCORE halt may take (the
	// restartable ones unless HaltNonRestartable; -1 when none): makeRoom skips a slave whose
	// top does not outrank the starter.
	topScore float64
	// minGPUMemMiB is the smallest memory among its GPUs: a job naming no model and at most
	// that much GPU memory matches every GPU, and its count needs no look at them.
	minGPUMemMiB int64
}

// SlaveIndex is what a pass derives from the slaves and clusters alone: their order, each
// slave's sorted GPUs and GPU model ids, the slaves by name, and the all-free state a pass
// starts from. Plan derives it at every pass unless the snapshot carries one (Snapshot.Index):
// the simulator, whose cluster never changes, builds it once rather than at each of its
// hundred thousand passes.
type SlaveIndex struct {
	of               *Slave // &Slaves[0] of the slice it was built from (nil when empty), and its length:
	n                int    // Plan uses the index only for that very slice
	slaves           []Slave
	states           []slaveState // all free: gpuFree and cpuFree lie in the two buffers, all true
	gpuFree, cpuFree []bool
	models           []string       // distinct lower-case GPU models; a model id indexes it
	byName           map[string]int // the first slave of each name, in the sorted order
	first            []bool         // whether each slave is the first of its name
}

// Place is where the first slave named name is in the index, plus one, and the name as the
// index holds it; zero and "" when none is: a running job's Placed.SlaveHint and SlaveName.
// A Placed whose SlaveName is the index's own string is matched to its hint without reading the
// name's bytes (two strings that share their bytes compare equal at once).
func (ix *SlaveIndex) Place(name string) (int, string) {
	if ix == nil {
		return 0, ""
	}
	if k, ok := ix.byName[name]; ok {
		return k + 1, ix.slaves[k].Name
	}
	return 0, ""
}

// hinted is where r's slave is by its hint, when the hint names the first slave of r's name.
func (ix *SlaveIndex) hinted(r *Placed) (int, bool) {
	k := r.SlaveHint - 1
	if k < 0 || k >= len(ix.slaves) || !ix.first[k] || ix.slaves[k].Name != r.SlaveName {
		return 0, false
	}
	return k, true
}

// NewSlaveIndex derives a SlaveIndex. The snapshot that carries it must have these very
// slaves and these clusters, unchanged: a caller rebuilds it when either changes.
func NewSlaveIndex(slaves []Slave, clusters map[int]Cluster) *SlaveIndex {
	ix := &SlaveIndex{n: len(slaves)}
	if len(slaves) > 0 {
		ix.of = &slaves[0]
	}
	// The slaves and their GPU lists are only read, so they are used as they are where
	// already in order (the loop reads them so, the simulator builds them so), and copied and
	// sorted otherwise.
	bySlave := func(a, b Slave) int {
		if c := cmp.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return cmp.Compare(a.InstanceID, b.InstanceID)
	}
	if !slices.IsSortedFunc(slaves, bySlave) {
		slaves = slices.Clone(slaves)
		slices.SortStableFunc(slaves, bySlave)
	}
	ix.slaves = slaves
	byIndex := func(a, b protocol.GPU) int { return cmp.Compare(a.Index, b.Index) }
	nGPU, nCPU := 0, 0
	for i := range slaves {
		nGPU += len(slaves[i].GPUs)
		nCPU += max(0, slaves[i].CPUs)
	}
	modelIDBuf, gpuFreeBuf, cpuFreeBuf := make([]int, nGPU), make([]bool, nGPU), make([]bool, nCPU)
	ix.gpuFree, ix.cpuFree = gpuFreeBuf, cpuFreeBuf
	ix.states = make([]slaveState, len(slaves))
	var modelIDs map[string]int
	ix.byName, ix.first = make(map[string]int, len(slaves)), make([]bool, len(slaves))
	for i := range slaves {
		st := &ix.states[i]
		st.s, st.pos = &slaves[i], int32(i)
		st.online, st.accepting, st.memGb = slaves[i].Online, slaves[i].Accepting, slaves[i].MemoryGb
		if i > 0 && slaves[i-1].ClusterID == slaves[i].ClusterID {
			st.cluster = ix.states[i-1].cluster
		} else if c, ok := clusters[slaves[i].ClusterID]; ok {
			st.cluster = &c
		}
		st.gpus = slaves[i].GPUs
		if !slices.IsSortedFunc(st.gpus, byIndex) {
			st.gpus = slices.Clone(st.gpus)
			slices.SortStableFunc(st.gpus, byIndex)
		}
		g := len(st.gpus)
		st.direct = true
		for k := range st.gpus {
			st.direct = st.direct && st.gpus[k].Index == k
			if k == 0 || st.gpus[k].MemoryMiB < st.minGPUMemMiB {
				st.minGPUMemMiB = st.gpus[k].MemoryMiB
			}
		}
		st.modelID, modelIDBuf = modelIDBuf[:g:g], modelIDBuf[g:]
		st.gpuFree, gpuFreeBuf = gpuFreeBuf[:g:g], gpuFreeBuf[g:]
		st.nFree = g
		for k, g := range st.gpus {
			st.gpuFree[k] = true
			// A slave's GPUs are mostly of one model: reuse the previous one's id rather than
			// lower-case and look up every name.
			if k > 0 && g.Model == st.gpus[k-1].Model {
				st.modelID[k] = st.modelID[k-1]
				continue
			}
			if k == 0 && i > 0 && len(ix.states[i-1].gpus) > 0 {
				if prev := &ix.states[i-1]; g.Model == prev.gpus[len(prev.gpus)-1].Model {
					st.modelID[k] = prev.modelID[len(prev.gpus)-1]
					continue
				}
			}
			m := strings.ToLower(g.Model)
			if modelIDs == nil {
				modelIDs = map[string]int{}
			}
			id, ok := modelIDs[m]
			if !ok {
				id = len(ix.models)
				modelIDs[m] = id
				ix.models = append(ix.models, m)
			}
			st.modelID[k] = id
		}
		c := max(0, slaves[i].CPUs)
		st.cpuFree, cpuFreeBuf = cpuFreeBuf[:c:c], cpuFreeBuf[c:]
		for k := range st.cpuFree {
			st.cpuFree[k] = true
		}
		if _, dup := ix.byName[st.s.Name]; !dup {
			ix.byName[st.s.Name] = i
			ix.first[i] = true
		}
	}
	return ix
}

// fits says whether the index was built from these very slaves.
func (ix *SlaveIndex) fits(slaves []Slave) bool {
	return ix != nil && ix.n == len(slaves) && (len(slaves) == 0 || ix.of == &slaves[0])
}

// passBufs are a pass's working arrays, kept from pass to pass in passPool: the simulator plans
// at every event, and allocating them afresh each time was a tenth of a replay. Nothing a plan
// returns points into them; Plan hands them back when it is done (planner.release).
type passBufs struct {
	states                 []slaveState
	gpuFree, cpuFree       []bool
	slaves, where, scratch []*slaveState
	canHalt                []bool
	nHeld, nHalt           []int
	placed                 []*Placed
	misses                 []miss
	order                  []*Job // Plan's queue order (queueOrder)
}

var passPool = sync.Pool{New: func() any { return new(passBufs) }}

// sized is s with length n, every element zero, reusing its array when large enough.
func sized[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// release hands the pass's arrays back for another pass, cleared of pointers into this
// snapshot so that the pool keeps none of it alive.
func (p *planner) release() {
	b := p.bufs
	if b == nil {
		return
	}
	p.bufs = nil
	clear(b.states)
	clear(b.slaves)
	clear(b.where)
	clear(b.scratch)
	clear(b.placed)
	clear(b.order)
	clear(b.misses[:cap(b.misses)])
	passPool.Put(b)
}

// haltOptions is a planner with only the snapshot's clock, tallies and halting options set, the
// defaults applied: all that halt.go's scoring needs (Snapshot.MayHalt uses it alone).
func haltOptions(s Snapshot) *planner {
	p := &planner{now: s.Now, tallies: s.Tallies, las: s.Policy == PolicyLAS,
		halting:    !s.NoHalts && (s.Policy == "" || s.Policy == PolicyFair || s.Policy == PolicyLAS),
		haltFactor: max(1, s.HaltFactor), haltRestartableOnly: !s.HaltNonRestartable, haltGrace: s.HaltGrace}
	if s.HaltFactor <= 0 {
		p.haltFactor = DefaultHaltFactor
	}
	if p.haltGrace <= 0 {
		p.haltGrace = DefaultHaltGrace
	}
	return p
}

// newPlanner copies what it must change (free resources) and leaves the snapshot alone; Slave
// structs and their GPU slices are only read. The pass's own state is allocated in a few
// slices, not per slave: the simulator builds a planner at every event.
func newPlanner(s Snapshot) *planner {
	p := haltOptions(s)
	p.clusters, p.limits, p.counts = s.Clusters, s.Limits, newRunning(s.Running, s.Limits)
	ix := s.Index
	if !ix.fits(s.Slaves) {
		ix = NewSlaveIndex(s.Slaves, s.Clusters)
	}
	p.models = ix.models
	byName := ix.byName
	b := passPool.Get().(*passBufs)
	p.bufs = b
	b.states = append(b.states[:0], ix.states...)
	b.gpuFree, b.cpuFree = append(b.gpuFree[:0], ix.gpuFree...), append(b.cpuFree[:0], ix.cpuFree...)
	states, gpuFree, cpuFree := b.states, b.gpuFree, b.cpuFree
	b.slaves = sized(b.slaves, len(states))
	p.slaves = b.slaves
	for i := range states {
		st := &states[i]
		g, c := len(st.gpuFree), len(st.cpuFree)
		st.gpuFree, gpuFree = gpuFree[:g:g], gpuFree[g:]
		st.cpuFree, cpuFree = cpuFree[:c:c], cpuFree[c:]
		p.slaves[i] = st
	}
	// The scratch lists of decide hold at most every slave each: sized so once, rather than
	// grown again at every pass (the simulator makes a planner at every event).
	n := len(states)
	b.scratch = sized(b.scratch, 4*n)
	scratch := b.scratch
	p.scope, p.capable, p.offline, p.draining = scratch[:0:n], scratch[n:n:2*n], scratch[2*n:2*n:3*n], scratch[3*n:3*n]
	if cap(b.misses) < n {
		b.misses = make([]miss, 0, n)
	}
	p.misses = b.misses[:0]
	// A running job belongs to the first slave of its name (in the sorted order). The held and
	// haltable lists of all slaves share two arrays, sized by a first count.
	b.where, b.canHalt = sized(b.where, len(s.Running)), sized(b.canHalt, len(s.Running))
	b.nHeld, b.nHalt = sized(b.nHeld, len(p.slaves)), sized(b.nHalt, len(p.slaves))
	where, canHalt, nHeld, nHalt := b.where, b.canHalt, b.nHeld, b.nHalt
	haltables := 0
	for i := range s.Running {
		r := &s.Running[i]
		k, ok := ix.hinted(r)
		if !ok {
			if k, ok = byName[r.SlaveName]; !ok {
				continue
			}
		}
		where[i] = p.slaves[k]
		nHeld[k]++
		if canHalt[i] = !r.Halting && p.haltable(r); canHalt[i] {
			nHalt[k]++
			haltables++
		}
	}
	b.placed = sized(b.placed, len(s.Running)+haltables)
	heldBuf, haltBuf := b.placed[:len(s.Running)], b.placed[len(s.Running):]
	for k, st := range p.slaves {
		h, v := nHeld[k], nHalt[k]
		st.held, heldBuf = heldBuf[:0:h], heldBuf[h:]
		st.haltables, haltBuf = haltBuf[:0:v], haltBuf[v:]
	}
	// Taking resources is idempotent per GPU and CPU id and additive for memory, so the order of
	// Running does not matter. Ids the slave does not have are ignored.
	for i := range s.Running {
		r, st := &s.Running[i], where[i]
		if st == nil {
			continue
		}
		st.held = append(st.held, r)
		// Only a job past its minDuration can ever be a victim, and only a halting one makes a
		// starter wait: a slave with neither is skipped by makeRoom, which otherwise looks at
		// every job of every busy slave for every waiting job (most of a pass on a full cluster
		// of young jobs).
		if r.Halting {
			if !st.halting {
				p.haltingSlaves++
			}
			st.halting = true
		} else if canHalt[i] {
			if !st.haltable {
				st.topScore = -1
			}
			st.haltable = true
			st.haltables = append(st.haltables, r)
			if p.halting && (!p.haltRestartableOnly || r.Restartable) {
				st.topScore = max(st.topScore, p.haltScore(r))
			}
		}
		p.mayHalt = p.mayHalt || st.halting || st.haltable
		for _, idx := range r.GPUIndices {
			if k := st.gpuPos(idx); k >= 0 && st.gpuFree[k] {
				st.gpuFree[k] = false
				st.nFree--
			}
		}
		for _, id := range r.CPUIDs {
			if id >= 0 && id < len(st.cpuFree) && st.cpuFree[id] {
				st.cpuFree[id] = false
				st.cpusUsed++
			}
		}
		st.memUsed += r.MemoryGb
	}
	p.newBookings(&s)
	return p
}

// need is a job's request in the form the filters use, computed once per job.
type need struct {
	gpus      int
	models    []string // as the user wrote them, for messages
	modelOK   []bool   // per model id; nil when any model will do
	gpuMemMiB int64
	gpuMemGb  int
	cuda      int
	cpus      int
	memGb     int
}

func (p *planner) needOf(j *Job) need {
	res := j.Request.Resources
	// Stored requests are validated (counts ≥ 0); clamping keeps a damaged row from panicking
	// the whole pass.
	n := need{
		gpus:      max(0, res.GPUs),
		models:    res.GPUModel,
		gpuMemGb:  res.GPUMemoryGb,
		gpuMemMiB: int64(res.GPUMemoryGb) * 1024,
		cuda:      res.MinCudaVersion,
		cpus:      max(0, res.CPUs),
		memGb:     j.Request.TotalMemoryGb(),
	}
	if len(res.GPUModel) > 0 {
		want := make([]string, len(res.GPUModel))
		for i, m := range res.GPUModel {
			want[i] = strings.ToLower(m)
		}
		n.modelOK = make([]bool, len(p.models))
		for id, m := range p.models {
			n.modelOK[id] = slices.ContainsFunc(want, func(w string) bool { return strings.Contains(m, w) })
		}
	}
	return n
}

// stage is a feasibility filter; a slave that fails a later stage came closer to taking the job.
type stage int

const (
	stageCUDA   stage = iota // CUDA major below minCudaVersion (jobs without GPUs; see check)
	stageGPU                 // not enough GPUs matching model, GPU memory and CUDA
	stageCPU                 // not enough CPUs
	stageMemory              // not enough memory
	stageFits
)

// verdict is the first filter a slave fails and the amount it has of what that filter counts
// (CUDA major, matching GPUs, CPUs, GiB). For stageFits, amount is the matching GPUs free.
type verdict struct {
	stage  stage
	amount int
}

// gpuOK is the GPU filter for one GPU: model (any entry a case-insensitive substring) and
// memory (at least gpuMemoryGb GiB).
func (st *slaveState) gpuOK(n *need, k int) bool {
	return (n.modelOK == nil || n.modelOK[st.modelID[k]]) && st.gpus[k].MemoryMiB >= n.gpuMemMiB
}

// regainable says whether the slave's capacity (the most GPUs it has had) would take the job
// though its inventory now does not: GPUs dropped out and may come back.
func (st *slaveState) regainable(n *need) bool {
	if len(st.s.CapacityGPUs) <= len(st.gpus) || st.s.CudaMajor < n.cuda {
		return false
	}
	c := 0
	for _, g := range st.s.CapacityGPUs {
		m := strings.ToLower(g.Model)
		if (len(n.models) == 0 || slices.ContainsFunc(n.models, func(w string) bool { return strings.Contains(m, strings.ToLower(w)) })) &&
			g.MemoryMiB >= n.gpuMemMiB {
			c++
		}
	}
	return c >= n.gpus && st.cpus(false) >= n.cpus && st.memory(false) >= n.memGb
}

// matchingGPUs counts the GPUs that match the request, all of them or only the free ones.
func (st *slaveState) matchingGPUs(n *need, free bool) int {
	if n.modelOK == nil && n.gpuMemMiB <= st.minGPUMemMiB {
		// Every GPU matches (most jobs name no model and no GPU memory): this check ran for
		// every job on every slave with room, and looking at each GPU was a third of a
		// pass's Plan (B1x: 22,185 jobs placed on 5,000 slaves).
		if free {
			return st.nFree
		}
		return len(st.gpus)
	}
	c := 0
	for k := range st.gpus {
		if (!free || st.gpuFree[k]) && st.gpuOK(n, k) {
			c++
		}
	}
	return c
}

func (st *slaveState) cpus(free bool) int {
	if free {
		return len(st.cpuFree) - st.cpusUsed
	}
	return len(st.cpuFree)
}

func (st *slaveState) memory(free bool) int {
	if free {
		return max(0, st.memGb-st.memUsed)
	}
	return max(0, st.memGb)
}

// mayFit is what check(n, true) needs before it can answer stageFits, by counts alone: the
// slave online and accepting, as many free GPUs (of any model), CPUs and GB as the job asks.
// It reads no GPU list, so a scan passes over full slaves at little cost.
func (st *slaveState) mayFit(n *need) bool {
	return st.online && st.accepting && st.nFree >= n.gpus && st.cpus(true) >= n.cpus && st.memory(true) >= n.memGb
}

// check runs the resource filters on the slave's totals (free=false: could it ever take the
// job?) or on what is free now. CUDA is folded into the GPU filter for jobs with GPUs, so that
// the answer reads "no GPU matching V100 with CUDA ≥ 11" rather than naming two half-reasons.
func (st *slaveState) check(n *need, free bool) verdict {
	if n.gpus == 0 && st.s.CudaMajor < n.cuda {
		return verdict{stageCUDA, max(0, st.s.CudaMajor)}
	}
	if free && st.nFree == 0 && n.gpus > 0 {
		return verdict{stageGPU, 0}
	}
	gpus := 0
	if st.s.CudaMajor >= n.cuda {
		gpus = st.matchingGPUs(n, free)
	}
	switch {
	case gpus < n.gpus:
		return verdict{stageGPU, gpus}
	case st.cpus(free) < n.cpus:
		return verdict{stageCPU, st.cpus(free)}
	case st.memory(free) < n.memGb:
		return verdict{stageMemory, st.memory(free)}
	}
	return verdict{stageFits, gpus}
}

// rank orders feasible slaves: best fit first (fewest matching GPUs left free, so whole slaves
// stay available for big jobs), then the least loaded after placing (CPU share, then memory
// share). Ties keep the slave order (name), which makes the choice deterministic.
type rank struct {
	gpusLeft          int
	cpuUsed, cpuTotal int
	memUsed, memTotal int
}

func (st *slaveState) rank(n *need, freeGPUs int) rank {
	return rank{
		gpusLeft: freeGPUs - n.gpus,
		cpuUsed:  st.cpusUsed + n.cpus, cpuTotal: max(1, len(st.cpuFree)),
		memUsed: st.memUsed + n.memGb, memTotal: max(1, st.s.MemoryGb),
	}
}

func (a rank) less(b rank) bool {
	if a.gpusLeft != b.gpusLeft {
		return a.gpusLeft < b.gpusLeft
	}
	// Compare used/total fractions exactly: a.used/a.total < b.used/b.total.
	if x, y := int64(a.cpuUsed)*int64(b.cpuTotal), int64(b.cpuUsed)*int64(a.cpuTotal); x != y {
		return x < y
	}
	return int64(a.memUsed)*int64(b.memTotal) < int64(b.memUsed)*int64(a.memTotal)
}

// take gives the job the lowest free matching GPU indices and the lowest free CPU ids, and
// marks them used for the rest of the pass.
func (st *slaveState) take(j *Job, n *need) *Assignment {
	a := &Assignment{
		JobUUID:         j.UUID,
		SlaveName:       st.s.Name,
		SlaveInstanceID: st.s.InstanceID,
		ClusterID:       st.s.ClusterID,
		GPUs:            make([]protocol.GPU, 0, n.gpus),
		CPUIDs:          make([]int, 0, n.cpus),
		MemoryGb:        n.memGb,
	}
	for k := range st.gpus {
		if len(a.GPUs) == n.gpus {
			break
		}
		if st.gpuFree[k] && st.gpuOK(n, k) {
			st.gpuFree[k] = false
			st.nFree--
			a.GPUs = append(a.GPUs, st.gpus[k])
		}
	}
	for id := range st.cpuFree {
		if len(a.CPUIDs) == n.cpus {
			break
		}
		if st.cpuFree[id] {
			st.cpuFree[id] = false
			a.CPUIDs = append(a.CPUIDs, id)
		}
	}
	st.cpusUsed += len(a.CPUIDs)
	st.memUsed += n.memGb
	return a
}
