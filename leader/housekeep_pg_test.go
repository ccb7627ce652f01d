package leader_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/leader"
	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/store"
	"github.com/opengpulab/gpulab/store/storetest"
)

// A pass that comes between two housekeepings (passes back to back, HousekeepEvery) plans but
// gives no timeout its outcome: a slave silent past its grace stays online until the next
// housekeeping, which Pass always does.
func TestPassBetweenHousekeepingsLeavesTimeoutsAlone(t *testing.T) {
	w := newEstimateWorld(t)
	w.oneGPUSlave()
	ctx := context.Background()
	loop := w.loop(leader.Config{HeartbeatGrace: time.Nanosecond}, nil)
	online := w.online
	if err := loop.PassBetweenHousekeepings(ctx, w.lead); err != nil {
		t.Fatal(err)
	}
	if !online() {
		t.Fatal("a pass between housekeepings marked the silent slave offline")
	}
	w.pass(loop)
	if online() {
		t.Error("the housekeeping did not mark the slave, silent past its grace, offline")
	}
}

// The housekeeping looks for slaves silent past their grace at most every tenth of the grace
// (offlineEvery): a slave found online again just after a look is marked offline only at the
// next look, however many housekeepings come between; the first housekeeping of a term looks.
func TestOfflineLooksSpacedByTheGrace(t *testing.T) {
	w := newEstimateWorld(t)
	w.oneGPUSlave()
	ctx := context.Background()
	grace := time.Hour
	if every := leader.OfflineEvery(grace); every != 6*time.Minute {
		t.Fatalf("looks every %s with a grace of %s, want 6m0s", every, grace)
	}
	if every := leader.OfflineEvery(time.Second); every != leader.HousekeepEvery {
		t.Fatalf("looks every %s with a grace of 1 s, want every housekeeping (%s)", every, leader.HousekeepEvery)
	}
	loop := w.loop(leader.Config{HeartbeatGrace: grace}, nil)
	lead := w.lead
	lead.Since = lead.Since.Add(-2 * grace) // a leader long enough to mark slaves offline
	exec := func(q string) {
		t.Helper()
		if _, err := w.st.DB().ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	online := w.online
	pass := func() {
		t.Helper()
		if err := loop.Pass(ctx, lead); err != nil {
			t.Fatal(err)
		}
	}
	exec(`UPDATE slaves SET last_heartbeat = now() - interval '3 hours'`)
	pass()
	if online() {
		t.Fatal("the first housekeeping did not mark the slave, silent past its grace, offline")
	}
	exec(`UPDATE slaves SET online = TRUE, offline_since = NULL`) // its heartbeat still 3 hours old
	for range 3 {
		pass()
	}
	if !online() {
		t.Fatal("housekeepings within a tenth of the grace of the last look looked again")
	}
	loop.OfflineLookedAgo(leader.OfflineEvery(grace))
	pass()
	if online() {
		t.Error("the housekeeping a tenth of the grace after the last look did not mark the silent slave offline")
	}
}

// A leader deposed since its last pass housekeeps nothing: its housekeeping's transaction
// proves the lease first (store.AsLeader) and is refused, so a slave silent past its grace is
// not marked offline by it.
func TestDeposedLeaderHousekeepsNothing(t *testing.T) {
	w := newEstimateWorld(t)
	w.oneGPUSlave()
	ctx := context.Background()
	loop := w.loop(leader.Config{HeartbeatGrace: time.Nanosecond}, nil)
	if _, err := w.st.DB().ExecContext(ctx, `UPDATE scheduler_leader SET expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := w.st.AcquireLeadership(ctx, "other-"+testenv.Suffix(), time.Hour); err != nil || !ok {
		t.Fatalf("another master's leadership: %v %v", ok, err)
	}
	if err := loop.Pass(ctx, w.lead); !errors.Is(err, store.ErrNotLeader) {
		t.Fatalf("a deposed leader's pass: %v (want ErrNotLeader)", err)
	}
	var on bool
	if err := w.st.DB().QueryRowContext(ctx, `SELECT online FROM slaves WHERE name = 'node1'`).Scan(&on); err != nil || !on {
		t.Errorf("a deposed leader marked the silent slave offline (online %v, %v)", on, err)
	}
}

// The housekeeping takes back the assignments whose lease ran out and those of a lost slave
// (one statement for all, store.RequeueAssigned): each gets its event, the slave's long poll
// is woken to drop it, and a pass places the job again where it can.
func TestHousekeepingTakesBackAssignments(t *testing.T) {
	w := newEstimateWorld(t)
	w.oneGPUSlave()
	ctx := context.Background()
	work := scheduler.NewSignal()
	var logs bytes.Buffer
	loop := leader.NewLoop(w.st, leader.Config{HeartbeatGrace: time.Hour, JobGrace: time.Minute},
		slog.New(slog.NewTextHandler(&logs, nil)), scheduler.NewSignal(), work)
	id := w.submit(time.Hour)
	status := func() (job.Status, int, []store.Event) {
		t.Helper()
		rec, evs := w.jobAndEvents(id)
		return rec.Job.State.Status, rec.Attempt, evs
	}
	requeued := func(evs []store.Event, message string) bool {
		for _, e := range evs {
			if e.FromStatus == "ASSIGNED" && e.ToStatus == "QUEUED" && e.Actor == string(job.ActorScheduler) && strings.Contains(e.Message, message) {
				return true
			}
		}
		return false
	}
	w.pass(loop)
	if s, _, _ := status(); s != job.StatusAssigned {
		t.Fatalf("the job is %s after the first pass", s)
	}
	// Its lease ran out before the slave asked for it: queued again, and placed again.
	if _, err := w.st.DB().ExecContext(ctx, `UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE uuid = $1`, id); err != nil {
		t.Fatal(err)
	}
	_, first, _ := status()
	w.pass(loop)
	s, second, evs := status()
	if !requeued(evs, "did not ask for the job within") || s != job.StatusAssigned || second <= first {
		t.Fatalf("after its lease ran out: %s, attempt %d (was %d), events %+v", s, second, first, evs)
	}
	if !strings.Contains(logs.String(), "lease expired") {
		t.Errorf("the requeue was not logged:\n%s", logs.String())
	}
	// Its slave is lost (and its lease ran out too): queued again once, as lost, and the
	// slave's poll is told to drop it.
	if _, err := w.st.DB().ExecContext(ctx, `UPDATE slaves SET online = FALSE, offline_since = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	if _, err := w.st.DB().ExecContext(ctx, `UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE uuid = $1`, id); err != nil {
		t.Fatal(err)
	}
	woken := work.For("node1")
	w.pass(loop)
	if s, _, evs := status(); s != job.StatusQueued || !requeued(evs, "slave node1 was lost before it took the job") {
		t.Fatalf("after its slave was lost: %s, events %+v", s, evs)
	}
	select {
	case <-woken:
	default:
		t.Error("the lost slave's long poll was not woken to drop the job")
	}
	if n, m := strings.Count(logs.String(), "lease expired"), strings.Count(logs.String(), "job given up: its slave is lost"); n != 1 || m != 1 {
		t.Errorf("logged %d expired leases (want 1) and %d lost slaves' jobs (want 1):\n%s", n, m, logs.String())
	}
}

// A leading term accrues the tallies beside its passes (Loop.accrue), from its start: a user's
// tally last accrued an hour ago is brought to now though the loop's passes come an hour apart.
func TestTermAccruesTalliesBesideThePasses(t *testing.T) {
	w := newEstimateWorld(t)
	ctx := context.Background()
	if _, err := w.st.DB().ExecContext(ctx, `INSERT INTO user_tallies (user_id, tally, updated_at) VALUES ($1, 10, now() - interval '1 hour')`, w.u.ID); err != nil {
		t.Fatal(err)
	}
	l := w.loop(leader.Config{Interval: time.Hour}, nil)
	leadCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Lead(leadCtx, w.lead) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(time.Minute)
	for {
		var tally float64
		var fresh bool
		if err := w.st.DB().QueryRowContext(ctx, `SELECT tally, updated_at > now() - interval '1 minute' FROM user_tallies WHERE user_id = $1`, w.u.ID).Scan(&tally, &fresh); err != nil {
			t.Fatal(err)
		}
		if fresh {
			if tally >= 10 || tally < 9 {
				t.Errorf("tally %.3f after an hour without running jobs (want 10 decayed a little)", tally)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tally was not accrued within a minute of the term's start (tally %.3f)", tally)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The tally weights the term's accrual takes from the leader's memory of the running jobs
// (store.AccrueTalliesOf) are those it read from the jobs' rows before (store.AccrueTallies):
// per user, the GPUs, CPUs and memory of his jobs holding resources; a job cancelled while its
// slave has not yet released what it held counts no more. They are made again only for an
// accrual that used them (a pass costs ~1 ms more when it makes them).
func TestTallyWeightsFromTheMemory(t *testing.T) {
	w := newEstimateWorld(t)
	ctx := context.Background()
	w.largeCluster(8)(2)
	bob, bobs := storetest.Member(t, w.st, "bob", "vision")
	var ids []string
	for i, size := range [][3]int{{1, 1, 1}, {2, 4, 16}, {4, 8, 32}, {1, 3, 5}, {3, 2, 7}} {
		u, p := w.u, w.p
		if i%2 == 1 {
			u, p = bob, bobs
		}
		ids = append(ids, w.submitAs(u, p, size, time.Hour))
	}
	loop := w.loop(leader.Config{}, nil)
	w.pass(loop)
	made := loop.TallyWeightsHeld()
	for _, m := range []struct {
		to job.Status
		by job.Actor
	}{{job.StatusStarting, job.ActorSlave}, {job.StatusCancelled, job.ActorOwner}} {
		if _, err := w.st.TransitionJob(ctx, ids[2], job.SourcesOf(m.to, m.by), m.to, store.Event{Actor: string(m.by), Message: "moved"}); err != nil {
			t.Fatal(err)
		}
	}
	var releases int
	if err := w.st.DB().QueryRowContext(ctx, `SELECT count(*) FROM job_releases WHERE job_uuid = $1`, ids[2]).Scan(&releases); err != nil || releases != 1 {
		t.Fatalf("%d releases of the cancelled job (want 1), %v", releases, err)
	}
	// A pass between two accruals leaves the weights as they were; the first after an accrual
	// that used them makes them again.
	w.pass(loop)
	if got := loop.TallyWeightsHeld(); !maps.Equal(got, made) {
		t.Errorf("a pass no accrual asked for made the weights again: %v, were %v", got, made)
	}
	loop.WantTallyWeights()
	w.pass(loop)
	weights := store.DefaultTallyWeights
	rows, err := w.st.DB().QueryContext(ctx, `SELECT user_id, SUM(gpus * $1::float8 + cpus * $2::float8 + cpu_memory_gb * $3::float8)
FROM jobs WHERE status IN ('ASSIGNED', 'STARTING', 'RUNNING', 'MUSTHALT', 'HALTING') GROUP BY user_id`, weights.GPU, weights.CPU, weights.MemoryGb)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rows.Close() }()
	want := map[int64]float64{}
	for rows.Next() {
		var u int64
		var sum float64
		if err := rows.Scan(&u, &sum); err != nil {
			t.Fatal(err)
		}
		want[u] = sum
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	got := loop.TallyWeightsHeld()
	if len(want) != 2 || len(got) != len(want) {
		t.Fatalf("weights from the memory %v, from the jobs %v: want both users in both", got, want)
	}
	for u, x := range want {
		if math.Abs(got[u]-x) > 1e-9 {
			t.Errorf("user %d: weight %.4f from the memory, %.4f from the jobs", u, got[u], x)
		}
	}
}
