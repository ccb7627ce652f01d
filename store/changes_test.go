package store_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
)

// TestSlavesChangedSince: the scheduler reads only the slaves whose scheduling columns changed
// since its mark: a heartbeat of an online slave (usage, time) is not a change; a drain, a
// registration with another inventory, a slave coming back online are, also when the change's
// transaction began before the mark.
func TestSlavesChangedSince(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	if _, err := st.CreateCluster(ctx, store.Cluster{ID: 1, Name: "c1"}); err != nil {
		t.Fatal(err)
	}
	register := func(name, inv string) {
		t.Helper()
		if _, err := st.RegisterSlave(ctx, store.SlaveRegistration{Name: name, InstanceID: "i-" + name, ClusterID: 1, Inventory: []byte(inv)}); err != nil {
			t.Fatal(err)
		}
	}
	register("node1", `{"cpus": 8}`)
	register("node2", `{"cpus": 16}`)
	byName := func(ss []store.SchedSlave) map[string]store.SchedSlave {
		out := map[string]store.SchedSlave{}
		for _, s := range ss {
			out[s.Name] = s
		}
		return out
	}
	read := func(since store.ChangeMark) map[string]store.SchedSlave {
		t.Helper()
		ss, err := st.SlavesChangedSince(ctx, since)
		if err != nil {
			t.Fatal(err)
		}
		return byName(ss)
	}
	mark := func() store.ChangeMark {
		t.Helper()
		m, err := st.TakeChangeMark(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	heartbeat := func(name string) {
		t.Helper()
		if _, err := st.Heartbeat(ctx, store.Beat{Slave: name, InstanceID: "i-" + name, Usage: []byte(`{"gpus": []}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// stamp is the slave's stamp: that a heartbeat is no change is seen on the stamp itself,
	// and in the feed.
	stamp := func(name string) string {
		t.Helper()
		var x string
		if err := st.DB().QueryRowContext(ctx, `SELECT sched_xid::text FROM slaves WHERE name = $1`, name).Scan(&x); err != nil {
			t.Fatal(err)
		}
		return x
	}
	all, err := st.SchedulerSlaves(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if first := byName(all); len(first) != 2 || string(first["node1"].Inventory) != `{"cpus": 8}` || !first["node1"].Online {
		t.Fatalf("full read: %+v", first)
	}
	m1 := mark()
	before := stamp("node1")
	heartbeat("node1")
	if after := stamp("node1"); after != before {
		t.Errorf("a heartbeat of an online slave stamped it: %s, was %s", after, before)
	}
	if err := st.SetSlaveAccepting(ctx, "node2", false); err != nil {
		t.Fatal(err)
	}
	second := read(m1)
	if _, ok := second["node1"]; ok {
		t.Errorf("node1 read after a heartbeat alone: %+v", second["node1"])
	}
	if s, ok := second["node2"]; !ok || s.AcceptingJobs || string(s.Inventory) != `{"cpus": 16}` {
		t.Errorf("node2 after it stopped accepting: %+v (want it read, not accepting, with its inventory)", second)
	}
	register("node1", `{"cpus": 4}`)
	if third := read(m1); string(third["node1"].Inventory) != `{"cpus": 4}` {
		t.Errorf("after node1 registered with another inventory: %+v", third["node1"])
	}

	// Marked offline, then back online by a heartbeat: both are changes.
	m2 := mark()
	if _, err := st.DB().ExecContext(ctx, `UPDATE slaves SET online = FALSE, offline_since = now() WHERE name = 'node2'`); err != nil {
		t.Fatal(err)
	}
	if s, ok := read(m2)["node2"]; !ok || s.Online {
		t.Errorf("node2 marked offline: %+v, %v", s, ok)
	}
	m3 := mark()
	heartbeat("node2")
	if s, ok := read(m3)["node2"]; !ok || !s.Online {
		t.Errorf("node2 back online by a heartbeat: %+v, %v", s, ok)
	}
	before = stamp("node2")
	heartbeat("node2")
	if after := stamp("node2"); after != before {
		t.Errorf("a heartbeat of a slave online again stamped it: %s, was %s", after, before)
	}

	// A registration whose transaction began before a mark and committed after it is read
	// from that mark.
	tx, err := st.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `UPDATE slaves SET inventory = '{"cpus": 32}' WHERE name = 'node2'`); err != nil {
		t.Fatal(err)
	}
	m5 := mark()
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if fifth := read(m5); string(fifth["node2"].Inventory) != `{"cpus": 32}` {
		t.Errorf("node2's new inventory, committed after the mark by an older transaction, not read: %+v", fifth["node2"])
	}
}

// TestHeartbeatCommitsWithoutWaitingForTheDisk: a heartbeat of the slave's current instance
// commits with synchronous_commit off (its writes are soft state); a heartbeat of another
// instance, which writes nothing, and the session's other transactions keep the default.
func TestHeartbeatCommitsWithoutWaitingForTheDisk(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	node1(t, st)
	mode, err := st.HeartbeatCommitMode(ctx, store.Beat{Slave: "node1", InstanceID: "i1", Usage: []byte(`{}`)})
	if err != nil || mode != "off" {
		t.Fatalf("heartbeat's commit: synchronous_commit %q (%v), want off", mode, err)
	}
	if mode, err := st.HeartbeatCommitMode(ctx, store.Beat{Slave: "node1", InstanceID: "old", Usage: []byte(`{}`)}); err != nil || mode != "on" {
		t.Errorf("a stale instance's heartbeat (nothing written): synchronous_commit %q (%v), want on", mode, err)
	}
	var after string
	if err := st.DB().QueryRowContext(ctx, `SHOW synchronous_commit`).Scan(&after); err != nil || after != "on" {
		t.Errorf("another transaction: synchronous_commit %q (%v), want on", after, err)
	}
	if _, err := st.Heartbeat(ctx, store.Beat{Slave: "node1", InstanceID: "i1", Usage: []byte(`{"x": 1}`)}); err != nil {
		t.Fatalf("the heartbeat itself: %v", err)
	}
}

// TestHeartbeatPlanKept: the heartbeats statement, whose parameters are arrays, is planned once
// per connection and the plan kept, not planned again at every heartbeat (which Postgres does
// for such a statement by default, at three times the cost of running it).
func TestHeartbeatPlanKept(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	node1(t, st)
	for range 20 {
		if _, err := st.Heartbeat(ctx, store.Beat{Slave: "node1", InstanceID: "i1", Usage: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	generic, custom, err := st.BeatPlans(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if generic < 20 || custom != 0 {
		t.Errorf("20 heartbeats: %d executions of a kept plan and %d planned for themselves, want 20 and none", generic, custom)
	}
}

// ClockAndMark: the mark misses no change committed after it, also one whose transaction began
// before it; the clock is the database's, read between two others.
func TestClockAndMark(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	if _, err := st.CreateCluster(ctx, store.Cluster{ID: 1, Name: "c1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RegisterSlave(ctx, store.SlaveRegistration{Name: "node1", InstanceID: "i1", ClusterID: 1, Inventory: []byte(`{"cpus": 8}`)}); err != nil {
		t.Fatal(err)
	}
	tx, err := st.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `UPDATE slaves SET inventory = '{"cpus": 16}' WHERE name = 'node1'`); err != nil {
		t.Fatal(err)
	}
	// A later transaction that ends before the mark: the running one is older than it.
	if _, err := st.RegisterSlave(ctx, store.SlaveRegistration{Name: "node0", InstanceID: "i0", ClusterID: 1, Inventory: []byte(`{"cpus": 8}`)}); err != nil {
		t.Fatal(err)
	}
	before, err := st.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now, mark, err := st.ClockAndMark(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after, err := st.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if now.Before(before) || now.After(after) {
		t.Errorf("clock %v, not between %v and %v", now, before, after)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RegisterSlave(ctx, store.SlaveRegistration{Name: "node2", InstanceID: "i2", ClusterID: 1, Inventory: []byte(`{"cpus": 8}`)}); err != nil {
		t.Fatal(err)
	}
	changed, err := st.SlavesChangedSince(ctx, mark)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range changed {
		got[s.Name] = string(s.Inventory)
	}
	if got["node1"] != `{"cpus": 16}` || got["node2"] == "" {
		t.Errorf("changed since the mark: %v, want node1 (its transaction began before the mark) with 16 CPUs and node2", got)
	}
}

// ClustersWithOwners reads in one statement what ListClusters and ClusterOwners read.
func TestClustersWithOwners(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	for _, c := range []store.Cluster{{ID: 1, Name: "public"}, {ID: 2, Name: "owned", Private: true}, {ID: 3, Name: "ownerless", Private: true}} {
		if _, err := st.CreateCluster(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"b", "a"} {
		p, err := st.CreateProject(ctx, "urn:publicid:IDN+test+project+"+name, name, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.AddClusterOwner(ctx, 2, p.ID); err != nil {
			t.Fatal(err)
		}
	}
	clusters, owners, err := st.ClustersWithOwners(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantClusters, err := st.ListClusters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantOwners, err := st.ClusterOwners(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(clusters, wantClusters) || !reflect.DeepEqual(owners, wantOwners) || len(owners[2]) != 2 {
		t.Errorf("ClustersWithOwners: %+v, %v; want %+v, %v", clusters, owners, wantClusters, wantOwners)
	}
}

// A pass's feeds read with its basics (ReadPass) are what the reads they replace return: the
// slaves changed since one mark, the jobs changed since another or named, and what ended jobs
// still hold; a feed not asked for is not read, and a named job is a value, never SQL.
func TestReadPassFeeds(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	node1(t, st)
	if _, err := st.RegisterSlave(ctx, store.SlaveRegistration{Name: "node2", InstanceID: "i2", ClusterID: 1, Inventory: []byte(`{"cpus": 4}`)}); err != nil {
		t.Fatal(err)
	}
	u, p := fixture(t, st, "alice", "vision")
	old, cancelled := createJob(t, st, u, p, job.StatusQueued), createJob(t, st, u, p, job.StatusQueued)
	placeOn(t, st, cancelled.UUID, 0, job.StatusRunning)
	running := createJob(t, st, u, p, job.StatusQueued)
	placeOn(t, st, running.UUID, 1, job.StatusRunning)
	slavesFrom, err := st.TakeChangeMark(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetSlaveAccepting(ctx, "node2", false); err != nil {
		t.Fatal(err)
	}
	jobsFrom, err := st.TakeChangeMark(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.TransitionJob(ctx, cancelled.UUID, job.SourcesOf(job.StatusCancelled, job.ActorOwner), job.StatusCancelled, store.Event{Message: "cancelled"}); err != nil {
		t.Fatal(err)
	}
	fresh := createJob(t, st, u, p, job.StatusQueued)
	also := []string{old.UUID}

	r, err := st.ReadPass(ctx, time.Hour, store.PassFeeds{Slaves: true, SlavesFrom: slavesFrom, Jobs: true, JobsFrom: jobsFrom, Also: also})
	if err != nil {
		t.Fatal(err)
	}
	slaves, err := st.SlavesChangedSince(ctx, slavesFrom)
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := st.JobsChangedSince(ctx, jobsFrom, also)
	if err != nil {
		t.Fatal(err)
	}
	releasing, err := st.Releasing(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byName := func(a, b store.SchedSlave) int { return strings.Compare(a.Name, b.Name) }
	byID := func(a, b store.SchedJob) int { return strings.Compare(a.UUID, b.UUID) }
	slices.SortFunc(r.Slaves, byName)
	slices.SortFunc(slaves, byName)
	slices.SortFunc(r.Jobs, byID)
	slices.SortFunc(jobs, byID)
	if !reflect.DeepEqual(r.Slaves, slaves) || !slices.ContainsFunc(r.Slaves, func(s store.SchedSlave) bool { return s.Name == "node2" && !s.AcceptingJobs }) {
		t.Errorf("slaves %+v, want %+v (node2 drained after the mark)", r.Slaves, slaves)
	}
	has := func(js []store.SchedJob, id string) bool {
		return slices.ContainsFunc(js, func(j store.SchedJob) bool { return j.UUID == id })
	}
	ids := func(js []store.SchedJob) (out []string) {
		for _, j := range js {
			out = append(out, j.UUID+" "+string(j.Status))
		}
		return out
	}
	if !reflect.DeepEqual(r.Jobs, jobs) || !has(r.Jobs, fresh.UUID) || !has(r.Jobs, old.UUID) || !has(r.Jobs, cancelled.UUID) {
		t.Errorf("jobs %v, want %v (the new one %s, the named one %s, the cancelled one %s)", ids(r.Jobs), ids(jobs), fresh.UUID, old.UUID, cancelled.UUID)
	}
	if !reflect.DeepEqual(r.Releasing, releasing) || len(releasing) != 1 || releasing[0].UUID != cancelled.UUID || !releasing[0].Releasing {
		t.Errorf("releasing %+v, want %+v (the cancelled job's GPU)", r.Releasing, releasing)
	}
	if r.Mark.Before(jobsFrom) {
		t.Errorf("mark %s before one taken earlier (%s)", r.Mark, jobsFrom)
	}

	only, err := st.ReadPass(ctx, time.Hour, store.PassFeeds{Slaves: true, SlavesFrom: slavesFrom})
	if err != nil || len(only.Slaves) == 0 || only.Jobs != nil || only.Releasing != nil {
		t.Errorf("the slaves' feed alone: %+v %+v %+v %v", only.Slaves, only.Jobs, only.Releasing, err)
	}
	// The server's start: the same at every read while it runs, and before its clock.
	if r.Started.IsZero() || !only.Started.Equal(r.Started) || !r.Started.Before(r.Now) {
		t.Errorf("the database started at %v, then at %v (now %v)", r.Started, only.Started, r.Now)
	}
	// Without a name: the feed alone.
	none, err := st.ReadPass(ctx, time.Hour, store.PassFeeds{Jobs: true, JobsFrom: jobsFrom})
	if err != nil {
		t.Fatal(err)
	}
	feed, err := st.JobsChangedSince(ctx, jobsFrom, nil)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(none.Jobs, byID)
	slices.SortFunc(feed, byID)
	if !reflect.DeepEqual(none.Jobs, feed) || !has(none.Jobs, fresh.UUID) {
		t.Errorf("no job named: %v, want %v", ids(none.Jobs), ids(feed))
	}
	before, err := st.SchedulerJobs(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{`x'); DELETE FROM jobs; --`, `a"b\c`} {
		if _, err := st.ReadPass(ctx, time.Hour, store.PassFeeds{Jobs: true, JobsFrom: jobsFrom, Also: []string{old.UUID, bad}}); err == nil {
			t.Errorf("a job named %q read without an error", bad)
		}
	}
	if after, err := st.SchedulerJobs(ctx, 1); err != nil || len(after) != len(before) || len(after) != 3 {
		t.Errorf("jobs after the bad names: %v (%v), before them %v", ids(after), err, ids(before))
	}
}

// The full read scans its rows in place into a slice it grows itself (selectMany): what it
// reads must be what sqlx's Select reads of the same jobs (the feed's statement, read from the
// first mark), whatever the hint, with more rows than the slice is first made for.
func TestSchedulerJobsReadsWhatTheFeedReads(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	node1(t, st)
	u, p := fixture(t, st, "alice", "vision")
	var want []string
	for i := range 150 {
		j := createJob(t, st, u, p, job.StatusQueued)
		switch i % 3 {
		case 1:
			placeOn(t, st, j.UUID, i%8, job.StatusRunning)
		case 2:
			if _, err := st.TransitionJob(ctx, j.UUID, job.SourcesOf(job.StatusCancelled, job.ActorOwner), job.StatusCancelled, store.Event{Message: "cancelled"}); err != nil {
				t.Fatal(err)
			}
			continue // neither queued nor holding: not read
		}
		want = append(want, j.UUID)
	}
	feed, err := st.JobsChangedSince(ctx, store.ChangeMark{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	feed = slices.DeleteFunc(feed, func(j store.SchedJob) bool { return !j.Queued() && !j.Holds })
	byID := func(a, b store.SchedJob) int { return strings.Compare(a.UUID, b.UUID) }
	slices.SortFunc(feed, byID)
	slices.Sort(want)
	var ids []string
	for _, j := range feed {
		ids = append(ids, j.UUID)
	}
	if !slices.Equal(ids, want) {
		t.Fatalf("the feed read %d jobs, want the %d created queued or running", len(feed), len(want))
	}
	for _, hint := range []int{0, 1, 99, 1000} {
		got, err := st.SchedulerJobs(ctx, hint)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(got, byID)
		if !reflect.DeepEqual(got, feed) {
			t.Errorf("hint %d: the full read differs from the feed's rows:\n got %+v\nwant %+v", hint, got[:min(2, len(got))], feed[:min(2, len(feed))])
		}
	}
}

// A change mark is exact: a read from it gives the rows of the transactions that had not
// committed when it was taken (one running then, committed after it; one begun after it), and
// not those of a transaction committed before it, even while an older one still runs (a mark
// that was the oldest transaction running gave every change since that one began again).
func TestChangeMarkIsExact(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	if _, err := st.CreateCluster(ctx, store.Cluster{ID: 1, Name: "c1"}); err != nil {
		t.Fatal(err)
	}
	register := func(name string) {
		t.Helper()
		if _, err := st.RegisterSlave(ctx, store.SlaveRegistration{Name: name, InstanceID: "i-" + name, ClusterID: 1, Inventory: []byte(`{"cpus": 8}`)}); err != nil {
			t.Fatal(err)
		}
	}
	register("old")
	tx, err := st.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `UPDATE slaves SET inventory = '{"cpus": 16}' WHERE name = 'old'`); err != nil {
		t.Fatal(err)
	}
	register("seen") // begun after the running one, committed before the mark
	mark, err := st.TakeChangeMark(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := func(from store.ChangeMark) []string {
		t.Helper()
		ss, err := st.SlavesChangedSince(ctx, from)
		if err != nil {
			t.Fatal(err)
		}
		r, err := st.ReadPass(ctx, time.Hour, store.PassFeeds{Slaves: true, SlavesFrom: from})
		if err != nil {
			t.Fatal(err)
		}
		var out, inPass []string
		for _, s := range ss {
			out = append(out, s.Name)
		}
		for _, s := range r.Slaves {
			inPass = append(inPass, s.Name)
		}
		slices.Sort(out)
		slices.Sort(inPass)
		if !slices.Equal(out, inPass) {
			t.Errorf("from %s: SlavesChangedSince read %v, ReadPass %v", from, out, inPass)
		}
		return out
	}
	if got := names(mark); len(got) != 0 {
		t.Errorf("read from a mark taken after their commits: %v, want none", got)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	register("new")
	if got := names(mark); !slices.Equal(got, []string{"new", "old"}) {
		t.Errorf("read from the mark after the running transaction committed and another began: %v, want [new old]", got)
	}
}
