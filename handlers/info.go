package handlers

import (
	"net/http"
	"time"

	"github.com/opengpulab/gpulab/store"
)

// Version is GET version.
func (h *Handlers) Version(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]string{
		"version":               h.cfg.Version,
		"latest_client_version": h.cfg.LatestClientVersion,
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

func slaveInfo(s store.Slave) SlaveInfo {
	si := SlaveInfo{Name: s.Name, Host: s.Host, ClusterID: s.ClusterID, InstanceID: s.InstanceID, Version: s.Version,
		Online: s.Online, AcceptingJobs: s.AcceptingJobs, GPUModels: []string{}}
	if s.LastHeartbeat.Valid {
		t := s.LastHeartbeat.Time
		si.LastHeartbeat = &t
	}
	return si
}

func (h *Handlers) clusterInfos(r *http.Request) ([]ClusterInfo, []SlaveInfo, error) {
	clusters, err := h.store.ListClusters(r.Context())
	if err != nil {
		return nil, nil, err
	}
	slaves, err := h.store.ListSlaves(r.Context())
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
		si := slaveInfo(s)
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

// Clusters is GET clusters: every cluster with its slaves and free/total resources.
func (h *Handlers) Clusters(w http.ResponseWriter, r *http.Request) error {
	infos, _, err := h.clusterInfos(r)
	if err != nil {
		return err
	}
	if apiVersion(r.Context()) == V40 {
		writeJSON(w, http.StatusOK, map[string]any{"items": infos})
		return nil
	}
	writeJSON(w, http.StatusOK, infos)
	return nil
}

// Slaves is GET slaves: every slave with its free/total resources.
func (h *Handlers) Slaves(w http.ResponseWriter, r *http.Request) error {
	_, slaves, err := h.clusterInfos(r)
	if err != nil {
		return err
	}
	if apiVersion(r.Context()) == V40 {
		writeJSON(w, http.StatusOK, map[string]any{"items": slaves})
		return nil
	}
	writeJSON(w, http.StatusOK, slaves)
	return nil
}
