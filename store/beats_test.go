package store_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
)

// TestHeartbeatsTogether: heartbeats that arrive while the database is busy are recorded in
// one statement, and each caller still gets its own outcome: its slave's jobs, whether it came
// back online, ErrNotFound for another instance or an unknown slave (nothing written for
// them), a *CertificateRefusedError for a revoked or expired certificate (nothing written
// either), a sample of another slave's job not written, a slave's second heartbeat sent in a
// later statement (in the same one it would find no row), a caller that gave up before its
// batch left out.
func TestHeartbeatsTogether(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	if _, err := st.CreateCluster(ctx, store.Cluster{ID: 1, Name: "c1"}); err != nil {
		t.Fatal(err)
	}
	const n = 40
	name := func(k int) string { return fmt.Sprintf("hb%02d", k) }
	jobOf := map[string]string{}
	for k := range n {
		if _, err := st.RegisterSlave(ctx, store.SlaveRegistration{Name: name(k), InstanceID: "i-" + name(k), ClusterID: 1, Inventory: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		j := createJob(t, st, u, p, job.StatusQueued)
		if _, err := st.AssignJobs(ctx, []store.Assignment{{JobUUID: j.UUID, Placement: store.Placement{SlaveName: name(k), SlaveInstanceID: "i-" + name(k),
			ClusterID: 1, Resources: job.StateResources{SlaveName: name(k), GPUIDs: []int{0}, CPUIDs: []int{0}, CPUMemoryGb: 1}}}}); err != nil {
			t.Fatal(err)
		}
		jobOf[name(k)] = j.UUID
		// Each heartbeat comes with its slave's certificate: hb08's is revoked, hb09's has
		// expired, hb10's is not on record (left to the TLS stack's checks: accepted).
		notAfter := time.Now().Add(time.Hour)
		if k == 9 {
			notAfter = time.Now().Add(-time.Second)
		}
		if k != 10 {
			if err := st.RecordCertificate(ctx, "c-"+name(k), store.CertSlave, name(k), notAfter, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := st.RevokeCertificate(ctx, "c-hb08"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DB().ExecContext(ctx, `UPDATE slaves SET online = FALSE, offline_since = now() WHERE name = 'hb05'`); err != nil {
		t.Fatal(err)
	}
	lastBeat := func(slave string) (at time.Time) {
		t.Helper()
		if err := st.DB().QueryRowContext(ctx, `SELECT last_heartbeat FROM slaves WHERE name = $1`, slave).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	refusedAt := map[string]time.Time{name(8): lastBeat(name(8)), name(9): lastBeat(name(9))}
	beat := func(slave, instance string) store.Beat {
		return store.Beat{Slave: slave, InstanceID: instance, CertSerial: "c-" + slave, Usage: []byte(`[]`), SampleSecs: 5, MissingGrace: time.Minute,
			Samples: []store.UsageSample{{JobUUID: jobOf[slave], CPUPercent: 50, MemoryMiB: 100, GPUs: []store.GPUSample{{Index: 0, UtilPercent: 90, MemoryUsedMiB: 1000}}}}}
	}
	type outcome struct {
		view store.BeatView
		err  error
	}
	stmts0, beats0 := st.BeatStats()
	var observed struct {
		sync.Mutex
		statements, beats int
		waited            time.Duration
	}
	st.ObserveBeats(func(size int, waited, took time.Duration) {
		observed.Lock()
		observed.statements++
		observed.beats += size
		observed.waited = max(observed.waited, waited)
		observed.Unlock()
	})
	defer st.ObserveBeats(nil)
	waiting, release := st.HoldBeats()
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[string]outcome{}
	send := func(key string, ctx context.Context, b store.Beat) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := st.Heartbeat(ctx, b)
			mu.Lock()
			got[key] = outcome{v, err}
			mu.Unlock()
		}()
	}
	for k := range n {
		b := beat(name(k), "i-"+name(k))
		if k == 6 { // and a sample of another slave's job: not written
			b.Samples = append(b.Samples, store.UsageSample{JobUUID: jobOf[name(7)], CPUPercent: 1})
		}
		send(name(k), ctx, b)
	}
	send("stale", ctx, beat(name(0), "i-old"))
	jobOf["nope"] = jobOf[name(3)] // an unknown slave's sample of another's job: not written
	send("unknown", ctx, beat("nope", "i-nope"))
	send("again", ctx, beat(name(1), "i-"+name(1)))
	gaveUp, cancel := context.WithCancel(ctx)
	send("gave up", gaveUp, beat(name(2), "i-"+name(2)))
	for waiting() < n+4 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	mu.Lock()
	for len(got) == 0 {
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
	}
	if o := got["gave up"]; o.err == nil || len(got) != 1 {
		t.Errorf("before release: %v", got)
	}
	mu.Unlock()
	release()
	wg.Wait()

	for k := range n {
		o := got[name(k)]
		if k == 8 || k == 9 {
			var refused *store.CertificateRefusedError
			if want := map[int]string{8: "revoked", 9: "expired"}[k]; !errors.As(o.err, &refused) || refused.State != want || refused.Serial != "c-"+name(k) {
				t.Errorf("%s, its certificate %s: %+v %v", name(k), want, o.view, o.err)
			}
			if at := lastBeat(name(k)); !at.Equal(refusedAt[name(k)]) {
				t.Errorf("%s's refused heartbeat was recorded: last heartbeat %s, before %s", name(k), at, refusedAt[name(k)])
			}
			continue
		}
		if o.err != nil || len(o.view.Jobs) != 1 || o.view.Jobs[0].UUID != jobOf[name(k)] || o.view.Jobs[0].Status != job.StatusAssigned {
			t.Errorf("%s: %+v %v, want its one job %s", name(k), o.view, o.err, jobOf[name(k)])
		}
		if o.view.CameOnline != (k == 5) {
			t.Errorf("%s: came online %v", name(k), o.view.CameOnline)
		}
	}
	for _, key := range []string{"stale", "unknown"} {
		if o := got[key]; !errors.Is(o.err, store.ErrNotFound) {
			t.Errorf("%s heartbeat: %v, want ErrNotFound", key, o.err)
		}
	}
	if o := got["again"]; o.err != nil || len(o.view.Jobs) != 1 {
		t.Errorf("a slave's second heartbeat: %+v %v", o.view, o.err)
	}
	stmts, beats := st.BeatStats()
	if beats-beats0 != n+3 || stmts-stmts0 > 3 {
		t.Errorf("%d heartbeats sent in %d statements; want %d in at most 3", beats-beats0, stmts-stmts0, n+3)
	}
	// The observer was told of each statement, and of the wait of those held back.
	observed.Lock()
	if int64(observed.statements) != stmts-stmts0 || int64(observed.beats) != beats-beats0 || observed.waited <= 0 {
		t.Errorf("observed %d statements of %d heartbeats (longest wait %s); BeatStats: %d of %d", observed.statements, observed.beats,
			observed.waited, stmts-stmts0, beats-beats0)
	}
	observed.Unlock()
	// The heartbeats wrote no usage row: the samples wait in the master's sums until flushed.
	var rows int
	if err := st.DB().QueryRowContext(ctx, `SELECT count(*) FROM job_usage`).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("the heartbeats wrote %d usage rows (%v), want none", rows, err)
	}
	// Read from this master, the job's series has them already, as its latest point.
	if pts, err := st.JobUsage(ctx, jobOf[name(1)]); err != nil || len(pts) != 1 || pts[0].Secs != 10 || pts[0].CPUPercent != 50 {
		t.Errorf("hb01's job's usage before the flush: %+v %v, want one pending point of 10 s at 50 %%", pts, err)
	}
	if err := st.FlushUsage(ctx); err != nil {
		t.Fatal(err)
	}
	if pts, err := st.JobUsage(ctx, jobOf[name(1)]); err != nil || len(pts) != 1 || pts[0].Secs != 10 || len(pts[0].GPUs) != 1 || pts[0].GPUs[0].UtilPercent != 90 {
		t.Errorf("hb01's job's usage after the flush: %+v %v, want the one written point", pts, err)
	}
	var samples, ofZero int
	var secsOne, secsTwo, secsSeven float64
	if err := st.DB().QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (WHERE job_uuid = $1), coalesce(sum(secs) FILTER (WHERE job_uuid = $2), 0),
    coalesce(sum(secs) FILTER (WHERE job_uuid = $3), 0), coalesce(sum(secs) FILTER (WHERE job_uuid = $4), 0) FROM job_usage`,
		jobOf[name(0)], jobOf[name(1)], jobOf[name(2)], jobOf[name(7)]).Scan(&samples, &ofZero, &secsOne, &secsTwo, &secsSeven); err != nil {
		t.Fatal(err)
	}
	// One row per job of a slave whose heartbeat was recorded, hb01's two samples summed in
	// one (10 s); nothing of the stale instance's, the unknown slave's, hb06's of hb07's job,
	// the one given up, or those of refused certificates.
	if samples != n-2 || ofZero != 1 || secsOne != 10 || secsTwo != 5 || secsSeven != 5 {
		t.Errorf("usage rows: %d in all (want %d), %d of hb00's job (want 1), %gs of hb01's (10), %gs of hb02's (5), %gs of hb07's (5)",
			samples, n-2, ofZero, secsOne, secsTwo, secsSeven)
	}
}

// TestSlaveWork: a long poll's one read gives the slave's live jobs as ListSlaveJobs does, and
// whether it is disabled (an unknown slave is not).
func TestSlaveWork(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	node1(t, st)
	var ids []string
	for range 3 {
		j := createJob(t, st, u, p, job.StatusQueued)
		placeOn(t, st, j.UUID, len(ids), job.StatusRunning)
		ids = append(ids, j.UUID)
	}
	createJob(t, st, u, p, job.StatusQueued) // not on the slave
	want, err := st.ListSlaveJobs(ctx, "node1", time.Minute)
	if err != nil || len(want) != 3 {
		t.Fatalf("ListSlaveJobs: %v %v", want, err)
	}
	disabled, got, err := st.SlaveWork(ctx, "node1", time.Minute, "")
	if err != nil || disabled || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("SlaveWork: %v %v %v, want not disabled and %v", disabled, got, err, want)
	}
	if _, err := st.SetSlaveDisabled(ctx, "node1", true); err != nil {
		t.Fatal(err)
	}
	if disabled, _, err := st.SlaveWork(ctx, "node1", time.Minute, ""); err != nil || !disabled {
		t.Errorf("after it was disabled: %v %v", disabled, err)
	}
	if disabled, jobs, err := st.SlaveWork(ctx, "nobody", time.Minute, ""); err != nil || disabled || len(jobs) != 0 {
		t.Errorf("an unknown slave: %v %v %v", disabled, jobs, err)
	}
}

// TestJobPlace: a slave call's read of a job agrees with the whole job read (GetJob): its slave,
// state, attempt, queued time and cluster; the slave's disabled flag comes with it; a job that
// is on no slave has none, an unknown one is ErrNotFound.
func TestJobPlace(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	node1(t, st)
	queued := createJob(t, st, u, p, job.StatusQueued)
	running := createJob(t, st, u, p, job.StatusQueued)
	attempt := placeOn(t, st, running.UUID, 0, job.StatusRunning)
	assigned := createJob(t, st, u, p, job.StatusQueued)
	placeOn(t, st, assigned.UUID, 1, job.StatusAssigned)
	for _, id := range []string{queued.UUID, running.UUID, assigned.UUID} {
		rec, err := st.GetJob(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got, err := st.JobPlace(ctx, id, "")
		if err != nil {
			t.Fatal(err)
		}
		cluster := 0
		if rec.Job.State.Resources != nil {
			cluster = rec.Job.State.Resources.ClusterID
		}
		queuedAt, wasQueued := rec.Job.State.EventTimes[job.StatusQueued]
		if got.Status != rec.Job.State.Status || got.Attempt != rec.Attempt || got.Slave != rec.Job.State.Scheduling.AssignedSlaveName ||
			got.ClusterID != cluster || got.QueuedAt.Valid != wasQueued || !got.QueuedAt.Time.Equal(queuedAt) || got.SlaveDisabled {
			t.Errorf("JobPlace(%s) = %+v; GetJob: %s attempt %d on %q, cluster %d, queued %v", id, got, rec.Job.State.Status, rec.Attempt,
				rec.Job.State.Scheduling.AssignedSlaveName, cluster, queuedAt)
		}
	}
	if got, _ := st.JobPlace(ctx, running.UUID, ""); got.Slave != "node1" || got.Status != job.StatusRunning || got.Attempt != attempt {
		t.Errorf("the running job: %+v", got)
	}
	if got, _ := st.JobPlace(ctx, queued.UUID, ""); got.Slave != "" {
		t.Errorf("a queued job is on slave %q", got.Slave)
	}
	// Disabled just after a pass assigned it the job (SetSlaveDisabled would queue it again).
	if _, err := st.DB().ExecContext(ctx, `UPDATE slaves SET disabled = TRUE WHERE name = 'node1'`); err != nil {
		t.Fatal(err)
	}
	if got, err := st.JobPlace(ctx, assigned.UUID, ""); err != nil || !got.SlaveDisabled || got.Status != job.StatusAssigned {
		t.Errorf("on a disabled slave: %+v %v", got, err)
	}
	if _, err := st.JobPlace(ctx, "00000000-0000-4000-8000-000000000000", ""); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an unknown job: %v, want ErrNotFound", err)
	}
}

// slaveCerts records certificates of slave node1: c-valid, c-revoked (revoked) and c-expired
// (its time passed).
func slaveCerts(t *testing.T, st *store.Store) {
	t.Helper()
	ctx := context.Background()
	later := time.Now().Add(time.Hour)
	for serial, notAfter := range map[string]time.Time{"c-valid": later, "c-revoked": later, "c-expired": time.Now().Add(-time.Minute)} {
		if err := st.RecordCertificate(ctx, serial, store.CertSlave, "node1", notAfter, ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.RevokeCertificate(ctx, "c-revoked"); err != nil {
		t.Fatal(err)
	}
}

// TestCallsReadTheirCertificate: JobPlace and SlaveWork given the caller's certificate refuse
// one recorded as revoked or expired (a *CertificateRefusedError, also for a job that does not
// exist), and answer as without it for a valid one and for one the master has no record of.
func TestCallsReadTheirCertificate(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	node1(t, st)
	running := createJob(t, st, u, p, job.StatusQueued)
	placeOn(t, st, running.UUID, 0, job.StatusRunning)
	slaveCerts(t, st)
	unknown := "00000000-0000-4000-8000-000000000000"
	for _, serial := range []string{"", "c-valid", "c-unrecorded"} {
		if got, err := st.JobPlace(ctx, running.UUID, serial); err != nil || got.Slave != "node1" || got.Status != job.StatusRunning {
			t.Errorf("JobPlace with certificate %q: %+v %v", serial, got, err)
		}
		if _, err := st.JobPlace(ctx, unknown, serial); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("JobPlace of an unknown job with certificate %q: %v, want ErrNotFound", serial, err)
		}
		if _, jobs, err := st.SlaveWork(ctx, "node1", time.Minute, serial); err != nil || len(jobs) != 1 {
			t.Errorf("SlaveWork with certificate %q: %v %v", serial, jobs, err)
		}
	}
	for serial, state := range map[string]string{"c-revoked": "revoked", "c-expired": "expired"} {
		refused := func(what string, err error) {
			t.Helper()
			var re *store.CertificateRefusedError
			if !errors.As(err, &re) || re.Serial != serial || re.State != state {
				t.Errorf("%s with certificate %s: %v, want it %s", what, serial, err, state)
			}
		}
		_, err := st.JobPlace(ctx, running.UUID, serial)
		refused("JobPlace", err)
		_, err = st.JobPlace(ctx, unknown, serial)
		refused("JobPlace of an unknown job", err)
		_, _, err = st.SlaveWork(ctx, "node1", time.Minute, serial)
		refused("SlaveWork", err)
	}
}

// TestLargestSlave: the largest slave is taken over the registered slaves only, each resource
// on its own, GPUs from the inventory or the GPU capacity, whichever is larger, CPUs and memory
// from the last registration; a field of another type counts for nothing, and no slave at all is
// zero slaves.
func TestLargestSlave(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	if got, err := st.LargestSlave(ctx); err != nil || got != (store.Largest{}) {
		t.Fatalf("without slaves: %+v %v", got, err)
	}
	want := registerSlavesOfAllSizes(t, st)
	if got, err := st.LargestSlave(ctx); err != nil || got != want {
		t.Errorf("largest slave: %+v %v, want %+v", got, err, want)
	}
}

// TestMigrationKeepsTheLargestSlave: migration 0027 gives the slaves registered before it the
// capacities their registrations would have written.
func TestMigrationKeepsTheLargestSlave(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	want := registerSlavesOfAllSizes(t, st)
	if _, err := st.DB().ExecContext(ctx, `DROP TABLE slave_capacities; DELETE FROM schema_migrations WHERE version = 27`); err != nil {
		t.Fatal(err)
	}
	if applied, err := st.Migrate(ctx); err != nil || len(applied) != 1 || applied[0] != 27 {
		t.Fatalf("migrate again: applied %v, %v; want 27", applied, err)
	}
	if got, err := st.LargestSlave(ctx); err != nil || got != want {
		t.Errorf("largest slave after the migration: %+v %v, want %+v", got, err, want)
	}
}

// registerSlavesOfAllSizes registers slaves whose largest resources come from different slaves
// and from their history, with odd inventories and one that only joined, and returns Largest.
func registerSlavesOfAllSizes(t *testing.T, st *store.Store) store.Largest {
	t.Helper()
	ctx := context.Background()
	if _, err := st.CreateCluster(ctx, store.Cluster{ID: 1, Name: "c1"}); err != nil {
		t.Fatal(err)
	}
	gpus := func(n int) string { return "[" + strings.TrimSuffix(strings.Repeat(`{"index": 0},`, n), ",") + "]" }
	register := func(name, inventory string) {
		t.Helper()
		if _, err := st.RegisterSlave(ctx, store.SlaveRegistration{Name: name, InstanceID: "i-" + name, ClusterID: 1, Inventory: []byte(inventory)}); err != nil {
			t.Fatal(err)
		}
	}
	// "wide" registered with six GPUs, then again with two (its capacity stays six) and with
	// fewer CPUs than before: the last registration's CPUs and memory count.
	register("wide", `{"cpus": 99, "memoryMiB": 131072, "gpus": `+gpus(6)+`}`)
	register("wide", `{"cpus": 64, "memoryMiB": 131072, "gpus": `+gpus(2)+`}`)
	register("deep", `{"cpus": 16, "memoryMiB": 524800, "gpus": `+gpus(4)+`}`)
	register("odd", `{"cpus": "many", "memoryMiB": null, "gpus": {"0": 1}}`)
	register("empty", `{}`)
	// One that joined and never registered counts for nothing.
	if err := st.JoinSlave(ctx, "joined", 1); err != nil {
		t.Fatal(err)
	}
	return store.Largest{Slaves: 4, GPUs: 6, CPUs: 64, MemoryMiB: 524800}
}

// TestHandOver: the jobs a long poll hands out are read together as they are one by one, by
// uuid, with the log an earlier attempt left (none for a first attempt); an unknown uuid is
// left out; none asked for, none read. (What the hand-over does to the leases:
// TestAssignedLeaseRunsFromHandOver.)
func TestHandOver(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	node1(t, st)
	a := createJob(t, st, u, p, job.StatusQueued)
	b := createJob(t, st, u, p, job.StatusQueued)
	placeOn(t, st, b.UUID, 0, job.StatusAssigned)
	again := createJob(t, st, u, p, job.StatusQueued)
	first := placeOn(t, st, again.UUID, 1, job.StatusRunning)
	for seq, chunk := range []string{"hello ", "world\n"} {
		if err := st.AppendJobLog(ctx, again.UUID, seq, []byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := st.ChangeJob(ctx, again.UUID, store.Change{From: []job.Status{job.StatusRunning}, To: job.StatusQueued,
		Attempt: store.Attempt(first), Released: true}); err != nil {
		t.Fatal(err)
	}
	placeOn(t, st, again.UUID, 1, job.StatusAssigned)
	createJob(t, st, u, p, job.StatusQueued) // not asked for
	unknown := "00000000-0000-4000-8000-000000000000"
	got, err := st.HandOver(ctx, "node1", []string{b.UUID, unknown, a.UUID, again.UUID})
	if err != nil || len(got) != 3 {
		t.Fatalf("HandOver: %d jobs, %v; want 3", len(got), err)
	}
	for _, id := range []string{a.UUID, b.UUID, again.UUID} {
		one, err := st.GetJob(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if g := got[id]; g == nil || !reflect.DeepEqual(g.JobRecord, one) {
			t.Errorf("job %s read with others: %+v; alone: %+v", id, g, one)
		}
	}
	if g := got[b.UUID]; g.LogNextSeq != 0 || g.LogSize != 0 {
		t.Errorf("a first attempt's log: next %d, size %d; want none", g.LogNextSeq, g.LogSize)
	}
	if g := got[again.UUID]; g.Attempt != first+1 || g.LogNextSeq != 2 || g.LogSize != 12 {
		t.Errorf("attempt %d placed again: log next %d, size %d; want 2 chunks of 12 bytes", g.Attempt, g.LogNextSeq, g.LogSize)
	}
	if none, err := st.HandOver(ctx, "node1", nil); err != nil || len(none) != 0 {
		t.Errorf("no uuids: %v %v", none, err)
	}
}

// TestHeartbeatsHaveTheirOwnConnections: a heartbeat does not wait for the pool the API's
// requests share: with every connection of it taken, heartbeats are still recorded.
func TestHeartbeatsHaveTheirOwnConnections(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	node1(t, st)
	for st.DB().Stats().InUse < st.DB().Stats().MaxOpenConnections {
		tx, err := st.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
	}
	// The shared pool is taken: a read through it cannot get a connection.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, _, err := st.SlaveWork(short, "node1", time.Minute, ""); err == nil {
		t.Fatal("a read got a connection of a pool whose every connection is taken")
	}
	long, cancel2 := context.WithTimeout(ctx, 30*time.Second)
	defer cancel2()
	if v, err := st.Heartbeat(long, store.Beat{Slave: "node1", InstanceID: "i1", Usage: []byte(`[]`), SampleSecs: 5}); err != nil || v.CameOnline {
		t.Fatalf("a heartbeat with the shared pool taken: %+v %v", v, err)
	}
}

// node1 registers slave node1 (instance i1) in a new cluster 1.
func node1(t *testing.T, st *store.Store) {
	t.Helper()
	ctx := context.Background()
	if _, err := st.CreateCluster(ctx, store.Cluster{ID: 1, Name: "c1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RegisterSlave(ctx, store.SlaveRegistration{Name: "node1", InstanceID: "i1", ClusterID: 1, Inventory: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
}

// TestTextsRoundTrip: Postgres reads a texts argument (the heartbeats' and the state
// changes' text[] arguments) back as the strings it was made of, in order.
func TestTextsRoundTrip(t *testing.T) {
	st := newStore(t)
	want := []string{"", "a", `{"gpus": [{"index": 0}], "q": "a \"b\" \\ c"}`, `\`, `"`, ",", "{}", "NULL", " x ", "üñí\tcode\n"}
	// Postgres writes the array back in its own text, which pq's own reader parses.
	var got []string
	if err := st.DB().QueryRowContext(context.Background(), `SELECT $1::text[]`, store.TextsArg(want)).Scan(pq.Array(&got)); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("read back %q, want %q", got, want)
	}
	var null bool
	if err := st.DB().QueryRowContext(context.Background(), `SELECT $1::text[] IS NULL`, store.TextsArg(nil)).Scan(&null); err != nil || !null {
		t.Errorf("nil: NULL %v, %v; want NULL", null, err)
	}
}
