package sim

import (
	"cmp"
	"container/heap"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/scheduler"
)

// Config is the simulated cluster and policy. CPUs and memory are modelled but never binding
// (each slave has 8 CPUs and 64 GiB per GPU, each job asks 4 CPUs and 16 GiB per GPU): the
// traces record only GPUs, and inventing a CPU bottleneck would measure the invention.
type Config struct {
	// Policy orders the queue, exactly as in the master.
	Policy scheduler.Policy
	// Slaves and GPUsPerSlave size the cluster; all slaves are in one public cluster (id 1),
	// online and accepting throughout.
	Slaves, GPUsPerSlave int
	// HalfLife is the decay half-life of the usage tallies the fair policy orders by (SPEC 7.2);
	// 0 means DefaultHalfLife.
	HalfLife time.Duration

	// Limits are the running-job caps (SPEC 7.2). Zero, no caps, is the default here: a trace
	// user such as a Philly virtual cluster is a whole team, and GPULab's per-person caps would
	// measure the caps instead of the queue order.
	Limits scheduler.Limits

	// noTrim passes every candidate to Plan (see trim); tests compare both ways.
	noTrim bool
}

// DefaultHalfLife is GPULab's tally half-life (SPEC 7.2).
const DefaultHalfLife = 7 * 24 * time.Hour

// Outcome is what happened to one trace job, kept so that tests and further analysis can look
// past the averages.
type Outcome struct {
	Job   TraceJob
	Start time.Time
	End   time.Time
	// Slave is where the job ran.
	Slave string
}

// Result is one simulated run: per-job outcomes and the summary metrics (see Summarize).
type Result struct {
	Config Config
	// Outcomes are the completed jobs in trace order.
	Outcomes []Outcome
	// Dropped counts jobs needing more GPUs than one slave has: SPEC 7.1 places a job on one
	// slave, so they could never run and would otherwise fail at once.
	Dropped int
	// Failed counts jobs Plan failed (none are expected: the model gives it no reason to).
	Failed int
	// Stuck counts jobs still queued when no event was left (none are expected).
	Stuck int
	// PlanCalls is how many times Plan ran: the simulator's cost driver.
	PlanCalls int
	// Metrics summarise Outcomes.
	Metrics Metrics
	// Wall is the wall-clock time the run took; the only field that differs between two runs.
	Wall time.Duration
}

// endEvent is a running job's completion.
type endEvent struct {
	at   time.Time
	uuid string
}

type endHeap []endEvent

func (h endHeap) Len() int { return len(h) }
func (h endHeap) Less(i, j int) bool {
	if c := h[i].at.Compare(h[j].at); c != 0 {
		return c < 0
	}
	return h[i].uuid < h[j].uuid
}
func (h endHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)   { *h = append(*h, x.(endEvent)) }
func (h *endHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// running is a job holding GPUs in the model.
type running struct {
	idx    int // trace index
	placed scheduler.Placed
	slave  int
}

// Run replays jobs (sorted by Submit, as ReadTrace returns them) on the configured cluster,
// calling scheduler.Snapshot.Plan at every instant where a job arrives or ends and a GPU is
// free, and starting the assigned jobs at once for their real run time. Explanations are
// ignored; failures are counted. Run is deterministic apart from Result.Wall.
func Run(cfg Config, jobs []TraceJob) Result {
	began := time.Now()
	if cfg.HalfLife <= 0 {
		cfg.HalfLife = DefaultHalfLife
	}
	if cfg.Policy == "" {
		cfg.Policy = scheduler.PolicyFair
	}
	res := Result{Config: cfg}
	uid, _ := users(jobs)

	slaves := make([]scheduler.Slave, cfg.Slaves)
	slaveIdx := map[string]int{}
	free := make([]int, cfg.Slaves)
	for i := range slaves {
		name := fmt.Sprintf("sim-%04d", i)
		gs := make([]protocol.GPU, cfg.GPUsPerSlave)
		for k := range gs {
			gs[k] = protocol.GPU{Index: k, UUID: fmt.Sprintf("GPU-%s-%d", name, k), Model: "Simulated GPU", MemoryMiB: 32 * 1024, Fake: true}
		}
		slaves[i] = scheduler.Slave{Name: name, InstanceID: "inst-" + name, ClusterID: 1, Online: true, Accepting: true,
			CPUs: 8 * cfg.GPUsPerSlave, MemoryGb: 64 * cfg.GPUsPerSlave, CudaMajor: 12, GPUs: gs}
		slaveIdx[name] = i
		free[i] = cfg.GPUsPerSlave
	}
	clusters := map[int]scheduler.Cluster{1: {ID: 1}}

	uuidOf := func(i int) string { return fmt.Sprintf("job-%06d", i) }
	byUUID := map[string]int{}
	outcomes := make([]Outcome, len(jobs))
	done := make([]bool, len(jobs))

	var queued []*scheduler.Job // in submission order
	run := map[string]*running{}
	var runList []*running // in start order, for a deterministic Running slice
	var ends endHeap
	tallies := map[int64]float64{}
	userGPUs := map[int64]int{} // GPUs each user holds now
	var last time.Time          // when tallies were last brought up to date

	// advance decays the tallies to t and adds what running jobs accrued since last: the exact
	// integral of g·2^(-(t-s)/h) ds over the interval, g being constant between events.
	h := cfg.HalfLife.Seconds()
	advance := func(t time.Time) {
		if !last.IsZero() && t.After(last) {
			dt := t.Sub(last).Seconds()
			f := math.Exp2(-dt / h)
			acc := h / math.Ln2 * (1 - f)
			for u, v := range tallies {
				tallies[u] = v * f
			}
			for u, g := range userGPUs {
				if g > 0 {
					tallies[u] += float64(g) * acc
				}
			}
		}
		last = t
	}

	var cand []*scheduler.Job
	next := 0
	for {
		// The next instant: the earlier of the next arrival and the next completion.
		var now time.Time
		switch {
		case next < len(jobs) && (len(ends) == 0 || !ends[0].at.Before(jobs[next].Submit)):
			now = jobs[next].Submit
		case len(ends) > 0:
			now = ends[0].at
		default:
			now = time.Time{}
		}
		if now.IsZero() {
			break
		}
		advance(now)
		changed := false
		for len(ends) > 0 && !ends[0].at.After(now) {
			e := heap.Pop(&ends).(endEvent)
			r := run[e.uuid]
			delete(run, e.uuid)
			free[r.slave] += len(r.placed.GPUIndices)
			userGPUs[uid[jobs[r.idx].User]] -= len(r.placed.GPUIndices)
			done[r.idx] = true
			changed = true
		}
		if changed {
			k := 0
			for _, r := range runList {
				if _, ok := run[r.placed.JobUUID]; ok {
					runList[k] = r
					k++
				}
			}
			clear(runList[k:])
			runList = runList[:k]
		}
		for next < len(jobs) && !jobs[next].Submit.After(now) {
			j := jobs[next]
			if j.GPUs > cfg.GPUsPerSlave {
				res.Dropped++
				next++
				continue
			}
			u := uuidOf(next)
			byUUID[u] = next
			queued = append(queued, &scheduler.Job{
				UUID: u, Submitted: j.Submit, UserID: uid[j.User], OracleDuration: j.Duration,
				Request: job.Request{
					Resources:  job.Resources{GPUs: j.GPUs, CPUs: 4 * j.GPUs, CPUMemoryGb: 16 * j.GPUs},
					Scheduling: job.Scheduling{MaxDuration: job.Duration(Estimate(j.Duration))},
				},
			})
			next++
			changed = true
		}
		if !changed || len(queued) == 0 {
			continue
		}
		// Only jobs that fit on the emptiest slave now can be assigned, and a job that cannot
		// be assigned changes nothing for the others, so leaving the rest out of the snapshot
		// gives the same assignments at a fraction of the cost.
		maxFree := 0
		for _, f := range free {
			maxFree = max(maxFree, f)
		}
		if maxFree == 0 {
			continue
		}
		cand = cand[:0]
		for _, q := range queued {
			if q.Request.Resources.GPUs <= maxFree {
				cand = append(cand, q)
			}
		}
		if len(cand) == 0 {
			continue
		}
		if !cfg.noTrim && cfg.Limits == (scheduler.Limits{}) {
			cand = trim(cand, cfg.Policy, tallies, free)
		}
		given := make([]scheduler.Job, len(cand))
		for i, q := range cand {
			given[i] = *q
		}
		snap := scheduler.Snapshot{Now: now, Policy: cfg.Policy, Tallies: tallies, Limits: cfg.Limits, Clusters: clusters, Slaves: slaves,
			Queued: given, Running: make([]scheduler.Placed, len(runList))}
		for i, r := range runList {
			snap.Running[i] = r.placed
		}
		plan := snap.Plan()
		res.PlanCalls++
		gone := map[string]bool{}
		for _, a := range plan.Assignments {
			i := byUUID[a.JobUUID]
			j := jobs[i]
			si := slaveIdx[a.SlaveName]
			gi := make([]int, len(a.GPUs))
			for k, g := range a.GPUs {
				gi[k] = g.Index
			}
			r := &running{idx: i, slave: si, placed: scheduler.Placed{JobUUID: a.JobUUID, SlaveName: a.SlaveName, UserID: uid[j.User],
				GPUIndices: gi, CPUIDs: a.CPUIDs, MemoryGb: a.MemoryGb}}
			run[a.JobUUID] = r
			runList = append(runList, r)
			free[si] -= len(gi)
			userGPUs[uid[j.User]] += len(gi)
			outcomes[i] = Outcome{Job: j, Start: now, End: now.Add(j.Duration), Slave: a.SlaveName}
			heap.Push(&ends, endEvent{at: now.Add(j.Duration), uuid: a.JobUUID})
			gone[a.JobUUID] = true
		}
		for _, f := range plan.Failures {
			res.Failed++
			gone[f.JobUUID] = true
		}
		if len(gone) > 0 {
			k := 0
			for _, q := range queued {
				if !gone[q.UUID] {
					queued[k] = q
					k++
				}
			}
			queued = queued[:k]
		}
	}
	res.Stuck = len(queued)
	for i := range jobs {
		if done[i] {
			res.Outcomes = append(res.Outcomes, outcomes[i])
		}
	}
	res.Metrics = Summarize(res.Outcomes, cfg.Slaves*cfg.GPUsPerSlave)
	res.Wall = time.Since(began)
	return res
}

// trim keeps the part of the candidates Plan can act on, so that a queue of thousands does not
// cost thousands of placement checks and explanations at every event. Planning goes through
// the queue in policy order and a one-GPU job is assigned whenever any GPU is free; so once
// as many one-GPU jobs as there are free GPUs have had their turn, every GPU is taken and the
// rest of the queue only gets explanations, which the simulator ignores. That holds only without
// running-job caps (a capped user's one-GPU job waits with GPUs free), so Run trims only then. trim sorts by a copy
// of the policy's order (scheduler.queueOrder: the jobs here are never interactive) and cuts
// there. TestTrimExact checks that trimmed and untrimmed runs are identical.
func trim(cand []*scheduler.Job, p scheduler.Policy, tallies map[int64]float64, free []int) []*scheduler.Job {
	total := 0
	for _, f := range free {
		total += f
	}
	ones := 0
	for _, j := range cand {
		if j.Request.Resources.GPUs == 1 {
			ones++
		}
	}
	if ones <= total {
		return cand
	}
	older := func(a, b *scheduler.Job) int {
		if c := a.Submitted.Compare(b.Submitted); c != 0 {
			return c
		}
		return cmp.Compare(a.UUID, b.UUID)
	}
	var key func(a, b *scheduler.Job) int
	switch p {
	case scheduler.PolicyFIFO:
		key = older
	case scheduler.PolicySJFOracle:
		key = func(a, b *scheduler.Job) int {
			if c := cmp.Compare(a.OracleDuration, b.OracleDuration); c != 0 {
				return c
			}
			return older(a, b)
		}
	default:
		key = func(a, b *scheduler.Job) int {
			if c := cmp.Compare(tallies[a.UserID], tallies[b.UserID]); c != 0 {
				return c
			}
			if c := cmp.Compare(a.Request.Scheduling.MaxDuration, b.Request.Scheduling.MaxDuration); c != 0 {
				return c
			}
			return older(a, b)
		}
	}
	if p != scheduler.PolicyFIFO { // the queue is kept in submission order already
		slices.SortFunc(cand, key)
	}
	seen := 0
	for i, j := range cand {
		if j.Request.Resources.GPUs == 1 {
			if seen++; seen == total {
				return cand[:i+1]
			}
		}
	}
	return cand
}
