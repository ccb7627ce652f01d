package retention_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/leader"
	"github.com/opengpulab/gpulab/retention"
	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/store"
	"github.com/opengpulab/gpulab/store/storetest"
)

// The retention sweeps of a leader on a real Postgres.

func newStore(t *testing.T) *store.Store { return storetest.New(t) }

// world is a user in a project of a fresh database.
type world struct {
	t  *testing.T
	st *store.Store
	u  store.User
	p  store.Project
}

func newWorld(t *testing.T) *world {
	st := newStore(t)
	u, p := storetest.Member(t, st, "alice", "vision")
	return &world{t: t, st: st, u: u, p: p}
}

// job makes a job in the given state that last changed `ago` ago, with one log chunk and one
// event from then.
func (w *world) job(status job.Status, ago time.Duration) string {
	w.t.Helper()
	ctx := context.Background()
	j, err := job.Parse([]byte(`{"name": "j", "request": {"resources": {"gpus": 0, "cpus": 1, "cpuMemoryGb": 1},
 "docker": {"image": "debian:stable", "command": "true"}}}`), job.DefaultOptions())
	if err != nil {
		w.t.Fatal(err)
	}
	j.UUID = uuid.NewString()
	j.Owner = job.Owner{UserURN: w.u.URN, ProjectURN: w.p.URN}
	j.State.Status = job.StatusQueued
	if err := w.st.CreateJob(ctx, j, w.u.ID, w.p.ID, "submitted"); err != nil {
		w.t.Fatal(err)
	}
	if err := w.st.AppendJobLog(ctx, j.UUID, 0, []byte("log of "+j.UUID)); err != nil {
		w.t.Fatal(err)
	}
	w.exec(`UPDATE jobs SET status = $2, updated_at = now() - make_interval(secs => $3) WHERE uuid = $1`, j.UUID, string(status), ago.Seconds())
	w.exec(`UPDATE job_logs SET at = now() - make_interval(secs => $2) WHERE job_uuid = $1`, j.UUID, ago.Seconds())
	w.exec(`UPDATE job_events SET at = now() - make_interval(secs => $2) WHERE job_uuid = $1`, j.UUID, ago.Seconds())
	return j.UUID
}

func (w *world) exec(q string, args ...any) {
	w.t.Helper()
	if _, err := w.st.DB().ExecContext(context.Background(), q, args...); err != nil {
		w.t.Fatalf("%s: %v", q, err)
	}
}

func (w *world) count(q string, args ...any) int {
	w.t.Helper()
	var n int
	if err := w.st.DB().QueryRowContext(context.Background(), q, args...).Scan(&n); err != nil {
		w.t.Fatalf("%s: %v", q, err)
	}
	return n
}

func (w *world) lead() store.Leadership {
	w.t.Helper()
	// A lease longer than the test: nothing renews it here.
	lead, ok, err := w.st.AcquireLeadership(context.Background(), "test-"+testenv.Suffix(), time.Hour)
	if err != nil || !ok {
		w.t.Fatalf("acquire leadership: %v %v", ok, err)
	}
	return lead
}

const day = 24 * time.Hour

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestSweepDeletesOnlyWhatIsPastItsRetention(t *testing.T) {
	w := newWorld(t)
	old := w.job(job.StatusFinished, 400*day)               // log and events go
	middle := w.job(job.StatusFailed, 100*day)              // log goes, events stay
	running := w.job(job.StatusRunning, 400*day)            // a live job keeps all
	recent := w.job(job.StatusFinished, day)                // keeps all
	deletedOld := w.job(job.StatusDeleted, 40*day)          // the row goes, with all it holds
	deletedRecent := w.job(job.StatusDeleted, 10*time.Hour) // stays
	policy := retention.Policy{Logs: 90 * day, Events: 365 * day, Deleted: 30 * day, Batch: 1, Pause: time.Millisecond}
	sw := retention.New(w.st, policy, quiet())

	// Not the leader: nothing happens.
	if _, err := sw.Sweep(context.Background(), store.Leadership{Epoch: -1}); !errors.Is(err, store.ErrNotLeader) {
		t.Fatalf("a sweep without the lease: %v", err)
	}
	if n := w.count(`SELECT count(*) FROM job_logs`); n != 6 {
		t.Fatalf("a sweep without the lease deleted logs: %d left", n)
	}

	lead := w.lead()
	res, err := sw.Sweep(context.Background(), lead)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sweep: %+v", res)
	logs := func(id string) int { return w.count(`SELECT count(*) FROM job_logs WHERE job_uuid = $1`, id) }
	events := func(id string) int { return w.count(`SELECT count(*) FROM job_events WHERE job_uuid = $1`, id) }
	jobs := func(id string) int { return w.count(`SELECT count(*) FROM jobs WHERE uuid = $1`, id) }
	for _, c := range []struct {
		name               string
		id                 string
		logs, events, jobs int
	}{
		{"finished 400 days ago", old, 0, 0, 1},
		{"failed 100 days ago", middle, 0, 1, 1},
		{"running since 400 days", running, 1, 1, 1},
		{"finished yesterday", recent, 1, 1, 1},
		{"deleted 40 days ago", deletedOld, 0, 0, 0},
		{"deleted 10 hours ago", deletedRecent, 1, 1, 1},
	} {
		if l, e, j := logs(c.id), events(c.id), jobs(c.id); l != c.logs || e != c.events || j != c.jobs {
			t.Errorf("%s: %d log chunks, %d events, %d job rows left; want %d, %d, %d", c.name, l, e, j, c.logs, c.events, c.jobs)
		}
	}
	if res.Logs != 2 || res.Events != 1 || res.Jobs != 1 || res.Batches < 4 {
		t.Errorf("result %+v: want 2 log chunks, 1 event, 1 job in batches of 1", res)
	}
	// A second sweep finds nothing more.
	if res, err := sw.Sweep(context.Background(), lead); err != nil || res.Logs+res.Events+res.Jobs != 0 {
		t.Errorf("second sweep: %+v %v", res, err)
	}
	// Age 0 keeps for ever.
	keep := retention.New(w.st, retention.Policy{}, quiet())
	if res, err := keep.Sweep(context.Background(), lead); err != nil || res.Logs+res.Events+res.Jobs != 0 || res.Batches != 1 {
		t.Errorf("a policy of zero ages swept more than stale waits: %+v %v", res, err)
	}
}

// What a queued job was told (job_waits) and left behind once it left the queue goes an hour
// after, or at once when its job is gone; a queued job keeps its row, a job queued again while
// the sweep runs keeps its row, and a row the forecaster is writing is skipped, not waited for.
func TestSweepDropsStaleWaits(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	told := func(id string) {
		w.exec(`INSERT INTO job_waits (job_uuid, explanations) VALUES ($1, '{"queuedExplanations": ["waits"]}')`, id)
	}
	has := func(id string) bool { return w.count(`SELECT count(*) FROM job_waits WHERE job_uuid = $1`, id) == 1 }
	queued := w.job(job.StatusQueued, 3*time.Hour)
	finished := w.job(job.StatusFinished, 2*time.Hour)
	cancelled := w.job(job.StatusCancelled, 10*time.Minute)
	requeued := w.job(job.StatusAssigned, 2*time.Hour)
	held := w.job(job.StatusFailed, 2*time.Hour)
	orphan := uuid.NewString()
	for _, id := range []string{queued, finished, cancelled, requeued, held, orphan} {
		told(id)
	}
	lead := w.lead()
	sw := retention.New(w.st, retention.Policy{Batch: 10, Pause: time.Millisecond}, quiet())

	// A state change queues `requeued` again and has not committed when the sweep starts; the
	// forecaster holds `held`'s row.
	change, err := w.st.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer change.Rollback() //nolint:errcheck // committed below, or the test failed
	if _, err := change.ExecContext(ctx, `UPDATE jobs SET status = 'QUEUED', updated_at = now() WHERE uuid = $1`, requeued); err != nil {
		t.Fatal(err)
	}
	forecaster, err := w.st.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer forecaster.Rollback() //nolint:errcheck // read-only lock holder
	if _, err := forecaster.ExecContext(ctx, `SELECT 1 FROM job_waits WHERE job_uuid = $1 FOR UPDATE`, held); err != nil {
		t.Fatal(err)
	}

	type swept struct {
		res retention.Result
		err error
	}
	done := make(chan swept, 1)
	go func() {
		res, err := sw.Sweep(ctx, lead)
		done <- swept{res, err}
	}()
	// The sweep waits for the state change (the job's row, FOR SHARE), not for the forecaster.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if w.count(`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%left_queue%'`) > 0 {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("the sweep ended (%+v, %v) without waiting for the job being queued again", r.res, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the sweep never waited for the job being queued again")
		}
	}
	if err := change.Commit(); err != nil {
		t.Fatal(err)
	}
	var r swept
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the sweep still waits a minute after the state change committed (for the forecaster's row?)")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Logf("sweep: %+v", r.res)
	for _, c := range []struct {
		name string
		id   string
		kept bool
	}{
		{"queued", queued, true},
		{"finished 2 hours ago", finished, false},
		{"cancelled 10 minutes ago", cancelled, true},
		{"queued again during the sweep", requeued, true},
		{"failed 2 hours ago, its row held by the forecaster", held, true},
		{"of no job", orphan, false},
	} {
		if got := has(c.id); got != c.kept {
			t.Errorf("%s: row kept %v, want %v", c.name, got, c.kept)
		}
	}
	if r.res.Waits != 2 {
		t.Errorf("swept %d stale waits, want 2", r.res.Waits)
	}
	// Once the forecaster lets go, the next sweep takes the held row.
	if err := forecaster.Rollback(); err != nil {
		t.Fatal(err)
	}
	if res, err := sw.Sweep(ctx, lead); err != nil || res.Waits != 1 || has(held) {
		t.Errorf("second sweep: %+v %v, the held row left: %v", res, err, has(held))
	}
}

// The master caps a job's log: the chunk that crosses the cap is cut and marked, the chunks
// after it are kept empty so the slave's sequence goes on.
func TestLogCap(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	id := w.job(job.StatusRunning, 0)
	w.exec(`DELETE FROM job_logs WHERE job_uuid = $1`, id)
	for i, chunk := range []string{"01234", "56789abc", "def", "more"} {
		if _, err := w.st.AppendLog(ctx, store.LogChunk{JobUUID: id, Seq: i, Data: []byte(chunk), Limit: 10}); err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
	}
	log, size, err := w.st.ReadJobLog(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := "0123456789" + fmt.Sprintf(store.LogCapMarker, 10)
	if string(log) != want || size != int64(len(want)) {
		t.Fatalf("capped log = %q (size %d), want %q", log, size, want)
	}
	if _, err := w.st.AppendLog(ctx, store.LogChunk{JobUUID: id, Seq: 4, Data: []byte("x"), Limit: 10}); err != nil {
		t.Fatalf("a chunk after the cap: %v", err)
	}
}

// A million old events are deleted in small batches while the scheduler goes on with its
// passes: the sweep never holds what a pass needs.
func TestSweepOfAMillionEventsDoesNotBlockTheScheduler(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	const jobs, perJob = 100, 10000
	for range jobs {
		w.job(job.StatusFinished, 400*day)
	}
	w.exec(`INSERT INTO job_events (job_uuid, at, kind, message)
SELECT j.uuid, now() - interval '400 days', 'status', 'old event ' || g
FROM jobs j, generate_series(1, $1) g WHERE j.status = 'FINISHED'`, perJob)
	total := w.count(`SELECT count(*) FROM job_events`)
	if total < jobs*perJob {
		t.Fatalf("%d events made", total)
	}
	// Live work for the scheduler: queued jobs (no slave, so they stay or fail) and a
	// running job whose events keep coming.
	for range 5 {
		w.job(job.StatusQueued, 0)
	}
	lead := w.lead()
	loop := leader.NewLoop(w.st, leader.Config{Interval: time.Second}, quiet(), scheduler.NewSignal(), scheduler.NewSignal())

	sw := retention.New(w.st, retention.Policy{Events: 365 * day, Batch: 10000, Pause: 10 * time.Millisecond}, quiet())
	var (
		res      retention.Result
		sweepErr error
		took     time.Duration
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		start := time.Now()
		res, sweepErr = sw.Sweep(ctx, lead)
		took = time.Since(start)
	}()
	var (
		mu     sync.Mutex
		passes []time.Duration
	)
	// Passes at the pace of a busy real loop (it waits at least its settle time between two),
	// not back to back: a tight loop of passes would load the machine the other packages'
	// tests share far beyond what a master does.
	pace := time.NewTicker(50 * time.Millisecond)
	defer pace.Stop()
	sweeping := true
	for sweeping {
		<-pace.C
		start := time.Now()
		if err := loop.Pass(ctx, lead); err != nil {
			t.Fatalf("scheduler pass during the sweep: %v", err)
		}
		mu.Lock()
		passes = append(passes, time.Since(start))
		mu.Unlock()
		select {
		case <-done:
			sweeping = false
		default:
		}
	}
	if sweepErr != nil {
		t.Fatal(sweepErr)
	}
	left := w.count(`SELECT count(*) FROM job_events e JOIN jobs j ON j.uuid = e.job_uuid WHERE j.status = 'FINISHED'`)
	slices.Sort(passes)
	t.Logf("deleted %d of %d events in %d batches in %s; %d scheduler passes ran meanwhile (median %s, max %s)",
		res.Events, total, res.Batches, took.Round(time.Millisecond), len(passes), passes[len(passes)/2].Round(time.Microsecond),
		passes[len(passes)-1].Round(time.Microsecond))
	if left != 0 || res.Events < int64(jobs*perJob) {
		t.Fatalf("%d old events left after the sweep (%+v)", left, res)
	}
	// Not a bound on time: the passes went on while the sweep ran, one after another.
	if len(passes) < 3 {
		t.Errorf("only %d scheduler passes completed during the sweep of %d batches", len(passes), res.Batches)
	}
}
