package handlers

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/store"
)

// The v4.0 job is the shape of imec's `Job` model (imecilabt-gpulab-common 6.x, job2.py), which
// imec's gpulab-cli validates every answer against with unknown fields forbidden. Nothing may be
// added to it, so our additions stay in v3.1 (what our CLI and portal read): the state's
// created/updated times, ONHOLD's event time, the exit code and estimatedStart (v4.0 says the
// latter as a line of queuedExplanations, a list imec has). The mapping happens here, on the
// way out; the stored job is the same for every version. handlers/testdata/imec holds the
// JSON Schemas the conformance test (internal/e2e) checks real answers against.

// v4Job is imec's Job: JobBase plus a JobOwner.
type v4Job struct {
	UUID                  string        `json:"uuid"`
	Name                  string        `json:"name"`
	Description           string        `json:"description,omitempty"`
	DeploymentEnvironment string        `json:"deploymentEnvironment,omitempty"`
	Request               job.Request   `json:"request"`
	State                 v4State       `json:"state"`
	RestartInfo           v4RestartInfo `json:"restartInfo"`
	Owner                 v4Owner       `json:"owner"`
}

// v4RestartInfo is always present: imec fills it for a job that was never restarted (the job
// itself, count 0), so its answers always carry it.
type v4RestartInfo struct {
	InitialJobUUID string `json:"initialJobUuid"`
	RestartCount   int    `json:"restartCount"`
}

// v4Owner is imec's JobOwner: all three fields are required, the e-mail must be an address.
type v4Owner struct {
	UserURN    string `json:"userUrn"`
	UserEmail  string `json:"userEmail"`
	ProjectURN string `json:"projectUrn"`
}

// imec's placeholders for what a sanitized job hides.
const (
	v4HiddenProjectURN = "urn:publicid:IDN+hidden+project+hidden"
	v4HiddenEmail      = "hidden@hidden.hidden"
)

// v4State is imec's JobState.
type v4State struct {
	Status               job.Status         `json:"status"`
	Scheduling           v4StateScheduling  `json:"scheduling"`
	EventTimes           map[string]v4Time  `json:"eventTimes"`
	Resources            *v4StateResources  `json:"resources,omitempty"`
	FinalUsageStatistics *v4UsageStatistics `json:"finalUsageStatistics,omitempty"`
}

// v4Time marshals as imec writes its times: RFC 3339 in UTC, whole seconds.
type v4Time time.Time

func (t v4Time) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Time(t).UTC().Format("2006-01-02T15:04:05Z") + `"`), nil
}

// v4StateScheduling is imec's JobStateScheduling.
type v4StateScheduling struct {
	AssignedClusterID  *int         `json:"assignedClusterId,omitempty"`
	AssignedInstanceID string       `json:"assignedInstanceId,omitempty"`
	AssignedSlaveName  string       `json:"assignedSlaveName,omitempty"`
	QueuedExplanations []string     `json:"queuedExplanations"`
	TallyIncrement     *float64     `json:"tallyIncrement,omitempty"`
	HaltEvents         []v4HaltInfo `json:"haltEvents"`
}

// v4HaltInfo is imec's HaltInfo: one halt decision, with the slave it happened on and the
// scores of both sides in the order of their job lists.
type v4HaltInfo struct {
	Reason           string    `json:"reason"`
	Time             v4Time    `json:"time"`
	StartedJobUUIDs  []string  `json:"startedJobUuids"`
	HaltedJobUUIDs   []string  `json:"haltedJobUuids"`
	SlaveName        string    `json:"slaveName"`
	SlaveInstance    string    `json:"slaveInstance"`
	StartedJobScores []float64 `json:"startedJobScores"`
	HaltedJobScores  []float64 `json:"haltedJobScores"`
}

// v4HaltReasons are imec's HaltReason names; our scheduler's reasons are among them.
var v4HaltReasons = map[string]bool{"UNKNOWN": true, "USER": true, "ADMIN": true, "SCORE": true, "RESERVATION": true, "CLUSTER": true}

// v4StateResources is imec's JobStateResources.
type v4StateResources struct {
	ClusterID        int               `json:"clusterId"`
	GPUIDs           []int             `json:"gpuIds"`
	CPUIDs           []int             `json:"cpuIds"`
	CPUMemoryGb      int               `json:"cpuMemoryGb"` // without tmpfs, which is TmpfsMemGb
	GPUMemoryGb      int               `json:"gpuMemoryGb"`
	SlaveName        string            `json:"slaveName"`
	SlaveHost        string            `json:"slaveHost"`
	SlaveInstanceID  string            `json:"slaveInstanceId"`
	SlaveInstancePID int               `json:"slaveInstancePid"`
	WorkerID         int               `json:"workerId"`
	PortMappings     []job.PortMapping `json:"portMappings"`
	GPUDetails       *v4GPUOverview    `json:"gpuDetails,omitempty"`
	TmpfsMemGb       int               `json:"tmpfsMemGb"`
	SSHHost          string            `json:"sshHost,omitempty"`
	SSHPort          int               `json:"sshPort,omitempty"`
	SSHUsername      string            `json:"sshUsername,omitempty"`
	SSHProxyHost     string            `json:"sshProxyHost,omitempty"`
	SSHProxyPort     int               `json:"sshProxyPort,omitempty"`
	SSHProxyUsername string            `json:"sshProxyUsername,omitempty"`
}

// v4GPUOverview is imec's GpuOverview. NVML facts our slaves do not report (serial, board,
// PCIe link, VBIOS) are imec's own "N/A" or 0.
type v4GPUOverview struct {
	CudaVersionFull  string      `json:"cudaVersionFull"`
	CudaVersionInt   int         `json:"cudaVersionInt"`
	CudaVersionMajor int         `json:"cudaVersionMajor"`
	CudaVersionMinor int         `json:"cudaVersionMinor"`
	DriverVersion    string      `json:"driverVersion"`
	NvmlVersion      string      `json:"nvmlVersion"`
	GPUs             []v4GPUInfo `json:"gpus"`
}

// v4GPUInfo is imec's GpuInfo.
type v4GPUInfo struct {
	Index                 int    `json:"index"`
	UUID                  string `json:"uuid"`
	Serial                string `json:"serial"`
	Name                  string `json:"name"`
	Brand                 string `json:"brand"`
	MinorNumber           int    `json:"minorNumber"`
	BoardID               int    `json:"boardId"`
	BridgeChipInfo        string `json:"bridgeChipInfo"`
	IsMultiGpuBoard       bool   `json:"isMultiGpuBoard"`
	MaxPcieLinkGeneration int    `json:"maxPcieLinkGeneration"`
	MaxPcieLinkWidth      int    `json:"maxPcieLinkWidth"`
	VbiosVersion          string `json:"vbiosVersion"`
}

// v4UsageStatistics is imec's GPULabUsageStatistics, derived from the last usage sample our
// slave reports with a job's end (protocol.Usage) and the job's times and resources.
type v4UsageStatistics struct {
	ContainerStatistics v4ContainerUsage `json:"containerStatistics"`
	GPUStatistics       v4GPUUsage       `json:"gpuStatistics"`
}

// v4ContainerUsage is imec's ContainerUsageStatistics. Counters our slave does not measure
// (kernel/user split, PIDs, network, peak memory) are -1, imec's own "not valid" value.
type v4ContainerUsage struct {
	FirstTime            v4Time  `json:"firstTime"`
	LastTime             v4Time  `json:"lastTime"`
	AggPeriodNs          int64   `json:"aggPeriodNs"`
	CPUCount             int     `json:"cpuCount"`
	CPUUsage             float64 `json:"cpuUsage"` // in CPUs, 0..cpuCount
	CPUUsageTotalNs      int64   `json:"cpuUsageTotalNs"`
	CPUUsageKernelmodeNs int64   `json:"cpuUsageKernelmodeNs"`
	CPUUsageUsermodeNs   int64   `json:"cpuUsageUsermodeNs"`
	MaxPidCount          int     `json:"maxPidCount"`
	MemLimitByte         int64   `json:"memLimitByte"`
	MemUsageByte         int64   `json:"memUsageByte"`
	MemMaxUsageByte      int64   `json:"memMaxUsageByte"`
	NetworkRxByte        int64   `json:"networkRxByte"`
	NetworkTxByte        int64   `json:"networkTxByte"`
}

// v4GPUUsage is imec's GpuUsageStatistics (utilisations in GPUs, 0..gpuCount).
type v4GPUUsage struct {
	GPUCount              int     `json:"gpuCount"`
	AverageUtilization    float64 `json:"averageUtilization"`
	AverageMemUtilization float64 `json:"averageMemUtilization"`
}

// slaveFacts is what v4.0 needs of a slave beyond the job: its process id and GPU software
// versions, from its latest registration.
type slaveFacts struct {
	instanceID    string
	pid           int
	driverVersion string
	cudaVersion   string
}

// slaveFactsOf indexes what v4.0 shows of the slaves by name.
func slaveFactsOf(ss []store.SlaveShown) map[string]slaveFacts {
	facts := make(map[string]slaveFacts, len(ss))
	for _, s := range ss {
		facts[s.Name] = slaveFacts{instanceID: s.InstanceID, pid: s.PID, driverVersion: s.DriverVersion, cudaVersion: s.CudaVersion}
	}
	return facts
}

// v4JobOf maps a (redacted, maybe sanitized) job to imec's Job. sanitized hides GPU details as
// imec's sanitized copy does.
func v4JobOf(j *job.Job, sanitized bool, slaves map[string]slaveFacts) v4Job {
	out := v4Job{
		UUID: j.UUID, Name: j.Name, Description: j.Description, DeploymentEnvironment: j.DeploymentEnvironment,
		Request:     v4Request(j.Request),
		State:       v4StateOf(j, sanitized, slaves),
		RestartInfo: v4RestartInfo{InitialJobUUID: j.UUID},
		Owner:       v4OwnerOf(j.Owner),
	}
	if ri := j.RestartInfo; ri != nil && ri.InitialJobUUID != "" {
		out.RestartInfo = v4RestartInfo{InitialJobUUID: ri.InitialJobUUID, RestartCount: ri.RestartCount}
	}
	return out
}

// v4Request adapts the request where imec's rules are stricter than ours: a working directory
// ends with a slash; gpuMemoryGb is more than 1 (a minimum of 1 GB, which every GPU has, is
// left out); a user is a name or id without a group ("1000:1000" shows as "1000").
func v4Request(r job.Request) job.Request {
	if wd := r.Docker.WorkingDir; wd != "" && !strings.HasSuffix(wd, "/") {
		r.Docker.WorkingDir = wd + "/"
	}
	if r.Resources.GPUMemoryGb == 1 {
		r.Resources.GPUMemoryGb = 0
	}
	r.Docker.User, _, _ = strings.Cut(r.Docker.User, ":")
	return r
}

func v4OwnerOf(o job.Owner) v4Owner {
	out := v4Owner{UserURN: o.UserURN, UserEmail: o.UserEmail, ProjectURN: o.ProjectURN}
	if out.ProjectURN == "" || out.ProjectURN == job.HiddenUserURN {
		out.ProjectURN = v4HiddenProjectURN
	}
	if out.UserURN == "" {
		out.UserURN = job.HiddenUserURN
	}
	if out.UserEmail == "" {
		out.UserEmail = v4HiddenEmail
	}
	return out
}

func v4StateOf(j *job.Job, sanitized bool, slaves map[string]slaveFacts) v4State {
	st := j.State
	sch := st.Scheduling
	out := v4State{
		Status: st.Status,
		Scheduling: v4StateScheduling{
			AssignedInstanceID: sch.AssignedInstanceID, AssignedSlaveName: sch.AssignedSlaveName,
			QueuedExplanations: v4Explanations(st),
			HaltEvents:         make([]v4HaltInfo, 0, len(sch.HaltEvents)),
		},
		EventTimes: v4EventTimes(st),
	}
	if sch.AssignedClusterID > 0 {
		id := sch.AssignedClusterID
		out.Scheduling.AssignedClusterID = &id
	}
	if sch.TallyIncrement != 0 {
		inc := sch.TallyIncrement
		out.Scheduling.TallyIncrement = &inc
	}
	for _, ev := range sch.HaltEvents {
		out.Scheduling.HaltEvents = append(out.Scheduling.HaltEvents, v4HaltInfoOf(ev, sch))
	}
	if res := st.Resources; res != nil {
		out.Resources = v4ResourcesOf(j, res, sanitized, slaves[res.SlaveName])
	}
	if len(st.FinalUsageStatistics) > 0 {
		out.FinalUsageStatistics = v4UsageOf(j)
	}
	return out
}

// v4Explanations are the scheduler's reasons, plus our estimated start as one more line while
// the job waits: imec's model has no field for it, but has this list of text.
func v4Explanations(st job.State) []string {
	out := append([]string{}, st.Scheduling.QueuedExplanations...)
	if est := st.Scheduling.EstimatedStart; est != nil && st.Status == job.StatusQueued {
		line := "Estimated start: " + est.UTC().Format(time.RFC3339)
		if rg := st.Scheduling.EstimateRange(time.Now(), time.UTC); rg != "" {
			line += " (" + rg + " UTC)"
		}
		out = append(out, line)
	}
	return out
}

// v4EventTimes has imec's required created and statusUpdated, and a time per state imec knows
// (all but ONHOLD, which imec's model does not have).
func v4EventTimes(st job.State) map[string]v4Time {
	created, updated := st.Created, st.Updated
	if created.IsZero() {
		created = time.Now()
		for _, t := range st.EventTimes {
			if !t.IsZero() && t.Before(created) {
				created = t
			}
		}
	}
	if updated.IsZero() {
		updated = created
	}
	out := map[string]v4Time{"created": v4Time(created), "statusUpdated": v4Time(updated)}
	for s, t := range st.EventTimes {
		if s == job.StatusOnHold || t.IsZero() {
			continue
		}
		out[string(s)] = v4Time(t)
	}
	return out
}

// v4HaltInfoOf adds what imec's HaltInfo has and our event leaves to the job: the slave (the
// job's own), and a score per job listed.
func v4HaltInfoOf(ev job.HaltEvent, sch job.StateScheduling) v4HaltInfo {
	reason := ev.Reason
	if !v4HaltReasons[reason] {
		reason = "UNKNOWN"
	}
	scores := func(n int, s float64) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = s
		}
		return out
	}
	return v4HaltInfo{
		Reason: reason, Time: v4Time(ev.Time),
		StartedJobUUIDs: append([]string{}, ev.StartedJobs...), HaltedJobUUIDs: append([]string{}, ev.HaltedJobs...),
		SlaveName: sch.AssignedSlaveName, SlaveInstance: sch.AssignedInstanceID,
		StartedJobScores: scores(len(ev.StartedJobs), ev.StarterScore), HaltedJobScores: scores(len(ev.HaltedJobs), ev.VictimScore),
	}
}

// tmpfsGb is the RAM disk memory of a request (part of the memory a placement books).
func tmpfsGb(r job.Request) int {
	return r.TotalMemoryGb() - r.Resources.CPUMemoryGb
}

func v4ResourcesOf(j *job.Job, res *job.StateResources, sanitized bool, slave slaveFacts) *v4StateResources {
	tmpfs := tmpfsGb(j.Request)
	out := &v4StateResources{
		ClusterID: res.ClusterID, GPUIDs: append([]int{}, res.GPUIDs...), CPUIDs: append([]int{}, res.CPUIDs...),
		CPUMemoryGb: max(res.CPUMemoryGb-tmpfs, 0), TmpfsMemGb: tmpfs,
		SlaveName: res.SlaveName, SlaveHost: res.SlaveHost, SlaveInstanceID: res.SlaveInstanceID,
		// The slave process is known while the job's instance is the slave's latest; -1 (imec's
		// value for "not shown") otherwise. Our slave runs every job itself: worker 0.
		SlaveInstancePID: -1,
		PortMappings:     append([]job.PortMapping{}, res.PortMappings...),
		SSHHost:          res.SSHHost, SSHPort: res.SSHPort, SSHUsername: res.SSHUsername,
		SSHProxyHost: res.SSHProxyHost, SSHProxyPort: res.SSHProxyPort, SSHProxyUsername: res.SSHProxyUsername,
	}
	if slave.instanceID != "" && slave.instanceID == res.SlaveInstanceID && slave.pid > 0 {
		out.SlaveInstancePID = slave.pid
	}
	var gpus []protocol.GPU
	if len(res.GPUDetails) > 0 {
		_ = json.Unmarshal(res.GPUDetails, &gpus) // written by our scheduler; unreadable means none
	}
	var mib int64
	for _, g := range gpus {
		mib += g.MemoryMiB
	}
	out.GPUMemoryGb = int(mib / 1024) // rounded down, as imec does
	if len(gpus) > 0 && !sanitized {
		out.GPUDetails = v4GPUOverviewOf(gpus, slave)
	}
	return out
}

func v4GPUOverviewOf(gpus []protocol.GPU, slave slaveFacts) *v4GPUOverview {
	major, minor := cudaParts(slave.cudaVersion)
	out := &v4GPUOverview{
		CudaVersionFull: cmp.Or(slave.cudaVersion, "N/A"), CudaVersionInt: major*1000 + minor*10,
		CudaVersionMajor: major, CudaVersionMinor: minor,
		DriverVersion: cmp.Or(slave.driverVersion, "N/A"), NvmlVersion: "N/A",
		GPUs: make([]v4GPUInfo, len(gpus)),
	}
	if slave.driverVersion != "" && major > 0 {
		out.NvmlVersion = strconv.Itoa(major) + "." + slave.driverVersion
	}
	for i, g := range gpus {
		out.GPUs[i] = v4GPUInfo{Index: g.Index, UUID: g.UUID, Serial: "N/A", Name: g.Model, Brand: gpuBrand(g.Model),
			MinorNumber: g.Index, BridgeChipInfo: "N/A", VbiosVersion: "N/A"}
	}
	return out
}

// cudaParts reads "12.4" as 12, 4 (0, 0 when unknown).
func cudaParts(v string) (major, minor int) {
	a, b, _ := strings.Cut(v, ".")
	major, _ = strconv.Atoi(a)
	b, _, _ = strings.Cut(b, ".")
	minor, _ = strconv.Atoi(b)
	return major, minor
}

// gpuBrand is NVML's brand as far as the model name tells it.
func gpuBrand(model string) string {
	m := strings.ToLower(model)
	switch {
	case strings.Contains(m, "geforce"), strings.Contains(m, "rtx"), strings.Contains(m, "gtx"):
		return "GeForce"
	case strings.Contains(m, "quadro"):
		return "Quadro"
	case m == "":
		return "N/A"
	}
	return "Tesla"
}

// v4UsageOf turns the stored final sample into imec's statistics over the job's run (RUNNING,
// else STARTING, to its end or last update).
func v4UsageOf(j *job.Job) *v4UsageStatistics {
	var u protocol.Usage
	if err := json.Unmarshal(j.State.FinalUsageStatistics, &u); err != nil {
		return nil
	}
	st := j.State
	first := st.EventTimes[job.StatusRunning]
	if first.IsZero() {
		first = st.EventTimes[job.StatusStarting]
	}
	last := st.Updated
	for _, s := range []job.Status{job.StatusFinished, job.StatusFailed, job.StatusCancelled, job.StatusHalted} {
		if t, ok := st.EventTimes[s]; ok && !t.IsZero() {
			last = t
			break
		}
	}
	if first.IsZero() || last.Before(first) {
		first = last
	}
	period := last.Sub(first).Nanoseconds()
	cpus := j.Request.Resources.CPUs
	memGb := j.Request.Resources.CPUMemoryGb
	if res := st.Resources; res != nil {
		if len(res.CPUIDs) > 0 {
			cpus = len(res.CPUIDs)
		}
		memGb = res.CPUMemoryGb
	}
	cpuUsage := u.CPUPercent / 100
	out := &v4UsageStatistics{
		ContainerStatistics: v4ContainerUsage{
			FirstTime: v4Time(first), LastTime: v4Time(last), AggPeriodNs: period, CPUCount: cpus,
			CPUUsage: cpuUsage, CPUUsageTotalNs: int64(math.Round(cpuUsage * float64(period))),
			CPUUsageKernelmodeNs: -1, CPUUsageUsermodeNs: -1, MaxPidCount: -1,
			MemLimitByte: int64(memGb) << 30, MemUsageByte: u.MemoryMiB << 20, MemMaxUsageByte: -1,
			NetworkRxByte: -1, NetworkTxByte: -1,
		},
		GPUStatistics: v4GPUUsage{GPUCount: len(u.GPUs)},
	}
	total := map[int]int64{}
	if res := st.Resources; res != nil && len(res.GPUDetails) > 0 {
		var gpus []protocol.GPU
		if json.Unmarshal(res.GPUDetails, &gpus) == nil {
			for _, g := range gpus {
				total[g.Index] = g.MemoryMiB
			}
		}
	}
	for _, g := range u.GPUs {
		out.GPUStatistics.AverageUtilization += g.UtilPercent / 100
		if t := total[g.Index]; t > 0 {
			out.GPUStatistics.AverageMemUtilization += float64(g.MemoryUsedMiB) / float64(t)
		}
	}
	return out
}

// slavesShown names the slaves whose facts an answer shows: for v3.x the SSH endpoints of the
// slaves running a job, for v4.0 the slave of every job that has resources. The others are
// not read: the whole slave table, with every slave's usage, was a read per GET of one job.
func slavesShown(recs []*store.JobRecord, version string) []string {
	var names []string
	for _, rec := range recs {
		res := rec.Job.State.Resources
		if res == nil || res.SlaveName == "" || (version != V40 && rec.Job.State.Status != job.StatusRunning) {
			continue
		}
		if !slices.Contains(names, res.SlaveName) {
			names = append(names, res.SlaveName)
		}
	}
	return names
}

// presentJobs prepares jobs for an API answer in the shape of the request's version: imec's
// Job model for v4.0 (see v4JobOf), our own job for v3.x (see present).
// The records are not changed (each job shown is a redacted copy, made only when its JSON is
// not kept already): a list's may be shared with the store's memory (store.JobFilter.Shared).
func (h *Handlers) presentJobs(ctx context.Context, c *Caller, version string, recs []*store.JobRecord) ([]any, error) {
	out := make([]any, len(recs))
	ss, err := h.store.SlavesShown(ctx, slavesShown(recs, version))
	if err != nil {
		return nil, fmt.Errorf("read slaves to show jobs: %w", err)
	}
	ssh := slaveSSHEndpoints(ss)
	if version != V40 {
		for i, rec := range recs {
			if out[i], err = h.presentV3Cached(c, rec, version, ssh); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	slaves := slaveFactsOf(ss)
	for i, rec := range recs {
		j := rec.Job.Redacted()
		sanitized := c == nil || !canSee(c, rec)
		if sanitized {
			j = j.Sanitized()
		}
		withSSH(j, ssh, h.cfg.SSHJump, rec.UserName, c != nil && canTouch(c, rec))
		out[i] = v4JobOf(j, sanitized, slaves)
	}
	return out, nil
}
