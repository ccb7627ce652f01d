// Package views holds the portal's templ components: the layout, one file per page, and the
// partials that htmx swaps in (each with a stable id, so a page and its refreshes agree on what
// is replaced). Components take plain props structs that the handlers fill; they never reach
// the store or the request themselves, which keeps them renderable in tests with fixed data.
package views

import (
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
)

// Chrome is what every full page needs around its content: who is logged in (for the menu and
// the admin link), the CSRF token every form and htmx request carries, which menu entry is
// current, and the clock that relative times are computed from.
type Chrome struct {
	UserName  string
	Admin     bool
	CSRFToken string
	// Active is the current menu entry: one of the Nav* constants.
	Active string
	Now    time.Time
}

// Menu entries, for Chrome.Active.
const (
	NavJobs         = "jobs"
	NavCreate       = "create"
	NavSlaves       = "slaves"
	NavClusters     = "clusters"
	NavProfile      = "profile"
	NavAdmin        = "admin"
	NavUsage        = "usage"
	NavReservations = "reservations"
)

// UsageView is a user's fair-share standing: his tally, his rank and what it means.
type UsageView struct {
	Chrome
	Tally       float64
	Rank        int
	ActiveUsers int
	HalfLife    string
	Explanation string
	// GPUHour, CPUHour and MemoryGbHour are what an hour of each adds to the tally.
	GPUHour, CPUHour, MemoryGbHour float64
	Queued                         []UsageJob
	// IdleGPUHours are the GPU-hours of the last 7 days his jobs held a GPU under the idle
	// threshold (IdleThreshold percent).
	IdleGPUHours  float64
	IdleThreshold float64
}

// UsageJob is one of the user's queued jobs with why it waits.
type UsageJob struct {
	UUID, Name   string
	Explanations []string
}

// LogoutPath is where the logout form posts (served by web's session code).
const LogoutPath = "/logout"

// ErrorView is an error as a page shows it: the HTTP status and the message the API would
// give, with the field problems when there are some.
type ErrorView struct {
	Status  int
	Message string
	Details []job.Problem
}

// JobRow is one job in a list: the job as the caller may see it (redacted, or sanitized when
// it is another project's), and what the caller may do with it.
type JobRow struct {
	Job *job.Job
	// Full is false for other projects' jobs: sanitized, no link, no actions.
	Full bool
	// CanTouch is true for the owner and admins: the state-changing actions are offered.
	CanTouch bool
	User     string
	Project  string
}

// JobsQuery is the filter of the Jobs page, as its form and URL carry it.
type JobsQuery struct {
	// Scope is "mine" (default), "projects" or "running" (everybody's running jobs).
	Scope string
	// State is "" (all but deleted), "pending", "running", "finished", "deleted" or a state name.
	State   string
	Project string
	Cluster string
	// Page is the page of the list shown, newest first (0 and 1: the first).
	Page int
}

// Choice is one option of a select.
type Choice struct {
	Value, Label string
}

// JobsView is the Jobs page.
type JobsView struct {
	Chrome
	Query JobsQuery
	Rows  []JobRow
	// More says a next (older) page may hold jobs: this one is full.
	More bool
	// Projects and Clusters are the choices of the filter selects.
	Projects []Choice
	Clusters []Choice
}

// TimelineEntry is when a job reached a state.
type TimelineEntry struct {
	Status job.Status
	At     time.Time
}

// PortLink is a published port of a running job, with the address it is reached at.
type PortLink struct {
	ContainerPort, HostPort int
	URL                     string
}

// GPUView is one GPU of a slave (or assigned to a job).
type GPUView struct {
	Index     int
	UUID      string
	Model     string
	MemoryMiB int64
	Fake      bool
	// Util is the utilisation as shown ("37 %"), "–" when the slave reports none.
	Util string
	// Job is the job that holds the GPU, nil when it is free.
	Job *JobRef
}

// JobRef names a job shown elsewhere (on a slave's GPU): a link when the caller may see it.
type JobRef struct {
	UUID, Name string
	Link       bool
}

// LogView is the log panel of a job: the text shown, the byte offset it ends at (where the
// live tail continues), and whether the tail still polls.
type LogView struct {
	JobUUID string
	Text    string
	// Offset is the log size the text ends at; Skipped the bytes left out at the start of a
	// long log (the raw log has them).
	Offset, Skipped int64
	Follow          bool
}

// JobDetailView is the job detail page.
type JobDetailView struct {
	Chrome
	Row          JobRow
	Timeline     []TimelineEntry
	Events       []store.Event
	Ports        []PortLink
	GPUs         []GPUView
	Log          LogView
	RequestJSON  string
	ClusterName  string
	Explanations []string
	// EstimatedStart is when the scheduler expects the queued job to start (nil: unknown).
	EstimatedStart *time.Time
	// EstimateRange is the range around it, "likely 14:10–15:30" (UTC; "" when none).
	EstimateRange string
	// SSH is how the owner logs in to the running job (nil: not running, not his, or its slave
	// serves no SSH).
	SSH *SSHView
	// Usage is the job's usage charts and verdict (nil: the job never ran).
	Usage *JobUsageView
}

// SSHView is the ssh command that logs in to a job, and one -L form per declared port.
type SSHView struct {
	Command      string
	CLICommand   string
	KnownHostURL string
	Forwards     []SSHForward
}

// SSHForward forwards a local port to a port of the job.
type SSHForward struct {
	ContainerPort int
	Command       string
}

// JobForm holds the common fields of the Create Job form as the user typed them. Everything
// else of a job lives in the JSON editor beside it.
type JobForm struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Project     string `json:"project"`
	Image       string `json:"image"`
	Command     string `json:"command"`
	CPUs        string `json:"cpus"`
	GPUs        string `json:"gpus"`
	CPUMemoryGb string `json:"cpuMemoryGb"`
	GPUModel    string `json:"gpuModel"`
	ClusterID   string `json:"clusterId"`
	Interactive bool   `json:"interactive"`
	Restartable bool   `json:"restartable"`
	MinDuration string `json:"minDuration"`
	MaxDuration string `json:"maxDuration"`
	Ports       string `json:"ports"`
	Storage     string `json:"storage"`
	Environment string `json:"environment"`
}

// JobFormView is the Create Job page.
type JobFormView struct {
	Chrome
	Form JobForm
	// Base is the form as it was rendered (JSON of a JobForm), sent back hidden: fields the user
	// changed since override the JSON editor, the others leave it alone.
	Base string
	// JSON is the editor's text.
	JSON string
	Hold bool
	// Projects (value: URN) and Clusters (value: id) are the select choices.
	Projects []Choice
	Clusters []Choice
	// FieldErrors maps a form field (JobForm's JSON names) to its problems; Errors are the
	// problems no field shows, listed above the editor.
	FieldErrors map[string][]string
	Errors      []string
	// Notice says what just happened ("Converted from version 1").
	Notice string
	// CloneOf is the job this form was cloned from; ImagePasswordHidden says its image had
	// registry credentials whose password was hidden.
	CloneOf             string
	ImagePasswordHidden bool
}

// FreeTotal is a free/total pair of a resource.
type FreeTotal struct {
	Free, Total float64
}

// SlaveView is one slave on the Live > Slaves page.
type SlaveView struct {
	Name          string
	Host          string
	ClusterID     int
	ClusterName   string
	Online        bool
	Accepting     bool
	LastHeartbeat *time.Time
	Version       string
	CudaVersion   string
	Fake          bool
	CPUs          FreeTotal
	MemoryGb      FreeTotal
	GPUsFree      FreeTotal
	GPUs          []GPUView
}

// SlavesView is the Live > Slaves page.
type SlavesView struct {
	Chrome
	Slaves []SlaveView
}

// ClusterView is one cluster on the Live > Clusters page.
type ClusterView struct {
	ID           int
	Name         string
	Description  string
	Private      bool
	Slaves       int
	OnlineSlaves int
	Workers      FreeTotal
	GPUs         FreeTotal
	CPUs         FreeTotal
	MemoryGb     FreeTotal
	GPUModels    []string
}

// ClustersView is the Live > Clusters page.
type ClustersView struct {
	Chrome
	Clusters []ClusterView
}

// ProfileView is the Profile page.
type ProfileView struct {
	Chrome
	User     store.User
	Projects []store.Project
	SSHKeys  []store.SSHKey
	// Certificates are the user's API certificates, newest first (each with its serial, so he
	// can revoke one that leaked).
	Certificates []store.Certificate
	// CertError and KeyError are the problems of the last certificate or key form; KeyName and
	// KeyText what was typed into the key form.
	CertError, KeyError string
	KeyName, KeyText    string
	// Mail lists the mail categories with whether the user gets them (issue 14).
	Mail []MailCategory
}

// MailCategory is one kind of job mail a user may turn off on his Profile.
type MailCategory struct {
	Name, Label string
	On          bool
}

// AdminProject is a project with its members.
type AdminProject struct {
	Project store.Project
	Members []store.User
}

// AdminCluster is a cluster with its owning projects.
type AdminCluster struct {
	Cluster store.Cluster
	Owners  []store.Project
}

// AdminSlave is a slave as the admin page shows it.
type AdminSlave struct {
	Name          string
	ClusterID     int
	Online        bool
	Accepting     bool
	Disabled      bool
	LastHeartbeat *time.Time
}

// AdminView is the Admin page.
type AdminView struct {
	Chrome
	SelfID   int64
	Users    []store.User
	Projects []AdminProject
	Clusters []AdminCluster
	Slaves   []AdminSlave
	// Certificates are every certificate the master issued, newest first.
	Certificates []store.Certificate
	// Services are the service identities (issue 13), by name.
	Services []store.Service
}

// ReservationsView is the reservations calendar: the reservations the user may see, the days
// shown, and for admins the booking form.
type ReservationsView struct {
	Chrome
	Days []time.Time // the calendar's columns: midnight UTC of each day shown
	Rows []ReservationRow
	// CanCreate shows the booking form (admins); Clusters are its cluster choices.
	CanCreate bool
	Clusters  []int
}

// ReservationRow is one reservation in the calendar.
type ReservationRow struct {
	ID, Name   string
	Resources  string // "2 GPUs of cluster 1", "whole slave gpu1"
	Holders    string // "users alice; projects vision"
	Start, End time.Time
	Mine       bool // the user holds it: his jobs may name it
	Active     bool // its window has started
	CanDelete  bool
}

// SlaveTokenView is the answer to an admin's new join token: the token, shown this once, and
// the command that joins the slave with it.
type SlaveTokenView struct {
	Chrome
	Name      string
	ClusterID int
	Valid     string
	Token     string
	Command   string
}
