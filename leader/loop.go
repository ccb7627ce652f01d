package leader

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/metrics"
	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/store"
	"golang.org/x/sync/errgroup"
)

// DefaultForecastEvery and DefaultMaxBusy are `gpulab-master serve`'s defaults of
// --forecast-every and --scheduler-max-busy (Config.ForecastEvery, Config.MaxBusy).
const (
	DefaultForecastEvery = 10 * time.Second
	DefaultMaxBusy       = 0.2
)

// Config tunes the loop.
type Config struct {
	// Interval is the longest time between two passes; submits, slaves coming back online and
	// job ends wake the loop sooner.
	Interval time.Duration
	// HeartbeatGrace: a slave silent this long is marked offline.
	HeartbeatGrace time.Duration
	// JobGrace: a slave that reached no master for this long stops its jobs itself (its
	// FenceAfter); after JobGrace plus FenceMargin offline, the master gives its jobs up:
	// `worker lost` (restartable ones restart), or queued again if they never ran.
	JobGrace time.Duration
	// FenceMargin is the time a fencing slave has to stop its jobs (a halt takes 15 s and a
	// kill) before the master may start them elsewhere (default 45 s).
	FenceMargin time.Duration
	// LeaderLease is how long the scheduler lease lasts unrenewed: a leader that vanishes is
	// replaced after at most this plus Interval (default 15 s, at least 3 intervals).
	LeaderLease time.Duration
	// Holder names this master in the lease (host and pid).
	Holder string
	// MemoryReserveGb is kept free on every slave for the system.
	MemoryReserveGb int
	// Limits cap running jobs per user and project (nil: DefaultLimits; zero fields: no cap).
	Limits *scheduler.Limits
	// TallyHalfLife is how fast usage is forgiven (default 7 days); TallyWeights what each
	// resource adds per hour (default store.DefaultTallyWeights).
	TallyHalfLife time.Duration
	TallyWeights  *store.TallyWeights
	// HaltFactor and HaltNonRestartable restrain SCORE halts (scheduler.Snapshot's fields of
	// the same names; zero values: the planner's defaults, which the simulator measured best).
	HaltFactor         float64
	HaltNonRestartable bool
	// Idle is the idle-GPU check; a zero Idle.After turns it off.
	Idle IdleConfig
	// FullReadEvery is how often the leader reads again in full what it otherwise keeps in
	// memory between passes (the queued jobs with their requests, what running jobs hold, the
	// slaves), as a check beside the passes (checker): differences are logged and counted as
	// drift (default 5 min).
	FullReadEvery time.Duration
	// Sweep is how many of the waiting jobs that cannot start now a pass between two full ones
	// plans anyway, first in queue order (default DefaultSweep; negative: every pass is full).
	// A full pass, which plans every queued job, comes at the start of a term and every
	// FullReadEvery; see narrow.
	Sweep int
	// ForecastEvery is how often the waiting jobs' starts are forecast and the estimates
	// written (a term's first pass and every full one hand theirs off too): by the forecaster,
	// off the passes, while a term lasts (see forecaster), by the pass itself when one runs
	// alone. The forecast replays the queue three times (scheduler.ForecastSamples) and was a
	// sixth of a pass at B8x's size, where passes come twice a second to move estimates shown to
	// the minute; between two, jobs keep what the last one wrote, and a new job gets its
	// estimate at the next. Zero: after every pass (the forecaster takes a pass's snapshot only
	// when it is done with the last one).
	ForecastEvery time.Duration
	// MaxBusy bounds the share of the time the loop spends in passes woken by work (submits,
	// ends) on a cluster where jobs wait for room: the loop earns MaxBusy of every second as
	// pass time, banks at most PassBank of it, and after a pass that spent more than it had
	// rests until the debt is paid (pacer): a pass of 300 ms after a quiet spell rests 1 s at a
	// fifth, and passes that come back to back rest four times their length. On a large, full
	// cluster the passes otherwise ran back to back, a core taken whole from the heartbeats and
	// requests on the same machine (B8x: 92 % busy at 5,000 slaves, heartbeat p50 31 ms; 16–19
	// % and 8 ms resting so), for placements under a second sooner on a queue where jobs wait
	// minutes. The bank lets a quick pass after a quiet spell go without a rest; the share is
	// kept over time, not pass by pass, since passes just under a threshold that never rested
	// (100 ms, until 30 Nov) put B8x's loop at 24–25 % once its passes got cheaper.
	// Passes that placed jobs and left none waiting for room neither rest nor count (rests):
	// they are what places a stream of submissions at once while the cluster has room for them
	// (B2x: resting after its 30-ms passes put submit → RUNNING p99 at 361 ms, 97 ms without;
	// on a machine where its passes took 155 ms, resting after them put it at 2.3 s). Zero or
	// ≥ 1: no bound. A rest is never longer than Interval. (Slurm's backfill yields in the same
	// way: bf_yield_interval, bf_yield_sleep.)
	MaxBusy float64
	// UsageCompactEvery is how often the leader downsamples the usage series (default 1 min).
	UsageCompactEvery time.Duration
	// OnPass, when set, is called after every pass of Run with when it started, how long it
	// took and its error: benchmarks time the real loop's passes with it.
	OnPass func(start time.Time, took time.Duration, err error)
	// Metrics, when set, records each committed pass's duration and placements and the halts
	// it asked for.
	Metrics *metrics.Master
	// WhileLeading, when set, runs beside the passes for as long as this master leads (its
	// context ends when the lease is lost): the leader's other chores, such as retention,
	// which prove the same lease in their own transactions.
	WhileLeading func(ctx context.Context, lead store.Leadership)
}

// TallyInterval is the period tallyIncrement is expressed in (SPEC 7.2).
const TallyInterval = 5 * time.Minute

// TallyEvery is how often a leader accrues the tallies (Loop.accrue).
const TallyEvery = 5 * time.Second

// ExpiredPerPass bounds the expired leases a pass's housekeeping ends (store.ListExpiredLeases):
// each is a statement of the pass's transaction and a row held until it commits, and the slaves'
// calls about those jobs wait for it; the rest are ended by the next passes, longest expired
// first. A pass comes at least every scheduler interval.
const ExpiredPerPass = 500

// Loop runs the scheduler on the master that holds the scheduler lease: each pass does the
// housekeeping (offline slaves, lost jobs, expired leases, jobs past maxDuration; at most once
// a second when passes come back to back, HousekeepEvery), takes a snapshot, plans and
// applies the plan. Every write of a pass is in a transaction that first proves the lease
// (store.AsLeader, or a single statement that does the same: store.AssignJobsAsLeader,
// store.SetQueuedExplanationsAsLeader), and every timeout is measured on the database's clock.
type Loop struct {
	st   *store.Store
	cfg  Config
	log  *slog.Logger
	wake *scheduler.Signal // wakes the loop
	work *scheduler.Signal // wakes slaves' long polls after assignments and cancellations

	// lastIdle and lastCompact are when this leader last ran the idle check and the usage
	// compaction (only the loop's goroutine touches them).
	lastIdle, lastCompact time.Time
	// learned holds the forecast's inputs read from the store, checked every learnEvery while
	// leading (see learn).
	learned    learned
	learnEvery time.Duration
	learnAfter time.Duration // RatioRefresh; tests shorten it
	// phases are the last pass's (LastPass).
	phases Phases
	// queue remembers the queued and running jobs between passes.
	queue *queue
	// fresh are the queued jobs no pass of this term has planned (nil: no pass yet), and fullAt
	// when the last full pass began (see narrow).
	fresh  map[string]bool
	fullAt time.Time
	// forecastAt is when the last pass that forecast began (see Config.ForecastEvery), farAt
	// when the last that handed off a far forecast did (FarForecastEvery), and farTook how long
	// the forecaster took to plan that one (set by the forecaster).
	forecastAt, farAt time.Time
	farTook           atomic.Int64
	// nearReach and farEveryAtLeast, when set (tests), replace scheduler.ForecastCap as the
	// reach of the forecasts between far ones and FarForecastEvery.
	nearReach       int
	farEveryAtLeast time.Duration
	// written are the start estimates this term wrote (see EstimateTolerance), guarded by
	// writtenMu (the forecaster writes them too); explained the explanations.
	writtenMu sync.Mutex
	written   written
	explained explained
	// forecasts hands snapshots to the forecaster while this master leads (nil otherwise: a
	// pass forecasts itself); see forecaster.
	forecasts chan forecastJob
	// explains hands the passes' explanations to the explainer while this master leads (nil
	// otherwise: a pass writes them itself); explainLost says a batch of them failed, and
	// what the database holds is unknown again (see explainer).
	explains    chan explainBatch
	explainLost atomic.Bool
	// writeExplanations, when set (tests only), writes the explainer's batches in place of
	// explainInParts.
	writeExplanations func(ctx context.Context, lead store.Leadership, news, refreshed map[string][]string) error
	// fleet remembers the slaves between passes; view is what the last snapshot made of them.
	fleet *fleet
	view  slaveView
	// dbNow is the database's clock as the last snapshot read it, at dbNowAt on this one's;
	// dbStarted when the database server had started then (store.PassBasics.Started).
	dbNow, dbNowAt, dbStarted time.Time
	// housekeptAt is when the housekeeping last ran (HousekeepEvery), offlineAt when it last
	// looked for silent slaves (offlineEvery).
	housekeptAt, offlineAt time.Time
	// running is the last snapshot's running jobs, whose slice the next snapshot fills again.
	running []scheduler.Placed
	// weights are the tally weights by user of the running jobs (heldWeights) for the term's
	// accrual (accrue), made by the term's first snapshot and by the first after each accrual
	// that used them (weightsWanted): made at every pass, they took ~1 ms a pass at 35,000
	// running jobs, for an accrual every TallyEvery.
	weights       atomic.Pointer[map[int64]float64]
	weightsWanted atomic.Bool
	// scratch is what the last narrowed plan filled (the jobs it decided), filled again by
	// the next.
	scratch narrowScratch
	// beforeEarlyPart, when set (tests only), is called with each early part before it is
	// written: what changes the database meanwhile is a change since the snapshot.
	beforeEarlyPart func([]scheduler.Assignment)
}

// followQueue brings what the loop keeps per queued job up to date with the jobs that came
// into the queue and left it since the last read (queue.takeChanges): a job that arrived is
// fresh (no pass of this term planned it); what was kept of one that left (its freshness,
// explanation and estimate written) is forgotten, even when it is queued again since: what
// the database holds of it was cleared or changed on the way, and it is fresh again. After a
// full read of the queue the explanations and estimates kept are swept against it as well.
func (l *Loop) followQueue() {
	arrived, departed, swept := l.queue.takeChanges()
	l.writtenMu.Lock()
	defer l.writtenMu.Unlock()
	for _, id := range departed {
		delete(l.fresh, id)
		delete(l.written, id)
		delete(l.explained, id)
	}
	if l.fresh != nil {
		for _, id := range arrived {
			if l.queue.queued(id) {
				l.fresh[id] = true
			}
		}
	}
	if swept {
		l.written.forget(l.queue.queued)
		l.explained.forget(l.queue.queued)
	}
}

// remember records the jobs a committed pass planned: they are fresh no more, but for those
// the plan assigned or failed: one that comes back to the queue (an assignment not taken, a
// slave lost before the job ran) is new again, planned at the next pass, even when the queue
// never saw it leave; the others are forgotten when the queue sees them leave (followQueue).
func (l *Loop) remember(planned []scheduler.Job, plan scheduler.Plan) {
	before := len(l.fresh)
	for _, j := range planned {
		delete(l.fresh, j.UUID)
	}
	// A map keeps its size when emptied: after a full plan it held every queued job, and
	// looking 20,000 jobs up in it at every pass cost as much as in a full one.
	if before > 2*len(l.fresh)+64 {
		small := make(map[string]bool, len(l.fresh)+len(plan.Assignments)+len(plan.Failures))
		for id := range l.fresh {
			small[id] = true
		}
		l.fresh = small
	}
	for _, a := range plan.Assignments {
		l.fresh[a.JobUUID] = true
	}
	for _, f := range plan.Failures {
		l.fresh[f.JobUUID] = true
	}
}

// The learned run-time ratios (forecast.go): jobs created within RatioWindow count, each group
// (a user's jobs of one maxDuration class, everyone's of one class, a user's, everyone's) needs
// RatioMinJobs ended jobs for a ratio of its own, and the leader reads them again every
// RatioRefresh.
const (
	RatioWindow  = 30 * 24 * time.Hour
	RatioMinJobs = 20
	RatioRefresh = 5 * time.Minute
)

// learned are the forecast's inputs that come from aggregates over many jobs: the run-time
// ratios (a month of ended jobs, and each user's latest per class) and the recent arrivals (a
// day of submissions), each read at most every RatioRefresh. Only a plan with ranges uses them
// (scheduler.Plan's forecast), and in a leading term that is the forecaster's, never a pass's:
// while a term lasts they are read in the background (Loop.learn), and the forecaster reads
// those it has none of before its first forecast (Loop.forForecast). At a month of a busy
// site's jobs the ratios' read takes a second or more: a pass that waited for it every five
// minutes was the pass p99, and the first pass of a term, which read them before it planned,
// placed nothing for that long after a failover (B1x's 100,000 recent submissions: 0.2 s alone,
// 0.5 s beside 5,000 heartbeating slaves, 2 Dec). A pass run alone (tests) plans its own ranges
// and reads them itself when they are stale (Loop.forPass).
type learned struct {
	mu         sync.Mutex
	ratios     scheduler.RunRatios
	ratiosAt   time.Time
	arrived    []scheduler.Arrival
	arrivalsAt time.Time
	// demandReads counts the reads made when they were needed (by a pass alone or by the
	// forecaster), not in the background (for tests).
	demandReads int
}

// due says what is due for a read at now, read every `every`: ratios, arrivals. g.mu is held.
func (g *learned) due(now time.Time, every time.Duration) (bool, bool) {
	return g.ratiosAt.IsZero() || now.Sub(g.ratiosAt) >= every, g.arrivalsAt.IsZero() || now.Sub(g.arrivalsAt) >= every
}

// forPass returns the inputs for a pass run alone at now, reading those due first (a leading
// term's passes read none: learned).
func (l *Loop) forPass(ctx context.Context, now time.Time) (scheduler.RunRatios, []scheduler.Arrival) {
	return l.learnedAt(ctx, now, func(g *learned) (bool, bool) { return g.due(now, l.learnAfter) })
}

// forForecast returns the inputs for the forecaster's plan of a snapshot taken at now, reading
// those not read yet first (the term's first forecast, unless an earlier term read them); the
// background keeps them fresh after that.
func (l *Loop) forForecast(ctx context.Context, now time.Time) (scheduler.RunRatios, []scheduler.Arrival) {
	return l.learnedAt(ctx, now, func(g *learned) (bool, bool) { return g.ratiosAt.IsZero(), g.arrivalsAt.IsZero() })
}

// learnedAt returns the learned inputs, after reading as of now those that need says to read.
func (l *Loop) learnedAt(ctx context.Context, now time.Time, need func(*learned) (bool, bool)) (scheduler.RunRatios, []scheduler.Arrival) {
	g := &l.learned
	g.mu.Lock()
	ratios, arrivals := need(g)
	if ratios || arrivals {
		g.demandReads++
	}
	g.mu.Unlock()
	if ratios || arrivals {
		l.read(ctx, now, ratios, arrivals)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ratios, g.arrived
}

// learn keeps the forecast's inputs fresh while this term lasts: it checks every
// learnEvery (a minute) and reads what is older than RatioRefresh, off the passes.
func (l *Loop) learn(ctx context.Context) {
	g := &l.learned
	tick := time.NewTicker(l.learnEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now, err := l.st.Now(ctx)
		if err != nil {
			if ctx.Err() == nil {
				l.log.Warn("reading the database's clock for start estimates failed", "err", err)
			}
			continue
		}
		g.mu.Lock()
		ratios, arrivals := g.due(now, l.learnAfter)
		g.mu.Unlock()
		if ratios || arrivals {
			l.read(ctx, now, ratios, arrivals)
		}
	}
}

// read reads the ratios and the arrivals as of now (the database's clock), those asked for. A
// failed read keeps the old ones: estimates are worth less than the pass.
func (l *Loop) read(ctx context.Context, now time.Time, ratios, arrivals bool) {
	g := &l.learned
	if ratios {
		rows, err := l.st.RunRatios(ctx, now.Add(-RatioWindow), RatioMinJobs, scheduler.RatioQuantiles, scheduler.RatioRecentJobs)
		if err != nil {
			if ctx.Err() == nil {
				l.log.Warn("reading run-time ratios for start estimates failed", "err", err)
			}
		} else {
			r := ratiosOf(rows, RatioMinJobs)
			g.mu.Lock()
			g.ratios, g.ratiosAt = r, now
			g.mu.Unlock()
		}
	}
	if arrivals {
		rows, err := l.st.Arrivals(ctx, now.Add(-scheduler.ArrivalWindow), ArrivalsMax)
		if err != nil {
			if ctx.Err() == nil {
				l.log.Warn("reading recent submissions for start estimates failed", "err", err)
			}
			return
		}
		out := make([]scheduler.Arrival, len(rows))
		for i, r := range rows {
			out[i] = scheduler.Arrival{UserID: r.UserID, GPUs: r.GPUs, MaxDuration: time.Duration(r.MaxDurationS) * time.Second, Count: r.Count}
		}
		g.mu.Lock()
		g.arrived, g.arrivalsAt = out, now
		g.mu.Unlock()
	}
}

// ArrivalsMax bounds the groups of recent submissions (owner, GPUs, maxDuration) the forecast
// weighs (scheduler.Snapshot.Arrivals), the largest first, read every RatioRefresh.
const ArrivalsMax = 50000

// ratiosOf turns the store's rows into the planner's input; a global row over fewer than
// minJobs jobs is no knowledge.
func ratiosOf(rows []store.RunRatio, minJobs int) scheduler.RunRatios {
	out := scheduler.RunRatios{Users: map[int64]scheduler.RunRatio{}, Classes: map[int]scheduler.RunRatio{},
		UserClasses: map[scheduler.UserClass]scheduler.RunRatio{}}
	for _, r := range rows {
		rr := scheduler.NewRunRatio(r.Mid, r.Q)
		switch {
		case r.UserID != 0 && r.Class >= 0:
			// A user's ratio for a class follows his latest jobs (scheduler.RecentRatio).
			out.UserClasses[scheduler.UserClass{UserID: r.UserID, Class: r.Class}] = scheduler.RecentRatio(recentRuns(r), rr)
		case r.UserID != 0:
			out.Users[r.UserID] = rr
		case r.Class >= 0:
			out.Classes[r.Class] = rr
		case r.Jobs >= minJobs:
			out.Global = rr
		}
	}
	return out
}

// recentRuns pairs a group's latest ratios with whether each job ran that long without ending
// on its own.
func recentRuns(r store.RunRatio) []scheduler.RatioRun {
	out := make([]scheduler.RatioRun, len(r.Recent))
	for i, x := range r.Recent {
		out[i] = scheduler.RatioRun{Ratio: x, Censored: i < len(r.Censored) && r.Censored[i]}
	}
	return out
}

// NewLoop makes a loop. wake and work are shared with the handlers.
func NewLoop(st *store.Store, cfg Config, log *slog.Logger, wake, work *scheduler.Signal) *Loop {
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Second
	}
	if cfg.HeartbeatGrace <= 0 {
		cfg.HeartbeatGrace = 30 * time.Second
	}
	if cfg.JobGrace <= 0 {
		cfg.JobGrace = 5 * time.Minute
	}
	if cfg.FenceMargin <= 0 {
		cfg.FenceMargin = 45 * time.Second
	}
	if cfg.LeaderLease <= 0 {
		cfg.LeaderLease = max(15*time.Second, 3*cfg.Interval)
	}
	if cfg.Holder == "" {
		host, _ := os.Hostname()
		cfg.Holder = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	if cfg.TallyHalfLife <= 0 {
		cfg.TallyHalfLife = 7 * 24 * time.Hour
	}
	if cfg.UsageCompactEvery <= 0 {
		cfg.UsageCompactEvery = time.Minute
	}
	if cfg.Idle.Action == "" {
		cfg.Idle.Action = IdleActionNone
	}
	if cfg.TallyWeights == nil {
		w := store.DefaultTallyWeights
		cfg.TallyWeights = &w
	}
	if cfg.Sweep == 0 {
		cfg.Sweep = DefaultSweep
	}
	if cfg.FullReadEvery <= 0 {
		cfg.FullReadEvery = 5 * time.Minute
	}
	return &Loop{st: st, cfg: cfg, log: log, wake: wake, work: work, queue: newQueue(cfg.FullReadEvery, log, cfg.Metrics.ObserveDrift),
		fleet:   newFleet(cfg.FullReadEvery, log, cfg.Metrics.ObserveDrift),
		written: written{}, explained: explained{}, learnEvery: time.Minute, learnAfter: RatioRefresh}
}

// Run schedules until ctx ends. Only one master at a time holds the lease; the others try
// again every interval, so one takes over when the leader goes away.
func (l *Loop) Run(ctx context.Context) error {
	for {
		lead, ok, err := l.st.AcquireLeadership(ctx, l.cfg.Holder, l.cfg.LeaderLease)
		if err != nil && ctx.Err() == nil {
			l.log.Warn("scheduler lease", "err", err)
		}
		if ok {
			l.log.Info("this master runs the scheduler", "epoch", lead.Epoch, "lease", l.cfg.LeaderLease)
			err := l.Lead(ctx, lead)
			if ctx.Err() != nil {
				rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = l.st.ResignLeadership(rctx, lead)
				cancel()
				return nil
			}
			l.log.Warn("scheduler lost its lease", "epoch", lead.Epoch, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(l.cfg.Interval):
		}
	}
}

// Lead runs passes under a held lease, renewing it in the background, until ctx ends or the
// lease is lost (its error).
func (l *Loop) Lead(ctx context.Context, lead store.Leadership) error {
	// What a previous term remembered may have changed under another leader: its first pass
	// reads and plans everything.
	l.queue.reset()
	l.fleet.reset()
	l.fresh, l.housekeptAt, l.offlineAt, l.dbNow, l.dbStarted, l.explained = nil, time.Time{}, time.Time{}, time.Time{}, time.Time{}, explained{}
	l.explainLost.Store(false)
	l.forgetWritten()
	l.weights.Store(nil)
	l.weightsWanted.Store(false)
	ctx, cancel := context.WithCancelCause(ctx)
	defer l.queue.check.wait()
	defer l.fleet.check.wait()
	defer cancel(nil)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		l.renew(ctx, lead, cancel)
	}()
	defer func() { <-renewed }()
	defer cancel(nil)
	learning := make(chan struct{})
	go func() {
		defer close(learning)
		l.learn(ctx)
	}()
	defer func() { <-learning }()
	defer cancel(nil)
	accruing := make(chan struct{})
	go func() {
		defer close(accruing)
		l.accrue(ctx, lead)
	}()
	defer func() { <-accruing }()
	defer cancel(nil)
	forecasts := make(chan forecastJob, 1)
	forecasting := make(chan struct{})
	go func() {
		defer close(forecasting)
		l.forecaster(ctx, lead, forecasts)
	}()
	l.forecasts = forecasts
	defer func() { l.forecasts = nil }()
	defer func() { <-forecasting }()
	defer cancel(nil)
	explains := make(chan explainBatch, 1)
	explaining := make(chan struct{})
	go func() {
		defer close(explaining)
		l.explainer(ctx, lead, explains)
	}()
	l.explains = explains
	defer func() { l.explains = nil }()
	defer func() { <-explaining }()
	defer cancel(nil)
	if l.cfg.WhileLeading != nil {
		chores := make(chan struct{})
		go func() {
			defer close(chores)
			l.cfg.WhileLeading(ctx, lead)
		}()
		defer func() { <-chores }()
		defer cancel(nil)
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	woken := l.wake.C()
	var rest time.Duration // after the last pass (MaxBusy)
	var ended time.Time
	pace := pacer{maxBusy: l.cfg.MaxBusy, most: l.cfg.Interval}
	for {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-woken:
			// Let a burst of submits or heartbeats settle into one pass, and rest after the
			// last one (MaxBusy).
			wait := max(20*time.Millisecond, rest-time.Since(ended))
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(wait):
			}
		case <-timer.C:
		}
		// Taken before the pass: a submit during the pass wakes the next one at once. (Taken
		// after it, such wakes were lost and the job waited a whole Interval: 5 s for the
		// submissions that came during a pass.)
		woken = l.wake.C()
		start := time.Now()
		err := l.pass(ctx, lead, time.Since(l.housekeptAt) >= HousekeepEvery)
		ended = time.Now()
		// Never longer than the interval (pacer): after a full pass of a long queue (seconds)
		// the next submissions must not wait four times that.
		rest = pace.after(start, ended, rests(err, l.phases))
		if l.cfg.OnPass != nil {
			l.cfg.OnPass(start, ended.Sub(start), err)
		}
		switch {
		case errors.Is(err, store.ErrNotLeader):
			return err
		case errors.Is(err, store.ErrUnavailable) && ctx.Err() == nil:
			l.log.Warn("scheduler pass skipped: the database is unavailable", "err", err)
		case err != nil && ctx.Err() == nil:
			l.log.Error("scheduler pass failed", "err", err)
		}
		timer.Reset(l.cfg.Interval)
	}
}

// crowded says whether a plan left a job of the snapshot's queue waiting for something other
// than time: room on a slave, or a cap, a GPU model, the backfill head's guard; a job a
// narrowed plan skipped could not start by counts. A job waiting only for its notBefore or
// for its reservations to begin does not count (B2x's backlog: 20,000 jobs booked two days
// ahead, on a cluster with room for every new one). On a cluster where nothing waits for room
// a new job starts at the next pass, so the loop must not rest before it (rests).
func crowded(snap scheduler.Snapshot, plan scheduler.Plan) bool {
	if len(plan.Skipped) > 0 {
		return true
	}
	for i := range snap.Queued {
		j := &snap.Queued[i]
		if _, waits := plan.Explanations[j.UUID]; waits && !snap.WaitsForTime(j) {
			return true
		}
	}
	return false
}

// rests says whether the loop may rest after a pass (Config.MaxBusy): not after one that placed
// jobs while no job waits for room, since the submissions keep coming and the cluster has room
// for them; after any other (a failed one too). A pass that placed nothing on such a cluster
// (woken by an end, with only jobs waiting for their time queued: nothing to place) rests, or
// the passes ran back to back while nothing came of them.
func rests(err error, ph Phases) bool {
	return err != nil || ph.Crowded || ph.Assigned == 0
}

// PassBank is how much pass time the loop may bank while it rests or idles (Config.MaxBusy):
// a pass that long after a quiet spell does not rest.
const PassBank = 100 * time.Millisecond

// pacer keeps the passes that may rest (rests) to maxBusy of the time (Config.MaxBusy), as a
// token bucket: time earns maxBusy of itself as pass time, at most PassBank banked, and a pass
// spends what it took. Steadily, a pass of d rests d×(1/maxBusy−1). A rest is never longer than
// most, and what a rest that long leaves owed is forgiven: after a full pass of a long queue
// (seconds) the passes after it must not go on resting the interval until it is paid.
type pacer struct {
	maxBusy float64
	most    time.Duration
	credit  time.Duration // banked pass time; negative: owed
	at      time.Time     // when credit was last earned to
}

// after returns how long the loop rests after a pass from start to end; mayRest false (a pass
// that placed a stream of submissions on a cluster with room) neither rests nor spends.
func (p *pacer) after(start, end time.Time, mayRest bool) time.Duration {
	if p.maxBusy <= 0 || p.maxBusy >= 1 {
		return 0
	}
	if p.at.IsZero() {
		p.credit = PassBank
	} else {
		p.credit = min(p.credit+time.Duration(float64(end.Sub(p.at))*p.maxBusy), PassBank)
	}
	p.at = end
	if !mayRest {
		return 0
	}
	p.credit = max(p.credit-end.Sub(start), -time.Duration(float64(p.most)*p.maxBusy))
	if p.credit >= 0 {
		return 0
	}
	return time.Duration(float64(-p.credit) / p.maxBusy)
}

// accrue adds to every user's tally what his running jobs used since the last accrual, at the
// start of the term and every TallyEvery while it lasts, each time in a transaction of its own
// that proves the lease. Accrual integrates over the time since the last one, so its frequency
// only bounds how late a start or an end counts. It runs beside the passes, not in one: its
// GROUP BY over every running job took 72 ms (p50) and up to 185 ms of every fifth pass of
// B8x's soak (35,000 running jobs, 29 Nov), inside the housekeeping's transaction; a pass reads
// the tallies as last accrued. Once the term has a snapshot, the weights come from the memory
// of the running jobs (Loop.weights, as the first pass after the last accrual saw them: what
// ran over the time being accrued, counted from its start rather than its end) instead of that
// GROUP BY (100–145 ms every 5 s at 35,000 running jobs, 5 % of Postgres's statement time in
// B8x).
func (l *Loop) accrue(ctx context.Context, lead store.Leadership) {
	tick := time.NewTicker(TallyEvery)
	defer tick.Stop()
	for {
		weights := l.weights.Load()
		err := l.st.AsLeader(ctx, lead, func(tx *store.Store) error {
			if weights != nil {
				l.weightsWanted.Store(true)
				return tx.AccrueTalliesOf(ctx, *weights, l.cfg.TallyHalfLife)
			}
			return tx.AccrueTallies(ctx, *l.cfg.TallyWeights, l.cfg.TallyHalfLife)
		})
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, store.ErrNotLeader):
			return // the passes end the term
		case err != nil:
			l.log.Warn("accruing the tallies failed; again in a moment", "err", err, "every", TallyEvery)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// renew extends the lease every third of its length; it cancels the leader's context when
// the lease is lost, or when it could not be renewed for a whole lease (the database is gone:
// another master may take over when it comes back).
func (l *Loop) renew(ctx context.Context, lead store.Leadership, cancel context.CancelCauseFunc) {
	tick := time.NewTicker(l.cfg.LeaderLease / 3)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rctx, done := context.WithTimeout(ctx, l.cfg.LeaderLease/3)
		err := l.st.RenewLeadership(rctx, lead, l.cfg.LeaderLease)
		done()
		switch {
		case err == nil:
			last = time.Now()
		case errors.Is(err, store.ErrNotLeader):
			cancel(err)
			return
		case time.Since(last) > l.cfg.LeaderLease:
			cancel(fmt.Errorf("lease not renewed for %s: %w", l.cfg.LeaderLease, err))
			return
		default:
			l.log.Warn("renew the scheduler lease", "err", err)
		}
	}
}

// Phases says where one pass's time went: the housekeeping transaction, the usage
// compaction, the snapshot's reads, Plan, and the transaction that applies the plan; Steps are
// the reads and writes one by one. Benchmarks and the profile of a slow pass read it; so would an operator, in the debug log.
type Phases struct {
	Housekeeping, Compact, Read, Plan, Apply time.Duration
	// Planned is how many queued jobs Plan was given (all of them in a full pass); Plan
	// includes choosing them (narrow).
	Planned int
	// Explained is how many waiting jobs' explanations changed in their reason (or were
	// unknown) and were written; Refreshed, how many were written again for their details.
	Explained, Refreshed              int
	Steps                             []Timed
	Slaves, Queued, Running, Assigned int
	// Crowded says the pass left a job waiting for room (crowded; see rests).
	Crowded bool
	// FeedRows is how many rows the pass's read of the jobs returned: the change feed's, or
	// every queued and live job's when FullRead. Checked says the pass compared the memory
	// with a check's full read (read beside the passes).
	FeedRows          int
	FullRead, Checked bool
}

// Timed is one step of a pass and how long it took.
type Timed struct {
	Step string
	Took time.Duration
}

// stepsString lists a pass's steps for the debug log: "clock=1ms tallies=3ms ...".
func stepsString(steps []Timed) string {
	var b strings.Builder
	for i, s := range steps {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%s", strings.ReplaceAll(s.Step, " ", "_"), s.Took.Round(time.Microsecond))
	}
	return b.String()
}

// LastPass is where the time of the last pass went. Only the goroutine that runs the passes
// may call it (tests and benchmarks that call Pass themselves).
func (l *Loop) LastPass() Phases { return l.phases }

// HousekeepEvery is the least time between two housekeepings of the loop's passes when they
// come faster (a stream of submissions on a cluster with room runs them back to back): what
// the housekeeping decides follows timeouts of many seconds (heartbeat grace, leases,
// maxDuration), so that a second later changes nothing, while its transaction of five
// statements was a third of such a pass (B2x).
const HousekeepEvery = time.Second

// offlineEvery is the least time between two looks of the housekeeping for slaves silent past
// their grace: a tenth of the grace, so that a slave is marked offline at most a tenth later
// than at the first housekeeping after its grace. The look reads every slave's row (which
// index would tell a silent slave, the time of its last heartbeat, changes at every heartbeat,
// whose updates must stay HOT); at 5,000 slaves it was a third of the housekeeping, 4 ms alone
// and 18 ms (median) in B8x's passes, at every housekeeping, once a second.
func offlineEvery(grace time.Duration) time.Duration { return max(HousekeepEvery, grace/10) }

// Pass does one housekeeping and scheduling pass as the holder of lead. The tallies are
// accrued beside the passes of a term (Lead), not by a pass.
func (l *Loop) Pass(ctx context.Context, lead store.Leadership) error {
	return l.pass(ctx, lead, true)
}

// pass is Pass, with the housekeeping left out unless housekeep.
func (l *Loop) pass(ctx context.Context, lead store.Leadership, housekeep bool) error {
	start := time.Now()
	l.phases = Phases{}
	ph := &l.phases
	var stops []string
	if housekeep {
		// The jobs past their maxDuration: the memory names the candidates (due by the
		// database's clock as last read, advanced by the time since, with a minute to spare),
		// the database decides; nil asks about every running job. Found before the
		// transaction: the walk over every live job (12 ms at B8x's size) held it open.
		var among []string
		if !l.dbNow.IsZero() {
			if ids, known := l.queue.overdue(l.dbNow.Add(time.Since(l.dbNowAt) + time.Minute)); known {
				among = ids
			}
		}
		t := time.Now()
		var ended time.Time
		offline := time.Since(l.offlineAt) >= offlineEvery(l.cfg.HeartbeatGrace)
		err := l.st.AsLeader(ctx, lead, func(tx *store.Store) error {
			l.timed("begin and proof", t)
			var err error
			if stops, err = l.housekeeping(ctx, tx, lead, among, offline); err != nil {
				return err
			}
			// Delivered at commit: the long polls of these slaves, on every master, learn of
			// the jobs to stop.
			err = tx.NotifySlaves(ctx, stops...)
			ended = time.Now()
			return err
		})
		if err != nil {
			return err
		}
		l.timed("commit", ended)
		l.housekeptAt = start
		if offline {
			l.offlineAt = start
		}
	}
	ph.Housekeeping = time.Since(start)
	l.work.WakeKeys(stops...)
	if time.Since(l.lastCompact) >= l.cfg.UsageCompactEvery {
		// Outside the leader's transaction: merging old samples is safe on any master and must
		// not hold the pass's locks.
		t := time.Now()
		if _, err := l.st.CompactUsage(ctx); err != nil {
			l.log.Warn("compacting the usage series failed", "err", err)
		}
		l.lastCompact = time.Now()
		ph.Compact = time.Since(t)
	}
	t := time.Now()
	snap, hosts, err := l.snapshot(ctx)
	if err != nil {
		return err
	}
	ph.Read = time.Since(t)
	ph.Slaves, ph.Queued, ph.Running = len(snap.Slaves), len(snap.Queued), len(snap.Running)
	t = time.Now()
	var plan scheduler.Plan
	var early earlyWrites
	narrowed := false
	all := snap.Queued // the whole queue, for a far forecast
	full := l.fresh == nil || l.cfg.Sweep < 0 || time.Since(l.fullAt) >= l.cfg.FullReadEvery
	estimate := full || l.cfg.ForecastEvery <= 0 || time.Since(l.forecastAt) >= l.cfg.ForecastEvery
	// With a forecaster (a leading term), the pass's own plan never forecasts: the forecaster
	// plans the same snapshot again with ranges, off the pass.
	background := l.forecasts != nil
	snap.NoRanges = !estimate || background
	if full {
		// Every job is fresh until this plan is committed (remember).
		l.fresh, l.fullAt = make(map[string]bool, len(snap.Queued)), time.Now()
		for _, j := range snap.Queued {
			l.fresh[j.UUID] = true
		}
		// A burst's first assignments are committed while the rest is planned (earlyWriter).
		w := l.writeEarly(ctx, lead, hosts)
		s := snap
		s.OnAssign = w.add
		plan = s.Plan()
		ph.Plan = time.Since(t)
		if early = w.finish(); early.err != nil {
			l.queue.readAgain(early.conflicts...)
			return early.err
		}
	} else {
		plan, snap.Queued, narrowed = planNarrowed(snap, l.fresh, l.queue.job, l.cfg.Sweep, &l.scratch)
		ph.Plan = time.Since(t)
	}
	ph.Planned = len(snap.Queued)
	t = time.Now()
	placed, err := l.apply(ctx, lead, snap, hosts, plan, early, narrowed, estimate && !background)
	ph.Apply, ph.Assigned = time.Since(t), placed
	if err == nil {
		ph.Crowded = crowded(snap, plan)
		far := background && (full || time.Since(l.farAt) >= l.farEvery())
		if estimate && (!background || l.handOff(snap, all, narrowed, far)) {
			l.forecastAt = start
			if far {
				l.farAt = start
			}
		}
		l.remember(snap.Queued, plan)
		l.cfg.Metrics.ObservePass(time.Since(start), placed)
		if l.log.Enabled(ctx, slog.LevelDebug) {
			l.log.Debug("scheduler pass phases", "housekeeping", ph.Housekeeping, "read", ph.Read, "plan", ph.Plan, "apply", ph.Apply,
				"slaves", ph.Slaves, "queued", ph.Queued, "planned", ph.Planned, "running", ph.Running, "assigned", placed,
				"fit_waiting", plan.FitWaiting, "skipped", len(plan.Skipped), "crowded", ph.Crowded, "explained", l.phases.Explained, "refreshed", l.phases.Refreshed,
				"feed_rows", l.phases.FeedRows, "full_read", l.phases.FullRead, "checked", l.phases.Checked, "steps", stepsString(l.phases.Steps))
			if plan.FitWaiting > 1000 {
				l.log.Debug("many jobs that fit by counts were left waiting", "fit_waiting", plan.FitWaiting, "explained", topReasons(plan.Explanations, 3))
			}
		}
	}
	return err
}

// topReasons names the most common of the waiting jobs' explanations, with their counts (for
// the debug log).
func topReasons(explained map[string][]string, n int) string {
	count := map[string]int{}
	for _, lines := range explained {
		if len(lines) > 0 {
			count[strings.Join(lines, " | ")]++
		}
	}
	reasons := make([]string, 0, len(count))
	for r := range count {
		reasons = append(reasons, r)
	}
	slices.SortFunc(reasons, func(a, b string) int { return cmp.Compare(count[b], count[a]) })
	var out []string
	for _, r := range reasons[:min(n, len(reasons))] {
		out = append(out, fmt.Sprintf("%d× %q", count[r], r))
	}
	return strings.Join(out, "; ")
}

// timed records how long a step of the pass (a read of the snapshot, a write of the plan) took.
func (l *Loop) timed(step string, since time.Time) {
	l.phases.Steps = append(l.phases.Steps, Timed{Step: step, Took: time.Since(since)})
}

// housekeeping gives their outcome to the jobs the scheduler must act on by time (all measured
// on the database's clock), and returns the slaves that have something to stop now:
//   - slaves silent for the heartbeat grace are marked offline (when offline: see offlineEvery);
//   - jobs on a slave offline for the job grace plus the fence margin (the slave has stopped
//     them by then) are given up: one that never ran is queued again, one that ran fails with
//     `worker lost` and is restarted if restartable;
//   - jobs whose lease ran out: an assignment not taken is queued again; a start, a halt not
//     begun or a halt not finished fails (a halt's job restarts if restartable);
//   - jobs that ran their maxDuration are cancelled (among the jobs named, nil: any).
//
// What a job ended here held on its slave stays taken until the slave confirms the container
// gone (see store.Change.Released).
func (l *Loop) housekeeping(ctx context.Context, tx *store.Store, lead store.Leadership, among []string, offline bool) ([]string, error) {
	if offline {
		t := time.Now()
		names, err := tx.MarkSlavesOffline(ctx, l.cfg.HeartbeatGrace, lead.Since)
		if err != nil {
			return nil, err
		}
		l.timed("offline", t)
		for _, name := range names {
			l.log.Warn("slave offline: no heartbeat", "slave", name, "grace", l.cfg.HeartbeatGrace)
		}
	}
	t := time.Now()
	var stops []string
	act := func(j store.LiveJob, ch store.Change, what string) error {
		ch.From, ch.Attempt = []job.Status{j.Status}, store.Attempt(j.Attempt)
		ch.Event.Actor = string(job.ActorScheduler)
		_, restart, err := tx.ChangeJob(ctx, j.UUID, ch)
		if errors.Is(err, store.ErrStateConflict) {
			return nil
		}
		if err != nil {
			return err
		}
		stops = append(stops, j.SlaveName)
		l.log.Warn(what, "job", j.UUID, "slave", j.SlaveName, "was", j.Status, "now", ch.To, "restart_job", restart)
		return nil
	}
	lost, err := tx.ListLostJobs(ctx, l.cfg.JobGrace+l.cfg.FenceMargin)
	if err != nil {
		return nil, err
	}
	l.timed("lost", t)
	// Assignments taken back are queued again in one statement (store.RequeueAssigned), the
	// other outcomes one change each; taken keeps each requeue's job for the log and the stops.
	var requeues []store.Requeue
	type takenBack struct{ slave, what string }
	taken := map[string]takenBack{}
	requeue := func(j store.LiveJob, expired bool, message string) {
		if _, dup := taken[j.UUID]; dup {
			return // an assignment on a lost slave whose lease ran out too: once, as lost
		}
		requeues = append(requeues, store.Requeue{UUID: j.UUID, Attempt: j.Attempt, Expired: expired, Message: message})
		what := "job given up: its slave is lost"
		if expired {
			what = "lease expired"
		}
		taken[j.UUID] = takenBack{j.SlaveName, what}
	}
	for _, j := range lost {
		var ch store.Change
		switch j.Status {
		case job.StatusAssigned:
			// The slave never took it, and an attempt never taken can never start.
			requeue(j, false, "slave "+j.SlaveName+" was lost before it took the job: queued again")
			continue
		case job.StatusStarting:
			ch = store.Change{To: job.StatusQueued,
				Event: store.Event{Message: "worker lost: slave " + j.SlaveName + " stopped answering before the job ran: queued again"}}
		default:
			ch = store.Change{To: job.StatusFailed, Restart: true,
				Event: store.Event{Message: "worker lost: slave " + j.SlaveName + " stopped answering"}}
		}
		if err := act(j, ch, "job given up: its slave is lost"); err != nil {
			return nil, err
		}
	}
	t = time.Now()
	expired, err := tx.ListExpiredLeases(ctx, ExpiredPerPass)
	if err != nil {
		return nil, err
	}
	l.timed("leases", t)
	leases := tx.Leases()
	for _, j := range expired {
		var ch store.Change
		switch {
		case j.Status == job.StatusAssigned && j.HandedOver:
			requeue(j, true, fmt.Sprintf("slave %s did not take the job within %s: queued again", j.SlaveName, leases.Assigned))
			continue
		case j.Status == job.StatusAssigned:
			requeue(j, true, fmt.Sprintf("slave %s did not ask for the job within %s: queued again", j.SlaveName, leases.BeforeHandOver()))
			continue
		case j.Status == job.StatusStarting:
			ch = store.Change{To: job.StatusFailed,
				Event: store.Event{Message: fmt.Sprintf("slave %s did not start the job in time (no progress for %s, or longer than %s)",
					j.SlaveName, leases.Starting, leases.StartDeadline)}}
		case j.Status == job.StatusMustHalt:
			ch = store.Change{To: job.StatusFailed, Restart: true,
				Event: store.Event{Message: fmt.Sprintf("slave %s did not begin the halt within %s: stopped", j.SlaveName, leases.MustHalt)}}
		default: // HALTING
			ch = store.Change{To: job.StatusFailed, Restart: true,
				Event: store.Event{Message: fmt.Sprintf("the halt did not end within %s: stopped", leases.Halting)}}
		}
		if err := act(j, ch, "lease expired"); err != nil {
			return nil, err
		}
	}
	if len(requeues) > 0 {
		t = time.Now()
		queued, err := tx.RequeueAssigned(ctx, string(job.ActorScheduler), requeues)
		if err != nil {
			return nil, err
		}
		l.timed("requeue", t)
		for _, id := range queued {
			stops = append(stops, taken[id].slave)
			l.log.Warn(taken[id].what, "job", id, "slave", taken[id].slave, "was", job.StatusAssigned, "now", job.StatusQueued)
		}
	}
	// The jobs past their maxDuration among the candidates the pass found (nil: every
	// running job).
	t = time.Now()
	overdue, err := tx.ListExpiredJobs(ctx, among)
	if err != nil {
		return nil, err
	}
	l.timed("overdue", t)
	for _, j := range overdue {
		ch := store.Change{To: job.StatusCancelled,
			Event: store.Event{Message: "maxDuration (" + job.FormatDuration(time.Duration(j.MaxS)*time.Second) + ") reached"}}
		if err := act(store.LiveJob{UUID: j.UUID, Status: job.Status(j.Status), Attempt: j.Attempt, SlaveName: j.SlaveName}, ch, "job cancelled: maxDuration reached"); err != nil {
			return nil, err
		}
	}
	// The idle check reads an hour of samples of every running job: it runs a few times per
	// idle window (at most once a minute), not at every pass.
	if l.cfg.Idle.After > 0 && time.Since(l.lastIdle) >= min(time.Minute, l.cfg.Idle.After/4) {
		t = time.Now()
		if err := l.idleGPUs(ctx, tx, act); err != nil {
			return nil, err
		}
		l.lastIdle = time.Now()
		l.timed("idle", t)
	}
	slices.Sort(stops)
	return slices.Compact(stops), nil
}

// slaveView is what a snapshot makes of the fleet's slaves: the planner's slaves, their index
// (scheduler.SlaveIndex: each slave's GPUs in order, model ids, the all-free state a pass starts
// from) and the host each is reached at. The fleet's slice of slaves stays the same until a
// slave's scheduling columns change, which heartbeats do not, so the view is made again only
// then or when the clusters change: made at every pass, the index alone was 3 % of the
// master's CPU in B2x (1,000 slaves; Plan sorted them by name again, the fleet keeps them by
// cluster and name) and grew with the slaves.
type slaveView struct {
	from     []fleetSlave // the fleet's slice it was made of
	clusters map[int]scheduler.Cluster
	slaves   []scheduler.Slave
	index    *scheduler.SlaveIndex
	hosts    map[string]string
	// gen numbers the views a leader made, from 1: a running job's slave's place in the index
	// (heldJob.hint) is found again when it was found in another view.
	gen uint32
}

// of says whether the view was made of these very slaves (fleet.take's shared slice) and of
// clusters equal to these (the index keeps a copy of each slave's cluster).
func (v *slaveView) of(slaves []fleetSlave, clusters map[int]scheduler.Cluster) bool {
	if v.index == nil || len(slaves) != len(v.from) || len(slaves) > 0 && &slaves[0] != &v.from[0] {
		return false
	}
	return maps.EqualFunc(clusters, v.clusters, func(a, b scheduler.Cluster) bool {
		return a.ID == b.ID && a.Private == b.Private && a.GuestLimit == b.GuestLimit && slices.Equal(a.Projects, b.Projects)
	})
}

// makeView makes the view of the fleet's slaves and the clusters. Plan and the loop only read
// what it holds, and the snapshots of later passes share it.
func (l *Loop) makeView(slaves []fleetSlave, clusters map[int]scheduler.Cluster) slaveView {
	v := slaveView{from: slaves, clusters: clusters, slaves: make([]scheduler.Slave, 0, len(slaves)), hosts: make(map[string]string, len(slaves))}
	for _, s := range slaves {
		v.hosts[s.Name] = firstNonEmpty(s.DNSName, s.Host, s.Name)
		inv := s.docs.inventory
		v.slaves = append(v.slaves, scheduler.Slave{
			Name: s.Name, InstanceID: s.InstanceID, ClusterID: s.ClusterID,
			Online: s.Online, Accepting: s.AcceptingJobs && !s.Disabled,
			CPUs: inv.CPUs, MemoryGb: max(int(inv.MemoryMiB/1024)-l.cfg.MemoryReserveGb, 0),
			CudaMajor: inv.CudaMajor(), GPUs: inv.GPUs, CapacityGPUs: s.docs.capacity,
		})
	}
	v.index = scheduler.NewSlaveIndex(v.slaves, clusters)
	return v
}

// snapshot reads what Plan needs, and the host name users reach each slave at (for the
// assignments' state.resources.slaveHost).
func (l *Loop) snapshot(ctx context.Context) (scheduler.Snapshot, map[string]string, error) {
	hosts := map[string]string{}
	t := time.Now()
	// One round trip (store.ReadPass) reads the clock, the tallies, the reservations and the
	// clusters, and the slaves' and the jobs' feeds with what ended jobs still hold. Its mark
	// is taken before the feeds: whatever commits after them is stamped at or after it. A full
	// read of the slaves or the jobs (a term's first) is made apart, after it.
	fn, qn := l.fleet.next(ctx, l.st), l.queue.next(ctx, l.st)
	read, err := l.st.ReadPass(ctx, l.cfg.TallyHalfLife, store.PassFeeds{Slaves: !fn.full, SlavesFrom: fn.from, Jobs: !qn.full, JobsFrom: qn.from, Also: qn.also})
	if err != nil {
		return scheduler.Snapshot{}, hosts, err
	}
	now, mark := read.Now, read.Mark
	if !l.dbStarted.IsZero() && !read.Started.Equal(l.dbStarted) {
		// The database restarted since the last pass: after a crash it has lost what it had
		// committed without waiting for the disk (a heartbeat's slave back online), which the
		// memories may have read, and gives out again the ids of those transactions (wentBack).
		l.log.Warn("the database restarted: the scheduler reads everything again", "started", read.Started, "was", l.dbStarted)
		fn, qn = l.fleet.readAll(), l.queue.readAll()
	}
	snap := scheduler.Snapshot{Now: now, Clusters: map[int]scheduler.Cluster{}, Policy: scheduler.PolicyFair, Limits: scheduler.DefaultLimits,
		HaltFactor: l.cfg.HaltFactor, HaltNonRestartable: l.cfg.HaltNonRestartable, Tallies: read.Tallies}
	if l.cfg.Limits != nil {
		snap.Limits = *l.cfg.Limits
	}
	l.dbNow, l.dbNowAt = now, time.Now()
	for _, r := range read.Reservations {
		snap.Reservations = append(snap.Reservations, scheduler.Reservation{ID: r.ID, Name: r.Name, ClusterID: int(r.ClusterID.Int64),
			SlaveNames: r.SlaveNames, GPUs: r.GPUs, Start: r.Start, End: r.End, Users: r.UserIDs, Projects: r.ProjectIDs})
	}
	for _, c := range read.Clusters {
		snap.Clusters[c.ID] = scheduler.Cluster{ID: c.ID, Private: c.Private, Projects: read.Owners[c.ID], GuestLimit: time.Duration(c.GuestLimitS) * time.Second}
	}
	l.timed("read", t)
	if l.forecasts == nil {
		// A pass run alone plans its own ranges (pass); a leading term's forecaster reads
		// these for its plan of the snapshot (forForecast).
		t = time.Now()
		snap.Ratios, snap.Arrivals = l.forPass(ctx, now)
		l.timed("run ratios", t)
	}
	t = time.Now()
	slaves, err := l.fleet.take(ctx, l.st, fn, read.Slaves, mark)
	if err != nil {
		return snap, hosts, err
	}
	if !l.view.of(slaves, snap.Clusters) {
		gen := l.view.gen + 1
		l.view = l.makeView(slaves, snap.Clusters)
		l.view.gen = gen
	}
	snap.Slaves, snap.Index, hosts = l.view.slaves, l.view.index, l.view.hosts
	l.timed("slaves", t)
	t = time.Now()
	queued, held, err := l.queue.take(ctx, l.st, qn, read.Jobs, read.Releasing, mark)
	if err != nil {
		return snap, hosts, err
	}
	snap.Queued = queued
	r := l.queue.lastRead
	if r.full {
		l.phases.Steps = append(l.phases.Steps, Timed{Step: "full read", Took: r.feed}, Timed{Step: "releasing", Took: r.releasing})
	}
	l.phases.FeedRows, l.phases.FullRead, l.phases.Checked = r.rows, r.full, r.checked
	l.followQueue()
	// The last pass's slice, filled again: a pass is done with its snapshot when it ends, and
	// the forecaster gets a copy (handOff). Made anew at every pass, it was the master's
	// largest allocation in B8x's soak (a Placed per running job: 7 MB a pass at 35,000).
	running := l.running[:0]
	if cap(running) < held.len() {
		running = make([]scheduler.Placed, 0, held.len()+held.len()/4)
	}
	running = held.placed(running, now, &l.view)
	clear(running[len(running):cap(running)]) // what fewer jobs left behind: not kept alive
	snap.Running, l.running = running, running
	if l.weights.Load() == nil || l.weightsWanted.Swap(false) {
		weights := heldWeights(running, *l.cfg.TallyWeights)
		l.weights.Store(&weights)
	}
	l.timed("jobs", t)
	// Only now: a pass that failed before both memories were read in full finds the restart
	// again.
	l.dbStarted = read.Started
	return snap, hosts, nil
}

// apply writes a plan in one transaction that proves the lease first (a plan of assignments
// alone: one statement that does the same, store.AssignJobsAsLeader; a plan with nothing to
// write: nothing), then what the waiting jobs are told in another. Each change stays
// conditional on the state the snapshot saw: a job cancelled since is skipped, not assigned.
//
// The plan's first early.sent assignments were committed while it was planned (earlyWriter);
// apply writes the others.
//
// A narrowed plan (see narrow) sets the estimates of the jobs it planned only; without estimate,
// no estimate is written (the plan forecast none: see Config.ForecastEvery).
func (l *Loop) apply(ctx context.Context, lead store.Leadership, snap scheduler.Snapshot, hosts map[string]string, plan scheduler.Plan, early earlyWrites, narrowed, estimate bool) (int, error) {
	assigned, halted := len(early.moved), 0
	var haltReasons, conflicts []string
	defer func() { l.queue.readAgain(slices.Concat(early.conflicts, conflicts)...) }()
	// The first early.sent assignments were committed while Plan ran (earlyWriter): the rest
	// are written here, and their slaves woken.
	rest := plan
	rest.Assignments = plan.Assignments[early.sent:]
	wake := wakeSlaves(snap, rest)
	batch, err := l.placements(rest.Assignments, hosts)
	if err != nil {
		return 0, err
	}
	// took notes the jobs the assignment moved; those it skipped changed since the snapshot
	// (cancelled, say): read again at the next pass, in case the change is one the feed does
	// not show (the row deleted since).
	took := func(done []string) {
		assigned = len(early.moved) + len(done)
		conflicts = append(conflicts, skipped(batch, done)...)
	}
	if len(plan.Failures) == 0 && len(plan.Halts) == 0 {
		// Assignments alone (most passes): one statement proves the lease, assigns and wakes
		// the slaves (store.AssignJobsAsLeader); nothing to write, nothing sent.
		if len(batch) > 0 {
			t := time.Now()
			var done []string
			if done, err = l.assignInParts(ctx, lead, batch, wake); err == nil {
				took(done)
				l.timed("assign", t)
			}
		}
	} else {
		err = l.st.AsLeader(ctx, lead, func(tx *store.Store) error {
			conflicts, halted, haltReasons = conflicts[:0], 0, nil
			// One statement for the whole pass; jobs cancelled since the snapshot are skipped.
			t := time.Now()
			done, err := tx.AssignJobs(ctx, batch)
			if err != nil {
				return err
			}
			l.timed("assign", t)
			took(done)
			for _, f := range plan.Failures {
				_, err := tx.TransitionJob(ctx, f.JobUUID, []job.Status{job.StatusQueued}, job.StatusFailed,
					store.Event{Actor: string(job.ActorScheduler), Message: f.Reason})
				if errors.Is(err, store.ErrStateConflict) {
					conflicts = append(conflicts, f.JobUUID)
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
					conflicts = append(conflicts, h.JobUUID)
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
				haltReasons = append(haltReasons, h.Reason)
			}
			if assigned > 0 || halted > 0 {
				// Delivered at commit, to the long polls of these slaves on every master.
				return tx.NotifySlaves(ctx, wake...)
			}
			return nil
		})
	}
	if err != nil {
		return 0, err
	}
	for _, r := range haltReasons {
		l.cfg.Metrics.ObserveHalt(r)
	}
	if assigned > 0 || halted > 0 {
		l.work.WakeKeys(wake...)
	}
	if assigned > 0 || halted > 0 || len(plan.Failures) > 0 {
		l.log.Info("scheduler pass", "planned", len(snap.Queued), "assigned", assigned, "halted", halted, "failed", len(plan.Failures))
	}
	// Assigned jobs' estimates were cleared with the assignment; jobs no longer queued are
	// forgotten at the next read (followQueue).
	l.writtenMu.Lock()
	for _, a := range plan.Assignments {
		delete(l.written, a.JobUUID)
	}
	l.writtenMu.Unlock()
	for _, a := range plan.Assignments {
		delete(l.explained, a.JobUUID)
	}
	var wrote []string
	var estimates map[string]job.StartEstimate
	now := time.Now()
	if l.explainLost.Swap(false) {
		l.explained = explained{} // the explainer failed: what the database holds is unknown again
	}
	news, refreshed := l.explained.changed(plan.Explanations, now)
	l.phases.Explained, l.phases.Refreshed = len(news), len(refreshed)
	if len(news) >= 100 && l.log.Enabled(ctx, slog.LevelDebug) {
		l.log.Debug("many explanations changed", "explained", len(news), "top", topReasons(news, 3))
	}
	// What waiting jobs are told comes in a transaction of its own, after the decisions are
	// committed and their slaves woken: on a long queue writing every explanation and estimate
	// took most of the pass (B1x's burst: 7.6 of 17.8 s), and assignments waited for it. The
	// lease is proven again; a failure here leaves the last explanations, and the next pass
	// plans these jobs again. Nothing to write, no transaction: its begin, proof and commit
	// were a fifth of a pass that placed a stream of new jobs and explained none (B2x).
	if len(news) == 0 && len(refreshed) == 0 && !estimate {
		return assigned, nil
	}
	if !estimate && l.explains != nil {
		// While leading (a term's passes never estimate: the forecaster does), written by the
		// explainer, off the pass, and recorded as written now (explainer).
		l.explained.record(news, now, true)
		l.explained.record(refreshed, now, false)
		return assigned, l.explain(ctx, explainBatch{news: news, refreshed: refreshed})
	}
	if !estimate {
		// The explanations alone: statements that prove the lease themselves (four round
		// trips as a transaction), one unless they are many (explainInParts).
		t := time.Now()
		if err = l.explainInParts(ctx, lead, news, refreshed); err == nil {
			l.timed("explanations", t)
		}
	} else {
		err = l.st.AsLeader(ctx, lead, func(tx *store.Store) error {
			t := time.Now()
			if err := tx.SetQueuedExplanations(ctx, news, refreshed); err != nil {
				return err
			}
			l.timed("explanations", t)
			t = time.Now()
			var err error
			estimates, wrote, err = l.writeEstimates(ctx, tx, plan, estimated(snap.Queued, plan, false), snap.Now, narrowed, nearTolerance)
			l.timed("estimates", t)
			return err
		})
	}
	if err != nil {
		l.explained = explained{} // what the database holds is unknown again
		l.forgetWritten()
		return assigned, fmt.Errorf("explain the waiting jobs: %w", err)
	}
	l.recordWritten(estimates, wrote)
	l.explained.record(news, now, true)
	l.explained.record(refreshed, now, false)
	return assigned, nil
}

// writeEstimates writes the start estimates of a plan's waiting jobs (ids: those whose
// estimates the plan made at now decides, estimated) that moved by more than the tolerance
// (closeEstimates) since this term wrote them, all of them at the term's first full plan, when
// nothing is known of what the database holds. It returns the estimates and the jobs written,
// for recordWritten once the transaction commits.
func (l *Loop) writeEstimates(ctx context.Context, tx *store.Store, plan scheduler.Plan, ids []string, now time.Time, narrowed bool, tol tolerance) (map[string]job.StartEstimate, []string, error) {
	est, write := l.estimatesToWrite(plan, ids, narrowed, now, tol)
	if len(write) > 0 {
		if err := tx.SetStartEstimatesAmong(ctx, subEstimates(est, write), write); err != nil {
			return nil, nil, err
		}
	}
	return est, write, nil
}

// estimatesToWrite is a plan's estimates and, of ids (estimated), the jobs whose estimate is
// to be written (writeEstimates): those that moved by tol, the plan made at now, or all of ids
// when this term knows nothing of what the database holds.
func (l *Loop) estimatesToWrite(plan scheduler.Plan, ids []string, narrowed bool, now time.Time, tol tolerance) (map[string]job.StartEstimate, []string) {
	est := startEstimates(plan)
	l.writtenMu.Lock()
	defer l.writtenMu.Unlock()
	if narrowed || len(l.written) > 0 {
		return est, l.written.changed(est, ids, now, tol)
	}
	return est, ids
}

// estimated are the jobs of queued (a plan's) whose estimates the plan decides: all of them,
// but for those beyond its forecast's reach (scheduler.Plan.Unreached) unless far. A far
// forecast (FarForecastEvery) clears the estimates of the jobs it could not reach either; a
// near one leaves them what the last far one wrote.
func estimated(queued []scheduler.Job, plan scheduler.Plan, far bool) []string {
	if far || len(plan.Unreached) == 0 {
		return queuedIDs(queued)
	}
	beyond := make(map[string]bool, len(plan.Unreached))
	for _, id := range plan.Unreached {
		beyond[id] = true
	}
	ids := make([]string, 0, len(queued))
	for _, j := range queued {
		if !beyond[j.UUID] {
			ids = append(ids, j.UUID)
		}
	}
	return ids
}

// subEstimates is est for the jobs named.
func subEstimates(est map[string]job.StartEstimate, ids []string) map[string]job.StartEstimate {
	sub := make(map[string]job.StartEstimate, len(ids))
	for _, id := range ids {
		if e, ok := est[id]; ok {
			sub[id] = e
		}
	}
	return sub
}

func queuedIDs(queued []scheduler.Job) []string {
	ids := make([]string, len(queued))
	for i, j := range queued {
		ids[i] = j.UUID
	}
	return ids
}

// recordWritten notes estimates committed; forgetWritten forgets them all (what the database
// holds is unknown: a new term, a failed write).
func (l *Loop) recordWritten(est map[string]job.StartEstimate, ids []string) {
	l.writtenMu.Lock()
	defer l.writtenMu.Unlock()
	l.written.record(est, ids)
}

func (l *Loop) forgetWritten() {
	l.writtenMu.Lock()
	defer l.writtenMu.Unlock()
	l.written = written{}
}

// wakeSlaves names the slaves whose long polls have news after a plan: those that got jobs and
// those with jobs to halt.
func wakeSlaves(snap scheduler.Snapshot, plan scheduler.Plan) []string {
	var names []string
	for _, a := range plan.Assignments {
		names = append(names, a.SlaveName)
	}
	if len(plan.Halts) > 0 {
		at := make(map[string]string, len(snap.Running))
		for _, pl := range snap.Running {
			if !pl.Releasing { // a requeued job may also hold on the slave it left
				at[pl.JobUUID] = pl.SlaveName
			}
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

// setPlaced sets *pl to what a running job holds, as Plan sees it at now, in place: a pass sets
// one for every running job (15,000–37,000 at B8x's size), and each copy of the 240-byte
// struct on its way (an argument, a result, an append) was as long as setting it. Its GPUs' and
// CPUs' indices are the row's own (the memory's, read once), not copied: cut to their length,
// so that an append to them cannot write past them.
func setPlaced(pl *scheduler.Placed, h *store.Held, now time.Time) {
	*pl = scheduler.Placed{JobUUID: h.UUID, SlaveName: h.SlaveName, UserID: h.UserID, ProjectID: h.ProjectID, Bucket: h.Bucket,
		GPUIndices: slices.Clip([]int(h.GPUIDs)), CPUIDs: slices.Clip([]int(h.CPUIDs)), MemoryGb: h.MemoryGb,
		MinDuration: time.Duration(h.MinDuration) * time.Second, Restartable: h.Restartable, Interactive: h.Interactive,
		Halting: h.Releasing || h.Status == job.StatusMustHalt || h.Status == job.StatusHalting, Reservations: h.Reservations,
		Releasing: h.Releasing}
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
}

// startEstimates is what the store keeps of a plan's estimates: the forecast's likely start and
// range where there is one, else the planner's own estimate (a reservation's start).
func startEstimates(p scheduler.Plan) map[string]job.StartEstimate {
	out := make(map[string]job.StartEstimate, len(p.Ranges)+len(p.Estimates))
	for id, t := range p.Estimates {
		out[id] = job.StartEstimate{Start: t}
	}
	for id, r := range p.Ranges {
		early, late := r.Early, r.Late
		out[id] = job.StartEstimate{Start: r.Likely, Earliest: &early, Latest: &late}
	}
	return out
}

// Assignments of one pass are written in assignParts statements at once from assignSplitFrom
// of them: each proves the lease and wakes its own slaves (store.AssignJobsAsLeader), and
// Postgres runs them on as many cores. B1x's burst (22,185 jobs) was committed in 1.6–1.8 s
// as one statement, 1.1–1.2 s as two, 1.2–1.4 s as four (bench/ TestPassCost, 2 cores). A full
// plan commits its assignments while it is planned, as many writers in parts of the same size
// (early.go): what is left for apply then is less than a part; a narrowed plan (a cluster's
// slaves back at once) may still place more.
const (
	assignSplitFrom = 2000
	assignParts     = 2
)

// assignInParts commits a plan's assignments (no halts, no failures) and returns the jobs
// moved; wake are the slaves to wake (wakeSlaves), of which each statement wakes those it gave
// jobs to. The parts are transactions of their own: when one fails, what the others committed
// stays (each valid alone, under the lease it proved) and the next pass reads it from the feed.
func (l *Loop) assignInParts(ctx context.Context, lead store.Leadership, batch []store.Assignment, wake []string) ([]string, error) {
	if len(batch) < assignSplitFrom {
		return l.st.AssignJobsAsLeader(ctx, lead, batch, wake)
	}
	var g errgroup.Group
	done := make([][]string, assignParts)
	size := (len(batch) + assignParts - 1) / assignParts
	for k := range assignParts {
		part := batch[min(k*size, len(batch)):min((k+1)*size, len(batch))]
		g.Go(func() error {
			var err error
			done[k], err = l.st.AssignJobsAsLeader(ctx, lead, part, slavesOf(part))
			return err
		})
	}
	err := g.Wait()
	return slices.Concat(done...), err
}

// explainSplitFrom is how many explanations apply writes as assignParts statements at once
// (explainInParts): B1x's burst leaves 77,815 jobs waiting, each explained for the first time.
const explainSplitFrom = assignSplitFrom

// explainInParts writes the explanations of a pass (store.SetQueuedExplanationsAsLeader), from
// explainSplitFrom of them on as assignParts statements at once, each with a share of the jobs.
// The parts are transactions of their own, as assignInParts's: when one fails the others' stay
// written, and the caller, not knowing what the database holds, writes all of them again.
func (l *Loop) explainInParts(ctx context.Context, lead store.Leadership, news, refreshed map[string][]string) error {
	if len(news)+len(refreshed) < explainSplitFrom {
		return l.st.SetQueuedExplanationsAsLeader(ctx, lead, news, refreshed)
	}
	type part struct{ news, refreshed map[string][]string }
	parts := make([]part, assignParts)
	for k := range parts {
		parts[k] = part{make(map[string][]string, len(news)/assignParts+1), make(map[string][]string, len(refreshed)/assignParts+1)}
	}
	k := 0
	for id, e := range news {
		parts[k%assignParts].news[id] = e
		k++
	}
	for id, e := range refreshed {
		parts[k%assignParts].refreshed[id] = e
		k++
	}
	var g errgroup.Group
	for _, p := range parts {
		g.Go(func() error { return l.st.SetQueuedExplanationsAsLeader(ctx, lead, p.news, p.refreshed) })
	}
	return g.Wait()
}

// placements are the store's assignments of the plan's: each with its GPUs' details, the host
// users reach the slave at, what it adds to its owner's tally, and its event's message.
func (l *Loop) placements(as []scheduler.Assignment, hosts map[string]string) ([]store.Assignment, error) {
	batch := make([]store.Assignment, 0, len(as))
	for _, a := range as {
		gpuIDs := make([]int, len(a.GPUs))
		for i, g := range a.GPUs {
			gpuIDs[i] = g.Index
		}
		details, err := json.Marshal(a.GPUs)
		if err != nil {
			return nil, fmt.Errorf("encode GPUs: %w", err)
		}
		res := job.StateResources{ClusterID: a.ClusterID, GPUIDs: gpuIDs, CPUIDs: a.CPUIDs, CPUMemoryGb: a.MemoryGb,
			SlaveName: a.SlaveName, SlaveHost: hosts[a.SlaveName], SlaveInstanceID: a.SlaveInstanceID,
			PortMappings: []job.PortMapping{}, GPUDetails: details}
		inc := l.cfg.TallyWeights.Weight(len(a.GPUs), len(a.CPUIDs), a.MemoryGb) * TallyInterval.Hours()
		batch = append(batch, store.Assignment{JobUUID: a.JobUUID,
			Placement: store.Placement{SlaveName: a.SlaveName, SlaveInstanceID: a.SlaveInstanceID, ClusterID: a.ClusterID, Resources: res, TallyIncrement: inc},
			Message:   fmt.Sprintf("assigned to slave %s (GPUs %v, CPUs %v, %d GB)", a.SlaveName, gpuIDs, a.CPUIDs, a.MemoryGb)})
	}
	return batch, nil
}

// slavesOf names the slaves the assignments give jobs to, each once, in order.
func slavesOf(batch []store.Assignment) []string {
	names := make([]string, 0, len(batch))
	for _, a := range batch {
		names = append(names, a.SlaveName)
	}
	slices.Sort(names)
	return slices.Compact(names)
}
