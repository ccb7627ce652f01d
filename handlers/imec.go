package handlers

// The v4.0 answers that imec's own Python gpulab-cli (imecilabt-gpulab-cli 3.x, models in
// imecilabt-gpulab-common 6.x) validates with models that forbid unknown fields: GET
// jobs/{id}/debug (a list of JobEvent), GET clusters (a list of ClusterInfo), GET slaves (a list
// of SlaveInfo2) and GET version. Every field here is one imec's model knows, with its name and
// type; a field imec may leave out is left out when we have nothing to say. v3.0 and v3.1 keep
// our own shapes (info.go), which our CLI and the portal read.

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"sort"
	"time"

	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/store"
)

// ImecClientVersion is the imec gpulab-cli release that v4.0's GET version advertises as the
// latest client. imec's client warns when the advertised version is neither its own nor older
// than its own, so advertising the oldest release this master is known to work with (3.11)
// never nags a user of 3.11 or later, and still tells a user of an older one to upgrade. Our
// own CLI reads v3.1, which keeps Config.LatestClientVersion.
const ImecClientVersion = "3.11"

// imecDeploymentEnvironment is what imec's models call the deployment (they still require the
// field, though it is deprecated): a master serves one, and imec names the main one so.
const imecDeploymentEnvironment = "production"

// imecShape reports whether a request gets imec's models (v4.0) rather than our own shapes.
// One place to decide, so that a later version (v4.1 for our own additions) chooses here.
func imecShape(ctx context.Context) bool { return apiVersion(ctx) == V40 }

// imecTime formats a time as imec's models write one: UTC, seconds, "Z".
func imecTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05Z") }

// ImecJobEvent is imec's JobEvent: one entry of GET jobs/{id}/debug for v4.0.
type ImecJobEvent struct {
	JobID string `json:"jobId"`
	// Type is STATUS_CHANGE, DEBUG, INFO, WARN or ERROR.
	Type string `json:"type"`
	Time string `json:"time"`
	// NewState is the state entered, for a STATUS_CHANGE.
	NewState string `json:"newState,omitempty"`
	Msg      string `json:"msg,omitempty"`
}

// imecEventType maps our event kinds to imec's JobEventType names: scheduler explanations are
// imec's DEBUG (detail for the curious), an unknown kind INFO.
func imecEventType(kind string) string {
	switch kind {
	case store.EventStatus:
		return "STATUS_CHANGE"
	case store.EventWarning:
		return "WARN"
	case store.EventScheduler:
		return "DEBUG"
	case "error":
		return "ERROR"
	default:
		return "INFO"
	}
}

// imecJobEvents converts a job's events to imec's JobEvent list.
func imecJobEvents(evs []store.Event) []ImecJobEvent {
	out := make([]ImecJobEvent, 0, len(evs))
	for _, ev := range evs {
		e := ImecJobEvent{JobID: ev.JobUUID, Type: imecEventType(ev.Kind), Time: imecTime(ev.Time), Msg: ev.Message}
		if e.Type == "STATUS_CHANGE" {
			e.NewState = ev.ToStatus
		}
		out = append(out, e)
	}
	return out
}

// ImecResourceInfo is imec's ResourceInfo: SystemTotal is what the hardware has, Acquired
// what is offered to jobs, Used what jobs hold, Available = Acquired − Used (imec's model
// refuses anything else). imec's CLI shows "Available/Acquired".
type ImecResourceInfo struct {
	SystemTotal int `json:"systemTotal"`
	Acquired    int `json:"acquired"`
	Used        int `json:"used"`
	Available   int `json:"available"`
}

// resourceInfo builds a ResourceInfo for a slave: an offline slave offers only what its jobs
// still hold, so nothing is shown available on it.
func resourceInfo(total, used int, online bool) ImecResourceInfo {
	acquired := total
	if !online {
		acquired = used
	}
	return ImecResourceInfo{SystemTotal: total, Acquired: acquired, Used: used, Available: acquired - used}
}

func (a *ImecResourceInfo) add(b ImecResourceInfo) {
	a.SystemTotal += b.SystemTotal
	a.Acquired += b.Acquired
	a.Used += b.Used
	a.Available += b.Available
}

// ImecGpuModel is imec's GpuModel.
type ImecGpuModel struct {
	Vendor   string `json:"vendor"`
	Name     string `json:"name"`
	MemoryMb int    `json:"memoryMb"`
}

// ImecSlaveInfo2 is imec's SlaveInfo2: one entry of GET slaves for v4.0. It is readable
// without login, like imec's sanitized copy: no job UUIDs, no statistics.
type ImecSlaveInfo2 struct {
	Name                  string           `json:"name"`
	InstanceID            string           `json:"instanceId"`
	ClusterID             int              `json:"clusterId"`
	PID                   *int             `json:"pid,omitempty"`
	DeploymentEnvironment string           `json:"deploymentEnvironment"`
	SoftwareVersion       string           `json:"softwareVersion,omitempty"`
	Aliases               []string         `json:"aliases"`
	Comment               string           `json:"comment,omitempty"`
	Host                  string           `json:"host,omitempty"`
	GpuModel              []ImecGpuModel   `json:"gpuModel"`
	CPUModel              []string         `json:"cpuModel"`
	Worker                ImecResourceInfo `json:"worker"`
	CPUMemoryMb           ImecResourceInfo `json:"cpuMemoryMb"`
	GPU                   ImecResourceInfo `json:"gpu"`
	CPU                   ImecResourceInfo `json:"cpu"`
	LastUpdate            string           `json:"lastUpdate"`
	ShuttingDown          bool             `json:"shuttingDown"`
	CudaVersionFull       string           `json:"cudaVersionFull,omitempty"`
	CudaVersionMajor      *int             `json:"cudaVersionMajor,omitempty"`
	AcceptingJobs         bool             `json:"acceptingJobs"`
	StoragePathsAvailable []string         `json:"storagePathsAvailable,omitempty"`
}

// ImecClusterInfo is imec's ClusterInfo: one entry of GET clusters for v4.0, the sums of its
// slaves.
type ImecClusterInfo struct {
	DeploymentEnvironment string           `json:"deploymentEnvironment"`
	ClusterID             int              `json:"clusterId"`
	Comment               string           `json:"comment"`
	IsPrivate             bool             `json:"isPrivate"`
	SlaveCount            int              `json:"slaveCount"`
	GpuModel              []ImecGpuModel   `json:"gpuModel"`
	Worker                ImecResourceInfo `json:"worker"`
	CPUMemoryMb           ImecResourceInfo `json:"cpuMemoryMb"`
	GPU                   ImecResourceInfo `json:"gpu"`
	CPU                   ImecResourceInfo `json:"cpu"`
	StoragePathsAvailable []string         `json:"storagePathsAvailable,omitempty"`
}

// cudaFull is the form of a full CUDA version imec derives the major version from ("12.4");
// imec refuses a major version that disagrees with it, so the major is given only then.
var cudaFull = regexp.MustCompile(`^[0-9]+\.[0-9.]+$`)

// imecSlave shows a slave as imec's SlaveInfo2, with what its jobs hold.
func imecSlave(s store.Slave, use slaveUse) ImecSlaveInfo2 {
	si := ImecSlaveInfo2{Name: s.Name, InstanceID: s.InstanceID, ClusterID: s.ClusterID,
		DeploymentEnvironment: imecDeploymentEnvironment, SoftwareVersion: s.Version, Aliases: []string{},
		Host: s.DNSName, GpuModel: []ImecGpuModel{}, CPUModel: []string{},
		AcceptingJobs: s.AcceptingJobs && s.Online, LastUpdate: imecTime(s.RegisteredAt)}
	if si.Host == "" {
		si.Host = s.Host
	}
	if s.LastHeartbeat.Valid {
		si.LastUpdate = imecTime(s.LastHeartbeat.Time)
	}
	if !s.Online {
		si.Comment = "offline"
	}
	var inv protocol.Inventory
	if len(s.Inventory) > 0 && json.Unmarshal(s.Inventory, &inv) == nil {
		if inv.PID > 0 {
			pid := inv.PID
			si.PID = &pid
		}
		if cudaFull.MatchString(inv.CudaVersion) {
			si.CudaVersionFull = inv.CudaVersion
			major := inv.CudaMajor()
			si.CudaVersionMajor = &major
		}
		seen := map[ImecGpuModel]bool{}
		for _, g := range inv.GPUs {
			m := ImecGpuModel{Vendor: "NVIDIA", Name: g.Model, MemoryMb: int(g.MemoryMiB)}
			if !seen[m] {
				seen[m] = true
				si.GpuModel = append(si.GpuModel, m)
			}
		}
		si.StoragePathsAvailable = slices.Clone(inv.StorageRoots)
		si.GPU = resourceInfo(len(inv.GPUs), use.gpus, s.Online)
		si.CPU = resourceInfo(inv.CPUs, use.cpus, s.Online)
		si.CPUMemoryMb = resourceInfo(int(inv.MemoryMiB), use.memGb*1024, s.Online)
		// Workers are job slots, one per CPU (see slaveInfo); imec sets systemTotal to acquired.
		si.Worker = resourceInfo(inv.CPUs, use.jobs, s.Online)
		si.Worker.SystemTotal = si.Worker.Acquired
	} else {
		si.GPU = resourceInfo(0, use.gpus, false)
		si.CPU = resourceInfo(0, use.cpus, false)
		si.CPUMemoryMb = resourceInfo(0, use.memGb*1024, false)
		si.Worker = resourceInfo(0, use.jobs, false)
	}
	return si
}

// imecInfos builds imec's ClusterInfo and SlaveInfo2 lists from the same data as clusterInfos.
func (h *Handlers) imecInfos(ctx context.Context) ([]ImecClusterInfo, []ImecSlaveInfo2, error) {
	clusters, slaves, use, err := h.clusterData(ctx)
	if err != nil {
		return nil, nil, err
	}
	infos := make([]ImecClusterInfo, 0, len(clusters))
	index := map[int]int{}
	for _, c := range clusters {
		index[c.ID] = len(infos)
		comment := c.Name
		if c.Description != "" {
			comment = c.Name + ": " + c.Description
		}
		infos = append(infos, ImecClusterInfo{DeploymentEnvironment: imecDeploymentEnvironment, ClusterID: c.ID,
			Comment: comment, IsPrivate: c.Private, GpuModel: []ImecGpuModel{}})
	}
	all := make([]ImecSlaveInfo2, 0, len(slaves))
	for _, s := range slaves {
		si := imecSlave(s, use[s.Name])
		all = append(all, si)
		i, ok := index[s.ClusterID]
		if !ok {
			continue
		}
		ci := &infos[i]
		ci.SlaveCount++
		ci.Worker.add(si.Worker)
		ci.CPUMemoryMb.add(si.CPUMemoryMb)
		ci.GPU.add(si.GPU)
		ci.CPU.add(si.CPU)
		for _, m := range si.GpuModel {
			if !slices.Contains(ci.GpuModel, m) {
				ci.GpuModel = append(ci.GpuModel, m)
			}
		}
		for _, p := range si.StoragePathsAvailable {
			if !slices.Contains(ci.StoragePathsAvailable, p) {
				ci.StoragePathsAvailable = append(ci.StoragePathsAvailable, p)
			}
		}
	}
	for i := range infos {
		sort.Strings(infos[i].StoragePathsAvailable)
	}
	return infos, all, nil
}
