// Package protocol is the contract between the master and its slaves: the wire types and one
// interface, Master, that the slave's HTTPS client implements and the master's slave endpoints
// serve. Nothing else crosses between the two. README.md draws the timelines of the faults the
// protocol is built to survive.
//
// # Lifecycle
//
//  1. Join (once): an admin makes a one-time token (`gpulab-master slave-token`); the slave
//     sends it with a certificate signing request to JoinPath and gets back a client
//     certificate with a slave identity, signed by the master's CA. Every later call
//     authenticates with that certificate; user certificates are refused here, and slave
//     certificates on user endpoints.
//  2. Register (at every start): the slave reports its inventory and the containers it found
//     (each labelled with its job and attempt) and gets the jobs the master has on it. Both
//     sides reconcile at once: the slave re-attaches to the containers of jobs the master has
//     on it in the same attempt and removes the others; the master requeues or ends the jobs it
//     has on the slave whose containers are gone.
//  3. Heartbeat (every Interval, chosen by the master's reply, on its own timer: never behind a
//     Docker call; the master draws each reply's Interval a little apart from the last, so that
//     slaves answered together do not heartbeat together ever after): every job the slave
//     holds, as a task or a container, with the latest usage sample. The master answers with
//     its own view of the jobs on the slave and stop orders for what the slave must not hold;
//     it frees what ended jobs held once the slave no longer lists them, and requeues or ends
//     a job the slave has stopped listing for a grace.
//  4. Next (long poll, up to Wait): the master answers at once with work when there is some (a
//     job ASSIGNED to this slave that the slave does not hold, or a stop order), else when Wait
//     ends with no work. An assignment is a lease, not a transfer: the job stays ASSIGNED until
//     the slave moves it to STARTING, and goes back to the queue when the lease runs out.
//  5. Update and Done: every state change names its transition (From → To) and the attempt it
//     acts for. A retry of a change already made answers success; a real conflict answers the
//     state the master holds (Conflict), and the slave acts on it: a job the master ended, or
//     gave to another attempt, is stopped and its container removed.
//  6. Log: ordered chunks (Seq 0, 1, 2, …) of the current attempt. A chunk already stored is
//     ErrConflict (harmless on a retry); the slave asks LogState after a restart to continue
//     where the master is.
//
// # Leases and fencing
//
// ASSIGNED, STARTING, MUSTHALT and HALTING each have a lease on the master (store.Leases), on
// the database's clock; when one runs out the job gets its defined outcome. ASSIGNED's runs
// from the first Next that hands the job over (before it, a longer hand-over lease: a master
// too loaded to answer the polls does not take back jobs no slave was given). A slave that has
// reached no master for FenceAfter stops its jobs (halting restartable ones) on its own, and the
// master restarts a lost slave's jobs elsewhere only after that time plus a margin: the old
// copy is gone before the new one starts.
//
// # Retries
//
// The slave retries every call with back-off and jitter on network errors and 5xx answers,
// moving to the next master URL when it has several; all calls are idempotent or conditional,
// so a retry cannot apply twice. The master never calls the slave.
package protocol

import (
	"context"
	"errors"
	"time"

	"github.com/opengpulab/gpulab/job"
)

// Paths of the slave endpoints on the master, below the server root.
const (
	BasePath      = "/api/slave/v1/"
	JoinPath      = BasePath + "join"
	RegisterPath  = BasePath + "register"
	HeartbeatPath = BasePath + "heartbeat"
	NextPath      = BasePath + "next"
	UpdatePath    = BasePath + "update"
	LogPath       = BasePath + "log"
	LogStatePath  = BasePath + "logstate"
	DonePath      = BasePath + "done"
	// SSHAuthPath is where a slave's SSH server asks whether a key may log in to a job.
	SSHAuthPath = BasePath + "ssh-auth"
)

// Errors both sides branch on. The HTTP client maps status codes back to them.
var (
	// ErrConflict: the job is not in the state (or attempt) the call assumed, or the log chunk
	// exists. Conflicts of state changes are *Conflict.
	ErrConflict = errors.New("conflict")
	// ErrUnknownSlave: the slave must register (again) before this call.
	ErrUnknownSlave = errors.New("slave not registered")
	// ErrNotFound: no such job on this slave.
	ErrNotFound = errors.New("not found")
)

// Master is what a slave may ask of the master.
type Master interface {
	// Register reports the slave's inventory at start; it replaces the previous one.
	Register(ctx context.Context, inv Inventory) (Registration, error)
	// Heartbeat reports running jobs and usage; the reply sets the next interval and orders stops.
	Heartbeat(ctx context.Context, hb Heartbeat) (HeartbeatReply, error)
	// Next waits up to req.Wait for work for this slave.
	Next(ctx context.Context, req NextRequest) (Work, error)
	// Update moves a job from one state to another, conditionally; a *Conflict tells the state
	// the master holds instead.
	Update(ctx context.Context, u StateUpdate) error
	// Log appends the next chunk of a job's output.
	Log(ctx context.Context, c LogChunk) error
	// LogState tells how much of a job's log the master has.
	LogState(ctx context.Context, jobUUID string) (LogState, error)
	// Done ends a job, conditionally, with its exit code and usage; a *Conflict as for Update.
	Done(ctx context.Context, d Completion) error
}

// JoinRequest exchanges a one-time token for a slave certificate.
type JoinRequest struct {
	Token string `json:"token"`
	// CSR is a PEM certificate signing request; the slave keeps its private key.
	CSR string `json:"csr"`
}

// JoinReply carries the signed certificate and the CA to trust from then on.
type JoinReply struct {
	Name        string `json:"name"`
	ClusterID   int    `json:"clusterId"`
	Certificate string `json:"certificate"`
	CA          string `json:"ca"`
}

// GPU is one GPU of a slave.
type GPU struct {
	Index     int    `json:"index"`
	UUID      string `json:"uuid"`
	Model     string `json:"model"`
	MemoryMiB int64  `json:"memoryMiB"`
	// Fake marks GPUs declared with --fake-gpus: simulated, for demos and tests.
	Fake bool `json:"fake"`
}

// Inventory is what a slave has to offer.
type Inventory struct {
	Name       string `json:"name"`
	InstanceID string `json:"instanceId"` // new at every slave start
	ClusterID  int    `json:"clusterId"`
	Host       string `json:"host"`    // host name, shown to users and put in GPULAB_SLAVE_HOSTNAME
	DNSName    string `json:"dnsName"` // where published ports are reached
	Version    string `json:"version"`
	PID        int    `json:"pid"`
	CPUs       int    `json:"cpus"`
	MemoryMiB  int64  `json:"memoryMiB"`
	GPUs       []GPU  `json:"gpus"`
	// DriverVersion and CudaVersion come from NVML ("550.54.15", "12.4"); empty without GPUs.
	DriverVersion string `json:"driverVersion,omitempty"`
	CudaVersion   string `json:"cudaVersion,omitempty"`
	// GPUStatus says where the GPU list comes from: "nvml", "fake" or "none: <why>".
	GPUStatus string `json:"gpuStatus"`
	// StorageRoots are the public storage names this slave can mount ("/project", ...).
	StorageRoots []string `json:"storageRoots"`
	// Containers are the job containers the slave found on its engine at start, running or
	// not: the master requeues or ends the jobs it has on the slave that are not among them.
	Containers []RunningJob `json:"containers,omitempty"`
	// SSH is the slave's SSH endpoint for its running jobs; nil when the slave serves none.
	SSH *SSHEndpoint `json:"ssh,omitempty"`
}

// SSHEndpoint is where a slave (or the master, as jump host) serves SSH, as users reach it.
type SSHEndpoint struct {
	Host string `json:"host"`
	Port int    `json:"port"`
	// HostKey is the server's public host key in authorized_keys form ("ssh-ed25519 AAAA…"),
	// which the master publishes so that clients never meet an unknown host key.
	HostKey string `json:"hostKey"`
}

// SSHAuthRequest asks the master whether PublicKey may log in to the job that the SSH user
// name names, on the asking slave. The master decides (and records the login as an event on
// the job), so that a disabled user, a removed profile key or a job that stopped running is
// refused at once, without the slave keeping keys.
type SSHAuthRequest struct {
	// User is the SSH user name as given: the job's UUID or its first 8 characters.
	User string `json:"user"`
	// PublicKey is the offered key in authorized_keys form.
	PublicKey string `json:"publicKey"`
	// RemoteAddr is the client's address, for the event and rate limits ("10.0.0.5:51234").
	RemoteAddr string `json:"remoteAddr"`
}

// SSHAuthAnswer is the master's decision. When Allowed, JobUUID is the job to exec into and
// UserName its owner's name; else Reason says why (for the slave's log, never for the client).
type SSHAuthAnswer struct {
	Allowed  bool   `json:"allowed"`
	JobUUID  string `json:"jobUuid,omitempty"`
	UserName string `json:"userName,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// CudaMajor is the CUDA major version, 0 when unknown.
func (inv Inventory) CudaMajor() int {
	n := 0
	for _, c := range inv.CudaVersion {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// Registration is the master's answer to Register.
type Registration struct {
	HeartbeatInterval time.Duration `json:"heartbeatInterval"`
	// Jobs are the jobs the master has on this slave (ASSIGNED … HALTING); the slave stops
	// and removes the containers of any other job, or of another attempt.
	Jobs []JobState `json:"jobs"`
	// FenceAfter is how long the slave may go without reaching a master before it stops its
	// jobs on its own (self-fencing); 0 leaves the slave's own default.
	FenceAfter time.Duration `json:"fenceAfter"`
}

// JobState is a job's state as the master knows it.
type JobState struct {
	JobUUID string     `json:"jobUuid"`
	Status  job.Status `json:"status"`
	Attempt int        `json:"attempt"`
}

// RunningJob is a job the slave holds: a task it carries out, a container it found, or both.
type RunningJob struct {
	JobUUID string `json:"jobUuid"`
	// Attempt is the attempt the task or container belongs to (container label gpulab.attempt).
	Attempt     int    `json:"attempt"`
	ContainerID string `json:"containerId,omitempty"`
	// Status is the state the slave's task has (ASSIGNED, STARTING, RUNNING, MUSTHALT,
	// HALTING); empty for a container the slave holds without a task (found, not yet removed).
	Status job.Status `json:"status,omitempty"`
	Usage  *Usage     `json:"usage,omitempty"`
}

// Usage is a sample of what a job uses.
type Usage struct {
	CPUPercent float64    `json:"cpuPercent"` // 100 = one CPU
	MemoryMiB  int64      `json:"memoryMiB"`
	GPUs       []GPUUsage `json:"gpus,omitempty"`
}

// GPUUsage is one GPU's sample.
type GPUUsage struct {
	Index         int     `json:"index"`
	UtilPercent   float64 `json:"utilPercent"`
	MemoryUsedMiB int64   `json:"memoryUsedMiB"`
}

// Heartbeat is the slave's periodic report.
type Heartbeat struct {
	InstanceID string `json:"instanceId"`
	// Jobs are all the jobs the slave holds: its tasks and every container of its latest
	// listing of the engine. A job not listed is one the slave has no container of.
	Jobs []RunningJob `json:"jobs"`
	// Accepting is false while the slave drains or shuts down.
	Accepting bool `json:"accepting"`
}

// StopMode is how a job must be stopped.
type StopMode string

// Stop modes.
const (
	// StopCancel: SIGTERM, 10 s, SIGKILL; the master already has the job CANCELLED (or ended).
	StopCancel StopMode = "cancel"
	// StopHalt: the job is MUSTHALT: move it to HALTING, SIGUSR1, 15 s for exit 123.
	StopHalt StopMode = "halt"
)

// StopOrder tells the slave to stop a job.
type StopOrder struct {
	JobUUID string   `json:"jobUuid"`
	Mode    StopMode `json:"mode"`
	Reason  string   `json:"reason"`
}

// HeartbeatReply sets the next interval, orders stops and tells the master's view.
type HeartbeatReply struct {
	// Interval is the wait before the next heartbeat: the master's --heartbeat-interval,
	// spread by its --heartbeat-jitter at every reply.
	Interval time.Duration `json:"interval"`
	Stops    []StopOrder   `json:"stops"`
	// Jobs are the jobs the master has on this slave, as in Registration.
	Jobs       []JobState    `json:"jobs"`
	FenceAfter time.Duration `json:"fenceAfter"`
}

// PollWait is how long a slave's Next call waits for work by default, and MaxPollWait the
// longest a master holds one: a slave with nothing to do polls again once that long, and each
// poll costs the master a request and a look at the slave's jobs in the database. With 5,000
// slaves, polls of 25 s were 200 requests a second beside the 1,000 heartbeats, where bench
// B8x's assignments (2,500 a minute) wake some 40 a second. A longer poll costs nothing while
// it waits, and delays nothing: an assignment wakes it at once, stop orders come with the
// heartbeats too, and a master that stops answering is found by the connection's pings
// (Client), not by the poll's end. Just under a minute: proxies and load balancers are commonly
// set to cut a request silent for one.
const (
	PollWait    = 55 * time.Second
	MaxPollWait = time.Minute
)

// NextRequest asks for work.
type NextRequest struct {
	InstanceID string        `json:"instanceId"`
	Wait       time.Duration `json:"wait"`
	// Jobs are the jobs the slave holds now, so the master neither offers them again nor
	// forgets to order their stop.
	Jobs []RunningJob `json:"jobs"`
}

// Work is what Next answers: jobs to start and jobs to stop (either may be empty).
type Work struct {
	Assignments []Assignment `json:"assignments"`
	Stops       []StopOrder  `json:"stops"`
}

// Assignment is a job to run on this slave with the resources the scheduler gave it.
type Assignment struct {
	// Job is the full job, image credentials included (the slave needs them to pull).
	Job job.Job `json:"job"`
	// Attempt is the placement this assignment is for; every call about it names it.
	Attempt int `json:"attempt"`
	// Log is the job's log as the master has it: a job placed again (requeued) continues its
	// log after what its earlier attempt wrote.
	Log LogState `json:"log"`
	// GPUs, CPUIDs and MemoryGb are what the job may use.
	GPUs     []GPU `json:"gpus"`
	CPUIDs   []int `json:"cpuIds"`
	MemoryGb int   `json:"memoryGb"`
	// Identity of the owner, for the GPULAB_* variables and the storage mapping.
	UserName   string `json:"userName"`
	UserURN    string `json:"userUrn"`
	UserMiniID string `json:"userMiniId"`
	Project    string `json:"project"`
	ProjectGID int    `json:"projectGid"`
	ClusterID  int    `json:"clusterId"`
	// WorkerID numbers the job among those on the slave (GPULAB_WORKER_ID).
	WorkerID int `json:"workerId"`
}

// StateUpdate is a conditional state change made by the slave.
type StateUpdate struct {
	JobUUID string     `json:"jobUuid"`
	Attempt int        `json:"attempt"`
	From    job.Status `json:"from"`
	To      job.Status `json:"to"`
	Reason  string     `json:"reason,omitempty"`
	// Resources, when set, replace the job's state.resources (ports really published, ...).
	Resources *job.StateResources `json:"resources,omitempty"`
}

// LogChunk is the next piece of a job's output.
type LogChunk struct {
	JobUUID string `json:"jobUuid"`
	Attempt int    `json:"attempt"`
	Seq     int    `json:"seq"`
	Data    []byte `json:"data"`
}

// LogState is how much of a job's log the master has.
type LogState struct {
	NextSeq int   `json:"nextSeq"`
	Size    int64 `json:"size"`
}

// Completion ends a job. The container has exited: what the job held is free.
type Completion struct {
	JobUUID  string     `json:"jobUuid"`
	Attempt  int        `json:"attempt"`
	From     job.Status `json:"from"`
	To       job.Status `json:"to"` // FINISHED, FAILED or HALTED
	ExitCode *int       `json:"exitCode,omitempty"`
	Reason   string     `json:"reason,omitempty"`
	Usage    *Usage     `json:"usage,omitempty"`
	// Fenced says the slave stopped the job on its own, having reached no master for
	// FenceAfter: the job ends FAILED and, if restartable, is restarted as after a lost worker.
	Fenced bool `json:"fenced,omitempty"`
}

// Conflict is the master's answer to a state change it did not make: the job is in State (and
// Attempt) instead. Status and Attempt are empty when the master has no such job.
type Conflict struct {
	JobUUID string     `json:"jobUuid"`
	Status  job.Status `json:"status"`
	Attempt int        `json:"attempt"`
	Message string     `json:"error"`
}

func (c *Conflict) Error() string { return "conflict: " + c.Message }

// Unwrap makes errors.Is(err, ErrConflict) true.
func (c *Conflict) Unwrap() error { return ErrConflict }

// Gone reports whether the conflict means the slave must let the job go: the master ended it,
// has no such job, or gave it to another attempt.
func (c *Conflict) Gone(attempt int) bool {
	return c.Status == "" || c.Status.Ended() || c.Attempt != attempt || c.Status == job.StatusQueued || c.Status == job.StatusOnHold
}
