package store_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testenv"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
)

func TestEndJobRestartsHaltedRestartableJob(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	j, err := job.Parse([]byte(`{"name": "r", "request": {"resources": {"cpus": 1, "gpus": 0, "cpuMemoryGb": 1},
	  "docker": {"image": "debian:stable"}, "scheduling": {"restartable": true, "maxDuration": "1 hour"}}}`), job.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	j.UUID, j.State.Status = "aaaaaaaa-0000-4000-8000-000000000001", job.StatusQueued
	if err := st.CreateJob(ctx, j, u.ID, p.ID, "test"); err != nil {
		t.Fatal(err)
	}
	for _, step := range [][2]job.Status{{job.StatusQueued, job.StatusAssigned}, {job.StatusAssigned, job.StatusStarting}, {job.StatusStarting, job.StatusRunning}} {
		if _, err := st.TransitionJob(ctx, j.UUID, []job.Status{step[0]}, step[1], store.Event{}); err != nil {
			t.Fatal(err)
		}
	}
	// Pretend it has run for 10 minutes.
	if _, err := st.DB().ExecContext(ctx, `UPDATE jobs SET event_times = jsonb_set(event_times, '{RUNNING}', to_jsonb(now() - interval '10 minutes')) WHERE uuid = $1`, j.UUID); err != nil {
		t.Fatal(err)
	}
	code := 123
	_, restartID, err := st.ChangeJob(ctx, j.UUID, store.Change{From: []job.Status{job.StatusRunning}, To: job.StatusHalted, ExitCode: &code, Restart: true, Released: true})
	if err != nil || restartID == "" {
		t.Fatalf("EndJob: %q %v", restartID, err)
	}
	r, err := st.GetJob(ctx, restartID)
	if err != nil {
		t.Fatal(err)
	}
	left := time.Duration(r.Job.Request.Scheduling.MaxDuration)
	if r.Job.State.Status != job.StatusQueued || r.Job.RestartInfo == nil || r.Job.RestartInfo.RestartCount != 1 || left > 50*time.Minute+time.Second || left < 49*time.Minute {
		t.Fatalf("restart job: %s %+v maxDuration %s", r.Job.State.Status, r.Job.RestartInfo, left)
	}
	old, _ := st.GetJob(ctx, j.UUID)
	if old.Job.State.Resources == nil || old.Job.State.Resources.ExitCode == nil || *old.Job.State.Resources.ExitCode != 123 {
		t.Fatalf("exit code not kept: %+v", old.Job.State.Resources)
	}
}

// placeOn assigns a queued job to slave node1 with one GPU and moves it to `to` as the slave
// would; it returns the job's attempt.
func placeOn(t *testing.T, st *store.Store, id string, gpu int, to job.Status) int {
	t.Helper()
	ctx := context.Background()
	if _, err := st.AssignJobs(ctx, []store.Assignment{{JobUUID: id, Placement: store.Placement{SlaveName: "node1", SlaveInstanceID: "i1", ClusterID: 1,
		Resources: job.StateResources{SlaveName: "node1", GPUIDs: []int{gpu}, CPUIDs: []int{gpu}, CPUMemoryGb: 1}}}}); err != nil {
		t.Fatal(err)
	}
	rec, err := st.GetJob(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	path := []job.Status{job.StatusAssigned, job.StatusStarting, job.StatusRunning, job.StatusMustHalt, job.StatusHalting}
	for i := 1; i < len(path) && path[i-1] != to; i++ {
		if _, _, err := st.ChangeJob(ctx, id, store.Change{From: []job.Status{path[i-1]}, To: path[i], Attempt: store.Attempt(rec.Attempt)}); err != nil {
			t.Fatalf("%s → %s: %v", path[i-1], path[i], err)
		}
	}
	return rec.Attempt
}

func heldBy(t *testing.T, st *store.Store) map[string]store.Held {
	t.Helper()
	held, err := st.ListHeld(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]store.Held{}
	for _, h := range held {
		if _, dup := out[h.UUID]; dup {
			t.Fatalf("job %s held twice: %+v", h.UUID, held)
		}
		out[h.UUID] = h
	}
	return out
}

// What a job the master ends holds on its slave stays taken until the slave confirms the
// container gone; a slave's own end (the container exited) frees it at once; a job that never
// got past ASSIGNED holds nothing after it leaves.
func TestResourcesHeldUntilReleased(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	cancelled, finished, assigned := createJob(t, st, u, p, job.StatusQueued), createJob(t, st, u, p, job.StatusQueued), createJob(t, st, u, p, job.StatusQueued)
	placeOn(t, st, cancelled.UUID, 0, job.StatusRunning)
	a := placeOn(t, st, finished.UUID, 1, job.StatusRunning)
	placeOn(t, st, assigned.UUID, 2, job.StatusAssigned)

	for _, id := range []string{cancelled.UUID, assigned.UUID} {
		if _, err := st.TransitionJob(ctx, id, job.SourcesOf(job.StatusCancelled, job.ActorOwner), job.StatusCancelled, store.Event{Message: "cancelled by alice"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := st.ChangeJob(ctx, finished.UUID, store.Change{From: []job.Status{job.StatusRunning}, To: job.StatusFinished,
		Attempt: store.Attempt(a), Released: true}); err != nil {
		t.Fatal(err)
	}
	held := heldBy(t, st)
	if h, ok := held[cancelled.UUID]; !ok || !h.Releasing || !slices.Equal(h.GPUIDs, store.Ints{0}) || h.SlaveName != "node1" {
		t.Fatalf("a cancelled running job does not hold its GPU until released: %+v", held)
	}
	if _, ok := held[finished.UUID]; ok {
		t.Fatalf("a job its slave ended still holds resources: %+v", held)
	}
	if _, ok := held[assigned.UUID]; ok {
		t.Fatalf("a cancelled job that never started holds resources: %+v", held)
	}
	rl, err := st.ListReleases(ctx, "node1")
	if err != nil || len(rl) != 1 || rl[0].Reason != "cancelled by alice" {
		t.Fatalf("releases: %+v %v", rl, err)
	}
	freed, err := st.ConfirmReleases(ctx, "node1", []string{cancelled.UUID, finished.UUID}, "slave node1 confirmed the container gone")
	if err != nil || !slices.Equal(freed, []string{cancelled.UUID}) {
		t.Fatalf("confirm: %v %v", freed, err)
	}
	if held := heldBy(t, st); len(held) != 0 {
		t.Fatalf("held after the release: %+v", held)
	}
	evs, _ := st.ListJobEvents(ctx, cancelled.UUID)
	if last := evs[len(evs)-1]; last.Message != "slave node1 confirmed the container gone" {
		t.Fatalf("no event for the release: %+v", evs)
	}
}

// TestChangeWritesEverythingWithIt: a change's resources, exit code, final usage and status
// event are written with it (one statement now), resources before the exit code merged into
// them; a change that finds the job elsewhere writes none of them.
func TestChangeWritesEverythingWithIt(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	j := createJob(t, st, u, p, job.StatusQueued)
	a := placeOn(t, st, j.UUID, 3, job.StatusStarting)
	ports := &job.StateResources{SlaveName: "node1", GPUIDs: []int{3}, CPUIDs: []int{3}, CPUMemoryGb: 1,
		PortMappings: []job.PortMapping{{ContainerPort: 8888, HostPort: 32768, HostIP: "0.0.0.0"}}}
	if _, _, err := st.ChangeJob(ctx, j.UUID, store.Change{From: []job.Status{job.StatusStarting}, To: job.StatusRunning,
		Attempt: store.Attempt(a), Resources: ports, Event: store.Event{Actor: "slave node1", Message: "started"}}); err != nil {
		t.Fatal(err)
	}
	rec, err := st.GetJob(ctx, j.UUID)
	if err != nil {
		t.Fatal(err)
	}
	if r := rec.Job.State.Resources; r == nil || len(r.PortMappings) != 1 || r.PortMappings[0].HostPort != 32768 || r.ExitCode != nil {
		t.Fatalf("resources after the start: %+v", r)
	}
	code := 3
	end := store.Change{From: []job.Status{job.StatusRunning}, To: job.StatusFailed, Attempt: store.Attempt(a), Released: true,
		ExitCode: &code, Usage: []byte(`{"marker": 77}`), Event: store.Event{Actor: "slave node1", Message: "exited with 3"}}
	if _, _, err := st.ChangeJob(ctx, j.UUID, end); err != nil {
		t.Fatal(err)
	}
	rec, err = st.GetJob(ctx, j.UUID)
	if err != nil {
		t.Fatal(err)
	}
	if r := rec.Job.State.Resources; r == nil || r.ExitCode == nil || *r.ExitCode != 3 || len(r.PortMappings) != 1 {
		t.Fatalf("resources after the end: %+v (want the ports kept and exit code 3)", r)
	}
	var usage string
	if err := st.DB().QueryRowContext(ctx, `SELECT final_usage::text FROM jobs WHERE uuid = $1`, j.UUID).Scan(&usage); err != nil || usage != `{"marker": 77}` {
		t.Fatalf("final usage %q, %v", usage, err)
	}
	evs, err := st.ListJobEvents(ctx, j.UUID)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if last.Kind != store.EventStatus || last.FromStatus != "RUNNING" || last.ToStatus != "FAILED" || last.Actor != "slave node1" || last.Message != "exited with 3" {
		t.Fatalf("last event %+v", last)
	}

	// The same end again is a conflict and writes nothing.
	code = 9
	end.Usage = []byte(`{"marker": 78}`)
	if _, _, err := st.ChangeJob(ctx, j.UUID, end); !errors.Is(err, store.ErrStateConflict) {
		t.Fatalf("a repeated end: %v, want a state conflict", err)
	}
	rec, _ = st.GetJob(ctx, j.UUID)
	again, _ := st.ListJobEvents(ctx, j.UUID)
	if *rec.Job.State.Resources.ExitCode != 3 || len(again) != len(evs) {
		t.Fatalf("a conflict wrote: exit code %d, %d events (was %d)", *rec.Job.State.Resources.ExitCode, len(again), len(evs))
	}
}

// A slave's change names its attempt: once the job was placed again, the old attempt's calls
// are conflicts that tell the current state and attempt.
func TestChangeIsFencedByAttempt(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	j := createJob(t, st, u, p, job.StatusQueued)
	first := placeOn(t, st, j.UUID, 0, job.StatusAssigned)
	// The lease ran out: queued again, and placed again.
	if _, _, err := st.ChangeJob(ctx, j.UUID, store.Change{From: []job.Status{job.StatusAssigned}, To: job.StatusQueued,
		Attempt: store.Attempt(first), Released: true}); err != nil {
		t.Fatal(err)
	}
	rec, _ := st.GetJob(ctx, j.UUID)
	if rec.Job.State.Scheduling.AssignedSlaveName != "" || rec.Job.State.Resources != nil {
		t.Fatalf("a requeued job keeps its placement: %+v", rec.Job.State)
	}
	second := placeOn(t, st, j.UUID, 1, job.StatusAssigned)
	if second != first+1 {
		t.Fatalf("attempts %d then %d", first, second)
	}
	_, _, err := st.ChangeJob(ctx, j.UUID, store.Change{From: []job.Status{job.StatusAssigned}, To: job.StatusStarting, Attempt: store.Attempt(first)})
	var sc *store.StateConflict
	if !errors.As(err, &sc) || sc.Current != job.StatusAssigned || sc.Attempt != second {
		t.Fatalf("the first attempt's start: %v, want a conflict naming attempt %d", err, second)
	}
	if _, _, err := st.ChangeJob(ctx, j.UUID, store.Change{From: []job.Status{job.StatusAssigned}, To: job.StatusStarting, Attempt: store.Attempt(second)}); err != nil {
		t.Fatalf("the current attempt's start: %v", err)
	}
}

// Leases are set when a job enters an in-between state and read on the database's clock.
func TestExpiredLeasesAndLostJobs(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	if _, err := st.CreateCluster(ctx, store.Cluster{ID: 1, Name: "one"}); err != nil {
		t.Fatal(err)
	}
	if err := st.JoinSlave(ctx, "node1", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RegisterSlave(ctx, store.SlaveRegistration{Name: "node1", InstanceID: "i1", ClusterID: 1, Inventory: []byte(`{"gpus": []}`)}); err != nil {
		t.Fatal(err)
	}
	u, p := fixture(t, st, "alice", "vision")
	assigned, running := createJob(t, st, u, p, job.StatusQueued), createJob(t, st, u, p, job.StatusQueued)
	placeOn(t, st, assigned.UUID, 0, job.StatusAssigned)
	placeOn(t, st, running.UUID, 1, job.StatusRunning)
	if exp, err := st.ListExpiredLeases(ctx, 0); err != nil || len(exp) != 0 {
		t.Fatalf("fresh leases expired: %+v %v", exp, err)
	}
	var lease sql.NullTime
	if err := st.DB().QueryRowContext(ctx, `SELECT lease_expires_at FROM jobs WHERE uuid = $1`, running.UUID).Scan(&lease); err != nil || lease.Valid {
		t.Fatalf("a RUNNING job has a lease: %v %v", lease, err)
	}
	if _, err := st.DB().ExecContext(ctx, `UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE uuid = $1`, assigned.UUID); err != nil {
		t.Fatal(err)
	}
	exp, err := st.ListExpiredLeases(ctx, 0)
	if err != nil || len(exp) != 1 || exp[0].UUID != assigned.UUID || exp[0].Status != job.StatusAssigned || exp[0].SlaveName != "node1" {
		t.Fatalf("expired leases: %+v %v", exp, err)
	}
	// A slave offline long enough: its jobs are lost; not before.
	if lost, err := st.ListLostJobs(ctx, time.Minute); err != nil || len(lost) != 0 {
		t.Fatalf("jobs of an online slave lost: %+v %v", lost, err)
	}
	if _, err := st.DB().ExecContext(ctx, `UPDATE slaves SET online = FALSE, offline_since = now() - interval '2 minutes'`); err != nil {
		t.Fatal(err)
	}
	lost, err := st.ListLostJobs(ctx, time.Minute)
	if err != nil || len(lost) != 2 {
		t.Fatalf("lost jobs: %+v %v", lost, err)
	}
	// Only ASSIGNED leases run out on an offline slave: its other jobs wait for the lost path.
	if _, err := st.DB().ExecContext(ctx, `UPDATE jobs SET lease_expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	if exp, err := st.ListExpiredLeases(ctx, 0); err != nil || len(exp) != 1 || exp[0].UUID != assigned.UUID {
		t.Fatalf("expired leases on an offline slave: %+v %v", exp, err)
	}
}

// One master leads at a time; a leader whose lease ran out can no longer act as one, even in
// a transaction it began before, and another takes over.
func TestLeadershipIsALeaseProvenInTransactions(t *testing.T) {
	url := testenv.PostgresURL(t)
	ctx := context.Background()
	open := func() *store.Store {
		st, err := store.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	a, b := open(), open()
	if _, err := a.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	la, ok, err := a.AcquireLeadership(ctx, "a", time.Minute)
	if err != nil || !ok {
		t.Fatalf("a: %v %v", ok, err)
	}
	if _, ok, err := b.AcquireLeadership(ctx, "b", time.Minute); err != nil || ok {
		t.Fatalf("b took a held lease: %v %v", ok, err)
	}
	ran := false
	if err := a.AsLeader(ctx, la, func(tx *store.Store) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("the leader cannot act: %v", err)
	}
	if err := a.RenewLeadership(ctx, la, time.Minute); err != nil {
		t.Fatal(err)
	}
	// a is frozen past its lease; b takes over.
	if _, err := a.DB().ExecContext(ctx, `UPDATE scheduler_leader SET expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	lb, ok, err := b.AcquireLeadership(ctx, "b", time.Minute)
	if err != nil || !ok || lb.Epoch != la.Epoch+1 {
		t.Fatalf("b after a's lease ran out: %+v %v %v", lb, ok, err)
	}
	ran = false
	if err := a.AsLeader(ctx, la, func(tx *store.Store) error { ran = true; return nil }); !errors.Is(err, store.ErrNotLeader) || ran {
		t.Fatalf("the old leader acted: ran %v, %v", ran, err)
	}
	if err := a.RenewLeadership(ctx, la, time.Minute); !errors.Is(err, store.ErrNotLeader) {
		t.Fatalf("the old leader renewed: %v", err)
	}
	// While a transaction of the leader is open, the leader can renew its lease (a long pass
	// must not lose it: B8x's did, its renewals queued behind its own pass), but nobody can take
	// it, even once it ran out: a takeover waits for the transaction to end, so no plan is
	// applied while another master leads.
	inTx, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- b.AsLeader(ctx, lb, func(tx *store.Store) error { close(inTx); <-release; return nil })
	}()
	<-inTx
	rctx, cancel := context.WithTimeout(ctx, testenv.WaitTimeout)
	defer cancel()
	if err := b.RenewLeadership(rctx, lb, time.Minute); err != nil {
		t.Fatalf("the leader could not renew its lease during its own transaction: %v", err)
	}
	if _, err := a.DB().ExecContext(ctx, `UPDATE scheduler_leader SET expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	type took struct {
		l   store.Leadership
		ok  bool
		err error
	}
	taken := make(chan took, 1)
	go func() {
		l, ok, err := a.AcquireLeadership(ctx, "a", time.Minute)
		taken <- took{l, ok, err}
	}()
	select {
	case r := <-taken:
		t.Fatalf("the lease was taken under an open leader transaction: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r := <-taken
	if r.err != nil || !r.ok || r.l.Epoch != lb.Epoch+1 {
		t.Fatalf("a after b's transaction ended: %+v", r)
	}
	if err := a.ResignLeadership(ctx, r.l); err != nil {
		t.Fatal(err)
	}
	if l, ok, err := b.AcquireLeadership(ctx, "b", time.Minute); err != nil || !ok || l.Epoch != r.l.Epoch+1 {
		t.Fatalf("after a resigned: %+v %v %v", l, ok, err)
	}
}

// After the leader took over (or the database came back), no slave is marked offline before
// the leader itself has led for the grace: every heartbeat is old then for reasons that are
// not the slaves'.
func TestMarkSlavesOfflineWaitsForTheLeader(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	if _, err := st.CreateCluster(ctx, store.Cluster{ID: 1, Name: "one"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RegisterSlave(ctx, store.SlaveRegistration{Name: "node1", InstanceID: "i1", ClusterID: 1, Inventory: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DB().ExecContext(ctx, `UPDATE slaves SET last_heartbeat = now() - interval '10 minutes'`); err != nil {
		t.Fatal(err)
	}
	now, err := st.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if names, err := st.MarkSlavesOffline(ctx, time.Minute, now); err != nil || len(names) != 0 {
		t.Fatalf("a new leader marked slaves offline: %v %v", names, err)
	}
	if names, err := st.MarkSlavesOffline(ctx, time.Minute, now.Add(-2*time.Minute)); err != nil || !slices.Equal(names, []string{"node1"}) {
		t.Fatalf("a leader of 2 minutes: %v %v", names, err)
	}
}

// TestOfflineSlavesByIndex: the leader's look for the slaves offline long enough (at every
// housekeeping) reads the index of the offline slaves, not every slave's row, and the index
// keeps the heartbeats of online slaves HOT updates (no index entry): only a slave going offline
// or coming back changes what it holds.
func TestOfflineSlavesByIndex(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	if _, err := st.CreateCluster(ctx, store.Cluster{ID: 1, Name: "one"}); err != nil {
		t.Fatal(err)
	}
	names := []string{"node1", "node2", "node3", "node4", "node5"}
	for _, n := range names {
		if _, err := st.RegisterSlave(ctx, store.SlaveRegistration{Name: n, InstanceID: "i-" + n, ClusterID: 1, Inventory: []byte(`{"cpus": 8}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.DB().ExecContext(ctx, `UPDATE slaves SET online = FALSE, offline_since = now() - interval '2 minutes' WHERE name IN ('node4', 'node5')`); err != nil {
		t.Fatal(err)
	}
	conn, err := st.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	// Postgres reads every row of a small table whatever its indexes; with sequential scans
	// priced out, a plan without the index means the statement cannot use it.
	for _, q := range []string{`SET enable_seqscan = off`, `PREPARE lost(float8) AS ` + store.LostSlavesStatement} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	var plan string
	if err := conn.QueryRowContext(ctx, `EXPLAIN (FORMAT JSON) EXECUTE lost(60)`).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, "slaves_offline_idx") {
		t.Errorf("the lost slaves are not found by their index:\n%s", plan)
	}
	if lost, err := st.ListLostJobs(ctx, time.Minute); err != nil || len(lost) != 0 {
		t.Fatalf("lost jobs of slaves with none: %+v %v", lost, err)
	}

	// The heartbeats' updates: 10 of each online slave, and one of node4, which comes back.
	stats := func() (upd, hot int64) {
		if err := st.DB().QueryRowContext(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'slaves'`).Scan(&upd, &hot); err != nil {
			t.Fatal(err)
		}
		return upd, hot
	}
	beats := 0
	for range 10 {
		for _, n := range names[:3] {
			if _, err := st.Heartbeat(ctx, store.Beat{Slave: n, InstanceID: "i-" + n, Usage: []byte(`[]`)}); err != nil {
				t.Fatal(err)
			}
			beats++
		}
	}
	if _, err := st.Heartbeat(ctx, store.Beat{Slave: "node4", InstanceID: "i-node4", Usage: []byte(`[]`)}); err != nil {
		t.Fatal(err)
	}
	// The counters reach the statistics when the connections that made the updates are idle
	// (within a few seconds); before them, the updates of the setup: the two marked offline.
	var upd, hot int64
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if upd, hot = stats(); upd >= int64(beats)+3 || time.Now().After(deadline) {
			break
		}
	}
	if upd < int64(beats)+3 {
		t.Fatalf("%d updates of the slaves counted after a minute, want %d", upd, beats+3)
	}
	t.Logf("updates of the slaves: %d, HOT %d", upd, hot)
	// Not HOT: the two marked offline and node4 coming back (all three change the index).
	if notHot := upd - hot; notHot > 3 {
		t.Errorf("%d of %d updates of the slaves were not HOT (%d heartbeats of online slaves among them), want at most 3", notHot, upd, beats)
	}
}

// TestChangeWakesTheScheduler: a change asked to wake the scheduler notifies every master's
// listener once, when it is made; a refused change and one not asked to do not; a submit
// does; inside a transaction, once it commits, and not when it is rolled back. Notifications arrive in commit
// order, so a marker sent after each step (and after the wakes asked for were sent) tells how
// many came before it.
func TestChangeWakesTheScheduler(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	node1(t, st)
	heard := listen(t, st)
	wakesBefore := func(marker string) int {
		t.Helper()
		st.WaitWakes() // sent apart from the change, soon after it
		if err := st.NotifySlaves(ctx, marker); err != nil {
			t.Fatal(err)
		}
		n := 0
		for h := range heard {
			switch h {
			case "":
				n++
			case "slaves " + marker:
				return n
			}
		}
		return n
	}
	running := createJob(t, st, u, p, job.StatusQueued)
	attempt := placeOn(t, st, running.UUID, 0, job.StatusRunning)
	other := createJob(t, st, u, p, job.StatusQueued)
	placeOn(t, st, other.UUID, 1, job.StatusRunning)
	wakesBefore("set-up") // the submits' and assignments' own notifications
	end := func(id string, from job.Status, wake bool) error {
		_, _, err := st.ChangeJob(ctx, id, store.Change{From: []job.Status{from}, To: job.StatusFinished, Attempt: store.Attempt(attempt),
			Released: true, Event: store.Event{Actor: "slave node1", Message: "exit code 0"}, WakeScheduler: wake})
		return err
	}
	if err := end(running.UUID, job.StatusQueued, true); !errors.Is(err, store.ErrStateConflict) {
		t.Fatalf("a change from the wrong state: %v, want a conflict", err)
	}
	if n := wakesBefore("refused"); n != 0 {
		t.Errorf("a refused change woke the scheduler %d times", n)
	}
	if err := end(running.UUID, job.StatusRunning, true); err != nil {
		t.Fatal(err)
	}
	if n := wakesBefore("made"); n != 1 {
		t.Errorf("a change made woke the scheduler %d times, want 1", n)
	}
	if err := end(other.UUID, job.StatusRunning, false); err != nil {
		t.Fatal(err)
	}
	if n := wakesBefore("not asked"); n != 0 {
		t.Errorf("a change not asked to wake the scheduler woke it %d times", n)
	}
	// A submit wakes it too: a new job to plan.
	createJob(t, st, u, p, job.StatusQueued)
	if n := wakesBefore("submitted"); n != 1 {
		t.Errorf("a submit woke the scheduler %d times, want 1", n)
	}
	// Inside a transaction, the wake waits for the commit; a transaction rolled back wakes no one.
	asked := st.WakesAsked()
	if err := st.WithTx(ctx, func(tx *store.Store) error {
		tx.WakeScheduler()
		if n := st.WakesAsked(); n != asked {
			t.Errorf("a wake asked for inside a transaction before its commit (%d → %d)", asked, n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n := wakesBefore("committed"); n != 1 {
		t.Errorf("a transaction that asked for a wake woke the scheduler %d times at its commit, want 1", n)
	}
	if err := st.WithTx(ctx, func(tx *store.Store) error {
		tx.WakeScheduler()
		return errors.New("rolled back")
	}); err == nil {
		t.Fatal("the transaction was not rolled back")
	}
	if n := wakesBefore("rolled back"); n != 0 {
		t.Errorf("a transaction rolled back woke the scheduler %d times", n)
	}
}

// An assigned job's lease runs from its first hand-over to its slave: before it, the longer
// HandOver lease; a later hand-over never lengthens it; another slave's poll does not count; a
// new assignment waits for its own hand-over. Expired leases are listed up to a limit, the
// longest expired first.
func TestAssignedLeaseRunsFromHandOver(t *testing.T) {
	st := twoSlaves(t, store.Leases{Assigned: time.Minute, HandOver: time.Hour, Starting: time.Minute, StartDeadline: time.Hour,
		MustHalt: time.Minute, Halting: time.Minute})
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	handed, kept := createJob(t, st, u, p, job.StatusQueued), createJob(t, st, u, p, job.StatusQueued)
	placeOn(t, st, handed.UUID, 0, job.StatusAssigned)
	placeOn(t, st, kept.UUID, 1, job.StatusAssigned)
	// left is the lease's time left by the database's clock; over is whether it was handed over.
	lease := func(id string) (left time.Duration, over bool) {
		t.Helper()
		var secs float64
		if err := st.DB().QueryRowContext(ctx, `SELECT extract(epoch FROM lease_expires_at - now()), handed_over_at IS NOT NULL FROM jobs WHERE uuid = $1`,
			id).Scan(&secs, &over); err != nil {
			t.Fatal(err)
		}
		return time.Duration(secs * float64(time.Second)), over
	}
	if left, over := lease(handed.UUID); over || left < 59*time.Minute {
		t.Fatalf("a job not handed over: lease %s left, handed over %v; want the hour of HandOver", left, over)
	}
	if _, err := st.HandOver(ctx, "node2", []string{handed.UUID}); err != nil {
		t.Fatal(err)
	}
	if left, over := lease(handed.UUID); over || left < 59*time.Minute {
		t.Fatalf("another slave's poll shortened the lease to %s (handed over %v)", left, over)
	}
	if _, err := st.HandOver(ctx, "node1", []string{handed.UUID}); err != nil {
		t.Fatal(err)
	}
	if left, over := lease(handed.UUID); !over || left > time.Minute || left < 50*time.Second {
		t.Fatalf("after the hand-over: lease %s left, handed over %v; want the minute of Assigned", left, over)
	}
	if left, over := lease(kept.UUID); over || left < 59*time.Minute {
		t.Fatalf("the other job's lease moved with the hand-over: %s left, handed over %v", left, over)
	}
	// The same job handed over again (a poll that returned it again) keeps what is left.
	if _, err := st.DB().ExecContext(ctx, `UPDATE jobs SET lease_expires_at = now() + interval '10 seconds' WHERE uuid = $1`, handed.UUID); err != nil {
		t.Fatal(err)
	}
	if _, err := st.HandOver(ctx, "node1", []string{handed.UUID}); err != nil {
		t.Fatal(err)
	}
	if left, _ := lease(handed.UUID); left > 10*time.Second {
		t.Fatalf("a second hand-over lengthened the lease to %s", left)
	}
	// Expired, each says whether it was handed over (the housekeeping's message).
	if _, err := st.DB().ExecContext(ctx, `UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE uuid IN ($1, $2)`, handed.UUID, kept.UUID); err != nil {
		t.Fatal(err)
	}
	exp, err := st.ListExpiredLeases(ctx, 0)
	if err != nil || len(exp) != 2 {
		t.Fatalf("expired leases: %+v %v", exp, err)
	}
	for _, e := range exp {
		if e.HandedOver != (e.UUID == handed.UUID) {
			t.Errorf("expired job %s: handed over %v", e.UUID, e.HandedOver)
		}
	}
	// A pass takes at most so many, the longest expired first.
	if _, err := st.DB().ExecContext(ctx, `UPDATE jobs SET lease_expires_at = now() - interval '1 minute' WHERE uuid = $1`, kept.UUID); err != nil {
		t.Fatal(err)
	}
	if exp, err := st.ListExpiredLeases(ctx, 1); err != nil || len(exp) != 1 || exp[0].UUID != kept.UUID {
		t.Fatalf("the first expired lease: %+v %v", exp, err)
	}
	// Queued again and assigned again: the new assignment waits for its own hand-over.
	if _, err := st.TransitionJob(ctx, handed.UUID, []job.Status{job.StatusAssigned}, job.StatusQueued, store.Event{}); err != nil {
		t.Fatal(err)
	}
	placeOn(t, st, handed.UUID, 2, job.StatusAssigned)
	if left, over := lease(handed.UUID); over || left < 59*time.Minute {
		t.Fatalf("assigned again: lease %s left, handed over %v", left, over)
	}
}

// A slave that lists a job it is taking or starting renews its lease, only when less than half
// is left and never past its bound: an ASSIGNED job up to the hand-over lease after the
// assignment, a STARTING one up to the start deadline after STARTING; another slave's listing
// renews nothing. The master's reads of a slave's jobs say which leases are due, so that a
// heartbeat renews only those.
func TestRenewLeases(t *testing.T) {
	st := twoSlaves(t, store.Leases{Assigned: time.Minute, HandOver: 10 * time.Minute, Starting: time.Minute, StartDeadline: 5 * time.Minute,
		MustHalt: time.Minute, Halting: time.Minute})
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	assigned, starting := createJob(t, st, u, p, job.StatusQueued), createJob(t, st, u, p, job.StatusQueued)
	placeOn(t, st, assigned.UUID, 0, job.StatusAssigned)
	placeOn(t, st, starting.UUID, 1, job.StatusStarting)
	ids := []string{assigned.UUID, starting.UUID}
	left := func(id string) time.Duration {
		t.Helper()
		var secs float64
		if err := st.DB().QueryRowContext(ctx, `SELECT extract(epoch FROM lease_expires_at - now()) FROM jobs WHERE uuid = $1`, id).Scan(&secs); err != nil {
			t.Fatal(err)
		}
		return time.Duration(secs * float64(time.Second))
	}
	// age sets a job's lease to expire in `in` and the time it entered its state to `since` ago.
	age := func(id string, state job.Status, in, since time.Duration) {
		t.Helper()
		if _, err := st.DB().ExecContext(ctx, `UPDATE jobs SET lease_expires_at = now() + make_interval(secs => $2),
    event_times = jsonb_set(event_times, ARRAY[$3::text], to_jsonb(now() - make_interval(secs => $4))) WHERE uuid = $1`,
			id, in.Seconds(), string(state), since.Seconds()); err != nil {
			t.Fatal(err)
		}
	}
	// due says which jobs on node1 the master's reads mark as due for renewal: ListSlaveJobs's
	// (a registration's) and a heartbeat's view.
	due := func() (listed, beat map[string]bool) {
		t.Helper()
		listed, beat = map[string]bool{}, map[string]bool{}
		jobs, err := st.ListSlaveJobs(ctx, "node1", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			listed[j.UUID] = j.Renew
		}
		view, err := st.Heartbeat(ctx, store.Beat{Slave: "node1", InstanceID: "i1", MissingGrace: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range view.Jobs {
			beat[j.UUID] = j.Renew
		}
		return listed, beat
	}
	if l, b := due(); l[assigned.UUID] || l[starting.UUID] || b[assigned.UUID] || b[starting.UUID] {
		t.Fatalf("fresh leases due for renewal: listed %v, heartbeat %v", l, b)
	}
	age(assigned.UUID, job.StatusAssigned, 10*time.Second, time.Minute)
	age(starting.UUID, job.StatusStarting, 10*time.Second, time.Minute)
	if l, b := due(); !l[assigned.UUID] || !l[starting.UUID] || !b[assigned.UUID] || !b[starting.UUID] {
		t.Fatalf("leases with 10 s left not due for renewal: listed %v, heartbeat %v", l, b)
	}
	if err := st.RenewLeases(ctx, "node2", ids); err != nil {
		t.Fatal(err)
	}
	if a, s := left(assigned.UUID), left(starting.UUID); a > 10*time.Second || s > 10*time.Second {
		t.Fatalf("another slave's listing renewed the leases: %s, %s left", a, s)
	}
	if err := st.RenewLeases(ctx, "node1", ids); err != nil {
		t.Fatal(err)
	}
	if a, s := left(assigned.UUID), left(starting.UUID); a < 50*time.Second || a > time.Minute || s < 50*time.Second || s > time.Minute {
		t.Fatalf("renewed: %s and %s left, want a minute each", a, s)
	}
	if l, b := due(); l[assigned.UUID] || l[starting.UUID] || b[assigned.UUID] || b[starting.UUID] {
		t.Fatalf("renewed leases still due: listed %v, heartbeat %v", l, b)
	}
	// More than half left: not written again.
	age(assigned.UUID, job.StatusAssigned, 40*time.Second, time.Minute)
	if err := st.RenewLeases(ctx, "node1", ids[:1]); err != nil {
		t.Fatal(err)
	}
	if a := left(assigned.UUID); a > 40*time.Second {
		t.Fatalf("a lease with more than half left was renewed to %s", a)
	}
	// Near their bounds: no further than them.
	age(assigned.UUID, job.StatusAssigned, 10*time.Second, 9*time.Minute+40*time.Second)
	age(starting.UUID, job.StatusStarting, 10*time.Second, 4*time.Minute+40*time.Second)
	if err := st.RenewLeases(ctx, "node1", ids); err != nil {
		t.Fatal(err)
	}
	if a, s := left(assigned.UUID), left(starting.UUID); a > 21*time.Second || a < 10*time.Second || s > 21*time.Second || s < 10*time.Second {
		t.Fatalf("near their bounds: %s and %s left, want about 20 s each", a, s)
	}
}

// twoSlaves is a store with leases l, cluster 1 and two slaves of it registered, node1 and node2
// (instance i1 each).
func twoSlaves(t *testing.T, l store.Leases) *store.Store {
	t.Helper()
	st := newStore(t)
	st.SetLeases(l)
	ctx := context.Background()
	if _, err := st.CreateCluster(ctx, store.Cluster{ID: 1, Name: "one"}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"node1", "node2"} {
		if err := st.JoinSlave(ctx, n, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := st.RegisterSlave(ctx, store.SlaveRegistration{Name: n, InstanceID: "i1", ClusterID: 1, Inventory: []byte(`{"gpus": []}`)}); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// The housekeeping's requeue of assignments takes back, in one statement, exactly the jobs
// still ASSIGNED in the attempt named (and, for an expired lease, still expired: a heartbeat
// may have renewed it since the listing): each leaves its placement and lease, with its
// status event; the others are left as they are.
func TestRequeueAssigned(t *testing.T) {
	st := twoSlaves(t, store.DefaultLeases)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	if got, err := st.RequeueAssigned(ctx, "scheduler", nil); err != nil || got != nil {
		t.Fatalf("nothing to requeue: %v %v", got, err)
	}
	expired, renewed, lost, other, running := createJob(t, st, u, p, job.StatusQueued), createJob(t, st, u, p, job.StatusQueued),
		createJob(t, st, u, p, job.StatusQueued), createJob(t, st, u, p, job.StatusQueued), createJob(t, st, u, p, job.StatusQueued)
	attempts := map[string]int{}
	for i, j := range []*job.Job{expired, renewed, lost, other} {
		attempts[j.UUID] = placeOn(t, st, j.UUID, i, job.StatusAssigned)
	}
	attempts[running.UUID] = placeOn(t, st, running.UUID, 4, job.StatusRunning)
	if _, err := st.DB().ExecContext(ctx, `UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE uuid IN ($1, $2)`,
		expired.UUID, running.UUID); err != nil {
		t.Fatal(err)
	}
	got, err := st.RequeueAssigned(ctx, "scheduler", []store.Requeue{
		{UUID: expired.UUID, Attempt: attempts[expired.UUID], Expired: true, Message: "ran out"},
		{UUID: renewed.UUID, Attempt: attempts[renewed.UUID], Expired: true, Message: "renewed since"},
		{UUID: lost.UUID, Attempt: attempts[lost.UUID], Message: "slave lost"},
		{UUID: other.UUID, Attempt: attempts[other.UUID] - 1, Message: "an older attempt"},
		{UUID: running.UUID, Attempt: attempts[running.UUID], Expired: true, Message: "taken since"},
	})
	slices.Sort(got)
	want := []string{expired.UUID, lost.UUID}
	slices.Sort(want)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("requeued %v (%v), want %v", got, err, want)
	}
	for id, message := range map[string]string{expired.UUID: "ran out", lost.UUID: "slave lost"} {
		var status string
		var slave, resources sql.NullString
		var lease sql.NullTime
		var queued bool
		if err := st.DB().QueryRowContext(ctx, `SELECT status, assigned_slave_name, lease_expires_at, resources::text,
    (event_times->>'QUEUED')::timestamptz >= (event_times->>'ASSIGNED')::timestamptz FROM jobs WHERE uuid = $1`, id).Scan(&status, &slave, &lease, &resources, &queued); err != nil {
			t.Fatal(err)
		}
		if status != "QUEUED" || slave.Valid || lease.Valid || resources.Valid || !queued {
			t.Errorf("job %s requeued: %s, slave %v, lease %v, resources %v, QUEUED after ASSIGNED %v", id, status, slave, lease, resources, queued)
		}
		evs, err := st.ListJobEvents(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		last := evs[len(evs)-1]
		if last.Kind != store.EventStatus || last.FromStatus != "ASSIGNED" || last.ToStatus != "QUEUED" || last.Actor != "scheduler" || last.Message != message {
			t.Errorf("job %s's event: %+v", id, last)
		}
	}
	for id, status := range map[string]job.Status{renewed.UUID: job.StatusAssigned, other.UUID: job.StatusAssigned, running.UUID: job.StatusRunning} {
		rec, err := st.GetJob(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Job.State.Status != status || rec.Job.State.Scheduling.AssignedSlaveName != "node1" {
			t.Errorf("job %s not to be requeued is %s on %q", id, rec.Job.State.Status, rec.Job.State.Scheduling.AssignedSlaveName)
		}
	}
	if held, err := st.ListReleases(ctx, ""); err != nil || len(held) != 0 {
		t.Fatalf("an assignment never taken holds something on its slave: %+v %v", held, err)
	}
	// A second run finds nothing left to do.
	if again, err := st.RequeueAssigned(ctx, "scheduler", []store.Requeue{{UUID: expired.UUID, Attempt: attempts[expired.UUID], Expired: true}}); err != nil || len(again) != 0 {
		t.Fatalf("requeued again: %v %v", again, err)
	}
}

// The pass's assignment as one statement: as the holder of the lease it moves the jobs still
// QUEUED, with their events, and wakes the named slaves' long polls at its commit, only when a
// job moved; with a lease it does not hold it writes nothing and sends nothing.
func TestAssignJobsAsLeader(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	node1(t, st)
	heard := listen(t, st)
	// wokenBefore lists the slave notifications that came before a marker sent now.
	wokenBefore := func(marker string) []string {
		t.Helper()
		if err := st.NotifySlaves(ctx, marker); err != nil {
			t.Fatal(err)
		}
		var out []string
		for h := range heard {
			if h == "slaves "+marker {
				break
			}
			if names, ok := strings.CutPrefix(h, "slaves "); ok {
				out = append(out, names)
			}
		}
		return out
	}
	lead, ok, err := st.AcquireLeadership(ctx, "me", time.Minute)
	if err != nil || !ok {
		t.Fatalf("leadership: %v %v", ok, err)
	}
	queued, cancelled := createJob(t, st, u, p, job.StatusQueued), createJob(t, st, u, p, job.StatusQueued)
	if _, err := st.TransitionJob(ctx, cancelled.UUID, []job.Status{job.StatusQueued}, job.StatusCancelled, store.Event{}); err != nil {
		t.Fatal(err)
	}
	on := func(id string, gpu int) store.Assignment {
		return store.Assignment{JobUUID: id, Message: "assigned here", Placement: store.Placement{SlaveName: "node1", SlaveInstanceID: "i1", ClusterID: 1,
			Resources: job.StateResources{SlaveName: "node1", GPUIDs: []int{gpu}, CPUIDs: []int{gpu}, CPUMemoryGb: 1}}}
	}
	status := func(id string) (job.Status, int) {
		t.Helper()
		rec, err := st.GetJob(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Job.State.Status, rec.Attempt
	}
	// Another epoch's: refused, nothing written, nothing sent.
	stale := lead
	stale.Epoch++
	if got, err := st.AssignJobsAsLeader(ctx, stale, []store.Assignment{on(queued.UUID, 0)}, []string{"node1"}); !errors.Is(err, store.ErrNotLeader) || got != nil {
		t.Fatalf("another epoch's assignment: %v %v", got, err)
	}
	if s, _ := status(queued.UUID); s != job.StatusQueued {
		t.Fatalf("a refused assignment moved the job to %s", s)
	}
	if w := wokenBefore("m1"); len(w) != 0 {
		t.Fatalf("a refused assignment woke %v", w)
	}
	// The lease's: the queued job moves, the cancelled one is skipped, node1 is woken.
	got, err := st.AssignJobsAsLeader(ctx, lead, []store.Assignment{on(queued.UUID, 0), on(cancelled.UUID, 1)}, []string{"node1"})
	if err != nil || len(got) != 1 || got[0] != queued.UUID {
		t.Fatalf("assigned %v (%v), want only %s", got, err, queued.UUID)
	}
	if s, attempt := status(queued.UUID); s != job.StatusAssigned || attempt != 1 {
		t.Fatalf("the assigned job is %s in attempt %d", s, attempt)
	}
	if s, _ := status(cancelled.UUID); s != job.StatusCancelled {
		t.Fatalf("the cancelled job is %s", s)
	}
	evs, err := st.ListJobEvents(ctx, queued.UUID)
	if err != nil {
		t.Fatal(err)
	}
	if last := evs[len(evs)-1]; last.FromStatus != "QUEUED" || last.ToStatus != "ASSIGNED" || last.Message != "assigned here" {
		t.Fatalf("the assignment's event: %+v", last)
	}
	if w := wokenBefore("m2"); !slices.Equal(w, []string{"node1"}) {
		t.Fatalf("woken by the assignment: %v, want node1", w)
	}
	// Nothing moved (the job no longer queued): nothing sent.
	if got, err := st.AssignJobsAsLeader(ctx, lead, []store.Assignment{on(cancelled.UUID, 1)}, []string{"node1"}); err != nil || len(got) != 0 {
		t.Fatalf("assigned %v (%v), want none", got, err)
	}
	if w := wokenBefore("m3"); len(w) != 0 {
		t.Fatalf("an assignment that moved nothing woke %v", w)
	}
}

// listen listens to the notifications of every master for the rest of the test, and passes
// them on in the order the listener calls back (two channels would lose it in a select): a
// wake of the scheduler as "", one of slaves as "slaves " and their names.
func listen(t *testing.T, st *store.Store) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	heard, ready := make(chan string, 64), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- st.Listen(ctx, slog.New(slog.DiscardHandler), func() { heard <- "" },
			func(names []string) { heard <- "slaves " + strings.Join(names, ",") }, func() { close(ready) })
	}()
	t.Cleanup(func() { cancel(); <-done })
	<-ready
	return heard
}

// TestSlaveChangeChecksTheSlave: a slave's change (Change.Slave) reads the job's place and the
// caller's certificate in its own statement and answers as the handlers' separate read did: a
// revoked or expired certificate first (also for a job that does not exist), then a job that
// does not exist, is on another slave or none, or is ASSIGNED to the slave while it is
// disabled (*WrongSlaveError, nothing changed), then the states (*StateConflict naming the
// current state, read in the same statement). A change made returns the place the job left.
func TestSlaveChangeChecksTheSlave(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	node1(t, st)
	slaveCerts(t, st)
	assigned := createJob(t, st, u, p, job.StatusQueued)
	attempt := placeOn(t, st, assigned.UUID, 0, job.StatusAssigned)
	queued := createJob(t, st, u, p, job.StatusQueued)
	unknown := "00000000-0000-4000-8000-000000000000"
	start := func(id, slave, cert string) (store.JobPlace, error) {
		place, _, err := st.SlaveChangeJob(ctx, id, store.Change{From: []job.Status{job.StatusAssigned}, To: job.StatusStarting,
			Attempt: store.Attempt(attempt), Slave: slave, CertSerial: cert, Event: store.Event{Actor: "slave " + slave}})
		return place, err
	}
	unchanged := func(what string) {
		t.Helper()
		if got, err := st.JobPlace(ctx, assigned.UUID, ""); err != nil || got.Status != job.StatusAssigned {
			t.Fatalf("after %s: %+v %v, want the job still ASSIGNED", what, got, err)
		}
	}

	for serial, state := range map[string]string{"c-revoked": "revoked", "c-expired": "expired"} {
		for _, id := range []string{assigned.UUID, unknown} {
			_, err := start(id, "node1", serial)
			var re *store.CertificateRefusedError
			if !errors.As(err, &re) || re.Serial != serial || re.State != state {
				t.Errorf("job %s with certificate %s: %v, want it %s", id, serial, err, state)
			}
		}
		unchanged("a refused certificate")
	}
	wrong := func(what string, err error, found bool, slave string) {
		t.Helper()
		var we *store.WrongSlaveError
		if !errors.As(err, &we) || we.Found != found || we.Place.Slave != slave {
			t.Errorf("%s: %v (%+v), want a *WrongSlaveError found=%v on %q", what, err, we, found, slave)
		}
	}
	_, err := start(unknown, "node1", "c-valid")
	wrong("an unknown job", err, false, "")
	_, err = start(queued.UUID, "node1", "")
	wrong("a queued job", err, true, "")
	_, err = start(assigned.UUID, "node2", "c-unrecorded")
	wrong("another slave's job", err, true, "node1")
	unchanged("another slave's start")
	// Disabled just after a pass assigned it the job (SetSlaveDisabled would queue it again).
	if _, err := st.DB().ExecContext(ctx, `UPDATE slaves SET disabled = TRUE WHERE name = 'node1'`); err != nil {
		t.Fatal(err)
	}
	_, err = start(assigned.UUID, "node1", "c-valid")
	wrong("a disabled slave's start", err, true, "node1")
	unchanged("a disabled slave's start")
	if _, err := st.DB().ExecContext(ctx, `UPDATE slaves SET disabled = FALSE WHERE name = 'node1'`); err != nil {
		t.Fatal(err)
	}

	rec, err := st.GetJob(ctx, assigned.UUID)
	if err != nil {
		t.Fatal(err)
	}
	place, err := start(assigned.UUID, "node1", "c-valid")
	queuedAt := rec.Job.State.EventTimes[job.StatusQueued]
	if err != nil || place.Status != job.StatusAssigned || place.Slave != "node1" || place.Attempt != attempt ||
		!place.QueuedAt.Valid || !place.QueuedAt.Time.Equal(queuedAt) || place.ClusterID != rec.Job.State.Resources.ClusterID {
		t.Fatalf("the slave's start: %+v %v, want the place it left (queued at %v)", place, err, queuedAt)
	}
	if got, _ := st.JobPlace(ctx, assigned.UUID, ""); got.Status != job.StatusStarting {
		t.Fatalf("after the start the job is %s", got.Status)
	}
	// Its retry: the states conflict, naming the state the job is in now.
	_, err = start(assigned.UUID, "node1", "c-valid")
	var sc *store.StateConflict
	if !errors.As(err, &sc) || sc.Current != job.StatusStarting || sc.Attempt != attempt {
		t.Fatalf("the start again: %v, want a conflict naming STARTING", err)
	}
	// A change without Slave is not checked: the master's own (a lease's end) still finds it.
	if _, _, err := st.ChangeJob(ctx, unknown, store.Change{From: []job.Status{job.StatusAssigned}, To: job.StatusQueued}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the master's change of an unknown job: %v, want ErrNotFound", err)
	}
}

// TestSlaveLogChecksTheSlave: a slave's log chunk (LogChunk.Slave) is checked in the statement
// that appends it, as a slave's change is: a refused certificate, a job that is not the
// slave's (or ASSIGNED to it while it is disabled) and another attempt append nothing; the
// chunks of the job's own attempt go on in order.
func TestSlaveLogChecksTheSlave(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	node1(t, st)
	slaveCerts(t, st)
	running := createJob(t, st, u, p, job.StatusQueued)
	attempt := placeOn(t, st, running.UUID, 0, job.StatusRunning)
	assigned := createJob(t, st, u, p, job.StatusQueued)
	assignedAttempt := placeOn(t, st, assigned.UUID, 1, job.StatusAssigned)
	unknown := "00000000-0000-4000-8000-000000000000"
	chunk := func(id string, seq int, slave, cert string, attempt int) (store.JobPlace, error) {
		return st.AppendLog(ctx, store.LogChunk{JobUUID: id, Seq: seq, Data: []byte("line\n"), Slave: slave, Attempt: attempt, CertSerial: cert})
	}
	size := func(id string) int64 {
		t.Helper()
		_, n, err := st.JobLogState(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, serial := range []string{"c-revoked", "c-expired"} {
		for _, id := range []string{running.UUID, unknown} {
			var re *store.CertificateRefusedError
			if _, err := chunk(id, 0, "node1", serial, attempt); !errors.As(err, &re) || re.Serial != serial {
				t.Errorf("job %s with certificate %s: %v, want it refused", id, serial, err)
			}
		}
	}
	var we *store.WrongSlaveError
	if _, err := chunk(unknown, 0, "node1", "c-valid", 1); !errors.As(err, &we) || we.Found {
		t.Errorf("an unknown job: %v, want a *WrongSlaveError", err)
	}
	if _, err := chunk(running.UUID, 0, "node2", "", attempt); !errors.As(err, &we) || we.Place.Slave != "node1" {
		t.Errorf("another slave's job: %v, want a *WrongSlaveError", err)
	}
	if p, err := chunk(running.UUID, 0, "node1", "c-valid", attempt+1); !errors.Is(err, store.ErrOtherAttempt) || p.Attempt != attempt || p.Status != job.StatusRunning {
		t.Errorf("another attempt's chunk: %+v %v, want ErrOtherAttempt with the job's place", p, err)
	}
	if n := size(running.UUID); n != 0 {
		t.Fatalf("refused chunks appended %d bytes", n)
	}
	if _, err := st.DB().ExecContext(ctx, `UPDATE slaves SET disabled = TRUE WHERE name = 'node1'`); err != nil {
		t.Fatal(err)
	}
	if _, err := chunk(assigned.UUID, 0, "node1", "", assignedAttempt); !errors.As(err, &we) || !we.Place.SlaveDisabled {
		t.Errorf("a disabled slave's chunk of its assigned job: %v, want a *WrongSlaveError", err)
	}
	if n := size(assigned.UUID); n != 0 {
		t.Fatalf("a disabled slave's chunk appended %d bytes", n)
	}
	// A disabled slave still logs the jobs it runs (it is drained, not stopped).
	for seq := range 2 {
		if p, err := chunk(running.UUID, seq, "node1", "c-valid", attempt); err != nil || p.Slave != "node1" {
			t.Fatalf("chunk %d of the slave's own job: %+v %v", seq, p, err)
		}
	}
	if _, err := chunk(running.UUID, 1, "node1", "c-valid", attempt); !errors.Is(err, store.ErrConflict) {
		t.Errorf("a chunk sent twice: %v, want ErrConflict", err)
	}
	if _, err := chunk(running.UUID, 3, "node1", "", attempt); !errors.Is(err, store.ErrLogGap) {
		t.Errorf("a chunk after a gap: %v, want ErrLogGap", err)
	}
	if n := size(running.UUID); n != 10 {
		t.Fatalf("the log has %d bytes, want the two chunks' 10", n)
	}
}
