package leader_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/leader"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/store"
	"github.com/opengpulab/gpulab/store/storetest"
)

// estimateWorld is a fresh database with one user and project, and a leader's lease.
type estimateWorld struct {
	t    *testing.T
	st   *store.Store
	u    store.User
	p    store.Project
	lead store.Leadership
}

func newEstimateWorld(t *testing.T) *estimateWorld {
	t.Helper()
	ctx := context.Background()
	st := storetest.New(t)
	u, p := storetest.Member(t, st, "alice", "vision")
	lead, ok, err := st.AcquireLeadership(ctx, "test-"+testenv.Suffix(), time.Hour)
	if err != nil || !ok {
		t.Fatalf("leadership: %v %v", ok, err)
	}
	return &estimateWorld{t: t, st: st, u: u, p: p, lead: lead}
}

// loop is a leader loop over the world's store with cfg, logging to logs (nil: nowhere).
func (w *estimateWorld) loop(cfg leader.Config, logs io.Writer) *leader.Loop {
	if logs == nil {
		logs = io.Discard
	}
	return leader.NewLoop(w.st, cfg, slog.New(slog.NewTextHandler(logs, nil)), scheduler.NewSignal(), scheduler.NewSignal())
}

// leading has l lead as the world's leader until the returned stop, which fails the test if
// the term ended otherwise than by stop.
func (w *estimateWorld) leading(l *leader.Loop) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Lead(ctx, w.lead) }()
	return func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			w.t.Fatalf("lead: %v", err)
		}
	}
}

// waitFor waits for ok, or fails the test after 2 minutes.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); !ok(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 2 minutes for %s", what)
		}
	}
}

// jobAndEvents reads job id and its history.
func (w *estimateWorld) jobAndEvents(id string) (*store.JobRecord, []store.Event) {
	w.t.Helper()
	ctx := context.Background()
	rec, err := w.st.GetJob(ctx, id)
	if err != nil {
		w.t.Fatal(err)
	}
	evs, err := w.st.ListJobEvents(ctx, id)
	if err != nil {
		w.t.Fatal(err)
	}
	return rec, evs
}

// pass runs one pass of loop as the world's leader.
func (w *estimateWorld) pass(loop *leader.Loop) {
	w.t.Helper()
	if err := loop.Pass(context.Background(), w.lead); err != nil {
		w.t.Fatalf("pass: %v", err)
	}
}

// online says whether the database has slave node1 online.
func (w *estimateWorld) online() bool {
	w.t.Helper()
	var on bool
	if err := w.st.DB().QueryRowContext(context.Background(), `SELECT online FROM slaves WHERE name = 'node1'`).Scan(&on); err != nil {
		w.t.Fatal(err)
	}
	return on
}

// oneGPUSlave registers slave node1 with one fake V100 in cluster 1.
func (w *estimateWorld) oneGPUSlave() {
	w.t.Helper()
	ctx := context.Background()
	inv, _ := json.Marshal(protocol.Inventory{Name: "node1", CPUs: 8, MemoryMiB: 32768, CudaVersion: "12.4", GPUStatus: "fake",
		GPUs: []protocol.GPU{{Index: 0, UUID: "GPU-0", Model: "V100-32GB", MemoryMiB: 32768, Fake: true}}})
	c, err := w.st.CreateCluster(ctx, store.Cluster{ID: 1, Name: "c1"})
	if err != nil {
		w.t.Fatal(err)
	}
	if _, err := w.st.RegisterSlave(ctx, store.SlaveRegistration{Name: "node1", InstanceID: "i1", Host: "node1", ClusterID: c.ID, Inventory: inv}); err != nil {
		w.t.Fatal(err)
	}
}

// submit queues a job of the world's user needing one GPU for at most maxDur.
func (w *estimateWorld) submit(maxDur time.Duration) string {
	w.t.Helper()
	return w.submitAs(w.u, w.p, [3]int{1, 1, 1}, maxDur)
}

// submitAs queues a job of user u in project p needing size's GPUs, CPUs and GB of memory for
// at most maxDur.
func (w *estimateWorld) submitAs(u store.User, p store.Project, size [3]int, maxDur time.Duration) string {
	w.t.Helper()
	j, err := job.Parse(fmt.Appendf(nil, `{"name": "j", "request": {"resources": {"gpus": %d, "cpus": %d, "cpuMemoryGb": %d},
 "docker": {"image": "debian:stable", "command": "true"}, "scheduling": {"maxDuration": "%d minutes"}}}`,
		size[0], size[1], size[2], int(maxDur.Minutes())), job.DefaultOptions())
	if err != nil {
		w.t.Fatal(err)
	}
	j.UUID = uuid.NewString()
	j.Owner = job.Owner{UserURN: u.URN, ProjectURN: p.URN}
	j.State.Status = job.StatusQueued
	if err := w.st.CreateJob(context.Background(), j, u.ID, p.ID, "submitted"); err != nil {
		w.t.Fatal(err)
	}
	return j.UUID
}

// estimated says whether job id has an estimated start with its range.
func (w *estimateWorld) estimated(id string) bool {
	w.t.Helper()
	rec, err := w.st.GetJob(context.Background(), id)
	if err != nil {
		w.t.Fatal(err)
	}
	s := rec.Job.State.Scheduling
	return s.EstimatedStart != nil && s.EstimatedStartEarliest != nil && s.EstimatedStartLatest != nil
}

// TestLoopStoresEveryEstimate: one pass of the real loop on Postgres, with a one-GPU slave and
// four one-hour jobs: the first is assigned, and every one still queued gets an estimated start
// with its range, an hour apart, in queue order; learned ratios from ended jobs bring the early
// end of the range forward at the next refresh.
func TestLoopStoresEveryEstimate(t *testing.T) {
	w := newEstimateWorld(t)
	ctx := context.Background()
	w.oneGPUSlave()
	var ids []string
	for range 4 {
		ids = append(ids, w.submit(time.Hour))
	}
	loop := w.loop(leader.Config{}, nil)
	if err := loop.Pass(ctx, w.lead); err != nil {
		t.Fatalf("pass: %v", err)
	}
	get := func(id string) *job.Job {
		rec, err := w.st.GetJob(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Job
	}
	first := get(ids[0])
	if first.State.Status != job.StatusAssigned {
		t.Fatalf("first job %s, want ASSIGNED", first.State.Status)
	}
	assignedAt := first.State.EventTimes[job.StatusAssigned]
	var prev time.Time
	for k, id := range ids[1:] {
		s := get(id).State.Scheduling
		if s.EstimatedStart == nil || s.EstimatedStartEarliest == nil || s.EstimatedStartLatest == nil {
			t.Fatalf("job %d: estimate %v, range %v–%v: want all three", k+1, s.EstimatedStart, s.EstimatedStartEarliest, s.EstimatedStartLatest)
		}
		// Nothing is learned yet: every job runs its maxDuration, the range is one point.
		want := assignedAt.Add(time.Duration(k+1) * time.Hour)
		if s.EstimatedStartLatest.Sub(want).Abs() > time.Minute || !s.EstimatedStart.Equal(*s.EstimatedStartLatest) {
			t.Errorf("job %d: latest %s, likely %s, want both about %s", k+1, s.EstimatedStartLatest, s.EstimatedStart, want)
		}
		if s.EstimatedStart.Before(prev) {
			t.Errorf("job %d estimated before the job ahead of it", k+1)
		}
		prev = *s.EstimatedStart
	}

	// Twenty ended jobs that ran a quarter of their 4-hour maxDuration give the ratios.
	for range leader.RatioMinJobs {
		id := w.submit(4 * time.Hour)
		if _, err := w.st.DB().ExecContext(ctx, `UPDATE jobs SET status = 'FINISHED',
    event_times = jsonb_build_object('RUNNING', now() - interval '2 hours', 'FINISHED', now() - interval '1 hour') WHERE uuid = $1`, id); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := w.st.RunRatios(ctx, time.Now().Add(-time.Hour), leader.RatioMinJobs, scheduler.RatioQuantiles, scheduler.RatioRecentJobs)
	if err != nil {
		t.Fatal(err)
	}
	// Alice's 4-hour class, everyone's 4-hour class, alice's and the global one.
	if len(rows) != 4 {
		t.Fatalf("ratios %+v: want alice's and everyone's, of the 4-hour class and of all", rows)
	}
	for _, r := range rows {
		if r.Jobs != leader.RatioMinJobs || r.Mid < 0.24 || r.Mid > 0.26 || len(r.Q) != scheduler.RatioQuantiles+1 ||
			r.Class != -1 && r.Class != scheduler.DurationClass(4*time.Hour) {
			t.Errorf("ratio %+v: want 20 jobs at 0.25", r)
		}
	}
	// The loop read the ratios (none) at its first pass and keeps them for RatioRefresh; a new
	// loop, as after a change of leader, reads them now.
	loop = w.loop(leader.Config{}, nil)
	if err := loop.Pass(ctx, w.lead); err != nil {
		t.Fatalf("pass: %v", err)
	}
	last := get(ids[3]).State.Scheduling
	if last.EstimatedStartEarliest == nil || last.EstimatedStartLatest == nil || last.EstimatedStart == nil ||
		!last.EstimatedStartEarliest.Before(*last.EstimatedStartLatest) || last.EstimatedStart.After(*last.EstimatedStartLatest) {
		t.Errorf("last job with ratios: %v in %v–%v, want a real range", last.EstimatedStart, last.EstimatedStartEarliest, last.EstimatedStartLatest)
	}
}

// TestLoopStretchesByArrivals: the loop gives the forecast the day's submissions, so a job that
// today's arrivals rank ahead of (shorter jobs of the same user) is told it will wait longer:
// twelve one-hour GPU jobs in a day on one GPU are half of it, and double the four-hour job's
// wait behind the running one.
func TestLoopStretchesByArrivals(t *testing.T) {
	w := newEstimateWorld(t)
	ctx := context.Background()
	w.oneGPUSlave()
	running := w.submit(time.Hour)
	long := w.submit(4 * time.Hour)
	for range 11 {
		id := w.submit(time.Hour)
		if _, err := w.st.DB().ExecContext(ctx, `UPDATE jobs SET status = 'FINISHED' WHERE uuid = $1`, id); err != nil {
			t.Fatal(err)
		}
	}
	loop := w.loop(leader.Config{}, nil)
	if err := loop.Pass(ctx, w.lead); err != nil {
		t.Fatalf("pass: %v", err)
	}
	rec, err := w.st.GetJob(ctx, running)
	if err != nil || rec.Job.State.Status != job.StatusAssigned {
		t.Fatalf("the one-hour job: %v %v, want ASSIGNED", rec, err)
	}
	assigned := rec.Job.State.EventTimes[job.StatusAssigned]
	rec, err = w.st.GetJob(ctx, long)
	if err != nil {
		t.Fatal(err)
	}
	s := rec.Job.State.Scheduling
	if s.EstimatedStart == nil || s.EstimatedStartEarliest == nil {
		t.Fatalf("the waiting job has no estimate: %+v", s)
	}
	// Raw: it starts when the running job ends, an hour after its assignment; stretched by
	// 1/(1−0.5) from the pass, about two hours.
	if got := s.EstimatedStart.Sub(assigned); got < 115*time.Minute || got > 125*time.Minute {
		t.Errorf("the four-hour job is expected %s after the assignment, want about 2 h (1 h stretched by the arrivals ranked ahead)", got)
	}
	if got := s.EstimatedStartEarliest.Sub(assigned); got < 55*time.Minute || got > 65*time.Minute {
		t.Errorf("its earliest start is %s after the assignment, want the raw 1 h", got)
	}
}

// TestLearnedOffThePasses: while it leads, the loop reads the run-time ratios and the arrivals in
// the background (at a month of a busy site's jobs the ratios take a second to read), and its
// passes read none, not even the first (their plans do not forecast): the forecaster reads
// them before its first forecast, and the background after that, however stale they are. Jobs
// that end meanwhile reach the ratios at a later background read; without the background (a
// pass alone), a pass reads stale ones itself.
func TestLearnedOffThePasses(t *testing.T) {
	w := newEstimateWorld(t)
	var passes, reading atomic.Int32
	var l *leader.Loop
	l = w.loop(leader.Config{Interval: 10 * time.Millisecond, OnPass: func(time.Time, time.Duration, error) {
		passes.Add(1)
		for _, st := range l.LastPass().Steps { // OnPass runs on the loop's goroutine, after the pass
			if st.Step == "run ratios" {
				reading.Add(1)
			}
		}
	}}, nil)
	// Stale after a millisecond, but the background looks only hourly: the passes go on with
	// what the first one read.
	l.LearnEvery(time.Hour, time.Millisecond)
	stop := w.leading(l)
	waitFor(t, "ten passes and the first forecast's read", func() bool {
		r, _, _ := l.Learned()
		return passes.Load() >= 10 && !r.IsZero()
	})
	stop()
	if n := reading.Load(); n > 0 {
		t.Errorf("%d passes of a leading term asked for the ratios and the arrivals, want none (the forecaster reads them)", n)
	}
	first, reads, _ := l.Learned()
	if reads != 1 {
		t.Errorf("the ratios were read %d times outside the background, want once (the first forecast)", reads)
	}
	// Twenty ended jobs, then a background that looks every 10 ms: it reads them.
	for range leader.RatioMinJobs {
		id := w.submit(4 * time.Hour)
		if _, err := w.st.DB().ExecContext(context.Background(), `UPDATE jobs SET status = 'FINISHED',
    event_times = jsonb_build_object('RUNNING', now() - interval '2 hours', 'FINISHED', now() - interval '1 hour') WHERE uuid = $1`, id); err != nil {
			t.Fatal(err)
		}
	}
	l.LearnEvery(10*time.Millisecond, 50*time.Millisecond)
	stop = w.leading(l)
	waitFor(t, "ratios read again", func() bool {
		r, _, global := l.Learned()
		return r.After(first) && global.Mid > 0.24 && global.Mid < 0.26
	})
	stop()
	if _, reads, _ := l.Learned(); reads != 1 {
		t.Errorf("the ratios were read %d times outside the background, want once (the first term's first forecast)", reads)
	}
	// No background now: a pass reads stale ones itself.
	waitFor(t, "the ratios to be stale", func() bool {
		r, _, _ := l.Learned()
		return time.Since(r) > 100*time.Millisecond
	})
	w.pass(l)
	if _, reads, _ := l.Learned(); reads != 2 {
		t.Errorf("a pass without the background read %d times in all, want 2", reads)
	}
}

// TestForecastOffThePasses: while a term lasts, the passes do not forecast; the forecaster
// plans the snapshot a pass handed off again, with ranges, and writes the estimates in its own
// transaction: the waiting jobs get their estimate with its range, and a new one gets its own
// at the next forecast.
func TestForecastOffThePasses(t *testing.T) {
	w := newEstimateWorld(t)
	ctx := context.Background()
	w.oneGPUSlave()
	running := w.submit(time.Hour)
	waiting := w.submit(time.Hour)
	var logs testenv.SyncBuffer
	l := leader.NewLoop(w.st, leader.Config{Interval: 10 * time.Millisecond, ForecastEvery: 20 * time.Millisecond},
		slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), scheduler.NewSignal(), scheduler.NewSignal())
	leadCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Lead(leadCtx, w.lead) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("lead: %v", err)
		}
	}
	defer func() {
		if leadCtx.Err() == nil {
			stop()
		}
	}()
	estimated := w.estimated
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); !ok(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("waited 2 minutes for %s; log:\n%s", what, logs.String())
			}
		}
	}
	waitFor("the waiting job's estimate", func() bool { return estimated(waiting) })
	late := w.submit(time.Hour)
	waitFor("the new job's estimate", func() bool { return estimated(late) })
	stop()
	if rec, err := w.st.GetJob(ctx, running); err != nil || rec.Job.State.Status != job.StatusAssigned {
		t.Fatalf("first job: %v %v, want ASSIGNED", rec, err)
	}
	if !strings.Contains(logs.String(), "forecast written") {
		t.Errorf("no forecast was written by the forecaster; log:\n%s", logs.String())
	}
	passes := 0
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "scheduler pass phases") {
			passes++
			if strings.Contains(line, "estimates=") {
				t.Errorf("a leading pass wrote estimates itself: %s", line)
			}
		}
	}
	if passes == 0 {
		t.Error("no pass logged its phases")
	}
}

// TestFarForecast: the forecasts every ForecastEvery cover the first jobs of the queue (here
// 2, scheduler.ForecastCap in a master); far ones cover all of it, at a term's start and every
// FarForecastEvery (here shortened). A job beyond the near reach keeps its estimate through
// the near forecasts between two far ones, and one submitted beyond it gets its estimate from
// the next far one.
func TestFarForecast(t *testing.T) {
	w := newEstimateWorld(t)
	ctx := context.Background()
	w.oneGPUSlave()
	w.submit(time.Hour) // runs
	var waiting []string
	for range 5 {
		waiting = append(waiting, w.submit(time.Hour))
	}
	estimated := w.estimated
	// lead runs a term with far forecasts every farEvery until the returned stop; forecasts
	// counts the far and the near forecasts written so far.
	lead := func(farEvery time.Duration) (stop func(), forecasts func() (far, near int), logs *testenv.SyncBuffer) {
		logs = &testenv.SyncBuffer{}
		l := leader.NewLoop(w.st, leader.Config{Interval: 10 * time.Millisecond, ForecastEvery: 20 * time.Millisecond},
			slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), scheduler.NewSignal(), scheduler.NewSignal())
		l.SetForecastReach(2, farEvery)
		leadCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- l.Lead(leadCtx, w.lead) }()
		stop = func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("lead: %v", err)
			}
		}
		forecasts = func() (far, near int) {
			for _, line := range strings.Split(logs.String(), "\n") {
				if strings.Contains(line, "forecast written") {
					if strings.Contains(line, "far=true") {
						far++
					} else {
						near++
					}
				}
			}
			return far, near
		}
		return stop, forecasts, logs
	}
	waitFor := func(what string, logs *testenv.SyncBuffer, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); !ok(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("waited 2 minutes for %s; log:\n%s", what, logs.String())
			}
		}
	}
	allEstimated := func(ids []string) func() bool {
		return func() bool {
			for _, id := range ids {
				if !estimated(id) {
					return false
				}
			}
			return true
		}
	}

	// A term whose only far forecast is its first (its first pass is a full one).
	stop, forecasts, logs := lead(time.Hour)
	waitFor("every waiting job's estimate, from the term's first (far) forecast", logs, allEstimated(waiting))
	_, near0 := forecasts()
	waitFor("five near forecasts more", logs, func() bool { _, near := forecasts(); return near >= near0+5 })
	stop()
	if far, _ := forecasts(); far != 1 {
		t.Fatalf("%d far forecasts, want the term's first alone; log:\n%s", far, logs.String())
	}
	if !strings.Contains(logs.String(), "unreached=3") {
		t.Errorf("no near forecast left 3 jobs beyond its reach; log:\n%s", logs.String())
	}
	for i, id := range waiting {
		if !estimated(id) {
			t.Errorf("waiting job %d lost its estimate to the near forecasts after the far one", i+1)
		}
	}

	// A term with far forecasts every 200 ms: a job submitted behind the others gets its
	// estimate from the next far forecast, none of the near ones reaching it.
	stop, forecasts, logs = lead(200 * time.Millisecond)
	defer stop()
	waitFor("a far forecast", logs, func() bool { far, _ := forecasts(); return far >= 1 })
	late := w.submit(time.Hour)
	waitFor("the late job's estimate", logs, func() bool { return estimated(late) })
	if far, _ := forecasts(); far < 2 {
		t.Errorf("the late job was estimated after %d far forecasts, want 2 or more; log:\n%s", far, logs.String())
	}
}

// The forecaster writes a forecast's estimates in parts of at most EstimatesPerWrite jobs, each
// in a transaction of its own (a pass assigning one of those jobs waits for the part's commit,
// not for the whole forecast's): after a full plan of 1,201 queued jobs, the 1,200 estimates
// written come from three transactions, and every waiting job has its estimate.
func TestForecastWrittenInParts(t *testing.T) {
	w := newEstimateWorld(t)
	ctx := context.Background()
	w.oneGPUSlave()
	w.queueCopies(1201)
	l := w.loop(leader.Config{}, nil)
	wrote, err := l.WriteForecast(ctx, w.lead)
	if err != nil || wrote != 1201 {
		t.Fatalf("forecast: %d jobs written, %v (want every one of the 1,201 queued)", wrote, err)
	}
	var estimated, parts int
	if err := w.st.DB().QueryRowContext(ctx, `SELECT count(*), count(DISTINCT w.xmin::text) FROM jobs j JOIN job_waits w ON w.job_uuid = j.uuid
WHERE j.status = 'QUEUED' AND w.estimate ? 'estimatedStart'`).Scan(&estimated, &parts); err != nil {
		t.Fatal(err)
	}
	want := (1200 + leader.EstimatesPerWrite - 1) / leader.EstimatesPerWrite
	if estimated != 1200 || parts != want {
		t.Errorf("%d jobs estimated (want 1,200: all but the one the plan places) by %d transactions (want %d of at most %d)",
			estimated, parts, want, leader.EstimatesPerWrite)
	}
}

// TestLoopReasonBackWithoutEvent: the real loop on Postgres, a one-GPU slave busy with one job
// and a second job waiting: its reason goes from short of a GPU to the slave draining and back.
// The job reads each reason as it stands, and its history records each of the two once: the
// way back, within leader.ReasonBackWithin, writes the explanation without an event.
func TestLoopReasonBackWithoutEvent(t *testing.T) {
	w := newEstimateWorld(t)
	ctx := context.Background()
	w.oneGPUSlave()
	first, waiting := w.submit(time.Hour), w.submit(time.Hour)
	loop := w.loop(leader.Config{}, nil)
	state := func() (explained string, events []string) {
		t.Helper()
		rec, evs := w.jobAndEvents(waiting)
		for _, e := range evs {
			if e.Kind == store.EventScheduler {
				events = append(events, e.Message)
			}
		}
		return strings.Join(rec.Job.State.Scheduling.QueuedExplanations, " | "), events
	}
	accepting := func(on bool) {
		t.Helper()
		if err := w.st.SetSlaveAccepting(ctx, "node1", on); err != nil {
			t.Fatal(err)
		}
	}
	// The first pass assigns the first job; the second adds the waiting job's expected start
	// (from the assigned job's maxDuration) to its reason.
	w.pass(loop)
	if rec, err := w.st.GetJob(ctx, first); err != nil || rec.Job.State.Status != job.StatusAssigned {
		t.Fatalf("first job not assigned: %v", err)
	}
	w.pass(loop)
	short, events := state()
	n := len(events)
	if !strings.Contains(short, "none free") || n == 0 {
		t.Fatalf("after two passes: %q with events %q; want none free, events", short, events)
	}
	accepting(false)
	w.pass(loop)
	draining, events := state()
	if !strings.Contains(draining, "draining") || len(events) != n+1 {
		t.Fatalf("slave draining: %q with events %q; want draining, one event more", draining, events)
	}
	accepting(true)
	w.pass(loop)
	back, events := state()
	// The expected start moves with the clock while the first job is not yet running (from
	// now, by its maxDuration): a detail, not another reason.
	stamp := regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)
	if stamp.ReplaceAllString(back, "TIME") != stamp.ReplaceAllString(short, "TIME") || len(events) != n+1 {
		t.Errorf("slave accepting again: %q with events %q; want %q again (its times aside), no event more", back, events, short)
	}
}
