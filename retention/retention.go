// Package retention deletes what a master no longer needs to keep: the logs and events of jobs
// that ended long ago, jobs that were DELETED long ago, and what jobs were told while queued
// when a row of it was left behind. Only the scheduler's leader sweeps
// (each batch proves its lease in its own transaction), in small batches with a pause between
// them, so a sweep of millions of rows never holds locks the scheduler or the API wait for.
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/opengpulab/gpulab/store"
)

// Defaults of the master's --retention-* flags.
const (
	DefaultLogs    = 90 * 24 * time.Hour
	DefaultEvents  = 365 * 24 * time.Hour
	DefaultDeleted = 30 * 24 * time.Hour
	DefaultBatch   = 2000
	DefaultEvery   = time.Hour
	DefaultPause   = 50 * time.Millisecond
	// StaleWaits is how long a job must have been out of the queue before a row of what it was
	// told while waiting, left behind, is swept (store.DeleteStaleJobWaits); not a setting,
	// since such a row is never shown.
	StaleWaits = time.Hour
)

// Policy says how long each kind of row is kept (0: for ever) and how a sweep goes.
type Policy struct {
	// Logs: a job's log, after the job ended. Events: a job's events, after the job ended.
	// Deleted: a DELETED job (with all it holds), after its deletion.
	Logs, Events, Deleted time.Duration
	// Batch is the most rows one transaction deletes; Pause the rest between batches; Every
	// how often a leader sweeps.
	Batch        int
	Pause, Every time.Duration
}

// WithDefaults fills zero Batch, Pause and Every (the ages are the caller's: 0 keeps for ever).
func (p Policy) WithDefaults() Policy {
	if p.Batch <= 0 {
		p.Batch = DefaultBatch
	}
	if p.Pause <= 0 {
		p.Pause = DefaultPause
	}
	if p.Every <= 0 {
		p.Every = DefaultEvery
	}
	return p
}

// Result counts what one sweep deleted.
type Result struct {
	Logs, Events, Jobs int64
	// Waits: rows of what jobs were told while queued, left behind after they left the queue.
	Waits   int64
	Batches int
}

// Sweeper runs the policy against a store.
type Sweeper struct {
	st  *store.Store
	p   Policy
	log *slog.Logger
}

// New returns a sweeper of the policy (defaults filled).
func New(st *store.Store, p Policy, log *slog.Logger) *Sweeper {
	return &Sweeper{st: st, p: p.WithDefaults(), log: log}
}

// Run sweeps now and then every Policy.Every while ctx lives and the lease holds; it is the
// scheduler loop's WhileLeading hook. Errors are logged, never fatal: the next sweep retries.
func (s *Sweeper) Run(ctx context.Context, lead store.Leadership) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		res, err := s.Sweep(ctx, lead)
		switch {
		case errors.Is(err, store.ErrNotLeader), ctx.Err() != nil:
			return
		case err != nil:
			s.log.Warn("retention sweep failed", "err", err, "deleted_logs", res.Logs, "deleted_events", res.Events, "deleted_jobs", res.Jobs,
				"deleted_stale_waits", res.Waits)
		case res.Logs+res.Events+res.Jobs+res.Waits > 0:
			s.log.Info("retention sweep", "deleted_log_chunks", res.Logs, "deleted_events", res.Events, "deleted_jobs", res.Jobs,
				"deleted_stale_waits", res.Waits, "batches", res.Batches, "took", time.Since(start).Round(time.Millisecond))
		}
		t.Reset(s.p.Every)
	}
}

// Sweep deletes, batch by batch, everything past its retention, and returns what it deleted.
// Each batch is one short transaction that first proves the lease.
func (s *Sweeper) Sweep(ctx context.Context, lead store.Leadership) (Result, error) {
	var res Result
	kinds := []struct {
		age   time.Duration
		count *int64
		del   func(*store.Store, context.Context, time.Duration, int) (int64, error)
	}{
		// Deleted jobs first: their logs and events go with them, in one statement each.
		{s.p.Deleted, &res.Jobs, (*store.Store).DeleteOldDeletedJobs},
		{s.p.Logs, &res.Logs, (*store.Store).DeleteOldJobLogs},
		{s.p.Events, &res.Events, (*store.Store).DeleteOldJobEvents},
		// Whatever the policy: housekeeping, not anyone's data.
		{StaleWaits, &res.Waits, (*store.Store).DeleteStaleJobWaits},
	}
	for _, k := range kinds {
		if k.age <= 0 {
			continue
		}
		for {
			var n int64
			err := s.st.AsLeader(ctx, lead, func(tx *store.Store) error {
				var err error
				n, err = k.del(tx, ctx, k.age, s.p.Batch)
				return err
			})
			if err != nil {
				return res, fmt.Errorf("retention: %w", err)
			}
			res.Batches++
			*k.count += n
			if n < int64(s.p.Batch) {
				break
			}
			select {
			case <-ctx.Done():
				return res, ctx.Err()
			case <-time.After(s.p.Pause):
			}
		}
	}
	return res, nil
}
