package client

import (
	"context"
	"fmt"
	"time"
)

// JobUsage is `GET jobs/{id}/usage` as the CLI reads it: the averages, the verdict and the
// idle-GPU flag (the series itself is left out).
type JobUsage struct {
	IdleThreshold float64       `json:"idleThreshold"`
	IdleGPUs      []int         `json:"idleGpus"`
	IdleSince     *time.Time    `json:"idleSince"`
	Verdict       string        `json:"verdict"`
	Averages      UsageAverages `json:"averages"`
	LastHour      UsageAverages `json:"lastHour"`
}

// UsageAverages are time-weighted averages over part of a job's usage series.
type UsageAverages struct {
	Seconds    float64 `json:"seconds"`
	CPUPercent float64 `json:"cpuPercent"`
	MemoryMiB  int64   `json:"memoryMiB"`
	GPUs       []struct {
		Index         int     `json:"index"`
		UtilPercent   float64 `json:"utilPercent"`
		MemoryUsedMiB int64   `json:"memoryUsedMiB"`
	} `json:"gpus"`
}

// JobUsage fetches a job's usage averages and idle-GPU flag.
func (c *Client) JobUsage(ctx context.Context, id string) (*JobUsage, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var u JobUsage
	if err := c.getJSON(ctx, jobPath(id, "usage"), nil, &u); err != nil {
		return nil, fmt.Errorf("usage of job %s: %w", id, err)
	}
	return &u, nil
}
