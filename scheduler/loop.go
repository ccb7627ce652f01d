package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/store"
)

// LoopConfig tunes the loop.
type LoopConfig struct {
	// Interval is the longest time between two passes; submits, slaves coming back online and
	// job ends wake the loop sooner.
	Interval time.Duration
	// HeartbeatGrace: a slave silent this long is marked offline.
	HeartbeatGrace time.Duration
	// JobGrace: the jobs of a slave offline this long fail with `worker lost`.
	JobGrace time.Duration
	// MemoryReserveGb is kept free on every slave for the system.
	MemoryReserveGb int
	// Limits cap running jobs per user and project (nil: DefaultLimits; zero fields: no cap).
	Limits *Limits
	// TallyHalfLife is how fast usage is forgiven (default 7 days); TallyWeights what each
	// resource adds per hour (default store.DefaultTallyWeights).
	TallyHalfLife time.Duration
	TallyWeights  *store.TallyWeights
}

// TallyInterval is the period tallyIncrement is expressed in (SPEC 7.2).
const TallyInterval = 5 * time.Minute

// Loop runs the scheduler on the master that holds the scheduler lock: each pass does the
// housekeeping (offline slaves, lost jobs, jobs past maxDuration), takes a snapshot, plans
// and applies the plan.
type Loop struct {
	st   *store.Store
	cfg  LoopConfig
	log  *slog.Logger
	wake *Signal // wakes the loop
	work *Signal // wakes slaves' long polls after assignments and cancellations
	now  func() time.Time
}

// NewLoop makes a loop. wake and work are shared with the handlers.
func NewLoop(st *store.Store, cfg LoopConfig, log *slog.Logger, wake, work *Signal) *Loop {
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Second
	}
	if cfg.HeartbeatGrace <= 0 {
		cfg.HeartbeatGrace = 30 * time.Second
	}
	if cfg.JobGrace <= 0 {
		cfg.JobGrace = 5 * time.Minute
	}
	if cfg.TallyHalfLife <= 0 {
		cfg.TallyHalfLife = 7 * 24 * time.Hour
	}
	if cfg.TallyWeights == nil {
		w := store.DefaultTallyWeights
		cfg.TallyWeights = &w
	}
	return &Loop{st: st, cfg: cfg, log: log, wake: wake, work: work, now: time.Now}
}

// Run schedules until ctx ends. Only one master at a time holds the lock; the others retry
// every interval, so one takes over when the leader goes away.
func (l *Loop) Run(ctx context.Context) error {
	for {
		leader, ok, err := l.st.TryLeader(ctx)
		if err != nil && ctx.Err() == nil {
			l.log.Warn("scheduler lock", "err", err)
		}
		if ok {
			l.log.Info("this master runs the scheduler")
			err := l.lead(ctx, leader)
			_ = leader.Release()
			if ctx.Err() != nil {
				return nil
			}
			l.log.Warn("scheduler lost its lock", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(l.cfg.Interval):
		}
	}
}

func (l *Loop) lead(ctx context.Context, leader *store.Leader) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		woken := l.wake.C()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-woken:
			// Let a burst of submits or heartbeats settle into one pass.
			time.Sleep(20 * time.Millisecond)
		case <-timer.C:
		}
		if !leader.Alive(ctx) {
			return errors.New("scheduler lock connection lost")
		}
		if err := l.Pass(ctx); err != nil && ctx.Err() == nil {
			l.log.Error("scheduler pass failed", "err", err)
		}
		timer.Reset(l.cfg.Interval)
	}
}

// Pass does one housekeeping and scheduling pass.
func (l *Loop) Pass(ctx context.Context) error {
	now := l.now()
	if err := l.housekeeping(ctx, now); err != nil {
		return err
	}
	if err := l.st.AccrueTallies(ctx, *l.cfg.TallyWeights, l.cfg.TallyHalfLife); err != nil {
		return err
	}
	snap, hosts, err := l.snapshot(ctx, now)
	if err != nil {
		return err
	}
	plan := snap.Plan()
	return l.apply(ctx, snap, hosts, plan)
}

// housekeeping marks silent slaves offline, fails the jobs of slaves gone too long (restarting
// restartable ones) and cancels jobs past their maxDuration.
func (l *Loop) housekeeping(ctx context.Context, now time.Time) error {
	offline, err := l.st.MarkSlavesOffline(ctx, now.Add(-l.cfg.HeartbeatGrace))
	if err != nil {
		return err
	}
	for _, name := range offline {
		l.log.Warn("slave offline: no heartbeat", "slave", name, "grace", l.cfg.HeartbeatGrace)
	}
	lost, err := l.st.ListLostJobs(ctx, now.Add(-l.cfg.JobGrace))
	if err != nil {
		return err
	}
	for _, j := range lost {
		restart, err := l.st.EndJob(ctx, j.UUID, store.JobEnd{From: []job.Status{job.Status(j.Status)}, To: job.StatusFailed, Restart: true,
			Event: store.Event{Actor: string(job.ActorScheduler), Message: "worker lost: slave " + j.SlaveName + " stopped answering"}})
		if errors.Is(err, store.ErrStateConflict) {
			continue
		}
		if err != nil {
			return err
		}
		l.log.Warn("job failed: worker lost", "job", j.UUID, "slave", j.SlaveName, "restart_job", restart)
	}
	expired, err := l.st.ListExpiredJobs(ctx, now)
	if err != nil {
		return err
	}
	for _, j := range expired {
		_, err := l.st.TransitionJob(ctx, j.UUID, []job.Status{job.Status(j.Status)}, job.StatusCancelled,
			store.Event{Actor: string(job.ActorScheduler), Message: "maxDuration (" + job.FormatDuration(time.Duration(j.MaxS)*time.Second) + ") reached"})
		if errors.Is(err, store.ErrStateConflict) {
			continue
		}
		if err != nil {
			return err
		}
		l.log.Info("job cancelled: maxDuration reached", "job", j.UUID)
	}
	if len(expired) > 0 {
		l.work.Wake()
	}
	return nil
}

// snapshot reads what Plan needs, and the host name users reach each slave at (for the
// assignments' state.resources.slaveHost).
func (l *Loop) snapshot(ctx context.Context, now time.Time) (Snapshot, map[string]string, error) {
	hosts := map[string]string{}
	snap := Snapshot{Now: now, Clusters: map[int]Cluster{}, Policy: PolicyFair, Limits: DefaultLimits}
	if l.cfg.Limits != nil {
		snap.Limits = *l.cfg.Limits
	}
	tallies, err := l.st.Tallies(ctx, l.cfg.TallyHalfLife)
	if err != nil {
		return snap, hosts, err
	}
	snap.Tallies = tallies
	reservations, err := l.st.ListReservations(ctx, now)
	if err != nil {
		return snap, hosts, err
	}
	for _, r := range reservations {
		snap.Reservations = append(snap.Reservations, Reservation{ID: r.ID, Name: r.Name, ClusterID: int(r.ClusterID.Int64),
			SlaveNames: r.SlaveNames, GPUs: r.GPUs, Start: r.Start, End: r.End, Users: r.UserIDs, Projects: r.ProjectIDs})
	}
	clusters, err := l.st.ListClusters(ctx)
	if err != nil {
		return snap, hosts, err
	}
	owners, err := l.st.ClusterOwners(ctx)
	if err != nil {
		return snap, hosts, err
	}
	for _, c := range clusters {
		snap.Clusters[c.ID] = Cluster{ID: c.ID, Private: c.Private, Projects: owners[c.ID], GuestLimit: time.Duration(c.GuestLimitS) * time.Second}
	}
	slaves, err := l.st.ListSlaves(ctx)
	if err != nil {
		return snap, hosts, err
	}
	for _, s := range slaves {
		if s.InstanceID == "" {
			continue // joined but never registered: nothing is known of what it has
		}
		hosts[s.Name] = firstNonEmpty(s.DNSName, s.Host, s.Name)
		var inv protocol.Inventory
		if len(s.Inventory) > 0 {
			if err := json.Unmarshal(s.Inventory, &inv); err != nil {
				return snap, hosts, fmt.Errorf("inventory of slave %s: %w", s.Name, err)
			}
		}
		snap.Slaves = append(snap.Slaves, Slave{
			Name: s.Name, InstanceID: s.InstanceID, ClusterID: s.ClusterID,
			Online: s.Online, Accepting: s.AcceptingJobs,
			CPUs: inv.CPUs, MemoryGb: max(int(inv.MemoryMiB/1024)-l.cfg.MemoryReserveGb, 0),
			CudaMajor: inv.CudaMajor(), GPUs: inv.GPUs,
		})
	}
	queued, err := l.st.ListJobs(ctx, store.JobFilter{Statuses: []job.Status{job.StatusQueued}, Sort: "created"})
	if err != nil {
		return snap, hosts, err
	}
	for _, rec := range queued {
		snap.Queued = append(snap.Queued, Job{UUID: rec.Job.UUID, Request: rec.Job.Request, Submitted: rec.Job.State.Created,
			UserID: rec.UserID, ProjectID: rec.ProjectID})
	}
	held, err := l.st.ListHeld(ctx, job.RunningStatuses)
	if err != nil {
		return snap, hosts, err
	}
	for _, h := range held {
		snap.Running = append(snap.Running, placedOf(h, now))
	}
	return snap, hosts, nil
}

// apply writes a plan in one transaction. Each change stays conditional on the state the
// snapshot saw: a job cancelled since is skipped, not assigned.
func (l *Loop) apply(ctx context.Context, snap Snapshot, hosts map[string]string, plan Plan) error {
	assigned, halted := 0, 0
	err := l.st.WithTx(ctx, func(tx *store.Store) error {
		batch := make([]store.Assignment, 0, len(plan.Assignments))
		for _, a := range plan.Assignments {
			gpuIDs := make([]int, len(a.GPUs))
			for i, g := range a.GPUs {
				gpuIDs[i] = g.Index
			}
			details, err := json.Marshal(a.GPUs)
			if err != nil {
				return fmt.Errorf("encode GPUs: %w", err)
			}
			res := job.StateResources{ClusterID: a.ClusterID, GPUIDs: gpuIDs, CPUIDs: a.CPUIDs, CPUMemoryGb: a.MemoryGb,
				SlaveName: a.SlaveName, SlaveHost: hosts[a.SlaveName], SlaveInstanceID: a.SlaveInstanceID,
				PortMappings: []job.PortMapping{}, GPUDetails: details}
			inc := l.cfg.TallyWeights.Weight(len(a.GPUs), len(a.CPUIDs), a.MemoryGb) * TallyInterval.Hours()
			batch = append(batch, store.Assignment{JobUUID: a.JobUUID,
				Placement: store.Placement{SlaveName: a.SlaveName, SlaveInstanceID: a.SlaveInstanceID, ClusterID: a.ClusterID, Resources: res, TallyIncrement: inc},
				Message:   fmt.Sprintf("assigned to slave %s (GPUs %v, CPUs %v, %d GB)", a.SlaveName, gpuIDs, a.CPUIDs, a.MemoryGb)})
		}
		// One statement for the whole pass; jobs cancelled since the snapshot are skipped.
		done, err := tx.AssignJobs(ctx, batch)
		if err != nil {
			return err
		}
		assigned = len(done)
		for _, f := range plan.Failures {
			_, err := tx.EndJob(ctx, f.JobUUID, store.JobEnd{From: []job.Status{job.StatusQueued}, To: job.StatusFailed,
				Event: store.Event{Actor: string(job.ActorScheduler), Message: f.Reason}})
			if errors.Is(err, store.ErrStateConflict) {
				continue
			}
			if err != nil {
				return err
			}
		}
		for _, h := range plan.Halts {
			_, err := tx.TransitionJob(ctx, h.JobUUID, []job.Status{job.StatusRunning}, job.StatusMustHalt, store.Event{Actor: string(job.ActorScheduler),
				Message: fmt.Sprintf("halt (%s) to make room for job %s (owner usage %.2f vs %.2f)", h.Reason, h.ForJobUUID, h.StarterScore, h.VictimScore)})
			if errors.Is(err, store.ErrStateConflict) {
				continue
			}
			if err != nil {
				return err
			}
			ev := job.HaltEvent{Time: snap.Now, Reason: h.Reason, HaltedJobs: []string{h.JobUUID}, StartedJobs: []string{h.ForJobUUID},
				VictimScore: h.VictimScore, StarterScore: h.StarterScore}
			for _, id := range []string{h.JobUUID, h.ForJobUUID} {
				if err := tx.AddHaltEvent(ctx, id, ev); err != nil {
					return err
				}
			}
			halted++
		}
		if err := tx.SetQueuedExplanations(ctx, plan.Explanations); err != nil {
			return err
		}
		return tx.SetEstimatedStarts(ctx, plan.Estimates)
	})
	if err != nil {
		return err
	}
	if assigned > 0 || halted > 0 {
		l.work.WakeKeys(wakeSlaves(snap, plan)...)
	}
	if assigned > 0 || halted > 0 || len(plan.Failures) > 0 {
		l.log.Info("scheduler pass", "queued", len(snap.Queued), "assigned", assigned, "halted", halted, "failed", len(plan.Failures))
	}
	return nil
}

// wakeSlaves names the slaves whose long polls have news after a plan: those that got jobs and
// those with jobs to halt.
func wakeSlaves(snap Snapshot, plan Plan) []string {
	var names []string
	for _, a := range plan.Assignments {
		names = append(names, a.SlaveName)
	}
	if len(plan.Halts) > 0 {
		at := make(map[string]string, len(snap.Running))
		for _, pl := range snap.Running {
			at[pl.JobUUID] = pl.SlaveName
		}
		for _, h := range plan.Halts {
			names = append(names, at[h.JobUUID])
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// placedOf is what a running job holds, as Plan sees it.
func placedOf(h store.Held, now time.Time) Placed {
	pl := Placed{JobUUID: h.UUID, SlaveName: h.SlaveName, UserID: h.UserID, ProjectID: h.ProjectID, Bucket: h.Bucket,
		GPUIndices: ints(h.GPUIDs), CPUIDs: ints(h.CPUIDs), MemoryGb: h.MemoryGb,
		MinDuration: time.Duration(h.MinDuration) * time.Second, Restartable: h.Restartable, Interactive: h.Interactive,
		Halting: h.Status == job.StatusMustHalt || h.Status == job.StatusHalting, Reservations: h.Reservations}
	if h.Status == job.StatusRunning && h.RunningAt.Valid {
		pl.Started = h.RunningAt.Time
	}
	// Ends: when the job reaches its maxDuration, counted from RUNNING, or from now for a job
	// still being started (it cannot end sooner than that); zero when it has none.
	if h.MaxDuration > 0 {
		from := now
		if h.RunningAt.Valid {
			from = h.RunningAt.Time
		}
		pl.Ends = from.Add(time.Duration(h.MaxDuration) * time.Second)
	}
	return pl
}

func ints(a []int64) []int {
	out := make([]int, len(a))
	for i, v := range a {
		out[i] = int(v)
	}
	return out
}
