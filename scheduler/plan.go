// Package scheduler decides where queued jobs run (SPEC section 7). The decision is a pure
// function, Snapshot.Plan, from what the database holds to what should change; the loop that
// takes snapshots and applies plans in one transaction is the only part that touches the store.
// Keeping the decision pure lets it be table-tested, and lets the simulator replay workload
// traces through the very same function in simulated time.
//
// Planning follows Nomad's shape: for each queued job, feasibility filters drop the slaves that
// cannot take it, and a ranking picks the best of the rest. See README.md.
package scheduler

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/opengpulab/gpulab/protocol"
)

// Plan is what one planning pass decided; the loop applies all of it in one transaction, each
// state write conditional on the job still being QUEUED.
type Plan struct {
	// Assignments move jobs to ASSIGNED on a slave, in queue order.
	Assignments []Assignment
	// Failures move queued jobs to FAILED, with the reason shown to the user, in queue order.
	Failures []Failure
	// Explanations say, for every queued job neither assigned nor failed, why it waits (1 to 3
	// short lines, the concrete blocker first); they become the job's queuedExplanations.
	Explanations map[string][]string
	// Estimates are the expected start times of waiting jobs, by uuid, only where one follows
	// from running jobs' Ends (see backfill.go); the explanation says the same in words.
	Estimates map[string]time.Time
	// Ranges are every waiting job's estimated start with its range (forecast.go), by uuid,
	// where a start follows from running jobs' maxDurations; jobs naming reservations have none
	// (their Estimates entry, the reservation's start, says when they may run).
	Ranges map[string]Range
	// Unreached are the waiting jobs beyond the forecast's reach (Snapshot.ForecastReach), in
	// queue order: they have no range for want of a replay, not of a start, so a forecast that
	// did not reach them says nothing of them (the leader keeps what a farther one wrote).
	Unreached []string
	// Halts ask running jobs to stop so that a queued job of higher priority can take their
	// place (SPEC 7.4, halt.go); the loop moves them to MUSTHALT and records a haltEvent each.
	// Nil when none.
	Halts []Halt
	// Skipped are the jobs a narrowed plan (Snapshot.Sweep) left out, in queue order: not
	// decided at all. HaltAfterCut says a halt was asked for a job after the first of them,
	// which the full plan might have given to a job left out.
	Skipped      []string
	HaltAfterCut bool
	// FitWaiting counts the jobs a narrowed plan decided because they could start by counts
	// at their turn, and left waiting all the same (a GPU model, CUDA, a cap, the backfill
	// head's guard): each such job leaves the room it was judged by free for the next, so many
	// of them make a narrowed plan large. The leader logs it with the pass's phases.
	FitWaiting int
}

// Assignment places one job on one slave with the exact GPUs and CPU ids it gets, so that the
// slave needs no decision of its own and two jobs never share a device.
type Assignment struct {
	JobUUID         string
	SlaveName       string
	SlaveInstanceID string // the instance planned for: a restarted slave must not inherit it blindly
	ClusterID       int
	GPUs            []protocol.GPU // lowest free matching indices, sorted by Index; empty, not nil, when none
	CPUIDs          []int          // lowest free ids, ascending
	MemoryGb        int            // cpuMemoryGb plus tmpfs (job.Request.TotalMemoryGb)
}

// Failure ends a queued job that can never run, or must not run any more, with a reason the user
// reads in the job's events.
type Failure struct {
	JobUUID string
	Reason  string
}

// Plan decides, for every queued job of the snapshot, whether it is assigned, failed or left
// waiting with an explanation. It is pure: it reads only s (never the wall clock), does not
// modify s, and gives the same plan for the same snapshot. It is a method because the type it
// returns is called Plan; scheduler.Snapshot.Plan is the func(Snapshot) Plan the simulator
// can take.
func (s Snapshot) Plan() Plan {
	p := newPlanner(s)
	defer p.release()
	// The explanations' map sized for the jobs the plan will decide (every queued one, or about
	// the sweep's and the named ones when narrowed): grown from empty, its rehashing was half of
	// filling it (0.27 of 0.73 s of the master's CPU a minute at 2,000 slaves, bench/ B8x).
	explained := len(s.Queued)
	if s.Sweep > 0 {
		explained = min(explained, s.Sweep+len(s.Decide))
	}
	out := Plan{Explanations: make(map[string][]string, explained), Estimates: map[string]time.Time{}}
	var waiting []*Job
	var assigned []assignedJob
	swept := 0
	var named map[*Job]bool
	if s.Sweep > 0 {
		// Sized once: on a long queue most jobs are left out, and grown from empty the list was
		// reallocated a dozen times a pass (7 % of what B8x's master allocated, 3 Dec).
		out.Skipped = make([]string, 0, max(0, len(s.Queued)-s.Sweep))
	}
	if s.Sweep > 0 && len(s.Decide) > 0 {
		named = make(map[*Job]bool, len(s.Decide))
		for _, i := range s.Decide {
			if i >= 0 && i < len(s.Queued) {
				named[&s.Queued[i]] = true // the addresses queueOrder gives
			}
		}
	}
	p.bufs.order = queueOrder(s, p.bufs.order)
	for _, j := range p.bufs.order {
		fits := false
		if s.Sweep > 0 && !p.mustDecide(j, named) {
			if fits = p.mayStart(j); !fits {
				if swept >= s.Sweep {
					out.Skipped = append(out.Skipped, j.UUID)
					continue
				}
				swept++
			}
		}
		halts := len(p.halts)
		d := p.decide(j)
		if len(out.Skipped) > 0 && len(p.halts) > halts {
			out.HaltAfterCut = true
		}
		switch {
		case d.assign != nil:
			out.Assignments = append(out.Assignments, *d.assign)
			if s.OnAssign != nil {
				s.OnAssign(*d.assign)
			}
			assigned = append(assigned, assignedJob{j: j, a: d.assign, st: d.on})
		case d.fail != "":
			out.Failures = append(out.Failures, Failure{JobUUID: j.UUID, Reason: d.fail})
		default:
			if fits {
				out.FitWaiting++
			}
			out.Explanations[j.UUID] = d.wait
			if !d.estimate.IsZero() {
				out.Estimates[j.UUID] = d.estimate
			}
			if len(j.Request.Scheduling.ReservationIDs) == 0 {
				waiting = append(waiting, j)
			}
		}
	}
	out.Halts = p.halts
	if !s.NoRanges && s.leavesWaiting(s.RangesFor, out.Explanations) {
		if len(s.Waiting) > 0 {
			waiting = withWaiting(s, waiting)
		}
		if s.RangesFor != nil {
			waiting = upToLast(waiting, s.RangesFor)
		}
		out.Ranges, out.Unreached = p.forecast(waiting, assigned, s.Ratios, s.ForecastWorkers, s.ForecastReach)
		if s.Policy == "" || s.Policy == PolicyFair {
			p.overtake(out.Ranges, waiting, s)
		}
	}
	return out
}

// mustDecide says whether a narrowed plan decides j whatever its counts: named (Snapshot.Decide,
// by address), interactive (one that cannot start fails, unless a halt makes room), or past its
// notAfter (it fails).
func (p *planner) mustDecide(j *Job, named map[*Job]bool) bool {
	sch := j.Request.Scheduling
	return named[j] || sch.Interactive || sch.NotAfter != nil && p.now.After(*sch.NotAfter)
}

// fitKey is what mayStart's answer depends on besides the slaves' free counts: the job's
// shape, and whether the backfill head's room is kept off for it (which head).
type fitKey struct {
	gpus, cpus, memGb, cluster int
	guard                      bool
	head                       *reservation
}

// mayStart says whether j could start now by counts alone: some online, accepting slave of
// its cluster (any, when it names none) has as many free GPUs (of any model), CPUs and GB as
// it asks for, the backfill head's room kept off when the job must keep off it (guarded, as
// decide counts it): necessary for an assignment (slaveState.mayFit), and cheap. Without the
// guard, once the room left was the head's, every later job of the queue fit by counts, and
// was decided only to be held back (B8x from minute 24: 13,500 of them a pass, planned at
// every pass for minutes). Answers are kept per shape: free resources only shrink within a
// pass (the head's room too), so a slave that had too little for a shape still has, and the
// next look at that shape starts at the slave that last had room.
func (p *planner) mayStart(j *Job) bool {
	res := j.Request.Resources
	n := need{gpus: max(0, res.GPUs), cpus: max(0, res.CPUs), memGb: j.Request.TotalMemoryGb()}
	k := fitKey{gpus: n.gpus, cpus: n.cpus, memGb: n.memGb, cluster: res.ClusterID, guard: p.guarded(j), head: p.reserved}
	if p.fitAt == nil {
		p.fitAt = map[fitKey]int{}
	}
	at, known := p.fitAt[k]
	if known && at < 0 {
		return false
	}
	for i := max(at, 0); i < len(p.slaves); i++ {
		st := p.slaves[i]
		if k.cluster != 0 && st.s.ClusterID != k.cluster {
			continue
		}
		fits := false
		if k.guard && st == p.reserved.st {
			p.reserved.mask()
			fits = st.mayFit(&n)
			p.reserved.unmask()
		} else {
			fits = st.mayFit(&n)
		}
		if fits {
			p.fitAt[k] = i
			return true
		}
	}
	p.fitAt[k] = -1
	return false
}

// upToLast cuts the queue after the last of the jobs asked about: the forecast replays the
// queue in order, and a job's start depends only on the jobs ahead of it, so those behind the
// last one asked about need no replay (a simulator measuring the jobs just submitted, ranked
// high under the fair order, replays a fraction of the queue).
func upToLast(waiting []*Job, jobs []string) []*Job {
	want := make(map[string]bool, len(jobs))
	for _, u := range jobs {
		want[u] = true
	}
	last := -1
	for i, j := range waiting {
		if want[j.UUID] {
			last = i
		}
	}
	return waiting[:last+1]
}

// leavesWaiting says whether the pass leaves one of jobs waiting: explained (the pass decided
// to keep it queued) or one of s.Waiting. Nil jobs: always true, any waiting job will do.
func (s *Snapshot) leavesWaiting(jobs []string, explained map[string][]string) bool {
	if jobs == nil {
		return true
	}
	for _, u := range jobs {
		if _, ok := explained[u]; ok {
			return true
		}
	}
	for i := range s.Waiting {
		if slices.Contains(jobs, s.Waiting[i].UUID) {
			return true
		}
	}
	return false
}

// Policy names a queue order.
type Policy string

// The queue orders. PolicyFair is GPULab's (SPEC 7.2); the others exist to compare against it
// in the simulator.
const (
	// PolicyFair: interactive first, then jobs naming an active reservation their owner holds,
	// then FairRank (the owner's usage tally weighted by the job's maxDuration, lowest first),
	// then shorter maxDuration, then older submission.
	PolicyFair Policy = "fair"
	// PolicyFIFO: older submission first.
	PolicyFIFO Policy = "fifo"
	// PolicySJFOracle: shortest real run time first (Job.OracleDuration, known only to the
	// simulator): the unreachable ideal that the fair policy is measured against.
	PolicySJFOracle Policy = "sjf-oracle"
	// PolicyLAS: least attained service first, in coarse levels, with halting (las.go); it
	// needs no run-time knowledge. The simulator compares it; the master does not track
	// Attained, so ParsePolicy does not offer it.
	PolicyLAS Policy = "las"
)

// ParsePolicy reads a policy name.
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(s); p {
	case PolicyFair, PolicyFIFO, PolicySJFOracle:
		return p, nil
	}
	return "", fmt.Errorf("unknown policy %q (fair, fifo or sjf-oracle)", s)
}

// FairRank is a job's place in the fair order (lower first): its owner's usage tally (SPEC 7.2,
// GPU-hours for a GPU job at the default weights) plus one, times its maxDuration in hours
// (14 days when unset). This is Smith's rule, weighted shortest processing time, with weights
// inverse to usage: a light user's job goes before a heavy user's of the same length, and a
// heavy user's one-hour job before a lighter user's week-long one unless the heavy user has
// used over 168 times as much. Ordering by tally alone made the heavy users' short jobs wait for
// days behind others' long ones: in the Philly replay, the fair order's Jain index over users'
// slowdowns rose from 0.46 to 0.66 and fair with halting from 0.68 to 0.94 with this rank,
// at a lower average JCT (see the README's scheduling section).
func FairRank(tally float64, maxDur time.Duration) float64 {
	if maxDur <= 0 {
		maxDur = 14 * 24 * time.Hour
	}
	return (max(0, tally) + 1) * maxDur.Hours()
}

// queueOrder is the order in which jobs get their turn under the snapshot's policy; ties end
// in submission time, then uuid, so equal jobs stay deterministic.
// The order is written in dst's array when it is large enough (nil: a new one).
func queueOrder(s Snapshot, dst []*Job) []*Job {
	out := sized(dst, len(s.Queued))
	for i := range s.Queued {
		out[i] = &s.Queued[i]
	}
	sortQueue(s, out)
	return out
}

// withWaiting adds the snapshot's Waiting jobs (those naming no reservation, as for the decided
// ones) to the waiting jobs of the pass, all in queue order, for the forecast.
func withWaiting(s Snapshot, waiting []*Job) []*Job {
	out := slices.Clone(waiting)
	for i := range s.Waiting {
		if j := &s.Waiting[i]; len(j.Request.Scheduling.ReservationIDs) == 0 {
			out = append(out, j)
		}
	}
	sortQueue(s, out)
	return out
}

// sortQueue puts jobs in the policy's queue order.
func sortQueue(s Snapshot, out []*Job) {
	b := sortPool.Get().(*sortBufs)
	defer b.release()
	b.keys = sized(b.keys, len(out))
	keys := b.keys
	for i, j := range out {
		keys[i] = s.QueueKey(j)
	}
	if inSubmissionOrder(out) && sortByPlaces(keys, out, b) {
		return
	}
	// Compare is a total order (it ends in the uuid), so an unstable sort gives the stable
	// one's order, at half its cost (a stable sort of 24,000 keys was a third of a narrowed
	// plan at B8x's size).
	slices.SortFunc(keys, QueueKey.Compare)
	for i := range keys {
		out[i] = keys[i].Job
	}
}

// sortByPlaces puts in out the jobs of keys, given in submission order, in the queue order: by
// the policy's part of their keys, then by their places in keys, which stand for their
// submission. The keys' policy parts are few (under the fair order, one a user, maxDuration and
// group), so they are sorted alone, and each job sorted as one integer, its policy part's rank
// above its place. Sorted by Compare, with most comparisons ties up to the submission time (one
// user's jobs of one maxDuration share a rank) and each a call reading the times from two of
// thousands of jobs of several hundred bytes, the sort was 30 % of a narrowed plan's CPU in
// B8x (~25,000 jobs, ~12 ms a pass; 3 Dec). False, out untouched, when there are too many jobs
// for the integers. Its arrays are b's (sortQueue's, reused from sort to sort).
func sortByPlaces(keys []QueueKey, out []*Job, b *sortBufs) bool {
	if uint64(len(keys)) >= 1<<32 {
		return false
	}
	type policy struct {
		group int
		rank  float64
		dur   time.Duration
	}
	index := map[policy]uint32{}
	var parts []QueueKey // the distinct policy parts, in the order first met
	b.part = sized(b.part, len(keys))
	part := b.part
	for i, k := range keys {
		p := policy{k.group, k.rank, k.dur}
		d, ok := index[p]
		if !ok {
			d = uint32(len(parts))
			index[p], parts = d, append(parts, k)
		}
		part[i] = d
	}
	byPolicy := make([]uint32, len(parts))
	for i := range byPolicy {
		byPolicy[i] = uint32(i)
	}
	slices.SortFunc(byPolicy, func(a, b uint32) int { return parts[a].comparePolicy(parts[b]) })
	// Parts that compare equal share a rank (NaN ranks, each a key of its own in the map).
	rank := make([]uint64, len(parts))
	for i := 1; i < len(byPolicy); i++ {
		prev, d := byPolicy[i-1], byPolicy[i]
		rank[d] = rank[prev]
		if parts[prev].comparePolicy(parts[d]) != 0 {
			rank[d]++
		}
	}
	b.sorted = sized(b.sorted, len(keys))
	sorted := b.sorted
	for i := range keys {
		sorted[i] = rank[part[i]]<<32 | uint64(i)
	}
	slices.Sort(sorted)
	for i, x := range sorted {
		out[i] = keys[uint32(x)].Job
	}
	return true
}

// sortBufs are sortQueue's arrays, kept for the next sort: a pass sorts the whole queue, and
// made anew each time they were 5 % of what B8x's master allocated (25,000 queued, 3 Dec).
type sortBufs struct {
	keys   []QueueKey
	part   []uint32
	sorted []uint64
}

var sortPool = sync.Pool{New: func() any { return new(sortBufs) }}

// release hands the arrays back, keeping no job alive through the keys.
func (b *sortBufs) release() {
	clear(b.keys)
	sortPool.Put(b)
}

// inSubmissionOrder reports whether jobs are in the order in which the leader keeps its queue:
// by submission, then uuid, with no job twice.
func inSubmissionOrder(jobs []*Job) bool {
	for i := 1; i < len(jobs); i++ {
		if compareSubmission(jobs[i-1], jobs[i]) >= 0 {
			return false
		}
	}
	return true
}

// compareSubmission orders jobs by submission, then uuid.
func compareSubmission(a, b *Job) int {
	if c := a.Submitted.Compare(b.Submitted); c != 0 {
		return c
	}
	return cmp.Compare(a.UUID, b.UUID)
}

// QueueKey is a job's place in the snapshot's queue order, computed once: a comparison of the
// fair order reads two tallies from a map and weighs two ranks, and a sort makes n·log n of them
// (the simulator sorts at every event). The simulator's trim orders its queue with it too, so
// that its order is Plan's.
type QueueKey struct {
	Job   *Job
	group int           // lower first: interactive jobs, then (fair) those holding an active reservation
	rank  float64       // FairRank (fair), attained-service level (las)
	dur   time.Duration // maxDuration (fair), the real run time (sjf-oracle)
}

// QueueKey is j's key under the snapshot's policy, tallies and reservations.
func (s *Snapshot) QueueKey(j *Job) QueueKey {
	k := QueueKey{Job: j}
	inter := j.Request.Scheduling.Interactive
	switch s.Policy {
	case PolicyFIFO:
	case PolicySJFOracle:
		k.dur = j.OracleDuration
	case PolicyLAS:
		if !inter {
			k.group = 1
		}
		k.rank = float64(lasLevel(j.Attained))
	default:
		if !inter {
			k.group = 2
		}
		if !s.holdsActive(j) {
			k.group++
		}
		k.rank = FairRank(s.Tallies[j.UserID], j.Request.Scheduling.MaxDuration.Std())
		k.dur = j.Request.Scheduling.MaxDuration.Std()
	}
	return k
}

// Compare orders two keys as the queue order does: by policy, then older submission, then uuid
// (a total order, so equal jobs stay deterministic).
func (a QueueKey) Compare(b QueueKey) int {
	if c := a.comparePolicy(b); c != 0 {
		return c
	}
	return compareSubmission(a.Job, b.Job)
}

// comparePolicy orders two keys by the policy's part of the order alone.
func (a QueueKey) comparePolicy(b QueueKey) int {
	if c := cmp.Compare(a.group, b.group); c != 0 {
		return c
	}
	if c := cmp.Compare(a.rank, b.rank); c != 0 {
		return c
	}
	return cmp.Compare(a.dur, b.dur)
}

// running counts the jobs that hold resources, per user, project and bucket, for the caps.
type running struct {
	user    map[int64]int
	project map[int64]int
	bucket  map[string]int
}

// newRunning counts per user and per project only under a cap (nil maps read as zero), which
// spares the simulator's uncapped passes hundreds of map writes each.
func newRunning(placed []Placed, l Limits) running {
	c := running{bucket: map[string]int{}}
	if l.PerUser > 0 {
		c.user = map[int64]int{}
	}
	if l.PerProject > 0 {
		c.project = map[int64]int{}
	}
	for i := range placed {
		if pl := &placed[i]; !pl.Releasing && (c.user != nil || c.project != nil || pl.Bucket != "") {
			c.add(pl.UserID, pl.ProjectID, pl.Bucket)
		}
	}
	return c
}

func (c running) add(user, project int64, bucket string) {
	if c.user != nil {
		c.user[user]++
	}
	if c.project != nil {
		c.project[project]++
	}
	if bucket != "" {
		c.bucket[bucket]++
	}
}

// blocked says which cap keeps a job from starting ("" when none does): its bucket
// (maxSimultaneousJobs, shared by everyone using the same name), then the per-user and
// per-project caps.
func (c running) blocked(j *Job, l Limits) string {
	if m := j.Request.Scheduling.MaxSimultaneousJobs; m != nil && c.bucket[m.BucketName] >= m.BucketMax {
		return fmt.Sprintf("bucket %q is full (%d/%d running)", m.BucketName, c.bucket[m.BucketName], m.BucketMax)
	}
	if l.PerUser > 0 && c.user[j.UserID] >= l.PerUser {
		return fmt.Sprintf("the owner has %d running jobs, the most one user may run at once", c.user[j.UserID])
	}
	if l.PerProject > 0 && c.project[j.ProjectID] >= l.PerProject {
		return fmt.Sprintf("the project has %d running jobs, the most one project may run at once", c.project[j.ProjectID])
	}
	return ""
}

func bucketOf(j *Job) string {
	if m := j.Request.Scheduling.MaxSimultaneousJobs; m != nil {
		return m.BucketName
	}
	return ""
}

// decision is the outcome for one job: exactly one of assign, fail and wait is set. estimate
// may come with wait.
type decision struct {
	assign   *Assignment
	on       *slaveState // the slave assigned
	fail     string
	wait     []string
	estimate time.Time
}

func failed(format string, args ...any) decision {
	return decision{fail: fmt.Sprintf(format, args...)}
}

// planner holds the working state of one pass: the slaves with what is still free on them.
type planner struct {
	bufs     *passBufs // this pass's working arrays, from passPool
	now      time.Time
	clusters map[int]Cluster
	limits   Limits
	counts   running       // running jobs per user, project and bucket, this pass's assignments included
	slaves   []*slaveState // by name, then instance id
	models   []string      // distinct lower-case GPU models; a model id indexes it

	// Scratch lists reused from job to job: a pass over thousands of jobs would otherwise spend
	// most of its time allocating them.
	scope, capable, offline, draining []*slaveState
	misses                            []miss
	ending                            []*Placed
	// capables are the slaves able to take a job by their totals, per capableKey; keys are
	// cheaper to find in a pass with no private cluster (scopeOwners, scopeLimits).
	capables               map[candKey]capableSet
	scopeKeyed             bool
	scopeOwners            map[int64]bool
	scopeLimits            []time.Duration
	gpuScratch, cpuScratch []bool

	// headTried is set once the first job blocked only by busy resources has had its start
	// planned (backfill.go); reserved is that plan, nil when none could be made.
	headTried bool
	reserved  *reservation

	// Halting for fairness (halt.go): only under PolicyFair, so that the simulator's other
	// policies stay pure queue orders.
	halting bool
	las     bool // PolicyLAS: victims are chosen by attained service, not by tally (las.go)
	// Snapshot.HaltFactor (at least 1; DefaultHaltFactor for 0) and !HaltNonRestartable.
	haltFactor          float64
	haltRestartableOnly bool
	mayHalt             bool // some running job is started or halting: without one, makeRoom has nothing to do
	haltingSlaves       int  // slaves with a halting job: without one, makeRoom waits for none
	tallies             map[int64]float64
	halts               []Halt
	victims             map[string]bool      // jobs halted this pass: never chosen twice
	starter             map[*slaveState]bool // slaves that already have a starter this pass
	// haltTop's answer, found once a pass.
	top                  float64
	topSpecial, topKnown bool

	// fitAt is mayStart's memory: per shape, the slave that last had room for it (-1: none).
	fitAt map[fitKey]int

	// Reservations (booking.go): those not ended, and the ones covering each slave.
	bookings []*booking
	bookedOn map[*slaveState][]*booking

	// version counts the assignments of the pass: the only change to what slaves have free
	// once the pass began (backfill's masks are undone before decide returns). scans are the
	// scans that found no slave for a job, valid while version is theirs.
	version int
	scans   map[scanKey]scan
	// free files the slaves by their free GPUs (bestfit.go), made when first used.
	free *freeIndex

	haltGrace time.Duration // Snapshot.HaltGrace, DefaultHaltGrace for 0
}

// scanShortcuts turns on the scans' two shortcuts (reusing a scan, looking first only at
// slaves with room); tests turn them off to check that the plan stays the same.
var scanShortcuts = true

// scanKey is what a scan of the capable slaves depends on besides their free resources: the
// capable set and need (capableKey), whether the backfill head's slave is masked for the job
// (guard) and which head that is.
type scanKey struct {
	cand     candKey
	guard    bool
	reserved *reservation
}

// scan is what a scan that found no slave saw (the misses, offline and draining slaves, in
// slave order) and the explanation made of it. A later job with the same scanKey, in the same
// version, would see the same: free resources only shrink within a pass, and a slave where no
// job fits is never asked whether a reservation blocks it (the only check that depends on the
// job itself). In a long queue on a full cluster, most jobs reuse a scan: B1x's first pass
// (5,000 slaves, 100,000 jobs) scanned 5,000 slaves for each of the 78,000 jobs left waiting.
type scan struct {
	version           int
	misses            []miss
	offline, draining []*slaveState
	why               []string
	// heldBack: the job fitted only on the room kept for the backfill head. While the head
	// drains its slave, every long job that fits there is held back, each after a scan of every
	// capable slave: in B8x's last minutes (30 Nov), with the head a 4-GPU job on a full
	// cluster, 4,000–5,000 jobs a pass were, and the pass's plan grew from ~25 ms to 100–500.
	heldBack bool
}

// keepScan remembers a scan's outcome for the jobs like the one scanned, until the next
// assignment (scan.version).
func (p *planner) keepScan(sk scanKey, sc scan) {
	if p.scans == nil {
		p.scans = map[scanKey]scan{}
	}
	p.scans[sk] = sc
}

// decide runs the filters for one job in the order that gives the most useful answer: timing,
// then the slaves in scope (cluster, pins, private clusters), then what could ever fit (totals),
// then what fits now (online, accepting, free resources), then the ranking.
func (p *planner) decide(j *Job) decision {
	r := j.Request
	res := r.Resources
	if na := r.Scheduling.NotAfter; na != nil && p.now.After(*na) {
		return failed("notAfter %s passed while the job was queued", na.Format(time.RFC3339))
	}
	if res.ClusterID != 0 {
		c, ok := p.cluster(res.ClusterID)
		if !ok {
			return failed("cluster %d does not exist", res.ClusterID)
		}
		if c.Private && !slices.Contains(c.Projects, j.ProjectID) {
			return failed("cluster %d is private to other projects; leave clusterId out to run there as a guest (minDuration ≤ %s)",
				c.ID, fmtDuration(c.guestLimit()))
		}
	}

	booked, bookWait, bookEst, bookFail := p.uses(j)
	if bookFail != "" {
		return decision{fail: bookFail}
	}

	// Which slaves could ever take the job depends only on its scope and request, which most
	// jobs of a long queue share: found once per pass for each (capableKey), not per job.
	n := p.needOf(j)
	key, keyed := p.capableKey(j, &n, booked)
	var capable []*slaveState
	var misses []miss
	pinned := false
	if c, ok := p.capables[key]; keyed && ok {
		capable, pinned = c.slaves, c.pinned
	} else {
		scope := p.scope[:0]
		for _, st := range p.slaves {
			if p.inScope(j, st) && (booked == nil || p.onBooked(st, booked)) {
				scope = append(scope, st)
			}
		}
		p.scope = scope
		if len(scope) == 0 && booked != nil {
			return decision{wait: []string{"no slave of the job's reservations is registered, or its clusterId and slave pins exclude them"}}
		}
		if len(scope) == 0 {
			why, fatal := p.emptyScope(j)
			switch {
			case fatal:
				return decision{fail: why}
			case r.Scheduling.Interactive:
				return failed("interactive job cannot start now: %s", why)
			}
			return decision{wait: []string{why}}
		}

		pinned = len(scope) == 1 && (res.SlaveName != "" || res.SlaveInstanceID != "")
		capable, misses = p.capable[:0], p.misses[:0]
		for _, st := range scope {
			if v := st.check(&n, false); v.stage != stageFits {
				misses = append(misses, miss{st, v})
				continue
			}
			capable = append(capable, st)
		}
		p.capable, p.misses = capable, misses
		if len(capable) == 0 {
			for _, m := range misses {
				if m.v.stage == stageGPU && m.st.regainable(&n) {
					why := fmt.Sprintf("slave %s has %d of its %d GPUs now: waiting for them to come back", m.st.s.Name, len(m.st.gpus), len(m.st.s.CapacityGPUs))
					if r.Scheduling.Interactive {
						return failed("interactive job cannot start now: %s", why)
					}
					return decision{wait: []string{why}}
				}
			}
			return decision{fail: impossible(&n, res.ClusterID, pinned, misses)}
		}
		if keyed {
			if p.capables == nil {
				p.capables = map[candKey]capableSet{}
			}
			p.capables[key] = capableSet{slices.Clone(capable), pinned}
		}
	}

	if nb := r.Scheduling.NotBefore; nb != nil && p.now.Before(*nb) {
		return decision{wait: []string{"waiting for notBefore " + nb.Format(time.RFC3339)}}
	}
	if bookWait != "" {
		if r.Scheduling.Interactive {
			return failed("interactive job cannot start now: %s", bookWait)
		}
		return decision{wait: []string{bookWait}, estimate: bookEst}
	}
	if why := p.counts.blocked(j, p.limits); why != "" {
		if r.Scheduling.Interactive {
			return failed("interactive job cannot start now: %s", why)
		}
		return decision{wait: []string{why}}
	}

	var best *slaveState
	var bestRank rank
	heldBack := false
	guard := p.guarded(j)
	var offline, draining []*slaveState
	bookedLine := ""
	quick := scanShortcuts
	// A job like one seen since the last assignment (same capable set and need, same guard)
	// finds what that one found: nothing; the scan over every capable slave, most of a long
	// queue's pass, is skipped (scan).
	sk := scanKey{key, guard, p.reserved}
	sc, seen := p.scans[sk]
	if keyed && seen && sc.version == p.version && scanShortcuts {
		if sc.heldBack {
			return decision{wait: []string{p.reserved.heldBack()}}
		}
		misses, offline, draining = sc.misses, sc.offline, sc.draining
		goto explain
	}
	// The first scan looks only at the slaves with room by counts (mayFit), which is where the
	// job goes if anywhere; only when none takes it are all scanned, for the explanation.
scan:
	offline, draining = p.offline[:0], p.draining[:0]
	misses = p.misses[:0]
	if quick && keyed && p.indexed(&n, len(capable)) {
		// The quick scan's answer, found through the index (bestfit.go); none: the full scan.
		if best = p.bestFit(j, &n, guard); best != nil {
			goto place
		}
		quick = false
	}
	for _, st := range capable {
		switch {
		case quick && !st.mayFit(&n):
			continue
		case !st.online:
			offline = append(offline, st)
			continue
		case !st.accepting:
			draining = append(draining, st)
			continue
		}

		var v verdict
		if guard && st == p.reserved.st {
			p.reserved.mask()
			v = st.check(&n, true)
			p.reserved.unmask()
			// Unmasked, the job fits (held back) or its blocker is not the reservation: then
			// the explanation names what really lacks.
			if v.stage != stageFits {
				if u := st.check(&n, true); u.stage == stageFits {
					heldBack = true
				} else {
					v = u
				}
			}
		} else {
			v = st.check(&n, true)
		}
		if v.stage != stageFits {
			misses = append(misses, miss{st, v})
			continue
		}
		// A reservation's room is kept off only where the job would fit: a busy slave is
		// explained by what it lacks.
		if b := p.blocks(j, st, &n); b != nil {
			if bookedLine == "" {
				bookedLine = p.bookedWhy(j, st, b)
			}
			continue
		}
		if rk := st.rank(&n, v.amount); best == nil || rk.less(bestRank) {
			best, bestRank = st, rk
		}
	}
	p.offline, p.draining, p.misses = offline, draining, misses
	if best == nil && quick {
		quick, heldBack, bookedLine = false, false, ""
		goto scan
	}
place:
	if best != nil {
		p.version++
		p.counts.add(j.UserID, j.ProjectID, bucketOf(j))
		if booked != nil {
			p.tookBooked(j, best, n.gpus)
		}
		if guard && best == p.reserved.st {
			p.reserved.mask()
			a := best.take(j, &n)
			p.reserved.unmask()
			p.reserved.spareMem -= n.memGb
			p.refile(best)
			return decision{assign: a, on: best}
		}
		a := best.take(j, &n)
		p.refile(best)
		return decision{assign: a, on: best}
	}
	if heldBack {
		if keyed && bookedLine == "" {
			// Nothing but the head's room fits this need (a job whose room was booked by a
			// reservation may differ from its like: not kept).
			p.keepScan(sk, scan{version: p.version, heldBack: true, misses: sc.misses[:0], offline: sc.offline[:0], draining: sc.draining[:0]})
		}
		return decision{wait: []string{p.reserved.heldBack()}}
	}
	if keyed && bookedLine == "" {
		// The lists are copied into the arrays of the scan this one replaces (sc, when seen):
		// nothing keeps them beyond a decide.
		sc = scan{version: p.version, misses: append(sc.misses[:0], misses...),
			offline: append(sc.offline[:0], offline...), draining: append(sc.draining[:0], draining...)}
		sc.why = waiting(&n, pinned, sc.misses, sc.offline, sc.draining)
		misses, offline, draining = sc.misses, sc.offline, sc.draining
		p.keepScan(sk, sc)
	}
explain:
	var why []string
	switch {
	case bookedLine != "" && len(misses)+len(offline)+len(draining) == 0:
		why = []string{bookedLine}
	case bookedLine != "":
		// The reservation comes first: without it the job would start now.
		w := waiting(&n, pinned, misses, offline, draining)
		why = append([]string{bookedLine}, w[:min(len(w), 2)]...)
	case keyed:
		why = slices.Clone(sc.why) // the decision's lines are appended to below
	default:
		why = waiting(&n, pinned, misses, offline, draining)
	}
	if line := p.makeRoom(j, &n, misses); line != "" {
		// The starter waits for the halt; it is not the backfill head, since it starts as soon
		// as the victims have stopped and a reservation elsewhere would only hold others back.
		return decision{wait: []string{line, why[0]}}
	}
	if r.Scheduling.Interactive {
		return failed("interactive job cannot start now: %s", why[0])
	}
	d := decision{wait: why}
	// The first job held up only by busy resources is the head (backfill.go); its estimate takes
	// the place of a third line, since explanations stay within 3.
	if !p.headTried && len(misses) > 0 {
		p.headTried = true
		if p.reserved = p.reserve(j, &n, misses); p.reserved != nil {
			d.estimate = p.reserved.start
			d.wait = append(d.wait[:min(len(d.wait), 2)], p.reserved.expected())
		}
	}
	return d
}

// cluster finds a cluster by id. A cluster some slave reports is taken to exist even if the
// snapshot's Clusters lacks it, so that a lagging clusters table never fails jobs.
func (p *planner) cluster(id int) (Cluster, bool) {
	if c, ok := p.clusters[id]; ok {
		return c, true
	}
	for _, st := range p.slaves {
		if st.s.ClusterID == id {
			return Cluster{ID: id}, true
		}
	}
	return Cluster{}, false
}

// inScope applies the filters no amount of waiting for resources changes: the requested
// cluster, the slave pins and access to private clusters.
func (p *planner) inScope(j *Job, st *slaveState) bool {
	res := j.Request.Resources
	switch {
	case res.ClusterID != 0 && st.s.ClusterID != res.ClusterID,
		res.SlaveName != "" && st.s.Name != res.SlaveName,
		res.SlaveInstanceID != "" && st.s.InstanceID != res.SlaveInstanceID:
		return false
	}
	return mayUse(j, st.cluster)
}

// mayUse says whether a job may run in a cluster: public clusters are open to all; a private one
// to its projects, and to others' jobs as guests (no clusterId, short minDuration).
func mayUse(j *Job, c *Cluster) bool {
	if c == nil || !c.Private || slices.Contains(c.Projects, j.ProjectID) {
		return true
	}
	return j.Request.Resources.ClusterID == 0 && j.Request.Scheduling.MinDuration.Std() <= c.guestLimit()
}

func (c Cluster) guestLimit() time.Duration {
	if c.GuestLimit > 0 {
		return c.GuestLimit
	}
	return DefaultGuestLimit
}

// emptyScope explains why no registered slave is in a job's scope. Most such jobs wait, since a
// slave may join or come back; fatal is set where nothing can change that: a pinned instance id
// (new at every slave start) that is not registered or contradicts the other pins.
func (p *planner) emptyScope(j *Job) (why string, fatal bool) {
	res := j.Request.Resources
	if id := res.SlaveInstanceID; id != "" {
		i := slices.IndexFunc(p.slaves, func(st *slaveState) bool { return st.s.InstanceID == id })
		if i < 0 {
			return fmt.Sprintf("slave instance %s is not registered (a slave gets a new instance id at every start)", id), true
		}
		s := p.slaves[i].s
		if res.SlaveName != "" && s.Name != res.SlaveName {
			return fmt.Sprintf("slave instance %s is slave %s, not %s", id, s.Name, res.SlaveName), true
		}
		if res.ClusterID != 0 && s.ClusterID != res.ClusterID {
			return fmt.Sprintf("slave instance %s (slave %s) is in cluster %d, not cluster %d", id, s.Name, s.ClusterID, res.ClusterID), true
		}
		return p.guestWhy(j, fmt.Sprintf("slave %s is in private cluster %d", s.Name, s.ClusterID), s.ClusterID), false
	}
	if name := res.SlaveName; name != "" {
		i := slices.IndexFunc(p.slaves, func(st *slaveState) bool { return st.s.Name == name })
		if i < 0 {
			return fmt.Sprintf("slave %s is not registered", name), false
		}
		s := p.slaves[i].s
		if res.ClusterID != 0 && s.ClusterID != res.ClusterID {
			return fmt.Sprintf("slave %s is in cluster %d, not cluster %d", name, s.ClusterID, res.ClusterID), false
		}
		return p.guestWhy(j, fmt.Sprintf("slave %s is in private cluster %d", s.Name, s.ClusterID), s.ClusterID), false
	}
	if res.ClusterID != 0 {
		return fmt.Sprintf("no slave in cluster %d yet", res.ClusterID), false
	}
	if len(p.slaves) == 0 {
		return "no slave registered yet", false
	}
	// Every slave is in a private cluster the job may not use; name the most lenient limit.
	var limit time.Duration
	for _, st := range p.slaves {
		if c, ok := p.clusters[st.s.ClusterID]; ok && c.Private {
			limit = max(limit, c.guestLimit())
		}
	}
	return fmt.Sprintf("every slave is in a private cluster of other projects; guests need minDuration ≤ %s (the job has %s)",
		fmtDuration(limit), fmtDuration(j.Request.Scheduling.MinDuration.Std())), false
}

// guestWhy completes the explanation for a pinned slave in a private cluster the job may only
// use as a guest.
func (p *planner) guestWhy(j *Job, prefix string, clusterID int) string {
	return fmt.Sprintf("%s; guests need minDuration ≤ %s (the job has %s)", prefix,
		fmtDuration(p.clusters[clusterID].guestLimit()), fmtDuration(j.Request.Scheduling.MinDuration.Std()))
}
