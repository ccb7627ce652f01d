package handlers

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
	"github.com/opengpulab/gpulab/views"
)

// JobUsage is GET jobs/{id}/usage: a job's usage series (downsampled as it ages, see
// store.UsageTiers), its averages over its life and over the last hour, the one-line verdict the
// portal shows and the idle-GPU flag.
type JobUsage struct {
	JobUUID string     `json:"jobUuid"`
	Status  job.Status `json:"status"`
	// IdleThreshold is the utilisation (percent) under which a GPU counts as idle.
	IdleThreshold float64    `json:"idleThreshold"`
	IdleGPUs      []int      `json:"idleGpus,omitempty"`
	IdleSince     *time.Time `json:"idleSince,omitempty"`
	Verdict       string     `json:"verdict"`
	// Averages are over the whole series; LastHour over the hour before the last sample.
	Averages UsageAverages      `json:"averages"`
	LastHour UsageAverages      `json:"lastHour"`
	Points   []store.UsagePoint `json:"points"`
}

// UsageAverages are time-weighted averages over part of a series. Memory is the average too
// (the final statistics keep the peak).
type UsageAverages struct {
	Seconds    float64           `json:"seconds"` // the time the samples stand for
	CPUPercent float64           `json:"cpuPercent"`
	MemoryMiB  int64             `json:"memoryMiB"`
	GPUs       []store.GPUSample `json:"gpus,omitempty"`
}

// GetJobUsage is GET jobs/{id}/usage.
func (h *Handlers) GetJobUsage(w http.ResponseWriter, r *http.Request) error {
	_, rec, err := h.userAndJob(r)
	if err != nil {
		return err
	}
	u, err := h.jobUsage(r, rec)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, u)
	return nil
}

func (h *Handlers) jobUsage(r *http.Request, rec *store.JobRecord) (JobUsage, error) {
	pts, err := h.store.JobUsage(r.Context(), rec.Job.UUID)
	if err != nil {
		return JobUsage{}, err
	}
	if pts == nil {
		pts = []store.UsagePoint{}
	}
	th := h.idleThreshold()
	st := rec.Job.State
	u := JobUsage{JobUUID: rec.Job.UUID, Status: st.Status, IdleThreshold: th, IdleGPUs: st.IdleGPUs, IdleSince: st.IdleSince,
		Points: pts, Averages: AverageUsage(pts, time.Time{})}
	if len(pts) > 0 {
		since := pts[len(pts)-1].Time.Add(-time.Hour)
		u.LastHour = AverageUsage(pts, since)
		u.Verdict = UsageVerdict(u.LastHour, th)
	} else {
		u.Verdict = "No usage samples yet: they come with the slave's heartbeats while the job runs."
	}
	return u, nil
}

// idleThreshold is the configured idle threshold, 5 % when none is.
func (h *Handlers) idleThreshold() float64 {
	if h.cfg.IdleThreshold > 0 {
		return h.cfg.IdleThreshold
	}
	return 5
}

// AverageUsage averages the points at or after since (all when since is zero), each weighted
// by the time it stands for.
func AverageUsage(pts []store.UsagePoint, since time.Time) UsageAverages {
	var a UsageAverages
	var mem float64
	util, gmem, secs := map[int]float64{}, map[int]float64{}, map[int]float64{}
	for _, p := range pts {
		if p.Time.Before(since) || p.Secs <= 0 {
			continue
		}
		a.Seconds += p.Secs
		a.CPUPercent += p.CPUPercent * p.Secs
		mem += float64(p.MemoryMiB) * p.Secs
		for _, g := range p.GPUs {
			util[g.Index] += g.UtilPercent * p.Secs
			gmem[g.Index] += float64(g.MemoryUsedMiB) * p.Secs
			secs[g.Index] += p.Secs
		}
	}
	if a.Seconds == 0 {
		return UsageAverages{}
	}
	a.CPUPercent /= a.Seconds
	a.MemoryMiB = int64(math.Round(mem / a.Seconds))
	for i, s := range secs {
		a.GPUs = append(a.GPUs, store.GPUSample{Index: i, UtilPercent: util[i] / s, MemoryUsedMiB: int64(math.Round(gmem[i] / s))})
	}
	slices.SortFunc(a.GPUs, func(x, y store.GPUSample) int { return x.Index - y.Index })
	return a
}

// UsageVerdict is the one line the job page shows over its charts: each GPU's average over the
// window a (the last hour, or the job's life when shorter), with the idle ones called so.
func UsageVerdict(a UsageAverages, threshold float64) string {
	window := "the last hour"
	if a.Seconds < 3500 {
		window = "the last " + humanSpan(time.Duration(a.Seconds*float64(time.Second)))
	}
	if len(a.GPUs) == 0 {
		return fmt.Sprintf("CPU averaged %s %% over %s (no GPU).", Percent(a.CPUPercent), window)
	}
	parts := make([]string, len(a.GPUs))
	var idle []string
	for i, g := range a.GPUs {
		parts[i] = fmt.Sprintf("GPU %d averaged %s %%", g.Index, Percent(g.UtilPercent))
		if g.UtilPercent < threshold {
			idle = append(idle, fmt.Sprint(g.Index))
		}
	}
	s := strings.Join(parts, ", ") + " over " + window
	switch {
	case len(idle) == len(a.GPUs):
		s += ": its GPUs are idle."
	case len(idle) > 0:
		s += ": GPU " + strings.Join(idle, ",") + " idle."
	default:
		s += "."
	}
	return s
}

// Percent writes a percentage as people read it: whole numbers from 10 up, one decimal under.
func Percent(v float64) string {
	if v >= 10 || v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// humanSpan is a short duration in words: "45 seconds", "12 minutes".
func humanSpan(d time.Duration) string {
	switch {
	case d < 2*time.Minute:
		return fmt.Sprintf("%.0f seconds", d.Seconds())
	default:
		return fmt.Sprintf("%.0f minutes", d.Minutes())
	}
}

// usageView is the job page's usage card of u: the verdict and the charts, their axes scaled
// to what the job holds (its CPUs, its memory, each GPU's memory).
func usageView(u JobUsage, j *job.Job, gpus []views.GPUView) *views.JobUsageView {
	lim := views.ChartLimits{CPUPercent: float64(j.Request.Resources.CPUs) * 100, MemoryMiB: float64(j.Request.Resources.CPUMemoryGb) * 1024,
		GPUMemoryMiB: map[int]float64{}}
	if res := j.State.Resources; res != nil && len(res.CPUIDs) > 0 {
		lim.CPUPercent = float64(len(res.CPUIDs)) * 100
	}
	for _, g := range gpus {
		lim.GPUMemoryMiB[g.Index] = float64(g.MemoryMiB)
	}
	return &views.JobUsageView{Verdict: u.Verdict, IdleGPUs: u.IdleGPUs, Charts: views.UsageCharts(u.Points, lim)}
}
