package handlers

import (
	"net/http"

	"github.com/opengpulab/gpulab/views"
)

// UsagePage is GET /usage: the caller's fair-share standing (the API's GET usage, as a page).
func (h *Handlers) UsagePage(w http.ResponseWriter, r *http.Request) error {
	if wantsJSON(r) {
		return h.GetUsage(w, r)
	}
	c, err := requireUser(r)
	if err != nil {
		return err
	}
	u, err := h.usage(r, c)
	if err != nil {
		return err
	}
	v := views.UsageView{Chrome: h.chrome(r, views.NavUsage), Tally: u.Tally, Rank: u.Rank, ActiveUsers: u.ActiveUsers,
		HalfLife: u.HalfLife, Explanation: u.Explanation, GPUHour: u.Weights.GPUHour, CPUHour: u.Weights.CPUHour, MemoryGbHour: u.Weights.MemoryGbHour,
		IdleGPUHours: u.IdleGPUHours, IdleThreshold: u.IdleThreshold}
	for _, q := range u.Queued {
		v.Queued = append(v.Queued, views.UsageJob{UUID: q.UUID, Name: q.Name, Explanations: q.Explanations})
	}
	return h.render(w, r, http.StatusOK, views.UsagePage(v))
}
