package scheduler

import (
	"container/heap"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"
)

// Forecast (issue 15): an estimated start, with a range, for every waiting job, not only the
// backfill head. After the pass has decided, the rest of the queue is replayed forward in
// simulated time, in queue order, on what the pass left free: running jobs (and the ones just
// assigned) release what they hold when they end, and each waiting job takes the first slave of
// its scope where it fits once enough has been released. Three replays give the range:
//
//   - late: every job runs to its maxDuration (the worst case, given no halts; a job already
//     on its way out ends after the halt grace, Snapshot.HaltGrace);
//   - likely: where the distribution of run times is learned (RunRatio.Q), the median start of
//     ForecastSamples replays in which every job's run time is drawn from it (a running job's
//     from the jobs like it that ran at least as long); else every job runs RunRatio.Mid (the
//     mean) of its maxDuration (a running job: the mean of those that ran as long, where known);
//   - early: every job runs RunRatio.Low of its maxDuration (a running job past that share: that
//     share of what remains).
//
// Why draws, not one replay of expected run times: a job waits for the first of many running
// jobs to end, and the first of many uncertain ends comes much sooner than the first of their
// expected ends. On the Philly replay (fair-halt), ends from each job's expected run time (given
// how long it has run) left the median error over the wait at 0.44, the median of drawn replays
// at 0.40 (las: 0.40 and 0.29), with the same learned distributions of a month; knowing the
// running jobs' real run times would give 0.10, so what is left is how little a job's kind and
// age tell of its end. A user's ratio for a class that follows his latest jobs, the running and
// halted ones counted as cut short (RecentRatio), took it to 0.25–0.28 over three seeds.
//
// The replay is list scheduling with backfill: its clock never goes back, but a job that fits on
// GPUs left free once the jobs ahead of it have their places may start as early as those GPUs
// came free, as the real pass backfills a small job behind a big one; it never starts before a
// job ahead of it that needs no more GPUs. (A job placed ahead keeps what it took, so a hole it
// leaves before its start is not used: the estimate errs late there.) Each replay is event-driven:
// a heap of ends, and per job a look at its candidate slaves with room (in the order of when
// their GPUs came free, replayindex.go, where it may go to most slaves) plus one check per end
// popped, so a replay of 5,000 jobs on 2,000 full slaves takes 10–15 ms (BenchmarkForecastSoak). Jobs
// naming reservations, capped by running-job limits or by notBefore keep what decide said
// (reservation starts count; caps and halts still to come are not modelled). Under the fair
// order, the likely and late starts are then stretched by what later arrivals ranked ahead
// would bring (overtake.go).

// RunRatio describes how long jobs run as a share of their maxDuration: Low is a low quantile
// (the early end of the range) and Mid the mean (the likely start; see RatioLowQuantile). Zero
// values mean 1: no knowledge, every job runs its maxDuration. Q, where known, are the
// quantiles of the distribution (NewRunRatio; RatioQuantiles).
type RunRatio struct {
	Low, Mid float64
	Q        []float64
	above    []float64 // see NewRunRatio
}

// RunRatios are the learned ratios: a user's for the job's maxDuration class (DurationClass)
// where he has enough finished jobs of it, else everyone's for that class, else the user's, else
// Global.
type RunRatios struct {
	Global      RunRatio
	Users       map[int64]RunRatio
	Classes     map[int]RunRatio
	UserClasses map[UserClass]RunRatio
}

func (r RunRatios) of(user int64, maxDur time.Duration) RunRatio {
	c := DurationClass(maxDur)
	if u, ok := r.UserClasses[UserClass{user, c}]; ok {
		return u.clean()
	}
	if u, ok := r.Classes[c]; ok {
		return u.clean()
	}
	if u, ok := r.Users[user]; ok {
		return u.clean()
	}
	return r.Global.clean()
}

// learned says whether anything is known of run times: without it every replay is the late one.
func (r RunRatios) learned() bool {
	g := r.Global.clean()
	return g.Low != 1 || g.Mid != 1 || len(r.Users) > 0 || len(r.Classes) > 0 || len(r.UserClasses) > 0
}

// clean clamps ratios to (0, 1] with Low ≤ Mid, so that a damaged statistic cannot make the
// range invert or jobs end before they start.
func (r RunRatio) clean() RunRatio {
	fix := func(x float64) float64 {
		if x <= 0 || x > 1 {
			return 1
		}
		return max(x, minRatio)
	}
	r.Mid = fix(r.Mid)
	r.Low = min(fix(r.Low), r.Mid)
	return r
}

// Range is a waiting job's estimated start: Likely within [Early, Late].
type Range struct {
	Early, Likely, Late time.Time
}

// ForecastCap bounds the waiting jobs a forecast covers, unless the snapshot says otherwise
// (Snapshot.ForecastReach); those beyond it get no range from it (Plan.Unreached).
const ForecastCap = 5000

// ForecastSamples is how many replays with drawn run times the likely start is the median of.
// Odd, so the median is one of them; three, five and eleven gave the Philly replay's error over
// the wait the same (fair-halt 0.40, las 0.29–0.31, fifo 0.23). Each costs a pass about as much as
// one scenario's replay (BenchmarkPlanSteadyForecast: 500 slaves, ~6,000 queued, ~20 ms each);
// with five, a FIFO replay of the trace, whose measured jobs wait at the end of a long queue,
// went from 11–16 s to 19–23 s.
const ForecastSamples = 3

// parallelReplay is the least number of waiting jobs for which the forecast's replays
// run at once, in goroutines: below it, starting them costs more than it saves.
const parallelReplay = 64

// scenarios of the replay.
const (
	scLate = iota
	scLikely
	scEarly
)

// fres is what is free on a slave: per GPU position, and counts.
type fres struct {
	gpuFree []bool
	nGPU    int // free GPUs of any model: a quick reject before matching models
	cpus    int
	mem     int
}

// fslave is a slave during a replay: what is free now, and what will be once every job that
// ends has ended (ever): a job that does not fit ever gets no start, and must not move the
// clock for the jobs behind it.
type fslave struct {
	st        *slaveState
	now, ever fres
	// freeAt is, per GPU position free in now, since when it has been free: a job may start
	// on free GPUs as early as the last of them came free (backfill), see replay.
	freeAt []time.Time
	// soonest is the earliest freeAt among the GPUs free in now: no set of them came free
	// before it, so a slave whose soonest is no earlier than the best start found is passed by.
	soonest time.Time
}

// refresh recomputes soonest after now or freeAt changed.
func (f *fslave) refresh() {
	f.soonest = time.Time{}
	for k, free := range f.now.gpuFree {
		if free && (f.soonest.IsZero() || f.freeAt[k].Before(f.soonest)) {
			f.soonest = f.freeAt[k]
		}
	}
}

// earliest picks the job's GPUs among those free now that came free first, and says from
// when they are all free; ok is false when the job does not fit now.
func (f *fslave) earliest(n *need, gpuK []int) ([]int, time.Time, bool) {
	gpuK, ok := f.now.fits(f.st, n, gpuK)
	if !ok || n.gpus == 0 {
		return gpuK, time.Time{}, ok
	}
	// fits took the first matching positions; swap in any matching free one that came free
	// earlier (slaves have a handful of GPUs: a simple exchange is enough).
	for k, free := range f.now.gpuFree {
		if !free || slices.Contains(gpuK, k) || !f.st.gpuOK(n, k) {
			continue
		}
		late := 0
		for m := range gpuK {
			if f.freeAt[gpuK[m]].After(f.freeAt[gpuK[late]]) {
				late = m
			}
		}
		if f.freeAt[k].Before(f.freeAt[gpuK[late]]) {
			gpuK[late] = k
		}
	}
	var from time.Time
	for _, k := range gpuK {
		from = maxTime(from, f.freeAt[k])
	}
	return gpuK, from, true
}

func (f *fres) take(k []int, cpus, mem int) {
	for _, k := range k {
		if f.gpuFree[k] {
			f.gpuFree[k] = false
			f.nGPU--
		}
	}
	f.cpus -= cpus
	f.mem -= mem
}

func (f *fres) give(k []int, cpus, mem int) {
	for _, k := range k {
		if !f.gpuFree[k] {
			f.gpuFree[k] = true
			f.nGPU++
		}
	}
	f.cpus += cpus
	f.mem += mem
}

// fits says whether the job fits on what is free, and which GPU positions it would take.
func (f *fres) fits(st *slaveState, n *need, gpuK []int) ([]int, bool) {
	gpuK = gpuK[:0]
	if f.nGPU < n.gpus || f.cpus < n.cpus || f.mem < n.memGb {
		return gpuK, false
	}
	if n.gpus == 0 {
		return gpuK, true
	}
	if st.s.CudaMajor < n.cuda {
		return gpuK, false
	}
	for k, free := range f.gpuFree {
		if free && st.gpuOK(n, k) {
			if gpuK = append(gpuK, k); len(gpuK) == n.gpus {
				return gpuK, true
			}
		}
	}
	return gpuK, false
}

// fend is the end of one job: what it gives back, and when.
type fend struct {
	at   time.Time
	sl   int
	gpuK []int
	cpus int
	mem  int
}

// fendHeap gives a replay's ends back in the order they come. The heap itself holds small keys
// without pointers (the end's time and its place in ends): sifting whole ends, each with a
// time's location and a slice, made every swap a copy of 72 bytes under the collector's write
// barriers. The heap was a third of the replays' CPU in the last minute of a 30-minute B8x soak
// (5,000 slaves, the multi-GPU jobs gathered in the queue, each popping many ends); with keys
// the forecast of BenchmarkForecastSoak's late queue is ~15 % cheaper, its ranges the same.
type fendHeap struct {
	keys []fendKey
	ends []fend // in the order they were added; keys point into it
}

// fendKey is an end's time as seconds and nanoseconds since 1970 (any time a maxDuration of up
// to 292 years gives: nanoseconds alone would overflow after 2262) and its index in ends.
type fendKey struct {
	sec  int64
	nsec int32
	i    int32
}

func keyOf(t time.Time, i int) fendKey {
	return fendKey{sec: t.Unix(), nsec: int32(t.Nanosecond()), i: int32(i)}
}

// before is time.Time's Before for the keys.
func (a fendKey) before(b fendKey) bool { return a.sec < b.sec || a.sec == b.sec && a.nsec < b.nsec }

func newFendHeap(n int) fendHeap {
	return fendHeap{keys: make([]fendKey, 0, n), ends: make([]fend, 0, n)}
}

// add adds e without restoring the heap's order: heap.Init does, once all are added.
func (h *fendHeap) add(e fend) {
	h.keys = append(h.keys, keyOf(e.at, len(h.ends)))
	h.ends = append(h.ends, e)
}

func (h *fendHeap) Len() int           { return len(h.keys) }
func (h *fendHeap) Less(i, j int) bool { return h.keys[i].before(h.keys[j]) }
func (h *fendHeap) Swap(i, j int)      { h.keys[i], h.keys[j] = h.keys[j], h.keys[i] }
func (h *fendHeap) Push(x any)         { h.add(x.(fend)) }
func (h *fendHeap) Pop() any {
	k := h.keys[len(h.keys)-1]
	h.keys = h.keys[:len(h.keys)-1]
	return h.ends[k.i]
}

// endsBy reports whether the next end comes at t or before.
func (h *fendHeap) endsBy(t time.Time) bool {
	return len(h.keys) > 0 && !keyOf(t, 0).before(h.keys[0])
}

// push and pop are heap.Push and heap.Pop (the same sift order, so the same ties) without
// boxing each end in an interface: a replay pops hundreds of ends per pass.
func (h *fendHeap) push(e fend) {
	h.add(e)
	hh := h.keys
	for j := len(hh) - 1; j > 0; {
		i := (j - 1) / 2
		if !hh[j].before(hh[i]) {
			break
		}
		hh[i], hh[j] = hh[j], hh[i]
		j = i
	}
}

func (h *fendHeap) pop() fend {
	hh := h.keys
	n := len(hh) - 1
	hh[0], hh[n] = hh[n], hh[0]
	for i := 0; ; {
		j := 2*i + 1
		if j >= n {
			break
		}
		if j2 := j + 1; j2 < n && hh[j2].before(hh[j]) {
			j = j2
		}
		if !hh[j].before(hh[i]) {
			break
		}
		hh[i], hh[j] = hh[j], hh[i]
		i = j
	}
	h.keys = hh[:n]
	return h.ends[hh[n].i]
}

// forecastJob is a waiting job to estimate, with its candidate slaves (in scope, able to take
// it by their totals, online and accepting) by index.
type forecastJob struct {
	j     *Job
	n     need
	cands []int
	in    slaveSet // cands as a set, shared by the jobs of a candKey
	r     RunRatio // its owner's ratio for its maxDuration
	u     [ForecastSamples]float64
}

// heldEnd is a job holding resources at the pass, running or assigned by it, for the replays to
// release: what it gives back is found once per pass, when only in each replay.
type heldEnd struct {
	fend                 // at is the replay's
	pl     *Placed       // nil: assigned by this pass
	maxDur time.Duration // of a job assigned by this pass
	r      RunRatio
	u      [ForecastSamples]float64
}

// draws are a job's points in [0, 1) for the drawn replays, the same at every pass: a job's
// likely start then moves only when what it waits for does. (Drawn afresh at each pass, the
// median of a few draws moved an hour-away start by many minutes between passes 5 s apart, and
// the master rewrote its estimate every time.) FNV-1a of the job's uuid and the draw's number,
// mixed by SplitMix64's finaliser so that near uuids give unrelated points.
func draws(uuid string) (u [ForecastSamples]float64) {
	for k := range u {
		h := fnv.New64a()
		_, _ = h.Write([]byte(uuid))
		_, _ = h.Write([]byte{byte(k)})
		x := h.Sum64()
		x ^= x >> 30
		x *= 0xbf58476d1ce4e5b9
		x ^= x >> 27
		x *= 0x94d049bb133111eb
		x ^= x >> 31
		u[k] = float64(x>>11) / (1 << 53)
	}
	return u
}

// assigned is a job the pass assigned, for the replay to release at its end.
type assignedJob struct {
	j  *Job
	a  *Assignment
	st *slaveState
}

// forecast replays the first reach waiting jobs (in queue order; reach 0: ForecastCap) and
// returns a range for each that finds a start, with at most workers replays at once (0: all),
// and the waiting jobs beyond its reach. The planner's state is only read.
func (p *planner) forecast(waiting []*Job, assigned []assignedJob, ratios RunRatios, workers, reach int) (map[string]Range, []string) {
	out := map[string]Range{}
	if len(waiting) == 0 || len(p.slaves) == 0 {
		return out, nil
	}
	if reach <= 0 {
		reach = ForecastCap
	}
	var unreached []string
	// Without a known end nothing is ever given back: no job that waits now gets a start.
	ends, leaving := false, false
	for _, st := range p.slaves {
		for _, pl := range st.held {
			leaving = leaving || pl.Halting || p.victims[pl.JobUUID]
			ends = ends || !pl.Ends.IsZero() || leaving
		}
	}
	for _, a := range assigned {
		ends = ends || a.j.Request.Scheduling.MaxDuration > 0
	}
	if !ends {
		return out, nil
	}
	index := make(map[*slaveState]int, len(p.slaves))
	for i, st := range p.slaves {
		index[st] = i
	}
	// Where distributions are learned, the likely start is the median of drawn replays.
	drawn := ForecastSamples > 0 && ratios.Global.known()
	jobs := make([]forecastJob, 0, min(len(waiting), reach))
	c := candidates{p: p, scopes: map[scopeKey][]int{}, matching: map[gpuKey][]int{}, cands: map[candKey]candSet{}}
	for i, j := range waiting {
		if len(jobs) == reach {
			unreached = make([]string, 0, len(waiting)-i)
			for _, j := range waiting[i:] {
				unreached = append(unreached, j.UUID)
			}
			break
		}
		fj := forecastJob{j: j, n: p.needOf(j), r: ratios.of(j.UserID, j.Request.Scheduling.MaxDuration.Std())}
		cs := c.of(j, &fj.n)
		if fj.cands, fj.in = cs.list, cs.set; len(fj.cands) > 0 {
			if drawn {
				fj.u = draws(j.UUID)
			}
			jobs = append(jobs, fj)
		}
	}
	held := p.heldEnds(assigned, index, ratios, drawn)
	var starts [3][]time.Time
	if !ratios.learned() && !leaving {
		// Nothing learned and no job on its way out (which may be gone at once, or only after
		// its halt grace): every job runs its maxDuration in all three.
		starts[scLate] = p.replay(scLate, -1, jobs, held)
		starts[scLikely], starts[scEarly] = starts[scLate], starts[scLate]
	} else {
		// Replays 0–2 are the scenarios; where distributions are learned, the likely one is
		// replaced by the drawn ones after them (replay 3+k takes each job's draw k: see draws).
		runs := 3
		if drawn {
			runs += ForecastSamples
		}
		out := make([][]time.Time, runs)
		one := func(k int) {
			switch {
			case k == scLikely && drawn:
			case k < 3:
				out[k] = p.replay(k, -1, jobs, held)
			default:
				out[k] = p.replay(scLikely, k-3, jobs, held)
			}
		}
		if workers <= 0 || workers > len(out) {
			workers = len(out)
		}
		if len(jobs) < parallelReplay || workers == 1 {
			for k := range out {
				one(k)
			}
		} else {
			// The replays only read the planner and the jobs (each has its own slaves and
			// heap): on a long queue they run side by side, workers at a time.
			next := make(chan int, len(out))
			for k := range out {
				next <- k
			}
			close(next)
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for k := range next {
						one(k)
					}
				})
			}
			wg.Wait()
		}
		copy(starts[:], out)
		if drawn {
			starts[scLikely] = medianStarts(out[3:], len(jobs))
		}
	}
	for i, fj := range jobs {
		late, likely, early := starts[scLate][i], starts[scLikely][i], starts[scEarly][i]
		if late.IsZero() {
			continue // no worst case follows from known ends: no honest range either
		}
		// List scheduling is not monotone in run times (a job ending early can let a later one
		// take a slave first), so the three are put in order rather than trusted to be.
		if likely.IsZero() || likely.After(late) {
			likely = late
		}
		if early.IsZero() || early.After(likely) {
			early = likely
		}
		out[fj.j.UUID] = Range{Early: early, Likely: likely, Late: late}
	}
	return out, unreached
}

// medianStarts is, per job, the median of the starts the drawn replays found (zero where none
// found one).
func medianStarts(runs [][]time.Time, n int) []time.Time {
	out := make([]time.Time, n)
	col := make([]time.Time, 0, len(runs))
	for i := range out {
		col = col[:0]
		for _, r := range runs {
			if !r[i].IsZero() {
				col = append(col, r[i])
			}
		}
		if len(col) > 0 {
			slices.SortFunc(col, time.Time.Compare)
			out[i] = col[(len(col)-1)/2]
		}
	}
	return out
}

// minRatio is the least a learned ratio is taken as (RunRatio.clean, and a drawn run time), so
// that a damaged statistic keeps every end after its start. What a waiting job is taken to run
// is floored by minRunTime besides, which is what bounds it in practice (1e-6 of two weeks is
// 1.2 s).
const minRatio = 1e-6

// minRunTime is the least time a waiting job is taken to run in a replay (or its maxDuration,
// when shorter): the least maxDuration a job may ask for (SPEC 3). Until 30 Nov the floor was
// 1 % of the maxDuration: a job asking for the default two weeks was taken to run at least 3.4
// hours, fifteen times what B8x's jobs run (13 minutes on average, 0.07 %).
const minRunTime = time.Minute

// duration is how long a job of that user with that maxDuration is taken to run in a scenario
// (in drawn replay number draw, from the job's draws u; draw < 0: no draw), at least
// minRunTime; 0 means it never ends.
func duration(sc, draw int, u *[ForecastSamples]float64, maxDur time.Duration, r RunRatio) time.Duration {
	if maxDur <= 0 {
		return 0
	}
	ratio, drawn := 1.0, false
	if draw >= 0 {
		var x float64
		if x, drawn = r.QuantileGiven(-1, u[draw]); drawn {
			ratio = max(x, minRatio)
		}
	}
	switch {
	case drawn:
	case sc == scLikely:
		ratio = r.Mid
	case sc == scEarly:
		ratio = r.Low
	}
	return max(time.Duration(float64(maxDur)*ratio), min(minRunTime, maxDur))
}

// runningEnd is when a running job ends in a scenario (zero: never; in drawn replay number
// draw ≥ 0, from the job's draws). Where the distribution is learned, the job ends as those like it that ran at least as
// long did (RunRatio.MeanGiven, QuantileGiven); otherwise, or when it has run longer than any of
// them, a job already past its expected share of maxDuration is expected to run that share of
// what remains.
func (p *planner) runningEnd(sc, draw int, h *heldEnd) time.Time {
	pl, r := h.pl, h.r
	if pl.Halting || p.victims[pl.JobUUID] {
		// On its way out (halted this pass or before): gone at once at the earliest, after
		// the halt grace at the latest and, as a halted job uses its grace to checkpoint, most
		// likely too. Taken as gone now, a starter waiting for its victims was told it would
		// start at this very pass (late = now) and started after its range, every time.
		if sc == scEarly {
			return p.now
		}
		return p.now.Add(p.haltGrace)
	}
	if pl.Ends.IsZero() {
		return time.Time{}
	}
	if sc == scLate {
		return maxTime(pl.Ends, p.now)
	}
	from := pl.Started
	if from.IsZero() || from.After(p.now) {
		from = p.now
	}
	maxDur := pl.Ends.Sub(from)
	if maxDur > 0 && sc == scLikely {
		f := float64(p.now.Sub(from)) / float64(maxDur)
		var x float64
		var ok bool
		if draw >= 0 {
			x, ok = r.QuantileGiven(f, h.u[draw])
		} else {
			x, ok = r.MeanGiven(f)
		}
		if ok {
			return maxTime(from.Add(time.Duration(float64(maxDur)*x)), p.now)
		}
	}
	ratio := r.Mid
	if sc == scEarly {
		ratio = r.Low
	}
	end := from.Add(time.Duration(float64(pl.Ends.Sub(from)) * ratio))
	if end.Before(p.now) {
		end = p.now.Add(time.Duration(float64(pl.Ends.Sub(p.now)) * ratio))
	}
	return maxTime(end, p.now)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// heldEnds lists what the running jobs and those assigned by this pass hold, with their
// owners' ratios: the same for every replay of the pass.
func (p *planner) heldEnds(assigned []assignedJob, index map[*slaveState]int, ratios RunRatios, drawn bool) []heldEnd {
	n, nK := len(assigned), 0
	for _, st := range p.slaves {
		n += len(st.held)
		for _, pl := range st.held {
			nK += len(pl.GPUIndices)
		}
	}
	out, kBuf := make([]heldEnd, 0, n), make([]int, 0, nK)
	for i, st := range p.slaves {
		for _, pl := range st.held {
			h := heldEnd{fend: fend{sl: i, mem: pl.MemoryGb}, pl: pl}
			from := len(kBuf)
			for _, idx := range pl.GPUIndices {
				if k := st.gpuPos(idx); k >= 0 {
					kBuf = append(kBuf, k)
				}
			}
			h.gpuK = kBuf[from:len(kBuf):len(kBuf)]
			for _, id := range pl.CPUIDs {
				if id >= 0 && id < len(st.cpuFree) {
					h.cpus++
				}
			}
			if !pl.Ends.IsZero() {
				started := pl.Started
				if started.IsZero() || started.After(p.now) {
					started = p.now
				}
				h.r = ratios.of(pl.UserID, pl.Ends.Sub(started))
				if drawn {
					h.u = draws(pl.JobUUID)
				}
			}
			out = append(out, h)
		}
	}
	for _, a := range assigned {
		h := heldEnd{fend: fend{sl: index[a.st], cpus: len(a.a.CPUIDs), mem: a.a.MemoryGb}, maxDur: a.j.Request.Scheduling.MaxDuration.Std()}
		for _, g := range a.a.GPUs {
			if k := a.st.gpuPos(g.Index); k >= 0 {
				h.gpuK = append(h.gpuK, k)
			}
		}
		h.r = ratios.of(a.j.UserID, h.maxDur)
		if drawn {
			h.u = draws(a.j.UUID)
		}
		out = append(out, h)
	}
	return out
}

// replay runs one scenario and returns each job's start (zero: none found). With draw ≥ 0, run
// times are drawn from the learned distributions (drawn likely replay number draw).
func (p *planner) replay(sc, draw int, jobs []forecastJob, held []heldEnd) []time.Time {
	// The free lists of all slaves share one array.
	nGPU := 0
	for _, st := range p.slaves {
		nGPU += len(st.gpuFree)
	}
	freeBuf := make([]bool, 2*nGPU)
	sl := make([]fslave, len(p.slaves))
	for i, st := range p.slaves {
		g := len(st.gpuFree)
		now, ever := freeBuf[:g:g], freeBuf[g:2*g:2*g]
		freeBuf = freeBuf[2*g:]
		copy(now, st.gpuFree)
		copy(ever, st.gpuFree)
		f := fres{gpuFree: now, nGPU: st.nFree, cpus: st.cpus(true), mem: st.s.MemoryGb - st.memUsed}
		sl[i] = fslave{st: st, now: f, freeAt: make([]time.Time, g), soonest: p.now}
		sl[i].ever = fres{gpuFree: ever, nGPU: f.nGPU, cpus: f.cpus, mem: f.mem}
		for k := range sl[i].freeAt {
			sl[i].freeAt[k] = p.now
		}
	}
	ends := newFendHeap(len(held) + len(jobs))
	for k := range held {
		h := &held[k]
		e := h.fend
		if h.pl != nil {
			e.at = p.runningEnd(sc, draw, h)
		} else if d := duration(sc, draw, &h.u, h.maxDur, h.r); d > 0 {
			e.at = p.now.Add(d)
		}
		if !e.at.IsZero() {
			sl[e.sl].ever.give(e.gpuK, e.cpus, e.mem)
			ends.add(e)
		}
	}
	heap.Init(&ends)

	out := make([]time.Time, len(jobs))
	clock := p.now
	var gpuK, bestK, touched []int
	// Backfill: a job that fits on GPUs free now may start when the last of them came free,
	// before the clock, rather than only once the jobs ahead of it have started (list
	// scheduling, which made small jobs behind big ones wait far too long); floor keeps it from
	// starting before a job ahead of it needing no more GPUs, so the queue order still holds
	// among alike jobs. A job needing no GPUs is not backfilled (CPUs and memory carry no time).
	var floor []time.Time // by GPUs needed
	// withFree[g] holds the slaves with at least g GPUs free now: a job needing g GPUs looks
	// only at those of its candidates (a full cluster's long queue spent most of each replay
	// passing by the candidates with no room, 2,000 a job at B8x's size).
	maxGPUs := 0
	for i := range sl {
		maxGPUs = max(maxGPUs, len(sl[i].now.gpuFree))
	}
	withFree := make([]slaveSet, maxGPUs+1)
	for g := range withFree {
		withFree[g] = newSlaveSet(len(sl))
	}
	for i := range sl {
		for g := 1; g <= sl[i].now.nGPU; g++ {
			withFree[g].add(i)
		}
	}
	// bounds[g], for each GPU count g a job asks, orders the slaves by when g of their GPUs have
	// been free (fromTree), for the jobs that may go to most slaves; a job of a few candidates
	// looks at those with room among them.
	bounds := make([]*fromTree, len(withFree))
	for i := range jobs {
		if g := jobs[i].n.gpus; g > 0 && g < len(bounds) && bounds[g] == nil && replayTrees {
			bounds[g] = newFromTree(len(sl))
		}
	}
	var since []int64
	bound := func(c int) {
		since = since[:0]
		for k, free := range sl[c].now.gpuFree {
			if free {
				since = append(since, sl[c].freeAt[k].UnixNano())
			}
		}
		slices.Sort(since)
		for g, t := range bounds {
			if t != nil {
				x := int64(never)
				if g <= len(since) {
					x = since[g-1]
				}
				t.set(c, x)
			}
		}
	}
	for i := range sl {
		bound(i)
	}
	var walk []treeNode
	change := func(c int, do func(f *fres)) {
		was := sl[c].now.nGPU
		do(&sl[c].now)
		for g := was + 1; g <= sl[c].now.nGPU; g++ {
			withFree[g].add(c)
		}
		for g := sl[c].now.nGPU + 1; g <= was; g++ {
			withFree[g].remove(c)
		}
	}
	release := func(e fend) {
		change(e.sl, func(f *fres) { f.give(e.gpuK, e.cpus, e.mem) })
		for _, k := range e.gpuK {
			sl[e.sl].freeAt[k] = e.at
		}
		sl[e.sl].refresh()
		bound(e.sl)
	}
	for i := range jobs {
		fj := &jobs[i]
		for ends.endsBy(clock) { // ended by now: free, since then
			release(ends.pop())
		}
		g := fj.n.gpus
		for len(floor) <= g { // floor is non-decreasing in the GPUs needed
			last := p.now
			if len(floor) > 0 {
				last = floor[len(floor)-1]
			}
			floor = append(floor, last)
		}
		least := maxTime(p.now, floor[g])
		at, ever := -1, false
		var from time.Time
		// look weighs one candidate with room now: the first that fits, and among GPUs the
		// one whose GPUs came free first (on a tie the lower index, as a scan by index finds);
		// done once none can start earlier.
		look := func(c int) (done bool) {
			if g > 0 && at >= 0 && (sl[c].soonest.After(from) || sl[c].soonest.Equal(from) && c > at) {
				return false // cannot start before the best found
			}
			var ok bool
			var f time.Time
			if gpuK, f, ok = sl[c].earliest(&fj.n, gpuK); ok && (at < 0 || g > 0 && (f.Before(from) || f.Equal(from) && c < at)) {
				at, from, ever = c, f, true
				bestK = append(bestK[:0], gpuK...)
			}
			return at >= 0 && (g == 0 || !from.After(least))
		}
		switch {
		case g == 0:
			for _, c := range fj.cands {
				if look(c) {
					break
				}
			}
		case g >= len(withFree):
		case bounds[g] != nil && 2*len(fj.cands) >= len(sl):
			// The job's start on a slave is the later of least and when its GPUs came free:
			// the best is the first slave, by index, where it may start at least, else the one
			// where it starts soonest (the scan's choice, without visiting every slave).
			t, x := bounds[g], least.UnixNano()
			for c := t.first(0, x); c >= 0; c = t.first(c+1, x) {
				if fj.in.has(c) && look(c) {
					break
				}
			}
			if at < 0 || from.After(least) {
				walk = t.best(walk, func(c int) (int64, int, bool) {
					if fj.in.has(c) {
						look(c)
					}
					return from.UnixNano(), at, at >= 0
				})
			}
		default:
			fj.in.eachIn(withFree[g], look)
		}
		if at < 0 {
			// None fits now: only whether one ever will.
			for _, c := range fj.cands {
				if _, ever = sl[c].ever.fits(sl[c].st, &fj.n, nil); ever {
					break
				}
			}
		}
		if at >= 0 {
			gpuK = append(gpuK[:0], bestK...)
		}
		if !ever {
			continue // nothing that ends makes room: unknown, and the clock stays
		}
		for at < 0 && ends.Len() > 0 {
			e := ends.pop()
			release(e)
			clock = maxTime(clock, e.at)
			from = clock
			touched = append(touched[:0], e.sl)
			// Whatever ends at the same moment is given back too before anyone takes it.
			for ends.endsBy(clock) {
				e2 := ends.pop()
				release(e2)
				touched = append(touched, e2.sl)
			}
			for _, c := range touched {
				if !fj.in.has(c) {
					continue
				}
				var ok bool
				if gpuK, ok = sl[c].now.fits(sl[c].st, &fj.n, gpuK); ok {
					at = c
					break
				}
			}
		}
		if at < 0 {
			continue
		}
		start := clock
		if g > 0 {
			start = maxTime(from, least)
		}
		if nb := fj.j.Request.Scheduling.NotBefore; nb != nil && nb.After(start) {
			start = *nb
		}
		out[i] = start
		for k := g; k < len(floor); k++ {
			floor[k] = maxTime(floor[k], start)
		}
		e := fend{sl: at, gpuK: slices.Clone(gpuK), cpus: fj.n.cpus, mem: fj.n.memGb}
		change(at, func(f *fres) { f.take(e.gpuK, e.cpus, e.mem) })
		sl[at].refresh()
		bound(at)
		if d := duration(sc, draw, &fj.u, fj.j.Request.Scheduling.MaxDuration.Std(), fj.r); d > 0 {
			e.at = start.Add(d)
			ends.push(e)
		} else {
			sl[at].ever.take(e.gpuK, e.cpus, e.mem)
		}
	}
	return out
}

// candidates finds the slaves that could ever take a job, by slave index, sharing the work
// between jobs: a queue holds many jobs of the same scope and the same few GPU requests, and
// filtering every slave for every job was most of the forecast.
type candidates struct {
	p        *planner
	scopes   map[scopeKey][]int // online, accepting slaves in scope
	matching map[gpuKey][]int   // per slave: GPUs matching model, memory and CUDA
	cands    map[candKey]candSet
}

// candSet is the slaves that could ever take a job, as a list and as a set.
type candSet struct {
	list []int
	set  slaveSet
}

// scopeKey is what inScope looks at.
type scopeKey struct {
	cluster     int
	slave, inst string
	project     int64
	guest       int // how many private clusters' guest limits the minDuration exceeds
}

type gpuKey struct {
	models string
	memMiB int64
	cuda   int
}

type candKey struct {
	scopeKey
	gpuKey
	gpus, cpus, mem int
}

// candKeyOf is what decides which slaves could ever take a job: its scope and request. The scope
// depends on the project only where it owns a private cluster, and on the minDuration only
// through which guest limits it stays within: keyed so, jobs share scopes.
func (p *planner) candKeyOf(j *Job, n *need) candKey {
	if !p.scopeKeyed {
		p.scopeKeyed = true
		for _, cl := range p.clusters {
			if cl.Private {
				p.scopeLimits = append(p.scopeLimits, cl.guestLimit())
				if p.scopeOwners == nil {
					p.scopeOwners = map[int64]bool{}
				}
				for _, pr := range cl.Projects {
					p.scopeOwners[pr] = true
				}
			}
		}
		slices.Sort(p.scopeLimits)
	}
	res := j.Request.Resources
	sk := scopeKey{cluster: res.ClusterID, slave: res.SlaveName, inst: res.SlaveInstanceID}
	if len(p.scopeLimits) > 0 {
		if p.scopeOwners[j.ProjectID] {
			sk.project = j.ProjectID
		}
		// The limits are sorted: the number exceeded names the set exceeded.
		d := j.Request.Scheduling.MinDuration.Std()
		for _, l := range p.scopeLimits {
			if d > l {
				sk.guest++
			}
		}
	}
	gk := gpuKey{cuda: n.cuda, memMiB: n.gpuMemMiB}
	switch len(n.models) {
	case 0:
	case 1:
		gk.models = n.models[0]
	default:
		gk.models = strings.Join(n.models, "\x00")
	}
	return candKey{sk, gk, n.gpus, n.cpus, n.memGb}
}

// capableSet is a cached answer of decide's first filters: the slaves able to take a job by
// their totals, and whether the job pins the one slave in its scope.
type capableSet struct {
	slaves []*slaveState
	pinned bool
}

// capableKey is the key under which decide caches a job's capable slaves; ok is false for a job
// using a reservation, whose scope is the reservation's slaves.
func (p *planner) capableKey(j *Job, n *need, booked []*booking) (candKey, bool) {
	if booked != nil {
		return candKey{}, false
	}
	return p.candKeyOf(j, n), true
}

func (c *candidates) of(j *Job, n *need) candSet {
	ck := c.p.candKeyOf(j, n)
	sk, gk := ck.scopeKey, ck.gpuKey
	if out, ok := c.cands[ck]; ok {
		return out
	}
	scope, ok := c.scopes[sk]
	if !ok {
		for i, st := range c.p.slaves {
			if st.s.Online && st.s.Accepting && c.p.inScope(j, st) {
				scope = append(scope, i)
			}
		}
		c.scopes[sk] = scope
	}
	match, ok := c.matching[gk]
	if !ok {
		match = make([]int, len(c.p.slaves))
		for i, st := range c.p.slaves {
			if st.s.CudaMajor >= n.cuda {
				match[i] = st.matchingGPUs(n, false)
			} else {
				match[i] = -1
			}
		}
		c.matching[gk] = match
	}
	out := candSet{list: make([]int, 0, len(scope)), set: newSlaveSet(len(c.p.slaves))}
	for _, i := range scope {
		st := c.p.slaves[i]
		if match[i] >= n.gpus && st.cpus(false) >= n.cpus && st.memory(false) >= n.memGb {
			out.list = append(out.list, i)
			out.set.add(i)
		}
	}
	c.cands[ck] = out
	return out
}
