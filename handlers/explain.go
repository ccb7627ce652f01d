package handlers

import (
	"fmt"
	"net/http"
	"time"

	"github.com/opengpulab/gpulab/job"
)

// Explanation answers "why is my job waiting, and when will it start" (SPEC 7.4).
type Explanation struct {
	UUID   string     `json:"uuid"`
	Status job.Status `json:"status"`
	// Reasons are the scheduler's concrete blockers for a queued job, or what the job is doing.
	Reasons []string `json:"reasons"`
	// EstimatedStart is when the scheduler expects the job to start, when it can tell.
	EstimatedStart *time.Time `json:"estimatedStart,omitempty"`
	// EstimatedStartEarliest and EstimatedStartLatest are the range around it: jobs ahead
	// ending as early as they often do, and all of them running to their maxDuration.
	EstimatedStartEarliest *time.Time `json:"estimatedStartEarliest,omitempty"`
	EstimatedStartLatest   *time.Time `json:"estimatedStartLatest,omitempty"`
}

// ExplainJob is GET jobs/{id}/explain.
func (h *Handlers) ExplainJob(w http.ResponseWriter, r *http.Request) error {
	_, rec, err := h.userAndJob(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, explain(rec.Job))
	return nil
}

// explain describes where a job stands; for a queued one the reasons are those of the latest
// scheduler pass.
func explain(j *job.Job) Explanation {
	e := Explanation{UUID: j.UUID, Status: j.State.Status, Reasons: []string{}}
	sched := j.State.Scheduling
	switch st := j.State.Status; {
	case st == job.StatusQueued:
		e.Reasons = append(e.Reasons, sched.QueuedExplanations...)
		e.EstimatedStart = sched.EstimatedStart
		e.EstimatedStartEarliest, e.EstimatedStartLatest = sched.EstimatedStartEarliest, sched.EstimatedStartLatest
		if len(e.Reasons) == 0 {
			e.Reasons = append(e.Reasons, "waiting for the next scheduler pass")
		}
		if rg := sched.EstimateRange(time.Now(), time.UTC); rg != "" {
			e.Reasons = append(e.Reasons, "start "+rg+" (UTC)")
		}
	case st == job.StatusOnHold:
		e.Reasons = append(e.Reasons, "the job is on hold: release it (gpulab-cli release) to queue it")
	case st.Ended():
		e.Reasons = append(e.Reasons, fmt.Sprintf("the job has ended (%s)", st))
	default:
		e.Reasons = append(e.Reasons, fmt.Sprintf("the job is %s on slave %s", st, sched.AssignedSlaveName))
	}
	return e
}
