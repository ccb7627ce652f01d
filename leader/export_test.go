package leader

import (
	"context"

	"github.com/opengpulab/gpulab/scheduler"
)

// ReadQueue is one pass's read of the queued jobs, for the tests of the leader's memory.
func (l *Loop) ReadQueue(ctx context.Context) ([]scheduler.Job, error) {
	return l.queue.read(ctx, l.st)
}

// CheckQueueNow makes the next read a full one that checks the memory.
func (l *Loop) CheckQueueNow() { l.queue.checkedAt = l.queue.checkedAt.Add(-l.queue.checkEvery) }

// Snapshot is a pass's read of the cluster, for the tests of what the configuration sets.
func (l *Loop) Snapshot(ctx context.Context) (scheduler.Snapshot, error) {
	snap, _, err := l.snapshot(ctx)
	return snap, err
}
