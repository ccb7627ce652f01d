package sim

import (
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
	// Halting lets Plan halt running jobs (SPEC 7.4) under the policies that halt (fair, las);
	// off, the snapshot says NoHalts, so the fair order can be measured with and without.
	Halting bool
	// HaltFactor and HaltRestartableOnly restrain halting (scheduler.Snapshot's HaltFactor and
	// HaltNonRestartable, inverted); here 0 and false mean no restraint (factor 1, any victim),
	// and the simulate command passes the master's defaults.
	HaltFactor          float64
	HaltRestartableOnly bool
	// HaltGrace is how long a halted job takes to stop (the slave's SIGUSR1 grace); 0 means
	// DefaultHaltGrace. A restartable victim's checkpoint is taken at the halt, so the grace
	// is lost GPU time, as is everything a non-restartable victim ran.
	HaltGrace time.Duration
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

	// NoOvertaking leaves the forecast without the recent arrivals (scheduler.Snapshot.Arrivals),
	// so that it does not stretch estimates by what overtakes in the fair order (to compare).
	NoOvertaking bool
	// NoEstimates skips measuring the start estimates (Result.Accuracy): the passes that would
	// forecast the whole queue cost time, and change no decision.
	NoEstimates bool
	// EstimateEvery measures the estimates of one job in EstimateEvery, by trace order (0 or 1:
	// every job): each measured submission costs a pass that forecasts the whole queue.
	EstimateEvery int

	// Scenario declares reservations, private clusters and notBefore/notAfter windows
	// (scenario.go; the jobs' windows and reservations are set by Scenario.ApplyJobs); nil: none.
	Scenario *Scenario
}

// DefaultHalfLife is GPULab's tally half-life (SPEC 7.2).
const DefaultHalfLife = 7 * 24 * time.Hour

// DefaultHaltFactor is the simulate command's --halt-factor (see Config.HaltFactor): the
// master's default.
const DefaultHaltFactor = scheduler.DefaultHaltFactor

// DefaultHaltGrace is the slave's default halt grace, as the planner's forecast assumes it.
const DefaultHaltGrace = scheduler.DefaultHaltGrace

// haltAge is the least run time before any halt (the planner's antiStorm): a job that crosses
// max(minDuration, haltAge) becomes a possible victim, so the simulator plans again then.
const haltAge = time.Minute

// haltReach is how many jobs beyond those that fill the free GPUs are given to Plan when it may
// halt: the ones that could make room by halting. The rest of a long queue would only get
// explanations, or halt for jobs that the next pass (a grace later) reconsiders anyway.
const haltReach = 8

// Outcome is what happened to one trace job, kept so that tests and further analysis can look
// past the averages.
type Outcome struct {
	Job TraceJob
	// Start is the first start, End the end of the run that completed the job.
	Start time.Time
	End   time.Time
	// Slave is where the job ran last.
	Slave string
	// Halts is how often the job was halted (and restarted).
	Halts int
	// Held is the GPU time the job held, lost work and halt graces included.
	Held time.Duration
	// Estimate is the start Plan estimated at the job's first planned pass (zero: none; a pass
	// that can decide nothing is not planned: see Run).
	Estimate time.Time
}

// Result is one simulated run: per-job outcomes and the summary metrics (see Summarize).
type Result struct {
	Config Config
	// Outcomes are the completed jobs in trace order.
	Outcomes []Outcome
	// Dropped counts jobs needing more GPUs than one slave has: SPEC 7.1 places a job on one
	// slave, so they could never run and would otherwise fail at once.
	Dropped int
	// Failed counts non-interactive jobs Plan failed (none are expected).
	Failed int
	// InteractiveFailed counts interactive jobs Plan failed because they could not start.
	InteractiveFailed int
	// Stuck counts jobs still queued when no event was left (none are expected).
	Stuck int
	// Halts counts halts carried out; HaltedEarly those of a job before its minDuration
	// (a broken promise: must be 0).
	Halts, HaltedEarly int
	// Lost counts jobs that a halt ended for good: not restartable, or with less than
	// job.MinRestartDuration of maxDuration left. LostGPUTime is what they had run;
	// GraceGPUTime the halt graces of restartable victims (their only loss).
	Lost                      int
	LostGPUTime, GraceGPUTime time.Duration
	// PlanCalls is how many passes ran Plan: the simulator's cost driver. Replans is how many
	// of those ran it a second time, with the whole queue (see roomLeft).
	PlanCalls, Replans int
	// Metrics summarise Outcomes.
	Metrics Metrics
	// Wall is the wall-clock time the run took; the only field that differs between two runs.
	Wall time.Duration
	// Accuracy is how well Plan's start ranges foretold the first starts (estimate.go).
	Accuracy Accuracy
	// Scenario is what the scenario's reservations and windows did (scenario.go).
	Scenario ScenarioResult
}

// Event kinds, in the order they are handled at one instant.
const (
	evEnd  = iota // a running job completes
	evStop        // a halted job has stopped (the grace is over)
	evWake        // a running job may now be halted: plan again
)

type event struct {
	at   time.Time
	kind int
	uuid string
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if c := h[i].at.Compare(h[j].at); c != 0 {
		return c < 0
	}
	if h[i].kind != h[j].kind {
		return h[i].kind < h[j].kind
	}
	return h[i].uuid < h[j].uuid
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
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
	haltAt time.Time // when Plan halted it; zero while not halting
	pos    int       // index in runList and runPlaced
	learn  *learnRun // the run as the ratios learn it
}

// simJob is a trace job's state across its restarts.
type simJob struct {
	seg      int           // restart count: the current job uuid's suffix
	left     time.Duration // work still to do
	maxDur   time.Duration // maxDuration of the current job (reduced by each restart)
	minDur   time.Duration
	attained time.Duration // GPU time received in earlier runs
	first    time.Time     // first start
	held     time.Duration // GPU time held in all runs
	halts    int
	estimate time.Time
	planned  bool // has been through one pass (its estimate, if any, is recorded)

	since time.Time // when the current run was queued (the master's created_at)
}

// Run replays jobs (sorted by Submit, as ReadTrace returns them; settings as Assign fills them)
// on the configured cluster, calling scheduler.Snapshot.Plan at every instant where something
// changed, and carrying out its whole decision in simulated time: assigned jobs run for their
// remaining work; failed ones are counted; halted ones stop after the halt grace and, if
// restartable, are queued again as the master does (job.RestartOf: the remaining work, the
// maxDuration reduced by the time run, a new uuid). Run is deterministic apart from Result.Wall.
func Run(cfg Config, jobs []TraceJob) Result {
	began := time.Now()
	if cfg.HalfLife <= 0 {
		cfg.HalfLife = DefaultHalfLife
	}
	if cfg.HaltGrace <= 0 {
		cfg.HaltGrace = DefaultHaltGrace
	}
	if cfg.Policy == "" {
		cfg.Policy = scheduler.PolicyFair
	}
	halting := cfg.Halting && (cfg.Policy == scheduler.PolicyFair || cfg.Policy == scheduler.PolicyLAS)
	res := Result{Config: cfg}
	uid, _ := users(jobs)
	est := newEstimator(len(jobs), cfg.EstimateEvery)

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

	uuidOf := func(i, seg int) string {
		if seg == 0 {
			return fmt.Sprintf("job-%06d", i)
		}
		return fmt.Sprintf("job-%06d-r%d", i, seg)
	}
	byUUID := map[string]int{}
	state := make([]simJob, len(jobs))
	outcomes := make([]Outcome, len(jobs))
	done := make([]bool, len(jobs))

	var queued []*scheduler.Job // in submission order
	run := map[string]*running{}
	// runList are the running jobs and runPlaced their Placed, in the same order: the
	// snapshots' Running, kept up to date rather than copied at every pass. A job that leaves
	// takes the last one's place (Plan does not depend on the order of Running).
	var runList []*running
	var runPlaced []scheduler.Placed
	var events eventHeap
	tallies := map[int64]float64{}
	userGPUs := map[int64]int{} // GPUs each user holds now
	var last time.Time          // when tallies were last brought up to date
	var resv []scheduler.Reservation
	if cfg.Scenario != nil && len(jobs) > 0 {
		resv = cfg.Scenario.layout(slaves, clusters, jobs[0].Submit, uid)
		for _, at := range cfg.Scenario.wakes(jobs, resv) {
			heap.Push(&events, event{at: at, kind: evWake}) // no uuid: a pass, for the scenario
		}
	}

	// advance decays the tallies to t and adds what running jobs accrued since last: the exact
	// integral of g·2^(-(t-s)/h) ds over the interval, g being constant between events.
	h := cfg.HalfLife.Seconds()
	advance := func(t time.Time) {
		if !last.IsZero() && t.After(last) {
			dt := t.Sub(last).Seconds()
			f := math.Exp2(-dt / h)
			acc := h / math.Ln2 * (1 - f) / 3600 // GPU-hours, the master's unit (weight 1 per GPU-hour)
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
	enqueue := func(i int, at time.Time) {
		j, st := jobs[i], &state[i]
		u := uuidOf(i, st.seg)
		byUUID[u] = i
		st.since = at
		queued = append(queued, &scheduler.Job{
			UUID: u, Submitted: at, UserID: uid[j.User], OracleDuration: st.left, Attained: st.attained,
			Request: job.Request{
				Resources: job.Resources{GPUs: j.GPUs, CPUs: 4 * j.GPUs, CPUMemoryGb: 16 * j.GPUs},
				Scheduling: job.Scheduling{MaxDuration: job.Duration(st.maxDur), MinDuration: job.Duration(st.minDur),
					Restartable: j.Restartable, Interactive: j.Interactive},
			},
		})
		if cfg.Scenario != nil {
			withScenario(queued[len(queued)-1], j, uid)
		}
	}
	// release frees what a running job holds and returns the GPU time of its run.
	release := func(r *running, at time.Time, halted bool) time.Duration {
		delete(run, r.placed.JobUUID)
		last := len(runList) - 1
		runList[r.pos], runPlaced[r.pos] = runList[last], runPlaced[last]
		runList[r.pos].pos = r.pos
		runList[last], runPlaced[last] = nil, scheduler.Placed{}
		runList, runPlaced = runList[:last], runPlaced[:last]
		g := len(r.placed.GPUIndices)
		free[r.slave] += g
		userGPUs[r.placed.UserID] -= g
		held := time.Duration(g) * at.Sub(r.placed.Started)
		state[r.idx].held += held
		est.learn.ended(r.learn, at, halted)
		return held
	}

	var cand []*scheduler.Job
	var givenBuf []scheduler.Job
	var arrivals []arrival
	var arrivalBuf []scheduler.Arrival
	// The slaves and clusters never change during a replay: Plan's index over them is built once.
	index := scheduler.NewSlaveIndex(slaves, clusters)
	// firstRun maps a uuid to its trace index, and whether the job is on its first run and has
	// not started: the jobs whose estimates the accuracy measure takes.
	firstRun := func(u string) (int, bool) {
		i := byUUID[u]
		return i, state[i].seg == 0 && state[i].first.IsZero()
	}
	next := 0
	for {
		// The next instant: the earlier of the next arrival and the next event.
		var now time.Time
		switch {
		case next < len(jobs) && (len(events) == 0 || !events[0].at.Before(jobs[next].Submit)):
			now = jobs[next].Submit
		case len(events) > 0:
			now = events[0].at
		default:
			now = time.Time{}
		}
		if now.IsZero() {
			break
		}
		advance(now)
		changed := false
		for len(events) > 0 && !events[0].at.After(now) {
			e := heap.Pop(&events).(event)
			if e.uuid == "" {
				changed = true
				continue
			}
			r := run[e.uuid]
			if r == nil { // ended before its stop or wake came
				continue
			}
			st := &state[r.idx]
			switch e.kind {
			case evEnd:
				held := release(r, now, false)
				st.attained += held
				done[r.idx] = true
				outcomes[r.idx] = Outcome{Job: jobs[r.idx], Start: st.first, End: now, Slave: r.placed.SlaveName,
					Halts: st.halts, Held: st.held, Estimate: st.estimate}
				changed = true
			case evStop:
				if r.haltAt.IsZero() {
					continue
				}
				held := release(r, now, true)
				st.attained += held
				changed = true
				ran := now.Sub(r.placed.Started)
				// As job.RestartOf: maxDuration less the time run, minDuration at most that; a
				// job with too little left is not restarted.
				if jobs[r.idx].Restartable && st.maxDur-ran >= job.MinRestartDuration {
					st.left -= r.haltAt.Sub(r.placed.Started)
					st.maxDur = (st.maxDur - ran).Truncate(time.Second)
					st.minDur = min(st.minDur, st.maxDur)
					st.seg++
					res.GraceGPUTime += time.Duration(len(r.placed.GPUIndices)) * now.Sub(r.haltAt)
					enqueue(r.idx, now)
					// A restart arrives in the queue as a new job, as the master's Arrivals count it.
					arrivals = append(arrivals, arrival{at: now, a: scheduler.Arrival{UserID: uid[jobs[r.idx].User], GPUs: jobs[r.idx].GPUs, MaxDuration: st.maxDur}})
				} else {
					res.Lost++
					res.LostGPUTime += held
				}
			case evWake:
				changed = true
			}
		}
		for next < len(jobs) && !jobs[next].Submit.After(now) {
			j := jobs[next]
			if j.GPUs > cfg.GPUsPerSlave {
				res.Dropped++
				next++
				continue
			}
			maxDur := j.MaxDuration
			if maxDur == 0 {
				maxDur = Estimate(j.Duration)
			}
			state[next] = simJob{left: j.Duration, maxDur: maxDur, minDur: min(j.MinDuration, maxDur)}
			enqueue(next, j.Submit)
			arrivals = append(arrivals, arrival{at: j.Submit, a: scheduler.Arrival{UserID: uid[j.User], GPUs: j.GPUs, MaxDuration: maxDur}})
			if !cfg.NoEstimates {
				est.arrived(next)
			}
			next++
			changed = true
		}
		if !changed || len(queued) == 0 {
			continue
		}
		// Only jobs that fit on the emptiest slave now can be assigned, so a pass where none
		// does (none interactive, which must fail, or expired, and nothing to halt) decides
		// nothing. But every queued job is a candidate of a pass that can: one that cannot be
		// assigned may be the backfill head, whose room is then kept from the jobs behind it
		// (scheduler/backfill.go). Without it here a 2–4-GPU job at the head of the queue was left
		// out of every pass until a slave had its GPUs free at once, and the jobs behind took
		// each GPU as it freed, as the master's passes do not let them (trim keeps the pass
		// small).
		maxFree := 0
		for _, f := range free {
			maxFree = max(maxFree, f)
		}
		anyFits := false // some job fits the emptiest slave, is interactive or expired
		for _, q := range queued {
			if q.Request.Scheduling.Interactive || q.Request.Resources.GPUs <= maxFree || expired(q, now) {
				anyFits = true
				break
			}
		}
		cand = append(cand[:0], queued...)
		// A pass that can decide nothing still forecasts when estimates are due (estimate.go).
		forecastOnly := len(cand) == 0 || (!anyFits && !halting)
		forecast := !cfg.NoEstimates && est.wants(now)
		if forecastOnly && !forecast {
			continue
		}
		if forecastOnly {
			cand = cand[:0]
		} else if !cfg.noTrim && cfg.Limits == (scheduler.Limits{}) && cfg.Scenario == nil {
			reach := 2 * cfg.GPUsPerSlave
			if halting {
				reach += haltReach
			}
			cand = trim(cand, cfg.Policy, tallies, free, reach)
		}
		// Plan keeps nothing of its snapshot, so the Queued and Running arrays are reused.
		given := slices.Grow(givenBuf[:0], len(cand))[:len(cand)]
		givenBuf = given
		for i, q := range cand {
			given[i] = *q
		}
		// Ranges only where something reads them: the passes whose estimates the accuracy
		// measure takes (estimate.go). (Outcome.Estimate is Plan.Estimates, made without them.)
		snap := scheduler.Snapshot{Now: now, Policy: cfg.Policy, Tallies: tallies, Limits: cfg.Limits, Clusters: clusters, Slaves: slaves, Index: index, Reservations: resv,
			NoHalts: !halting, NoRanges: !forecast, HaltFactor: max(1, cfg.HaltFactor), HaltNonRestartable: !cfg.HaltRestartableOnly, HaltGrace: cfg.HaltGrace,
			Queued: given, Running: runPlaced}
		if forecast {
			snap.Waiting, snap.Ratios = waitingBeside(queued, cand), est.learn.ratios(now)
			if !cfg.NoOvertaking {
				k, _ := slices.BinarySearchFunc(arrivals, now.Add(-scheduler.ArrivalWindow), func(a arrival, t time.Time) int { return a.at.Compare(t) })
				arrivals = arrivals[k:]
				snap.Arrivals = arrivalBuf[:0]
				for _, a := range arrivals {
					snap.Arrivals = append(snap.Arrivals, a.a)
				}
				arrivalBuf = snap.Arrivals
			}
		}
		// With halting every queued job is given, since any may halt; but when none can be
		// assigned and none can halt (Snapshot.MayHalt, a cheap necessary condition), the pass
		// decides nothing: most passes of a halting replay, prompted by a running job passing its
		// minDuration or by an arrival on a full cluster.
		if halting && !forecast && !anyFits && !snap.MayHalt() {
			continue
		}
		var seen []*scheduler.Job
		if forecast {
			seen = considered(given, snap.Waiting)
			snap.RangesFor = est.rangesFor(now, seen, firstRun)
		}
		plan := snap.Plan()
		if trimmed := len(cand) < len(queued); trimmed && !forecastOnly && roomLeft(plan, free, slaveIdx, queued, cand) {
			// The jobs trim left out could take what the pass left free: room a backfill head
			// kept from the jobs behind it, which a job ending before the head's start may take
			// wherever it waits in the queue. Planned again with every queued job.
			given = slices.Grow(given[:0], len(queued))[:len(queued)]
			givenBuf = given
			for i, q := range queued {
				given[i] = *q
			}
			snap.Queued = given
			if forecast {
				snap.Waiting = nil
				seen = considered(given, nil)
				snap.RangesFor = est.rangesFor(now, seen, firstRun)
			}
			plan = snap.Plan()
			res.Replans++
		}
		if !forecastOnly {
			res.PlanCalls++
		}
		if forecast {
			est.observe(now, plan, seen, firstRun)
		}
		for _, q := range given {
			if st := &state[byUUID[q.UUID]]; !st.planned {
				st.planned = true
				st.estimate = plan.Estimates[q.UUID]
			}
		}
		gone := map[string]bool{}
		for _, a := range plan.Assignments {
			i := byUUID[a.JobUUID]
			j, st := jobs[i], &state[i]
			si := slaveIdx[a.SlaveName]
			gi := make([]int, len(a.GPUs))
			for k, g := range a.GPUs {
				gi[k] = g.Index
			}
			r := &running{idx: i, slave: si, placed: scheduler.Placed{JobUUID: a.JobUUID, SlaveName: a.SlaveName, UserID: uid[j.User],
				GPUIndices: gi, CPUIDs: a.CPUIDs, MemoryGb: a.MemoryGb, Ends: now.Add(st.maxDur), Started: now,
				MinDuration: st.minDur, Restartable: j.Restartable, Interactive: j.Interactive, Attained: st.attained}}
			run[a.JobUUID] = r
			r.pos = len(runList)
			runList, runPlaced = append(runList, r), append(runPlaced, r.placed)
			free[si] -= len(gi)
			userGPUs[uid[j.User]] += len(gi)
			if st.first.IsZero() {
				st.first = now
				est.started(i, now)
			}
			heap.Push(&events, event{at: now.Add(st.left), kind: evEnd, uuid: a.JobUUID})
			r.learn = est.learn.started(st.since, now, uid[j.User], st.maxDur)
			if halting && !j.Interactive {
				// Rounded up to a whole minute, so that the wakes of jobs started at nearby
				// instants make one pass (the master plans every few seconds; a halt at most a
				// minute late changes little, and fewer passes keep a replay fast).
				at := now.Add(max(st.minDur, haltAge) + time.Minute - 1).Truncate(time.Minute)
				heap.Push(&events, event{at: at, kind: evWake, uuid: a.JobUUID})
			}
			gone[a.JobUUID] = true
		}
		for _, f := range plan.Failures {
			if jobs[byUUID[f.JobUUID]].Interactive {
				res.InteractiveFailed++
			} else if cfg.Scenario == nil || !scenarioFailure(&res.Scenario, jobs[byUUID[f.JobUUID]], now) {
				res.Failed++
			}
			gone[f.JobUUID] = true
		}
		for _, hl := range plan.Halts {
			r := run[hl.JobUUID]
			if r == nil || !r.haltAt.IsZero() {
				continue
			}
			res.Halts++
			state[r.idx].halts++
			if now.Sub(r.placed.Started) < r.placed.MinDuration {
				res.HaltedEarly++
			}
			r.haltAt, r.placed.Halting, runPlaced[r.pos].Halting = now, true, true
			heap.Push(&events, event{at: now.Add(cfg.HaltGrace), kind: evStop, uuid: hl.JobUUID})
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
	if cfg.Scenario != nil {
		cfg.Scenario.measure(&res, slaves, clusters, resv, uid)
	}
	if !cfg.NoEstimates {
		res.Accuracy = est.summary(func(i int) time.Time { return jobs[i].Submit })
	}
	if n := len(jobs) - res.Dropped; n > 0 {
		res.Metrics.HaltsPerJob = float64(res.Halts) / float64(n)
	}
	res.Wall = time.Since(began)
	return res
}

// trim keeps the part of the candidates Plan can act on, so that a queue of thousands does not
// cost thousands of placement checks and explanations at every event. Planning goes through
// the queue in policy order and a one-GPU job is assigned whenever any GPU is free; so once
// as many one-GPU jobs as there are free GPUs have had their turn, every GPU is taken and the
// rest of the queue only gets explanations, which the simulator ignores, or fails if
// interactive, so interactive jobs are always kept. That holds only without running-job caps
// (a capped user's one-GPU job waits with GPUs free), so Run trims only then. Backfill breaks
// it: the first blocked job's planned room (Placed.Ends are known) is kept from the jobs behind
// it that would end after its start, so one-GPU jobs may be held back with GPUs free, which a
// short job anywhere further back may take. reach more jobs are kept after the cut, and a pass
// that leaves GPUs free that a job left out could use is planned again whole (roomLeft);
// halting looks further (the first of those that could make room; see haltReach) and is not
// made exact. trim sorts by Plan's own queue order (scheduler.QueueKey). TestTrimClose checks
// that trimmed and untrimmed runs come out alike.
func trim(cand []*scheduler.Job, p scheduler.Policy, tallies map[int64]float64, free []int, reach int) []*scheduler.Job {
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
	if ones <= total+reach {
		return cand
	}
	if p != scheduler.PolicyFIFO { // the queue is kept in submission order already
		cand = firstInOrder(orderKeys(cand, p, tallies), total, reach)
	}
	cut := len(cand)
	if total == 0 {
		cut = 0
	} else {
		seen := 0
		for i, j := range cand {
			if j.Request.Resources.GPUs == 1 {
				if seen++; seen == total {
					cut = i + 1
					break
				}
			}
		}
	}
	cut = min(len(cand), cut+reach)
	out := cand[:cut]
	for _, j := range cand[cut:] {
		if j.Request.Scheduling.Interactive {
			out = append(out, j)
		}
	}
	return out
}

// roomLeft says whether some queued job the pass was not given (cand is what it was) needs no
// more GPUs than a slave has left free after the plan's assignments.
func roomLeft(plan scheduler.Plan, free []int, slaveIdx map[string]int, queued, cand []*scheduler.Job) bool {
	left := slices.Clone(free)
	for _, a := range plan.Assignments {
		left[slaveIdx[a.SlaveName]] -= len(a.GPUs)
	}
	most := slices.Max(left)
	if most <= 0 {
		return false
	}
	given := make(map[*scheduler.Job]bool, len(cand))
	for _, c := range cand {
		given[c] = true
	}
	for _, q := range queued {
		if !given[q] && q.Request.Resources.GPUs <= most {
			return true
		}
	}
	return false
}

// orderKeys is cand's keys in the policy's queue order (scheduler.QueueKey; without
// reservations: trim is not used with a scenario).
func orderKeys(cand []*scheduler.Job, p scheduler.Policy, tallies map[int64]float64) []scheduler.QueueKey {
	s := scheduler.Snapshot{Policy: p, Tallies: tallies}
	keys := make([]scheduler.QueueKey, len(cand))
	for i, j := range cand {
		keys[i] = s.QueueKey(j)
	}
	return keys
}

// firstInOrder puts in key order the part of the queue that trim keeps by order: up to the
// total-th one-GPU job and reach more (all of it if it has fewer). The rest follows in no
// particular order. A partial heap sort: a long queue is not sorted whole at every event for
// the few dozen jobs at its head. The keys are a total order, so the kept part is as a full
// sort has it.
func firstInOrder(keys []scheduler.QueueKey, total, reach int) []*scheduler.Job {
	h := keyHeap(keys)
	heap.Init(&h)
	sorted := make([]*scheduler.Job, 0, len(keys))
	ones, more := 0, -1 // more: jobs still to take once total one-GPU jobs are in
	for h.Len() > 0 && more != 0 {
		j := heap.Pop(&h).(scheduler.QueueKey).Job
		sorted = append(sorted, j)
		switch {
		case more > 0:
			more--
		case j.Request.Resources.GPUs == 1 && total > 0:
			if ones++; ones == total {
				more = reach
			}
		case total == 0:
			more = reach - 1
		}
	}
	for _, k := range h {
		sorted = append(sorted, k.Job)
	}
	return sorted
}

type keyHeap []scheduler.QueueKey

func (h *keyHeap) Len() int           { return len(*h) }
func (h *keyHeap) Less(i, j int) bool { return (*h)[i].Compare((*h)[j]) < 0 }
func (h *keyHeap) Swap(i, j int)      { (*h)[i], (*h)[j] = (*h)[j], (*h)[i] }
func (h *keyHeap) Push(x any)         { *h = append(*h, x.(scheduler.QueueKey)) }
func (h *keyHeap) Pop() any {
	x := (*h)[len(*h)-1]
	*h = (*h)[:len(*h)-1]
	return x
}

// NamedPolicy is one policy compared by `gpulab-master simulate --policy all` and the B7
// benchmark: a queue order, with or without halting.
type NamedPolicy struct {
	Name    string
	Policy  scheduler.Policy
	Halting bool
}

// Policies are the compared policies, in the tables' order.
var Policies = []NamedPolicy{
	{"fifo", scheduler.PolicyFIFO, false},
	{"fair", scheduler.PolicyFair, false},
	{"fair-halt", scheduler.PolicyFair, true},
	{"sjf-oracle", scheduler.PolicySJFOracle, false},
	{"las", scheduler.PolicyLAS, true},
}

// arrival is a submission, kept for ArrivalWindow for the forecast (Snapshot.Arrivals).
type arrival struct {
	at time.Time
	a  scheduler.Arrival
}
