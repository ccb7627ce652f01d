// Package job holds the GPULab job request (version 2, "Job2"), its conversion from version 1
// (`jobDefinition`), its validation rules and the job state machine.
//
// It is the one place that knows what a valid job is: the API, the portal's Create Job form,
// the CLI's convert command and the scheduler all call into it, so a rule changed here changes
// everywhere at once. It has no dependencies on the rest of the project.
package job

import (
	"encoding/json"
	"time"
)

// Job is a job as the API serves it and the store keeps it: the normalised request plus the
// server-owned parts (uuid, owner, state, restart info). Field names and nesting follow imec's
// GPULab JSON so that existing clients read it unchanged.
type Job struct {
	UUID                  string       `json:"uuid"`
	Name                  string       `json:"name"`
	Description           string       `json:"description,omitempty"`
	DeploymentEnvironment string       `json:"deploymentEnvironment,omitempty"`
	Request               Request      `json:"request"`
	Owner                 Owner        `json:"owner"`
	State                 State        `json:"state"`
	RestartInfo           *RestartInfo `json:"restartInfo,omitempty"`
}

// Owner says who submitted a job and in which project. On input only ProjectURN is honoured;
// the server fills the user from authentication.
type Owner struct {
	UserURN    string `json:"userUrn,omitempty"`
	UserEmail  string `json:"userEmail,omitempty"`
	ProjectURN string `json:"projectUrn,omitempty"`
}

// RestartInfo links a restart job to the job it continues.
type RestartInfo struct {
	InitialJobUUID string `json:"initialJobUuid"`
	RestartCount   int    `json:"restartCount"`
}

// Request is the user's request: what to run (Docker), what it needs (Resources), how it may be
// scheduled (Scheduling) and notification extras.
type Request struct {
	Resources  Resources  `json:"resources"`
	Docker     Docker     `json:"docker"`
	Scheduling Scheduling `json:"scheduling"`
	Extra      Extra      `json:"extra"`
}

// Resources is what a job needs on one slave.
type Resources struct {
	CPUs            int      `json:"cpus"`
	GPUs            int      `json:"gpus"`
	CPUMemoryGb     int      `json:"cpuMemoryGb"`
	GPUMemoryGb     int      `json:"gpuMemoryGb,omitempty"`
	GPUModel        []string `json:"gpuModel,omitempty"`
	MinCudaVersion  int      `json:"minCudaVersion,omitempty"`
	ClusterID       int      `json:"clusterId,omitempty"`
	SlaveName       string   `json:"slaveName,omitempty"`
	SlaveInstanceID string   `json:"slaveInstanceId,omitempty"`
	Features        []string `json:"features,omitempty"`
}

// Docker says which image runs which command with which environment, storage and ports.
type Docker struct {
	// Image is the image string as given, credentials included: it is needed to pull. It is
	// redacted (user:XXXX@...) whenever a job is shown; see Image.Redacted and Job.Redacted.
	Image                  string            `json:"image"`
	Command                Command           `json:"command,omitzero"`
	Environment            map[string]string `json:"environment,omitempty"`
	Storage                []Storage         `json:"storage,omitempty"`
	PortMappings           []PortMapping     `json:"portMappings,omitempty"`
	ProjectGidVariableName string            `json:"projectGidVariableName,omitempty"`
	WorkingDir             string            `json:"workingDir,omitempty"`
	User                   string            `json:"user,omitempty"`
	GroupAdd               []string          `json:"groupAdd,omitempty"`
}

// Command is the container command. Users write it either as one string, split into words by
// POSIX shell rules but never run through a shell (as docker does), or as a list used as is.
// The form given is kept so that a job shown or cloned looks as it was written.
type Command struct {
	// Text is set when the command was given as a string.
	Text string
	// List is set when the command was given as a list.
	List []string
	// IsList records which form was given.
	IsList bool
}

// Storage is one bind mount (or a tmpfs RAM disk when HostPath is "tmpfs").
type Storage struct {
	HostPath      string `json:"hostPath"`
	ContainerPath string `json:"containerPath"`
	SizeGb        int    `json:"sizeGb,omitempty"`
}

// TmpfsHostPath is the HostPath that asks for a RAM disk instead of a bind mount.
const TmpfsHostPath = "tmpfs"

// ProjectShareAuto is the HostPath meaning "the project share of the cluster the job lands on".
const ProjectShareAuto = "PROJECT_SHARE_AUTO"

// PortMapping publishes a container port. HostPort 0 lets the slave pick one; the port really
// used is reported back in State.Resources.PortMappings.
type PortMapping struct {
	ContainerPort int    `json:"containerPort"`
	HostPort      int    `json:"hostPort,omitempty"`
	HostIP        string `json:"hostIp,omitempty"`
}

// Scheduling holds the options of imec's scheduling reference. Stored jobs always have
// MinDuration and MaxDuration set (defaults filled by Parse).
type Scheduling struct {
	Interactive            bool                 `json:"interactive"`
	Restartable            bool                 `json:"restartable"`
	AllowHaltWithoutSignal bool                 `json:"allowHaltWithoutSignal"`
	MinDuration            Duration             `json:"minDuration"`
	MaxDuration            Duration             `json:"maxDuration"`
	NotBefore              *time.Time           `json:"notBefore,omitempty"`
	NotAfter               *time.Time           `json:"notAfter,omitempty"`
	MaxSimultaneousJobs    *MaxSimultaneousJobs `json:"maxSimultaneousJobs,omitempty"`
	ReservationIDs         []string             `json:"reservationIds,omitempty"`
}

// MaxSimultaneousJobs caps how many jobs sharing BucketName run at once.
type MaxSimultaneousJobs struct {
	BucketName string `json:"bucketName"`
	BucketMax  int    `json:"bucketMax"`
}

// Extra holds e-mail notification lists and SSH keys.
type Extra struct {
	SSHPubKeys     []string `json:"sshPubKeys,omitempty"`
	EmailOnQueue   []string `json:"emailOnQueue,omitempty"`
	EmailOnRun     []string `json:"emailOnRun,omitempty"`
	EmailOnEnd     []string `json:"emailOnEnd,omitempty"`
	EmailOnHalt    []string `json:"emailOnHalt,omitempty"`
	EmailOnRestart []string `json:"emailOnRestart,omitempty"`
}

// State is the server-owned part of a job.
type State struct {
	Status               Status               `json:"status"`
	Created              time.Time            `json:"created"` // when the job was submitted
	Updated              time.Time            `json:"updated"` // when its state last changed
	EventTimes           map[Status]time.Time `json:"eventTimes"`
	Scheduling           StateScheduling      `json:"scheduling"`
	Resources            *StateResources      `json:"resources,omitempty"`
	FinalUsageStatistics json.RawMessage      `json:"finalUsageStatistics,omitempty"`
	// IdleGPUs are the job's GPUs (indices on its slave) that the master found idle: under the
	// idle threshold for the idle time (issue 14); IdleSince is when it flagged them. Empty
	// when the job's GPUs are in use.
	IdleGPUs  []int      `json:"idleGpus,omitempty"`
	IdleSince *time.Time `json:"idleSince,omitempty"`
}

// StateScheduling is what the scheduler decided or found about a job.
type StateScheduling struct {
	AssignedClusterID  int      `json:"assignedClusterId,omitempty"`
	AssignedSlaveName  string   `json:"assignedSlaveName,omitempty"`
	AssignedInstanceID string   `json:"assignedInstanceId,omitempty"`
	QueuedExplanations []string `json:"queuedExplanations,omitempty"`
	// EstimatedStart is when the scheduler expects a queued job to start (when it can tell):
	// the likely start, from running jobs' maxDuration and how much of it jobs typically use.
	EstimatedStart *time.Time `json:"estimatedStart,omitempty"`
	// EstimatedStartEarliest and EstimatedStartLatest are the range around it: the start if jobs
	// end as early as they often do, and if every job ahead runs to its maxDuration (no halts).
	EstimatedStartEarliest *time.Time  `json:"estimatedStartEarliest,omitempty"`
	EstimatedStartLatest   *time.Time  `json:"estimatedStartLatest,omitempty"`
	TallyIncrement         float64     `json:"tallyIncrement,omitempty"`
	HaltEvents             []HaltEvent `json:"haltEvents,omitempty"`
}

// StartEstimate is what the scheduler stores of a queued job's expected start: the fields of
// StateScheduling with the same names.
type StartEstimate struct {
	Start    time.Time  `json:"estimatedStart"`
	Earliest *time.Time `json:"estimatedStartEarliest,omitempty"`
	Latest   *time.Time `json:"estimatedStartLatest,omitempty"`
}

// HaltEvent records one scheduler halt decision that involved this job.
type HaltEvent struct {
	Time         time.Time `json:"time"`
	Reason       string    `json:"reason"`
	HaltedJobs   []string  `json:"haltedJobs,omitempty"`
	StartedJobs  []string  `json:"startedJobs,omitempty"`
	VictimScore  float64   `json:"victimScore,omitempty"`
	StarterScore float64   `json:"starterScore,omitempty"`
}

// StateResources is what a job got on its slave (from STARTING on).
type StateResources struct {
	ClusterID       int             `json:"clusterId"`
	GPUIDs          []int           `json:"gpuIds"`
	CPUIDs          []int           `json:"cpuIds"`
	CPUMemoryGb     int             `json:"cpuMemoryGb"`
	SlaveName       string          `json:"slaveName"`
	SlaveHost       string          `json:"slaveHost"`
	SlaveInstanceID string          `json:"slaveInstanceId"`
	PortMappings    []PortMapping   `json:"portMappings"`
	GPUDetails      json.RawMessage `json:"gpuDetails,omitempty"`
	ExitCode        *int            `json:"exitCode,omitempty"`
	// SSH access to a running job (imec's fields): the slave's SSH endpoint, the user name that
	// names the job there, and the master as jump host when it serves as one. Never stored:
	// the master fills them when it shows a RUNNING job (the endpoint is the slave's, the job
	// only runs there).
	SSHHost          string `json:"sshHost,omitempty"`
	SSHPort          int    `json:"sshPort,omitempty"`
	SSHUsername      string `json:"sshUsername,omitempty"`
	SSHProxyHost     string `json:"sshProxyHost,omitempty"`
	SSHProxyPort     int    `json:"sshProxyPort,omitempty"`
	SSHProxyUsername string `json:"sshProxyUsername,omitempty"`
}
