package handlers

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/store"
	"github.com/opengpulab/gpulab/views"
)

// SlavesPage is GET /live/slaves: every slave with its GPUs (model, memory, utilisation, the
// job on each), CPUs, memory and heartbeat. JSON is the API's GET slaves; htmx gets the list
// alone (#slave-list) for its live refresh.
func (h *Handlers) SlavesPage(w http.ResponseWriter, r *http.Request) error {
	if wantsJSON(r) {
		return h.Slaves(w, r)
	}
	c := CallerFrom(r.Context())
	infos, slaveInfos, err := h.clusterInfos(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	raw, err := h.store.ListSlaves(ctx)
	if err != nil {
		return err
	}
	running, err := h.store.ListJobs(ctx, store.JobFilter{Statuses: job.RunningStatuses})
	if err != nil {
		return err
	}
	v := views.SlavesView{Chrome: h.chrome(r, views.NavSlaves), Slaves: liveSlaves(c, infos, slaveInfos, raw, running)}
	if isHTMX(r) {
		return h.render(w, r, http.StatusOK, views.SlaveList(v))
	}
	return h.render(w, r, http.StatusOK, views.SlavesPage(v))
}

// liveSlaves joins what the API shows of each slave (free/total, computed by clusterInfos)
// with its GPUs from the inventory, their utilisation from the last heartbeat and the jobs
// holding them. Jobs the caller may not see are shown by their sanitized name, unlinked.
func liveSlaves(c *Caller, infos []ClusterInfo, slaveInfos []SlaveInfo, raw []store.Slave, running []*store.JobRecord) []views.SlaveView {
	clusterNames := map[int]string{}
	for _, ci := range infos {
		clusterNames[ci.ID] = ci.Name
	}
	byName := map[string]store.Slave{}
	for _, s := range raw {
		byName[s.Name] = s
	}
	// Which job holds which GPU of which slave.
	holders := map[string]map[int]*views.JobRef{}
	for _, rec := range running {
		res, name := rec.Job.State.Resources, rec.Job.State.Scheduling.AssignedSlaveName
		if res == nil || name == "" {
			continue
		}
		row := listRow(c, rec)
		ref := &views.JobRef{UUID: rec.Job.UUID, Name: row.Job.Name, Link: row.Full}
		if holders[name] == nil {
			holders[name] = map[int]*views.JobRef{}
		}
		for _, g := range res.GPUIDs {
			holders[name][g] = ref
		}
	}
	out := make([]views.SlaveView, 0, len(slaveInfos))
	for _, si := range slaveInfos {
		sv := views.SlaveView{
			Name: si.Name, Host: si.Host, ClusterID: si.ClusterID, ClusterName: clusterNames[si.ClusterID],
			Online: si.Online, Accepting: si.AcceptingJobs, LastHeartbeat: si.LastHeartbeat, Version: si.Version,
			CudaVersion: si.CudaVersion, Fake: si.Fake,
			CPUs:     views.FreeTotal{Free: si.CPUs.Free, Total: si.CPUs.Total},
			MemoryGb: views.FreeTotal{Free: si.MemoryGb.Free, Total: si.MemoryGb.Total},
			GPUsFree: views.FreeTotal{Free: si.GPUs.Free, Total: si.GPUs.Total},
		}
		s := byName[si.Name]
		var inv protocol.Inventory
		if len(s.Inventory) > 0 {
			_ = json.Unmarshal(s.Inventory, &inv)
		}
		util := gpuUtilisation(s.Usage)
		for _, g := range inv.GPUs {
			gv := views.GPUView{Index: g.Index, UUID: g.UUID, Model: g.Model, MemoryMiB: g.MemoryMiB, Fake: g.Fake, Util: "–"}
			if u, ok := util[g.Index]; ok && !g.Fake && si.Online {
				gv.Util = fmt.Sprintf("%.0f %%", u)
			}
			gv.Job = holders[si.Name][g.Index]
			sv.GPUs = append(sv.GPUs, gv)
		}
		slices.SortFunc(sv.GPUs, func(a, b views.GPUView) int { return a.Index - b.Index })
		out = append(out, sv)
	}
	return out
}

// gpuReport is what a heartbeat keeps on its slave's row for gpuUtilisation: each GPU's
// utilisation, by index of the slave, in the shape of the heartbeat's job list (one entry, its
// usage's GPUs alone), so that rows written before it read the same. The whole list (container
// ids, CPU, memory: about 250 bytes a job) made every heartbeat's row version, and its WAL,
// several times larger for nothing read (issue 16, B8x).
func gpuReport(held []protocol.RunningJob) json.RawMessage {
	type gpu struct {
		Index       int     `json:"index"`
		UtilPercent float64 `json:"utilPercent"`
	}
	var gpus []gpu
	for _, j := range held {
		if j.Usage == nil {
			continue
		}
		for _, g := range j.Usage.GPUs {
			gpus = append(gpus, gpu{Index: g.Index, UtilPercent: math.Round(g.UtilPercent*10) / 10})
		}
	}
	if len(gpus) == 0 {
		return json.RawMessage(`[]`)
	}
	type usage struct {
		GPUs []gpu `json:"gpus"`
	}
	b, _ := json.Marshal([]struct {
		Usage usage `json:"usage"`
	}{{usage{gpus}}})
	return b
}

// gpuUtilisation reads the per-GPU utilisation from a slave's last heartbeat (gpuReport, or
// before it its jobs' usage samples, by GPU index of the slave).
func gpuUtilisation(usage json.RawMessage) map[int]float64 {
	out := map[int]float64{}
	var jobs []protocol.RunningJob
	if len(usage) == 0 || json.Unmarshal(usage, &jobs) != nil {
		return out
	}
	for _, j := range jobs {
		if j.Usage == nil {
			continue
		}
		for _, g := range j.Usage.GPUs {
			out[g.Index] = g.UtilPercent
		}
	}
	return out
}

// ClustersPage is GET /live/clusters: free/total per cluster. JSON is the API's GET clusters;
// htmx gets the table alone (#cluster-list).
func (h *Handlers) ClustersPage(w http.ResponseWriter, r *http.Request) error {
	if wantsJSON(r) {
		return h.Clusters(w, r)
	}
	infos, _, err := h.clusterInfos(r)
	if err != nil {
		return err
	}
	v := views.ClustersView{Chrome: h.chrome(r, views.NavClusters), Clusters: make([]views.ClusterView, len(infos))}
	for i, ci := range infos {
		cv := views.ClusterView{ID: ci.ID, Name: ci.Name, Description: ci.Description, Private: ci.Private, Slaves: len(ci.Slaves),
			Workers: views.FreeTotal(ci.Workers), GPUs: views.FreeTotal(ci.GPUs), CPUs: views.FreeTotal(ci.CPUs), MemoryGb: views.FreeTotal(ci.MemoryGb)}
		for _, s := range ci.Slaves {
			if s.Online {
				cv.OnlineSlaves++
			}
			for _, m := range s.GPUModels {
				if !slices.Contains(cv.GPUModels, m) {
					cv.GPUModels = append(cv.GPUModels, m)
				}
			}
		}
		v.Clusters[i] = cv
	}
	if isHTMX(r) {
		return h.render(w, r, http.StatusOK, views.ClusterList(v))
	}
	return h.render(w, r, http.StatusOK, views.ClustersPage(v))
}
