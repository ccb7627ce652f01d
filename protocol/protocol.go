// Package protocol is the contract between the master and its slaves: the wire types and one
// interface, Master, that the slave's HTTPS client implements and the master's slave endpoints
// serve. Nothing else crosses between the two.
//
// # Lifecycle
//
//  1. Join (once): an admin makes a one-time token (`gpulab-master slave-token`); the slave
//     sends it with a certificate signing request to JoinPath and gets back a client
//     certificate with a slave identity, signed by the master's CA. Every later call
//     authenticates with that certificate; user certificates are refused here, and slave
//     certificates on user endpoints.
//  2. Register (at every start): the slave reports its inventory (GPUs, CPUs, memory, cluster,
//     storage roots) and gets the heartbeat interval and the jobs the master believes run there.
//  3. Heartbeat (every Interval, chosen by the master's reply): the jobs the slave runs and their
//     usage. The master answers with the next interval and stop orders for jobs that must end
//     (cancelled, halting, or ended while the slave was away). A slave silent for the master's
//     grace period is marked offline; after the job grace its jobs fail with `worker lost`.
//  4. Next (long poll, up to Wait): the master answers at once with work when there is some (a
//     job ASSIGNED to this slave that the slave does not report as its own, or a stop order),
//     else when Wait ends with no work. An assignment is a lease, not a transfer: the job stays
//     ASSIGNED until the slave moves it to STARTING, and is offered again if the slave restarts
//     before that.
//  5. Update: every state change the slave makes is conditional (From → To); ErrConflict means
//     the job is no longer in From (cancelled meanwhile) and the slave must stop it.
//  6. Log: ordered chunks (Seq 0, 1, 2, …). A chunk already stored is ErrConflict (harmless on a
//     retry); the slave asks LogState after a restart to continue where the master is.
//  7. Done: the job's end (FINISHED, FAILED, HALTED) with exit code and usage, conditional like
//     Update. The master creates the restart job of a halted restartable job in the same
//     transaction.
//
// # Retries
//
// The slave retries every call with back-off on network errors and 5xx answers; all calls are
// idempotent or conditional, so a retry cannot apply twice. The master never calls the slave.
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
)

// Errors both sides branch on. The HTTP client maps status codes back to them.
var (
	// ErrConflict: the job is not in the state the call assumed, or the log chunk exists.
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
	// Update moves a job from one state to another, conditionally.
	Update(ctx context.Context, u StateUpdate) error
	// Log appends the next chunk of a job's output.
	Log(ctx context.Context, c LogChunk) error
	// LogState tells how much of a job's log the master has.
	LogState(ctx context.Context, jobUUID string) (LogState, error)
	// Done ends a job, conditionally, with its exit code and usage.
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
	// RunningJobs are the jobs whose containers the slave found at start (re-attached).
	RunningJobs []string `json:"runningJobs,omitempty"`
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
	// Jobs are the jobs the master has on this slave and their state; the slave stops and
	// removes containers of jobs not listed or ended.
	Jobs []JobState `json:"jobs"`
}

// JobState is a job's state as the master knows it.
type JobState struct {
	JobUUID string     `json:"jobUuid"`
	Status  job.Status `json:"status"`
}

// RunningJob is a job the slave runs.
type RunningJob struct {
	JobUUID     string     `json:"jobUuid"`
	ContainerID string     `json:"containerId"`
	Status      job.Status `json:"status"` // as the slave has it: STARTING, RUNNING, HALTING
	Usage       *Usage     `json:"usage,omitempty"`
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
	InstanceID string       `json:"instanceId"`
	Jobs       []RunningJob `json:"jobs"`
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

// HeartbeatReply sets the next interval and orders stops.
type HeartbeatReply struct {
	Interval time.Duration `json:"interval"`
	Stops    []StopOrder   `json:"stops"`
}

// NextRequest asks for work.
type NextRequest struct {
	InstanceID string        `json:"instanceId"`
	Wait       time.Duration `json:"wait"`
	// Running are the jobs the slave runs now, so the master neither offers them again nor
	// forgets to order their stop.
	Running []string `json:"running"`
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
	From    job.Status `json:"from"`
	To      job.Status `json:"to"`
	Reason  string     `json:"reason,omitempty"`
	// Resources, when set, replace the job's state.resources (ports really published, ...).
	Resources *job.StateResources `json:"resources,omitempty"`
}

// LogChunk is the next piece of a job's output.
type LogChunk struct {
	JobUUID string `json:"jobUuid"`
	Seq     int    `json:"seq"`
	Data    []byte `json:"data"`
}

// LogState is how much of a job's log the master has.
type LogState struct {
	NextSeq int   `json:"nextSeq"`
	Size    int64 `json:"size"`
}

// Completion ends a job.
type Completion struct {
	JobUUID  string     `json:"jobUuid"`
	From     job.Status `json:"from"`
	To       job.Status `json:"to"` // FINISHED, FAILED or HALTED
	ExitCode *int       `json:"exitCode,omitempty"`
	Reason   string     `json:"reason,omitempty"`
	Usage    *Usage     `json:"usage,omitempty"`
}
