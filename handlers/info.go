package handlers

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/store"
)

// Version is GET version. v4.0 is what imec's gpulab-cli reads, so its latest client version
// is imec's (ImecClientVersion), never one that would nag imec's users to install a release
// that does not exist; v3.x names our own CLI's.
func (h *Handlers) Version(w http.ResponseWriter, r *http.Request) error {
	latest := h.cfg.LatestClientVersion
	if imecShape(r.Context()) {
		latest = ImecClientVersion
	}
	writeJSON(w, http.StatusOK, map[string]string{
		"version":               h.cfg.Version,
		"latest_client_version": latest,
	})
	return nil
}

// FreeTotal is a "free/total" pair as gpulab-cli clusters shows it.
type FreeTotal struct {
	Free  float64 `json:"free"`
	Total float64 `json:"total"`
}

// SlaveInfo is a slave as GET slaves and GET clusters show it: readable without login, so it
// holds no job or user details.
type SlaveInfo struct {
	Name          string     `json:"name"`
	Host          string     `json:"host"`
	ClusterID     int        `json:"clusterId"`
	InstanceID    string     `json:"instanceId"`
	Version       string     `json:"version"`
	Online        bool       `json:"online"`
	AcceptingJobs bool       `json:"acceptingJobs"`
	LastHeartbeat *time.Time `json:"lastHeartbeat,omitempty"`
	Workers       FreeTotal  `json:"workers"`
	GPUs          FreeTotal  `json:"gpus"`
	CPUs          FreeTotal  `json:"cpus"`
	MemoryGb      FreeTotal  `json:"memoryGb"`
	GPUModels     []string   `json:"gpuModels"`
	CudaVersion   string     `json:"cudaVersion,omitempty"`
	Fake          bool       `json:"fake"`
}

// ClusterInfo is a cluster with its slaves.
type ClusterInfo struct {
	ID          int         `json:"id"`
	Name        string      `json:"name"`
	Description string      `json:"description,omitempty"`
	Private     bool        `json:"private"`
	Slaves      []SlaveInfo `json:"slaves"`
	Workers     FreeTotal   `json:"workers"`
	GPUs        FreeTotal   `json:"gpus"`
	CPUs        FreeTotal   `json:"cpus"`
	MemoryGb    FreeTotal   `json:"memoryGb"`
}

// slaveUse is what the jobs on a slave hold.
type slaveUse struct{ jobs, gpus, cpus, memGb int }

// slaveInfo shows a slave with its free/total resources: totals from its inventory, minus what
// the jobs placed on it hold. Workers are job slots: every job needs at least one CPU, so a
// slave runs at most one job per CPU.
func slaveInfo(s store.Slave, use slaveUse) SlaveInfo {
	si := SlaveInfo{Name: s.Name, Host: s.DNSName, ClusterID: s.ClusterID, InstanceID: s.InstanceID, Version: s.Version,
		Online: s.Online, AcceptingJobs: s.AcceptingJobs, GPUModels: []string{}}
	if si.Host == "" {
		si.Host = s.Host
	}
	if s.LastHeartbeat.Valid {
		t := s.LastHeartbeat.Time
		si.LastHeartbeat = &t
	}
	var inv protocol.Inventory
	if len(s.Inventory) > 0 && json.Unmarshal(s.Inventory, &inv) == nil {
		si.CudaVersion = inv.CudaVersion
		seen := map[string]bool{}
		for _, g := range inv.GPUs {
			si.Fake = si.Fake || g.Fake
			if !seen[g.Model] {
				seen[g.Model] = true
				si.GPUModels = append(si.GPUModels, g.Model)
			}
		}
		memGb := float64(inv.MemoryMiB) / 1024
		si.GPUs = FreeTotal{Free: float64(len(inv.GPUs) - use.gpus), Total: float64(len(inv.GPUs))}
		si.CPUs = FreeTotal{Free: float64(inv.CPUs - use.cpus), Total: float64(inv.CPUs)}
		si.MemoryGb = FreeTotal{Free: round2(memGb - float64(use.memGb)), Total: round2(memGb)}
		si.Workers = FreeTotal{Free: float64(inv.CPUs - use.jobs), Total: float64(inv.CPUs)}
	}
	if !s.Online {
		// An offline slave offers nothing, whatever it has.
		si.GPUs.Free, si.CPUs.Free, si.MemoryGb.Free, si.Workers.Free = 0, 0, 0, 0
	}
	return si
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }

// clusterData reads what GET clusters and GET slaves show, in every API version: the
// clusters, the slaves, and what the running jobs hold on each slave.
func (h *Handlers) clusterData(ctx context.Context) ([]store.Cluster, []store.Slave, map[string]slaveUse, error) {
	clusters, err := h.store.ListClusters(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	slaves, err := h.store.ListSlaves(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	running, err := h.store.ListJobs(ctx, store.JobFilter{Statuses: job.RunningStatuses})
	if err != nil {
		return nil, nil, nil, err
	}
	use := map[string]slaveUse{}
	for _, rec := range running {
		res := rec.Job.State.Resources
		name := rec.Job.State.Scheduling.AssignedSlaveName
		if res == nil || name == "" {
			continue
		}
		u := use[name]
		u.jobs++
		u.gpus += len(res.GPUIDs)
		u.cpus += len(res.CPUIDs)
		u.memGb += res.CPUMemoryGb
		use[name] = u
	}
	return clusters, slaves, use, nil
}

func (h *Handlers) clusterInfos(r *http.Request) ([]ClusterInfo, []SlaveInfo, error) {
	clusters, slaves, use, err := h.clusterData(r.Context())
	if err != nil {
		return nil, nil, err
	}
	infos := make([]ClusterInfo, 0, len(clusters))
	index := map[int]int{}
	for _, c := range clusters {
		index[c.ID] = len(infos)
		infos = append(infos, ClusterInfo{ID: c.ID, Name: c.Name, Description: c.Description, Private: c.Private, Slaves: []SlaveInfo{}})
	}
	all := make([]SlaveInfo, 0, len(slaves))
	for _, s := range slaves {
		si := slaveInfo(s, use[s.Name])
		all = append(all, si)
		if i, ok := index[s.ClusterID]; ok {
			ci := &infos[i]
			ci.Slaves = append(ci.Slaves, si)
			add(&ci.Workers, si.Workers)
			add(&ci.GPUs, si.GPUs)
			add(&ci.CPUs, si.CPUs)
			add(&ci.MemoryGb, si.MemoryGb)
		}
	}
	return infos, all, nil
}

func add(dst *FreeTotal, v FreeTotal) { dst.Free += v.Free; dst.Total += v.Total }

// Clusters is GET clusters: every cluster with its slaves and free/total resources; for v4.0
// a JSON list of imec's ClusterInfo.
func (h *Handlers) Clusters(w http.ResponseWriter, r *http.Request) error {
	if imecShape(r.Context()) {
		infos, _, err := h.imecInfos(r.Context())
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, infos)
		return nil
	}
	infos, _, err := h.clusterInfos(r)
	if err != nil {
		return err
	}
	writeList(w, r, infos)
	return nil
}

// Slaves is GET slaves: every slave with its free/total resources; for v4.0 a JSON list of
// imec's SlaveInfo2.
func (h *Handlers) Slaves(w http.ResponseWriter, r *http.Request) error {
	if imecShape(r.Context()) {
		_, slaves, err := h.imecInfos(r.Context())
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, slaves)
		return nil
	}
	_, slaves, err := h.clusterInfos(r)
	if err != nil {
		return err
	}
	writeList(w, r, slaves)
	return nil
}
