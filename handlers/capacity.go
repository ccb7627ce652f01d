package handlers

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/opengpulab/gpulab/job"
)

// capacityTTL is how long the largest slave is remembered: slaves join rarely, and a submit
// must not read every inventory. A job that does not fit is checked again against a fresh
// look (at most capacityRecheck old), so that a slave that just joined counts at once.
const (
	capacityTTL     = 15 * time.Second
	capacityRecheck = time.Second
)

// capacity is the most any one registered slave could hold: a job asking for more could never
// run anywhere (a job runs on one slave), so it is refused at submit instead of waiting forever.
type capacity struct {
	GPUs, CPUs, MemoryGb int
	// Slaves is how many registered slaves it was computed from; 0: none, no check.
	Slaves int
}

// capacityCache keeps the capacity for capacityTTL.
type capacityCache struct {
	mu   sync.Mutex
	at   time.Time
	last capacity
}

// maxCapacity returns the largest resources of any registered slave, cached for maxAge.
func (h *Handlers) maxCapacity(ctx context.Context, maxAge time.Duration) (capacity, error) {
	h.capacity.mu.Lock()
	defer h.capacity.mu.Unlock()
	if !h.capacity.at.IsZero() && time.Since(h.capacity.at) < maxAge {
		return h.capacity.last, nil
	}
	l, err := h.store.LargestSlave(ctx)
	if err != nil {
		return capacity{}, err
	}
	c := capacity{Slaves: l.Slaves, GPUs: l.GPUs, CPUs: l.CPUs, MemoryGb: max(int(l.MemoryMiB/1024)-h.cfg.MemoryReserveGb, 0)}
	h.capacity.last, h.capacity.at = c, time.Now()
	return c, nil
}

// checkCapacity refuses a job that asks for more than the largest slave holds, naming the field.
// Without registered slaves only the static limits (job.Limits) apply.
func (h *Handlers) checkCapacity(ctx context.Context, j *job.Job) error {
	c, err := h.maxCapacity(ctx, capacityTTL)
	if err != nil {
		return fmt.Errorf("largest slave: %w", err)
	}
	if tooLarge(j, c) != nil {
		if c, err = h.maxCapacity(ctx, capacityRecheck); err != nil {
			return fmt.Errorf("largest slave: %w", err)
		}
	}
	return tooLarge(j, c)
}

// tooLarge is the problem of a job beyond capacity c, or nil.
func tooLarge(j *job.Job, c capacity) error {
	if c.Slaves == 0 {
		return nil
	}
	res := j.Request.Resources
	var problems []job.Problem
	tooMuch := func(field string, asked, most int, unit string) {
		if asked > most {
			problems = append(problems, job.Problem{Path: "request.resources." + field,
				Message: fmt.Sprintf("asks for %d %s, but the largest slave of this cluster has %d: the job could never run", asked, unit, most)})
		}
	}
	tooMuch("gpus", res.GPUs, c.GPUs, "GPUs")
	tooMuch("cpus", res.CPUs, c.CPUs, "CPUs")
	tooMuch("cpuMemoryGb", j.Request.TotalMemoryGb(), c.MemoryGb, "GB of memory (RAM disks included)")
	if len(problems) > 0 {
		return &job.ValidationError{Problems: problems}
	}
	return nil
}

// forgetCapacity drops the cached capacity: a slave registered (on this master; others see it
// within capacityTTL).
func (h *Handlers) forgetCapacity() {
	h.capacity.mu.Lock()
	defer h.capacity.mu.Unlock()
	h.capacity.at = time.Time{}
}
