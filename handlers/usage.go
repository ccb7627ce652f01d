package handlers

import (
	"net/http"
	"sort"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
)

// Usage is a user's fair-share standing (SPEC 7.2): his tally, where it ranks him, and what
// that means for his queued jobs.
type Usage struct {
	User string `json:"user"`
	// Tally is the decayed weighted usage (a GPU held for an hour adds 1).
	Tally float64 `json:"tally"`
	// Rank is 1 for the user with the lowest tally among the active users (lowest goes first).
	Rank        int     `json:"rank"`
	ActiveUsers int     `json:"activeUsers"`
	HalfLife    string  `json:"halfLife"`
	Weights     Weights `json:"weights"`
	// IdleGPUHours are the GPU-hours of the last 7 days that his jobs held a GPU under the idle
	// threshold (IdleThreshold percent), from the jobs' usage series.
	IdleGPUHours  float64 `json:"idleGpuHours"`
	IdleThreshold float64 `json:"idleThreshold"`
	Explanation   string  `json:"explanation"`
	// Queued are the user's queued jobs with why they wait.
	Queued []UsageJob `json:"queued"`
}

// Weights shows what each resource adds to the tally per hour.
type Weights struct {
	GPUHour, CPUHour, MemoryGbHour float64
}

// UsageJob is a queued job in the usage view.
type UsageJob struct {
	UUID         string   `json:"uuid"`
	Name         string   `json:"name"`
	Explanations []string `json:"queuedExplanations"`
}

// GetUsage is GET usage: the caller's tally and standing.
func (h *Handlers) GetUsage(w http.ResponseWriter, r *http.Request) error {
	c, err := requireUser(r)
	if err != nil {
		return err
	}
	u, err := h.usage(r, c)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, u)
	return nil
}

func (h *Handlers) usage(r *http.Request, c *Caller) (Usage, error) {
	ctx := r.Context()
	half := h.cfg.TallyHalfLife
	if half <= 0 {
		half = 7 * 24 * time.Hour
	}
	tallies, err := h.store.Tallies(ctx, half)
	if err != nil {
		return Usage{}, err
	}
	idle, err := h.store.IdleGPUHours(ctx, h.idleThreshold(), 7*24*time.Hour)
	if err != nil {
		return Usage{}, err
	}
	wt := store.DefaultTallyWeights
	u := Usage{User: c.User.Name, Tally: tallies[c.User.ID], HalfLife: job.FormatDuration(half),
		Weights: Weights{GPUHour: wt.GPU, CPUHour: wt.CPU, MemoryGbHour: wt.MemoryGb}, Queued: []UsageJob{},
		IdleGPUHours: idle[c.User.ID], IdleThreshold: h.idleThreshold()}
	// Active users: those with a tally worth counting or a job queued or running, and the caller.
	type entry struct {
		id    int64
		tally float64
	}
	withJobs, err := h.store.ActiveUserIDs(ctx)
	if err != nil {
		return Usage{}, err
	}
	seen := map[int64]bool{}
	var active []entry
	add := func(id int64) {
		if !seen[id] {
			seen[id] = true
			active = append(active, entry{id, tallies[id]})
		}
	}
	for id, t := range tallies {
		if t >= 0.01 {
			add(id)
		}
	}
	for _, id := range withJobs {
		add(id)
	}
	add(c.User.ID)
	sort.Slice(active, func(i, j int) bool {
		if active[i].tally != active[j].tally {
			return active[i].tally < active[j].tally
		}
		return active[i].id < active[j].id
	})
	for i, e := range active {
		if e.id == c.User.ID {
			u.Rank = i + 1
		}
	}
	u.ActiveUsers = len(active)
	u.Explanation = "You have used the least lately: your queued jobs go before those of every other user (after interactive jobs)."
	if u.Rank > 1 {
		u.Explanation = "Your queued jobs go after those of the users who have used less lately, and before those who have used more. Your tally halves every " + u.HalfLife + " you do not use the cluster."
	}
	recs, err := h.store.ListJobs(ctx, store.JobFilter{Statuses: []job.Status{job.StatusQueued}, UserIDs: []int64{c.User.ID}, Sort: "created"})
	if err != nil {
		return Usage{}, err
	}
	for _, rec := range recs {
		u.Queued = append(u.Queued, UsageJob{UUID: rec.Job.UUID, Name: rec.Job.Name, Explanations: rec.Job.State.Scheduling.QueuedExplanations})
	}
	return u, nil
}
