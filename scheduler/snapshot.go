package scheduler

import (
	"slices"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
)

// DefaultGuestLimit is the longest minDuration a guest job may have on a private cluster whose
// GuestLimit is 0 (SPEC 7.3): guests must be quick to halt when the owners need the room.
const DefaultGuestLimit = time.Hour

// Snapshot is everything a planning pass may look at, taken by the loop from the database in
// one read. Plan only reads it, so one snapshot can be planned twice (tests, the simulator) and
// give the same plan.
type Snapshot struct {
	// Now is the planning clock: injected, never time.Now, so that traces replay exactly.
	Now time.Time
	// Policy orders the queue (PolicyFair when empty).
	Policy Policy
	// Tallies are the users' decayed usage tallies (SPEC 7.2); a user without one has 0.
	Tallies map[int64]float64
	// Limits cap running jobs per user and per project (0: no cap).
	Limits Limits
	// NoHalts turns halting for fairness off (halt.go), so that the simulator can measure the
	// fair order with and without it; the master leaves it false.
	NoHalts bool
	// HaltFactor asks more than a lower rank of a SCORE halt: the victim's fair rank must be
	// HaltFactor times the starter's, so that two jobs of similar rank do not halt each other
	// back and forth as their owners' tallies cross. 0 means DefaultHaltFactor; 1: any lower
	// rank will do (SPEC 7.4). HaltNonRestartable lets SCORE halts (not those for an
	// interactive starter, a private cluster's owners or a reservation, which may always take
	// any job) take non-restartable victims, which lose all their work; by default only
	// restartable ones are taken, which lose only the halt grace. The defaults are the options
	// the simulator measured best on the Philly trace (README, scheduling).
	HaltFactor         float64
	HaltNonRestartable bool
	// NoRanges skips the forecast (Plan.Ranges stays empty), the costliest part of a pass over
	// a long queue after the decisions themselves: the simulator asks for ranges only in the
	// passes whose ranges it records. The master leaves it false.
	NoRanges bool
	// ForecastWorkers bounds how many of the forecast's replays run at once (0: all of them,
	// side by side, on a queue of parallelReplay jobs or more). The master's forecaster runs
	// beside the heartbeats and the passes, and its replays are its heaviest work: run on
	// every core at once, they queued the handlers behind them (issue 16's late turn, README).
	ForecastWorkers int
	// ForecastReach bounds the waiting jobs the forecast covers, first in queue order (0:
	// ForecastCap); those beyond it are named in Plan.Unreached. The master's forecasts every
	// few seconds keep to ForecastCap, and a far one now and then covers the whole queue
	// (leader.FarForecastEvery).
	ForecastReach int
	// RangesFor, when not nil, limits the forecast to the passes that leave one of these jobs
	// waiting (undecided, or in Waiting): the simulator measures a sample of jobs, and a sampled
	// job placed at its first pass needs no range. Nil: every pass forecasts (the master).
	RangesFor []string
	// Sweep, when positive, narrows the plan to what can change (issue 16): of the jobs that
	// cannot start at their turn by counts alone (no online, accepting slave of their cluster
	// has as many free GPUs, CPUs and GB left, after the assignments before them), only the
	// first Sweep in queue order are decided; the others are left out of the plan (Plan.Skipped:
	// no explanation, no estimate, no halt), unless they are interactive, past their notAfter
	// or named in Decide. A job left out could not be assigned and takes nothing, so every
	// assignment and failure of the jobs decided is the full plan's, except where the full plan
	// would have given a job left out a halt (Plan.HaltAfterCut says when that may be) or the
	// backfill head lies beyond the sweep. Zero: every job is decided (the simulator).
	Sweep int
	// Decide are the places in Queued of jobs a narrowed plan decides whatever their counts (the
	// leader's jobs never planned before: a new job gets its explanation, or its failure, at
	// once). Places, not uuids: the plan marks these jobs by address, where a set of uuids had
	// every queued job's uuid looked up in it at every pass, its bytes read from wherever they
	// lie (B8x at 2,000 slaves: 10,000 queued, 180–330 passes a minute, a tenth of the pass's CPU).
	Decide []int
	// Reservations are the current and future reservations.
	Reservations []Reservation
	// Clusters are the existing clusters by id; a job naming another id fails.
	Clusters map[int]Cluster
	// Slaves are every registered slave, online or not: offline ones still count when deciding
	// whether a request could ever be satisfied, and name themselves in explanations.
	Slaves []Slave
	// Index, when built from these Slaves and Clusters (NewSlaveIndex), spares Plan deriving it
	// again; nil or built from another slice: Plan derives its own.
	Index *SlaveIndex
	// Queued are the QUEUED jobs. Plan puts them in its own order (queueOrder), so the order
	// given does not matter, but oldest first is what the loop naturally reads.
	Queued []Job
	// Running are the jobs holding resources on a slave (ASSIGNED, STARTING, RUNNING, MUSTHALT,
	// HALTING), and what ended jobs hold until their slave confirms the container gone
	// (Placed.Releasing): what they hold is not free.
	Running []Placed
	// Ratios are the learned shares of maxDuration that jobs really run (finished jobs' run
	// time over maxDuration), for the estimates' likely and early starts; zero: unknown.
	Ratios RunRatios
	// Arrivals are the jobs submitted in the last ArrivalWindow (queued, running or ended):
	// under the fair order the forecast stretches a job's estimate by the share of the cluster
	// that jobs ranked ahead of it bring (overtake.go). Empty: no stretching.
	Arrivals []Arrival
	// HaltGrace is how long a halted job may take to stop (the slave's grace after SIGUSR1;
	// 0: DefaultHaltGrace): the forecast's latest and likely end of a job on its way out.
	HaltGrace time.Duration
	// Waiting are queued jobs that the caller knows cannot start in this pass (the simulator
	// leaves most of a long queue out of the decision to save time): Plan does not decide them,
	// explain them or fail them, only forecasts their start (Plan.Ranges) behind and among the
	// jobs it decided, in queue order. The master leaves it empty and puts every job in Queued.
	Waiting []Job
	// OnAssign, when set, is called with each assignment as Plan decides it, in the order of
	// Plan.Assignments: within a plan a decision is never taken back, so a caller may act on
	// one before Plan returns (the leader commits a burst's first assignments while the rest
	// is planned). Plan reads nothing back from it.
	OnAssign func(Assignment)
}

// DefaultHaltGrace is the slave's halt grace (slave/container.DefaultHaltGrace): what the
// forecast assumes when the snapshot gives none, and the simulator's default.
const DefaultHaltGrace = 15 * time.Second

// Cluster is what placement needs to know about a cluster: whether it exists and who may use it.
type Cluster struct {
	ID int
	// Private clusters belong to Projects; other projects' jobs run there only as guests (no
	// clusterId given and minDuration ≤ GuestLimit), SPEC 7.3.
	Private bool
	// Projects are the project ids that own a private cluster (ignored when not Private).
	Projects []int64
	// GuestLimit is the longest minDuration of a guest job; 0 means DefaultGuestLimit.
	GuestLimit time.Duration
}

// Slave is one worker machine as the last registration and heartbeat described it.
type Slave struct {
	Name       string
	InstanceID string // new at every slave start; jobs may pin it
	ClusterID  int
	// Online is false once the heartbeat is older than the grace period: nothing is placed there.
	Online bool
	// Accepting is false while the slave drains: its jobs go on, new ones go elsewhere.
	Accepting bool
	// CPUs is the number of schedulable CPUs; their ids are 0..CPUs-1.
	CPUs int
	// MemoryGb is the schedulable memory in GiB.
	MemoryGb int
	// CudaMajor is the CUDA major version of the driver; 0 means no CUDA.
	CudaMajor int
	// GPUs are the slave's GPUs; Placed.GPUIndices refer to their Index.
	GPUs []protocol.GPU
	// CapacityGPUs are the most GPUs the slave has had (nil: GPUs). A request is impossible
	// only against them: a GPU that drops out for a while (an Xid error) makes jobs wait, not fail.
	CapacityGPUs []protocol.GPU
}

// Job is a queued job with what ordering and placement need from its row.
type Job struct {
	UUID      string
	Request   job.Request
	Submitted time.Time
	UserID    int64
	ProjectID int64 // decides access to private clusters
	// OracleDuration is the job's real run time, known only in simulation (PolicySJFOracle).
	OracleDuration time.Duration
	// Attained is the GPU time (GPU count × run time) the job and the halted jobs it restarts
	// have received so far: what PolicyLAS orders by (las.go).
	Attained time.Duration
}

// Placed is what one job holds on a slave, whatever its state: a job that is starting or halting
// still owns its GPUs, CPUs and memory.
type Placed struct {
	JobUUID   string
	SlaveName string
	// UserID, ProjectID and Bucket (maxSimultaneousJobs.bucketName, "" when none) count the job
	// against the running-job caps.
	UserID     int64
	ProjectID  int64
	Bucket     string
	GPUIndices []int // protocol.GPU.Index values
	CPUIDs     []int
	MemoryGb   int
	// Ends is when the job reaches its maxDuration (RUNNING since + maxDuration): the latest it
	// can hold its resources, which is what backfill plans the first blocked job's start from.
	// Zero means unknown, taken as never: no estimate is built on a guess.
	Ends time.Time
	// Started is when the job started RUNNING; zero while it is assigned or starting. Only a
	// job known to have run its MinDuration may be halted for another (SPEC 7.4), so a zero
	// Started is never a victim.
	Started time.Time
	// MinDuration is the job's scheduling.minDuration: the time it is promised before any halt.
	MinDuration time.Duration
	// Restartable jobs lose least when halted (they are queued again), so victims are chosen
	// among them first.
	Restartable bool
	// Interactive jobs are never halted: someone is working in them.
	Interactive bool
	// Halting is set for MUSTHALT and HALTING jobs: already on their way out, so never chosen
	// again, and the room they leave is what a waiting starter waits for.
	Halting bool
	// Reservations are the reservation ids the job names: on a reservation's slaves, what it
	// holds counts as the holders' share, and it is never halted for the holders.
	Reservations []string
	// Attained is the GPU time the job had received before this run started (Job.Attained);
	// PolicyLAS adds the GPUs × time since Started.
	Attained time.Duration
	// Releasing marks what a job that ended (or was queued again) still holds until its slave
	// confirms the container gone: taken, on its way out (Halting), counted against no cap.
	Releasing bool
	// SlaveHint, when not zero, is where the job's slave is in the snapshot's slave index, plus
	// one (SlaveIndex.Place): the leader keeps it with each running job, so that a pass does not
	// look every running job's slave up by name (15,000–37,000 look-ups a pass at B8x's size).
	// Plan checks it against SlaveName, and looks the name up when they differ.
	SlaveHint int
}

// Limits are the running-job caps of SPEC 7.2; zero means no cap.
type Limits struct {
	PerUser    int
	PerProject int
}

// DefaultLimits are GPULab's default caps: 10 running jobs per user, 20 per project.
var DefaultLimits = Limits{PerUser: 10, PerProject: 20}

// Reservation is a booking of resources for some users and projects during a window (SPEC
// 7.3): a number of GPUs, or whole slaves, of a cluster or of named slaves. Jobs name it in
// reservationIds; booking.go has the rules it imposes on placement.
type Reservation struct {
	ID   string
	Name string // for explanations; the id is used when empty
	// ClusterID and SlaveNames say which slaves the reservation covers: the named slaves (of
	// ClusterID, when set too), or else every slave of ClusterID.
	ClusterID  int
	SlaveNames []string
	// GPUs is how many GPUs of those slaves are kept for the holders; 0 books the whole slaves
	// (every GPU, CPU and byte of memory).
	GPUs       int
	Start, End time.Time
	Users      []int64
	Projects   []int64
}

// holds says whether the owner of a job (or his project) holds the reservation.
func (r *Reservation) holds(j *Job) bool {
	return slices.Contains(r.Users, j.UserID) || slices.Contains(r.Projects, j.ProjectID)
}

func (r *Reservation) active(now time.Time) bool { return !now.Before(r.Start) && now.Before(r.End) }

// holdsActive reports whether the job names a reservation that is active now and that its
// owner (or his project) holds.
func (s *Snapshot) holdsActive(j *Job) bool {
	for _, id := range j.Request.Scheduling.ReservationIDs {
		for _, r := range s.Reservations {
			if r.ID == id && r.active(s.Now) && r.holds(j) {
				return true
			}
		}
	}
	return false
}

// WaitsForTime reports whether Plan would leave a job waiting for time alone: its notBefore is
// ahead, or every reservation it names exists, is held by its owner (or his project) and has
// not begun. Plan then decides nothing else for it: it takes nothing, is neither the backfill
// head nor a halt's beneficiary, and is not forecast behind others, so a pass may leave it out
// until the time comes (leader's narrowing). A job Plan would fail (a reservation gone, not
// held, or a request no slave can meet) is not waiting for time: the answer is then false, or
// true only as long as the job was judged possible before.
func (s *Snapshot) WaitsForTime(j *Job) bool {
	sch := j.Request.Scheduling
	if sch.NotBefore != nil && s.Now.Before(*sch.NotBefore) {
		return true
	}
	if len(sch.ReservationIDs) == 0 {
		return false
	}
	for _, id := range sch.ReservationIDs {
		i := slices.IndexFunc(s.Reservations, func(r Reservation) bool { return r.ID == id })
		if i < 0 {
			return false
		}
		r := &s.Reservations[i]
		if !r.holds(j) || !s.Now.Before(r.Start) {
			return false
		}
	}
	return true
}
