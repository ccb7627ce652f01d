package job

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"time"
)

// HiddenUserURN replaces the owner URNs of a job shown to someone outside its project.
const HiddenUserURN = "urn:publicid:IDN+hidden+user+hidden"

// JupyterHubJobName is the name the JupyterHub spawner gives its jobs. It stays visible in
// sanitized jobs: it tells others that a GPU is held by a notebook, not by a batch job.
const JupyterHubJobName = "JupyterHub-singleuser"

// HiddenImage replaces docker in a sanitized job.
const HiddenImage = "hidden"

// Clone returns a deep copy: nothing in it shares memory with j, so handlers may redact or
// sanitize a job read from a cache without changing the cached one.
func (j *Job) Clone() *Job {
	if j == nil {
		return nil
	}
	c := *j
	c.Request = j.Request.Clone()
	if j.RestartInfo != nil {
		ri := *j.RestartInfo
		c.RestartInfo = &ri
	}
	c.State = j.State.clone()
	return &c
}

// Clone returns a deep copy of the request.
func (r Request) Clone() Request {
	c := r
	c.Resources.GPUModel = slices.Clone(r.Resources.GPUModel)
	c.Resources.Features = slices.Clone(r.Resources.Features)

	c.Docker.Command.List = slices.Clone(r.Docker.Command.List)
	c.Docker.Environment = maps.Clone(r.Docker.Environment)
	c.Docker.Storage = slices.Clone(r.Docker.Storage)
	c.Docker.PortMappings = slices.Clone(r.Docker.PortMappings)
	c.Docker.GroupAdd = slices.Clone(r.Docker.GroupAdd)

	if r.Scheduling.NotBefore != nil {
		t := *r.Scheduling.NotBefore
		c.Scheduling.NotBefore = &t
	}
	if r.Scheduling.NotAfter != nil {
		t := *r.Scheduling.NotAfter
		c.Scheduling.NotAfter = &t
	}
	if r.Scheduling.MaxSimultaneousJobs != nil {
		m := *r.Scheduling.MaxSimultaneousJobs
		c.Scheduling.MaxSimultaneousJobs = &m
	}
	c.Scheduling.ReservationIDs = slices.Clone(r.Scheduling.ReservationIDs)

	c.Extra = Extra{
		SSHPubKeys:     slices.Clone(r.Extra.SSHPubKeys),
		EmailOnQueue:   slices.Clone(r.Extra.EmailOnQueue),
		EmailOnRun:     slices.Clone(r.Extra.EmailOnRun),
		EmailOnEnd:     slices.Clone(r.Extra.EmailOnEnd),
		EmailOnHalt:    slices.Clone(r.Extra.EmailOnHalt),
		EmailOnRestart: slices.Clone(r.Extra.EmailOnRestart),
	}
	return c
}

func (s State) clone() State {
	c := s
	c.EventTimes = maps.Clone(s.EventTimes)
	c.Scheduling.QueuedExplanations = slices.Clone(s.Scheduling.QueuedExplanations)
	for _, t := range []**time.Time{&c.Scheduling.EstimatedStart, &c.Scheduling.EstimatedStartEarliest, &c.Scheduling.EstimatedStartLatest} {
		if *t != nil {
			v := **t
			*t = &v
		}
	}
	if s.Scheduling.HaltEvents != nil {
		c.Scheduling.HaltEvents = make([]HaltEvent, len(s.Scheduling.HaltEvents))
		for i, h := range s.Scheduling.HaltEvents {
			h.HaltedJobs = slices.Clone(h.HaltedJobs)
			h.StartedJobs = slices.Clone(h.StartedJobs)
			c.Scheduling.HaltEvents[i] = h
		}
	}
	if s.Resources != nil {
		res := *s.Resources
		res.GPUIDs = slices.Clone(s.Resources.GPUIDs)
		res.CPUIDs = slices.Clone(s.Resources.CPUIDs)
		res.PortMappings = slices.Clone(s.Resources.PortMappings)
		res.GPUDetails = bytes.Clone(s.Resources.GPUDetails)
		if s.Resources.ExitCode != nil {
			code := *s.Resources.ExitCode
			res.ExitCode = &code
		}
		c.Resources = &res
	}
	c.FinalUsageStatistics = bytes.Clone(s.FinalUsageStatistics)
	c.IdleGPUs = slices.Clone(s.IdleGPUs)
	if s.IdleSince != nil {
		t := *s.IdleSince
		c.IdleSince = &t
	}
	return c
}

// Redacted returns a deep copy whose docker.image shows no password ("user:XXXX@host/…") and
// whose environment shows no secret value (SecretEnvName: JupyterHub's API token, …). Every
// path that shows or returns a job (API, portal, CLI output, logs) uses it; only the slave that
// runs the job gets the original.
func (j *Job) Redacted() *Job {
	c := j.Clone()
	c.Redact()
	return c
}

// Listed is the job as a list's row shows it: its name, the resources it asks for and its
// state, without what it runs (image, command, environment, storage), its description or its
// owner. It shares memory with j, so it is only read: a list made a deep copy of each job to
// redact it, 9 % of the master's CPU of a portal page (bench B4), for rows that show none of
// what redaction hides.
func (j *Job) Listed() *Job {
	if j == nil {
		return nil
	}
	return &Job{UUID: j.UUID, Name: j.Name, Request: Request{Resources: j.Request.Resources},
		State: State{Status: j.State.Status, Created: j.State.Created, Updated: j.State.Updated, EventTimes: j.State.EventTimes,
			Scheduling: j.State.Scheduling, IdleGPUs: j.State.IdleGPUs, IdleSince: j.State.IdleSince}}
}

// Redact is Redacted in place, for a copy of the job that is only shown (a record read for
// one answer): a list of jobs copied each job twice, once when read and once to redact it.
func (j *Job) Redact() {
	if j == nil {
		return
	}
	j.Request.Docker.Image = redactImage(j.Request.Docker.Image)
	for k := range j.Request.Docker.Environment {
		if SecretEnvName(k) {
			j.Request.Docker.Environment[k] = RedactedPassword
		}
	}
}

// secretEnvWords are the parts of an environment variable's name that say its value is a
// secret (JUPYTERHUB_API_TOKEN, which the JupyterHub spawner passes to every notebook job, AWS_SECRET_ACCESS_KEY,
// DB_PASSWORD, …).
var secretEnvWords = []string{"TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "PRIVATE_KEY", "API_KEY"}

// SecretEnvName reports whether an environment variable's name says its value is a secret:
// such values are shown as XXXX wherever a job is shown, as an image's password is.
func SecretEnvName(name string) bool {
	u := strings.ToUpper(name)
	for _, w := range secretEnvWords {
		if strings.Contains(u, w) {
			return true
		}
	}
	return false
}

// Sanitized returns a deep copy fit for users outside the job's project (SPEC section 5): they
// may see that the job exists, how big it is and where it runs, but not who runs what. The name
// becomes "job-" and the first 6 characters of the UUID (except JupyterHub's, which says nothing
// about the user), owner URNs are hidden and the e-mail removed, docker is reduced to
// {"image":"hidden"}, port mappings, extra and the description are removed.
func (j *Job) Sanitized() *Job {
	c := j.Clone()
	if c == nil {
		return nil
	}
	if c.Name != JupyterHubJobName {
		c.Name = "job-" + c.UUID[:min(6, len(c.UUID))]
	}
	c.Description = ""
	c.Owner = Owner{UserURN: HiddenUserURN, ProjectURN: HiddenUserURN}
	c.Request.Docker = Docker{Image: HiddenImage}
	c.Request.Extra = Extra{}
	if c.State.Resources != nil {
		c.State.Resources.PortMappings = []PortMapping{}
	}
	return c
}

// TotalMemoryGb is the memory a job holds on its slave: cpuMemoryGb plus its tmpfs RAM disks
// (SPEC section 3), which is what placement and the container's memory limit must use.
func (r Request) TotalMemoryGb() int {
	n := r.Resources.CPUMemoryGb
	for _, s := range r.Docker.Storage {
		if s.HostPath == TmpfsHostPath {
			n += s.SizeGb
		}
	}
	return n
}
