package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
	"github.com/opengpulab/gpulab/store/storetest"
)

func newStore(t *testing.T) *store.Store { return storetest.New(t) }

const helloWorld = `{"name": "HelloWorld", "request": {"resources": {"clusterId": 1, "gpus": 1, "cpus": 2, "cpuMemoryGb": 1},
 "docker": {"image": "debian:stable", "command": "echo 'Hello World!'"}, "scheduling": {"interactive": true}}}`

// fixture makes a user in a project and returns their ids.
func fixture(t *testing.T, st *store.Store, user, project string) (store.User, store.Project) {
	t.Helper()
	return storetest.Member(t, st, user, project)
}

func createJob(t *testing.T, st *store.Store, u store.User, p store.Project, status job.Status) *job.Job {
	t.Helper()
	return createJobWithID(t, st, u, p, uuid.NewString(), status)
}

func createJobWithID(t *testing.T, st *store.Store, u store.User, p store.Project, id string, status ...job.Status) *job.Job {
	t.Helper()
	j, err := job.Parse([]byte(helloWorld), job.DefaultOptions())
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	j.UUID = id
	j.Owner = job.Owner{UserURN: u.URN, UserEmail: u.Email, ProjectURN: p.URN}
	j.State.Status = job.StatusQueued
	if len(status) > 0 {
		j.State.Status = status[0]
	}
	if err := st.CreateJob(context.Background(), j, u.ID, p.ID, "submitted"); err != nil {
		t.Fatalf("create job: %v", err)
	}
	return j
}

func TestMigrateIsIdempotentAndChecked(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	applied, err := st.Migrate(ctx)
	if err != nil || len(applied) != 0 {
		t.Fatalf("second migrate applied %v, err %v; want nothing", applied, err)
	}
	if err := st.CheckSchema(ctx); err != nil {
		t.Fatalf("check fresh schema: %v", err)
	}
	if _, err := st.DB().ExecContext(ctx, `DELETE FROM schema_migrations WHERE version = $1`, store.LatestVersion()); err != nil {
		t.Fatal(err)
	}
	if err := st.CheckSchema(ctx); !errors.Is(err, store.ErrSchemaOutdated) {
		t.Fatalf("older schema: got %v, want ErrSchemaOutdated", err)
	}
	if _, err := st.DB().ExecContext(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, 'x'), ($2, 'future')`,
		store.LatestVersion(), store.LatestVersion()+1); err != nil {
		t.Fatal(err)
	}
	if err := st.CheckSchema(ctx); !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("newer schema: got %v, want ErrSchemaTooNew", err)
	}
	if _, err := st.Migrate(ctx); !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("migrate newer schema: got %v, want ErrSchemaTooNew", err)
	}
}

func TestEmptyDatabaseIsOutdated(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.CheckSchema(ctx); !errors.Is(err, store.ErrSchemaOutdated) {
		t.Fatalf("empty database: got %v, want ErrSchemaOutdated", err)
	}
}

func TestUsersAndProjects(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	again, err := st.UpsertUser(ctx, u.URN, "alice", "", true)
	if err != nil || again.ID != u.ID || again.Email != "alice@example.org" || !again.IsAdmin {
		t.Fatalf("upsert existing: %+v %v (want same id, e-mail kept, admin granted)", again, err)
	}
	if _, err := st.CreateProject(ctx, "urn:other", "vision", "", 0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("duplicate project name: got %v, want ErrConflict", err)
	}
	if p.GID < 20000 {
		t.Fatalf("project gid %d, want one from the 20000 range", p.GID)
	}
	if _, err := st.GetProjectByName(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing project: got %v, want ErrNotFound", err)
	}
	ok, err := st.IsMember(ctx, p.ID, u.ID)
	if err != nil || !ok {
		t.Fatalf("IsMember = %v, %v", ok, err)
	}
	if err := st.AddMember(ctx, p.ID, u.ID); err != nil {
		t.Fatalf("adding a member twice: %v", err)
	}
	if err := st.RemoveMember(ctx, p.ID, u.ID); err != nil {
		t.Fatal(err)
	}
	if err := st.RemoveMember(ctx, p.ID, u.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("removing a non-member: got %v, want ErrNotFound", err)
	}
}

func TestJobRoundTripAndPrefix(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	j := createJob(t, st, u, p, job.StatusQueued)
	rec, err := st.GetJob(ctx, j.UUID)
	if err != nil {
		t.Fatal(err)
	}
	got := rec.Job
	if got.Name != "HelloWorld" || got.State.Status != job.StatusQueued || got.Owner.ProjectURN != p.URN || got.Owner.UserURN != u.URN {
		t.Fatalf("stored job read back wrong: %+v", got)
	}
	if got.Request.Resources.CPUs != 2 || got.Request.Resources.ClusterID != 1 || !got.Request.Scheduling.Interactive {
		t.Fatalf("request not kept: %+v", got.Request)
	}
	if time.Duration(got.Request.Scheduling.MaxDuration) != 14*24*time.Hour {
		t.Fatalf("maxDuration default not stored: %v", got.Request.Scheduling.MaxDuration)
	}
	if _, ok := got.State.EventTimes[job.StatusQueued]; !ok {
		t.Fatalf("no QUEUED event time: %v", got.State.EventTimes)
	}
	byPrefix, err := st.FindJob(ctx, j.UUID[:8])
	if err != nil || byPrefix.Job.UUID != j.UUID {
		t.Fatalf("find by prefix: %v %v", byPrefix, err)
	}
	if _, err := st.FindJob(ctx, "ffffffff"); !errors.Is(err, store.ErrNotFound) && j.UUID[:8] != "ffffffff" {
		t.Fatalf("unknown prefix: got %v, want ErrNotFound", err)
	}
	// Two jobs that share a prefix make it ambiguous.
	createJobWithID(t, st, u, p, "abcdef00-0000-4000-8000-000000000001")
	createJobWithID(t, st, u, p, "abcdef11-0000-4000-8000-000000000002")
	if _, err := st.FindJob(ctx, "abcdef"); !errors.Is(err, store.ErrAmbiguous) {
		t.Fatalf("shared prefix: got %v, want ErrAmbiguous", err)
	}
	if rec, err := st.FindJob(ctx, "abcdef1"); err != nil || rec.Job.UUID[:8] != "abcdef11" {
		t.Fatalf("longer prefix: %v %v", rec, err)
	}
	// A prefix is a range of the primary key (no index on the UUIDs' text): one that runs past
	// a hyphen, and the ends of the range.
	createJobWithID(t, st, u, p, "abcdef11-ffff-4000-8000-000000000003")
	if rec, err := st.FindJob(ctx, "abcdef11-0"); err != nil || rec.Job.UUID != "abcdef11-0000-4000-8000-000000000002" {
		t.Fatalf("prefix past a hyphen: %v %v", rec, err)
	}
	if rec, err := st.FindJob(ctx, "ABCDEF11-FFFF"); err != nil || rec.Job.UUID != "abcdef11-ffff-4000-8000-000000000003" {
		t.Fatalf("upper-case prefix at the range's end: %v %v", rec, err)
	}
	if _, err := st.FindJob(ctx, "abcdef11"); !errors.Is(err, store.ErrAmbiguous) {
		t.Fatalf("prefix of two: got %v, want ErrAmbiguous", err)
	}
	for _, none := range []string{"abcdef1-", "abcdef110", "abcdef11-00001"} {
		if rec, err := st.FindJob(ctx, none); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("prefix %q no UUID has: %v %v, want ErrNotFound", none, rec, err)
		}
	}
}

func TestTransitionIsConditional(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	j := createJob(t, st, u, p, job.StatusQueued)
	old, err := st.TransitionJob(ctx, j.UUID, []job.Status{job.StatusQueued}, job.StatusOnHold, store.Event{Actor: "owner"})
	if err != nil || old != job.StatusQueued {
		t.Fatalf("QUEUED→ONHOLD: old %s, %v", old, err)
	}
	_, err = st.TransitionJob(ctx, j.UUID, []job.Status{job.StatusQueued}, job.StatusCancelled, store.Event{})
	var sc *store.StateConflict
	if !errors.As(err, &sc) || sc.Current != job.StatusOnHold || !errors.Is(err, store.ErrStateConflict) {
		t.Fatalf("transition from a state the job left: got %v, want StateConflict(ONHOLD)", err)
	}
	if _, err := st.TransitionJob(ctx, uuid.NewString(), []job.Status{job.StatusQueued}, job.StatusCancelled, store.Event{}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing job: got %v, want ErrNotFound", err)
	}
	evs, err := st.ListJobEvents(ctx, j.UUID)
	if err != nil || len(evs) != 2 || evs[1].FromStatus != "QUEUED" || evs[1].ToStatus != "ONHOLD" {
		t.Fatalf("events: %+v %v", evs, err)
	}
	rec, _ := st.GetJob(ctx, j.UUID)
	if _, ok := rec.Job.State.EventTimes[job.StatusOnHold]; !ok {
		t.Fatalf("no ONHOLD event time: %v", rec.Job.State.EventTimes)
	}
}

// Many actors race to move the same job out of QUEUED: exactly one may win.
func TestTransitionRaceHasOneWinner(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	for round := 0; round < 5; round++ {
		j := createJob(t, st, u, p, job.StatusQueued)
		targets := []job.Status{job.StatusCancelled, job.StatusOnHold, job.StatusAssigned, job.StatusFailed}
		var wg sync.WaitGroup
		wins := make(chan job.Status, 16)
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func(to job.Status) {
				defer wg.Done()
				_, err := st.TransitionJob(ctx, j.UUID, []job.Status{job.StatusQueued}, to, store.Event{Message: fmt.Sprint("racer ", to)})
				if err == nil {
					wins <- to
				} else if !errors.Is(err, store.ErrStateConflict) {
					t.Errorf("racer: %v", err)
				}
			}(targets[i%len(targets)])
		}
		wg.Wait()
		close(wins)
		var winners []job.Status
		for w := range wins {
			winners = append(winners, w)
		}
		rec, err := st.GetJob(ctx, j.UUID)
		if err != nil {
			t.Fatal(err)
		}
		if len(winners) != 1 || rec.Job.State.Status != winners[0] {
			t.Fatalf("round %d: winners %v, final state %s; want exactly one winner whose state stuck", round, winners, rec.Job.State.Status)
		}
	}
}

func TestListJobsFilters(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	alice, vision := fixture(t, st, "alice", "vision")
	bob, audio := fixture(t, st, "bob", "audio")
	a1 := createJob(t, st, alice, vision, job.StatusQueued)
	a2 := createJob(t, st, alice, vision, job.StatusOnHold)
	b1 := createJob(t, st, bob, audio, job.StatusQueued)
	if _, err := st.DB().ExecContext(ctx, `UPDATE jobs SET status = 'RUNNING', assigned_slave_name = 'gpu1', assigned_cluster_id = 3 WHERE uuid = $1`, b1.UUID); err != nil {
		t.Fatal(err)
	}
	booked := uuid.NewString()
	if _, err := st.DB().ExecContext(ctx, `UPDATE jobs SET reservation_ids = $2 WHERE uuid = $1`, a2.UUID, "{"+booked+"}"); err != nil {
		t.Fatal(err)
	}
	ids := func(recs []*store.JobRecord) map[string]bool {
		m := map[string]bool{}
		for _, r := range recs {
			m[r.Job.UUID] = true
		}
		return m
	}
	cases := []struct {
		name string
		f    store.JobFilter
		want []string
	}{
		{"all", store.JobFilter{}, []string{a1.UUID, a2.UUID, b1.UUID}},
		{"pending", store.JobFilter{Statuses: job.PendingStatuses}, []string{a1.UUID, a2.UUID}},
		{"running", store.JobFilter{Statuses: job.RunningStatuses}, []string{b1.UUID}},
		{"by user id", store.JobFilter{UserIDs: []int64{alice.ID}}, []string{a1.UUID, a2.UUID}},
		{"by user name", store.JobFilter{UserName: "bob"}, []string{b1.UUID}},
		{"by project urn", store.JobFilter{ProjectURN: vision.URN}, []string{a1.UUID, a2.UUID}},
		{"by project name", store.JobFilter{ProjectName: "audio"}, []string{b1.UUID}},
		{"by user urn", store.JobFilter{UserURN: alice.URN}, []string{a1.UUID, a2.UUID}},
		{"by user name and project", store.JobFilter{UserName: "alice", ProjectName: "vision", Limit: 10}, []string{a1.UUID, a2.UUID}},
		{"by a user name nobody has", store.JobFilter{UserName: "nobody"}, nil},
		{"by a project urn no project has", store.JobFilter{ProjectURN: "urn:publicid:IDN+test+project+none", Limit: 10}, nil},
		{"by user name, visible to bob", store.JobFilter{UserName: "alice", Visible: &store.Visibility{UserID: bob.ID, ProjectIDs: []int64{audio.ID}}}, nil},
		{"by cluster (requested)", store.JobFilter{ClusterID: 1}, []string{a1.UUID, a2.UUID, b1.UUID}},
		{"by cluster (assigned)", store.JobFilter{ClusterID: 3}, []string{b1.UUID}},
		{"by slave", store.JobFilter{AssignedSlaveName: "gpu1"}, []string{b1.UUID}},
		{"by reservation", store.JobFilter{ReservationID: booked}, []string{a2.UUID}},
		{"by reservation, a page", store.JobFilter{ReservationID: booked, Limit: 10}, []string{a2.UUID}},
		{"by a reservation no job names", store.JobFilter{ReservationID: uuid.NewString(), Limit: 10}, nil},
		{"visible to alice", store.JobFilter{Visible: &store.Visibility{UserID: alice.ID, ProjectIDs: []int64{vision.ID}}}, []string{a1.UUID, a2.UUID}},
		{"visible to alice + running", store.JobFilter{Visible: &store.Visibility{UserID: alice.ID, ProjectIDs: []int64{vision.ID}, OthersRunning: true}}, []string{a1.UUID, a2.UUID, b1.UUID}},
		{"visible to bob", store.JobFilter{Visible: &store.Visibility{UserID: bob.ID, ProjectIDs: []int64{audio.ID}}}, []string{b1.UUID}},
		{"mine plus others' running", store.JobFilter{UserIDs: []int64{alice.ID}, Statuses: job.PendingStatuses, AlsoOthersRunning: true}, []string{a1.UUID, a2.UUID, b1.UUID}},
		{"others' running on another cluster", store.JobFilter{UserIDs: []int64{alice.ID}, AlsoOthersRunning: true, ClusterID: 3}, []string{b1.UUID}},
		{"limit", store.JobFilter{Limit: 1, Sort: "created"}, []string{a1.UUID}},
		{"offset", store.JobFilter{Limit: 1, Offset: 1, Sort: "created"}, []string{a2.UUID}},
		{"created within a microsecond", store.JobFilter{CreatedWithin: time.Microsecond}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			recs, err := st.ListJobs(ctx, c.f)
			if err != nil {
				t.Fatal(err)
			}
			got := ids(recs)
			if len(got) != len(c.want) {
				t.Fatalf("got %d jobs %v, want %v", len(got), got, c.want)
			}
			for _, w := range c.want {
				if !got[w] {
					t.Fatalf("missing %s in %v", w, got)
				}
			}
		})
	}
	if _, err := st.ListJobs(ctx, store.JobFilter{Sort: "bogus"}); err == nil {
		t.Fatal("unknown sort key accepted")
	}
	recs, err := st.ListJobs(ctx, store.JobFilter{Sort: "-created"})
	if err != nil || len(recs) != 3 || recs[0].Job.UUID != b1.UUID {
		t.Fatalf("newest first: %v %v", recs, err)
	}
}

func TestJobLogIsOrderedAndWhole(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	j := createJob(t, st, u, p, job.StatusRunning)
	if data, size, err := st.ReadJobLog(ctx, j.UUID, 0); err != nil || size != 0 || len(data) != 0 {
		t.Fatalf("empty log: %q %d %v", data, size, err)
	}
	if err := st.AppendJobLog(ctx, j.UUID, 1, []byte("too early")); !errors.Is(err, store.ErrLogGap) {
		t.Fatalf("out-of-order chunk: %v", err)
	}
	if _, size, _ := st.ReadJobLog(ctx, j.UUID, 0); size != 0 {
		t.Fatalf("a chunk without its predecessor was stored (size %d)", size)
	}
	for i, chunk := range []string{"Hello ", "World", "!\n"} {
		if err := st.AppendJobLog(ctx, j.UUID, i, []byte(chunk)); err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
	}
	if err := st.AppendJobLog(ctx, j.UUID, 1, []byte("dup")); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("resent chunk: got %v, want ErrConflict", err)
	}
	data, size, err := st.ReadJobLog(ctx, j.UUID, 0)
	if err != nil || string(data) != "Hello World!\n" || size != 13 {
		t.Fatalf("log = %q (%d), %v", data, size, err)
	}
	data, _, _ = st.ReadJobLog(ctx, j.UUID, 8)
	if string(data) != "rld!\n" {
		t.Fatalf("log from 8 = %q", data)
	}
}

// TestJobLogReadIsOneSnapshot reads a log while chunks are appended: every read's size must be
// where its data ends. A read whose size counts a chunk its data lacks makes a follower (imec's
// `log -f` continues from the size it was given) skip that chunk for good.
func TestJobLogReadIsOneSnapshot(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	j := createJob(t, st, u, p, job.StatusRunning)
	const chunks = 400
	appended := make(chan error, 1)
	go func() {
		for i := 0; i < chunks; i++ {
			if err := st.AppendJobLog(ctx, j.UUID, i, []byte(fmt.Sprintf("line-%d\n", i))); err != nil {
				appended <- err
				return
			}
		}
		appended <- nil
	}()
	var from int64
	var got []byte
	for done := false; !done; {
		select {
		case err := <-appended:
			if err != nil {
				t.Fatal(err)
			}
			done = true
		default:
		}
		data, size, err := st.ReadJobLog(ctx, j.UUID, from)
		if err != nil {
			t.Fatal(err)
		}
		if from+int64(len(data)) != size {
			t.Fatalf("read from %d gave %d bytes but size %d: a follower would skip %d bytes", from, len(data), size, size-from-int64(len(data)))
		}
		got = append(got, data...)
		from = size
	}
	data, _, err := st.ReadJobLog(ctx, j.UUID, from)
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, data...)
	var want strings.Builder
	for i := 0; i < chunks; i++ {
		fmt.Fprintf(&want, "line-%d\n", i)
	}
	if string(got) != want.String() {
		t.Fatalf("followed log differs from the log written (%d bytes vs %d)", len(got), want.Len())
	}
}

func TestWithTxRollsBack(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	boom := errors.New("boom")
	err := st.WithTx(ctx, func(tx *store.Store) error {
		if _, err := tx.CreateProject(ctx, "urn:tx", "tx", "", 0); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("WithTx returned %v", err)
	}
	if _, err := st.GetProjectByName(ctx, "tx"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("rolled-back project exists: %v", err)
	}
}

// AssignJobs assigns, in one statement, the jobs still QUEUED, each with its placement and
// status event; a job cancelled meanwhile stays cancelled, and a cancel racing the batch has
// exactly one winner.
func TestAssignJobsIsConditional(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	a, b, gone := createJob(t, st, u, p, job.StatusQueued), createJob(t, st, u, p, job.StatusQueued), createJob(t, st, u, p, job.StatusCancelled)
	place := func(id string, gpu int) store.Assignment {
		return store.Assignment{JobUUID: id, Message: fmt.Sprintf("assigned to slave node1 (GPUs [%d])", gpu),
			Placement: store.Placement{SlaveName: "node1", SlaveInstanceID: "inst1", ClusterID: 1, TallyIncrement: 0.25,
				Resources: job.StateResources{SlaveName: "node1", GPUIDs: []int{gpu}, CPUIDs: []int{gpu}, CPUMemoryGb: 1}}}
	}
	done, err := st.AssignJobs(ctx, []store.Assignment{place(a.UUID, 0), place(gone.UUID, 1), place(b.UUID, 2)})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(done)
	want := []string{a.UUID, b.UUID}
	slices.Sort(want)
	if !slices.Equal(done, want) {
		t.Fatalf("assigned %v, want %v", done, want)
	}
	rec, err := st.GetJob(ctx, b.UUID)
	if err != nil {
		t.Fatal(err)
	}
	j := rec.Job
	if j.State.Status != job.StatusAssigned || j.State.Scheduling.AssignedSlaveName != "node1" || j.State.Resources == nil ||
		!slices.Equal(j.State.Resources.GPUIDs, []int{2}) || j.State.Scheduling.TallyIncrement != 0.25 || j.State.EventTimes[job.StatusAssigned].IsZero() {
		t.Fatalf("assigned job: %+v %+v", j.State, j.State.Resources)
	}
	evs, err := st.ListJobEvents(ctx, b.UUID)
	if err != nil || len(evs) != 2 || evs[1].ToStatus != "ASSIGNED" || evs[1].Message != "assigned to slave node1 (GPUs [2])" {
		t.Fatalf("events: %+v %v", evs, err)
	}
	if rec, _ := st.GetJob(ctx, gone.UUID); rec.Job.State.Status != job.StatusCancelled {
		t.Fatalf("a cancelled job was assigned: %s", rec.Job.State.Status)
	}
	if done, err := st.AssignJobs(ctx, nil); err != nil || done != nil {
		t.Fatalf("empty batch: %v %v", done, err)
	}

	// A cancel racing the batch: exactly one of them wins each job.
	for round := 0; round < 5; round++ {
		jobs := make([]*job.Job, 20)
		batch := make([]store.Assignment, len(jobs))
		for i := range jobs {
			jobs[i] = createJob(t, st, u, p, job.StatusQueued)
			batch[i] = place(jobs[i].UUID, i)
		}
		var wg sync.WaitGroup
		var assigned []string
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if assigned, err = st.AssignJobs(ctx, batch); err != nil {
				t.Error(err)
			}
		}()
		cancelled := map[string]bool{}
		for _, j := range jobs[:10] {
			if _, err := st.TransitionJob(ctx, j.UUID, []job.Status{job.StatusQueued}, job.StatusCancelled, store.Event{}); err == nil {
				cancelled[j.UUID] = true
			} else if !errors.Is(err, store.ErrStateConflict) {
				t.Fatal(err)
			}
		}
		wg.Wait()
		for _, id := range assigned {
			if cancelled[id] {
				t.Fatalf("round %d: job %s both cancelled and assigned", round, id)
			}
		}
		if len(assigned)+len(cancelled) != len(jobs) {
			t.Fatalf("round %d: %d assigned + %d cancelled, want %d", round, len(assigned), len(cancelled), len(jobs))
		}
	}
}

// ListHeld reads what running jobs hold from the columns and documents the snapshot needs.
func TestListHeld(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	j := createJob(t, st, u, p, job.StatusQueued)
	createJob(t, st, u, p, job.StatusQueued) // holds nothing: not listed
	_, err := st.AssignJobs(ctx, []store.Assignment{{JobUUID: j.UUID, Placement: store.Placement{SlaveName: "node1", SlaveInstanceID: "i1", ClusterID: 1,
		Resources: job.StateResources{SlaveName: "node1", GPUIDs: []int{2, 3}, CPUIDs: []int{0, 1}, CPUMemoryGb: 5}}}})
	if err != nil {
		t.Fatal(err)
	}
	held, err := st.ListHeld(ctx)
	if err != nil || len(held) != 1 {
		t.Fatalf("held %+v %v", held, err)
	}
	h := held[0]
	if h.UUID != j.UUID || h.SlaveName != "node1" || !slices.Equal(h.GPUIDs, store.Ints{2, 3}) || !slices.Equal(h.CPUIDs, store.Ints{0, 1}) ||
		h.MemoryGb != 5 || h.RunningAt.Valid || h.Status != job.StatusAssigned || h.UserID != u.ID || h.ProjectID != p.ID ||
		h.MaxDuration != int64(j.Request.Scheduling.MaxDuration.Std()/time.Second) || !h.Interactive {
		t.Fatalf("assigned job held: %+v", h)
	}
	before := time.Now().Add(-time.Second) // the database's clock is the same machine's
	for _, to := range []job.Status{job.StatusStarting, job.StatusRunning} {
		if _, err := st.TransitionJob(ctx, j.UUID, []job.Status{job.StatusAssigned, job.StatusStarting}, to, store.Event{}); err != nil {
			t.Fatal(err)
		}
	}
	held, err = st.ListHeld(ctx)
	if err != nil || len(held) != 1 || !held[0].RunningAt.Valid || held[0].RunningAt.Time.Before(before) || held[0].RunningAt.Time.After(time.Now().Add(time.Second)) {
		t.Fatalf("running job held: %+v %v", held, err)
	}
}

// GetUserWithProjects returns the user with his project ids, by project name; none is an empty
// list, an unknown URN ErrNotFound.
func TestGetUserWithProjects(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, vision := fixture(t, st, "alice", "vision")
	_, audio := fixture(t, st, "bob", "audio")
	if err := st.AddMember(ctx, audio.ID, u.ID); err != nil {
		t.Fatal(err)
	}
	got, ids, err := st.GetUserWithProjects(ctx, u.URN)
	if err != nil || got != u || !slices.Equal(ids, []int64{audio.ID, vision.ID}) {
		t.Fatalf("alice: %+v %v %v", got, ids, err)
	}
	loner, err := st.UpsertUser(ctx, "urn:publicid:IDN+test+user+loner", "loner", "", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, ids, err := st.GetUserWithProjects(ctx, loner.URN); err != nil || len(ids) != 0 {
		t.Fatalf("loner: %v %v", ids, err)
	}
	if _, _, err := st.GetUserWithProjects(ctx, "urn:publicid:IDN+test+user+nobody"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown: %v", err)
	}
}

// A heartbeat says whether the slave came back online (what makes it worth a scheduling pass);
// a heartbeat of another instance is refused.
func TestSlaveHeartbeatReportsComingBack(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	if _, err := st.CreateCluster(ctx, store.Cluster{ID: 1, Name: "one"}); err != nil {
		t.Fatal(err)
	}
	if err := st.JoinSlave(ctx, "node1", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RegisterSlave(ctx, store.SlaveRegistration{Name: "node1", InstanceID: "i1", ClusterID: 1, Inventory: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	beat := func(instance string) (bool, error) {
		v, err := st.Heartbeat(ctx, store.Beat{Slave: "node1", InstanceID: instance, Usage: []byte(`[]`)})
		return v.CameOnline, err
	}
	if back, err := beat("i1"); err != nil || back {
		t.Fatalf("heartbeat of an online slave: came back %v, %v", back, err)
	}
	if names, err := st.MarkSlavesOffline(ctx, -time.Minute, time.Time{}); err != nil || len(names) != 1 {
		t.Fatalf("mark offline: %v %v", names, err)
	}
	if back, err := beat("i1"); err != nil || !back {
		t.Fatalf("heartbeat of an offline slave: came back %v, %v", back, err)
	}
	if _, err := beat("old-instance"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("heartbeat of another instance: %v", err)
	}
}

// An explanation stored as news gets a scheduler event when it changes; one stored as a refresh
// (its details moved) changes the job without an event; an unchanged one writes nothing; a job
// not queued is told nothing. The same as the holder of the scheduler lease in one
// statement (SetQueuedExplanationsAsLeader), which writes nothing with a lease it does not hold.
func TestQueuedExplanationsEvents(t *testing.T) {
	t.Run("plain", func(t *testing.T) { testQueuedExplanations(t, false) })
	t.Run("as leader", func(t *testing.T) { testQueuedExplanations(t, true) })
}

func testQueuedExplanations(t *testing.T, asLeader bool) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	a, b := createJob(t, st, u, p, job.StatusQueued), createJob(t, st, u, p, job.StatusRunning)
	lead, ok, err := st.AcquireLeadership(ctx, "me", time.Minute)
	if err != nil || !ok {
		t.Fatalf("leadership: %v %v", ok, err)
	}
	set := func(news, refreshed map[string][]string) {
		t.Helper()
		var err error
		if asLeader {
			err = st.SetQueuedExplanationsAsLeader(ctx, lead, news, refreshed)
		} else {
			err = st.SetQueuedExplanations(ctx, news, refreshed)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	check := func(id string, want []string, events []string) {
		t.Helper()
		rec, err := st.GetJob(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got := rec.Job.State.Scheduling.QueuedExplanations; !slices.Equal(got, want) {
			t.Errorf("job %s explained %q, want %q", id[:8], got, want)
		}
		evs, err := st.ListJobEvents(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range evs {
			if e.Kind == "scheduler" {
				got = append(got, e.Message)
			}
		}
		if !slices.Equal(got, events) {
			t.Errorf("job %s has scheduler events %q, want %q", id[:8], got, events)
		}
	}
	first := []string{"needs 4 GPUs, at most 2 free on a slave (sim-1)", "behind 3 jobs"}
	set(map[string][]string{a.UUID: first, b.UUID: first}, nil)
	check(a.UUID, first, []string{strings.Join(first, "; ")})
	check(b.UUID, nil, nil)
	moved := []string{"needs 4 GPUs, at most 3 free on a slave (sim-2)", "behind 3 jobs"}
	set(nil, map[string][]string{a.UUID: moved})
	check(a.UUID, moved, []string{strings.Join(first, "; ")})
	set(map[string][]string{a.UUID: moved}, nil) // unchanged: no event
	check(a.UUID, moved, []string{strings.Join(first, "; ")})
	other := []string{"bucket \"sweep\" is full (2/2 running)"}
	set(map[string][]string{a.UUID: other}, map[string][]string{b.UUID: other})
	check(a.UUID, other, []string{strings.Join(first, "; "), other[0]})
	check(b.UUID, nil, nil)
	if asLeader {
		stale := lead
		stale.Epoch++
		if err := st.SetQueuedExplanationsAsLeader(ctx, stale, map[string][]string{a.UUID: first}, nil); !errors.Is(err, store.ErrNotLeader) {
			t.Fatalf("explanations with another epoch: %v, want ErrNotLeader", err)
		}
		check(a.UUID, other, []string{strings.Join(first, "; "), other[0]})
	}
}

// What a queued job is told (its explanations and estimated start, kept apart from the job) is
// shown by its reads, GetJob and the lists, which see every change of it at once; the job's
// leaving the queue (assigned, cancelled) deletes it, and so does the deletion of its row.
func TestWaitsShownWhileQueued(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	a, b := createJob(t, st, u, p, job.StatusQueued), createJob(t, st, u, p, job.StatusQueued)
	filter := store.JobFilter{UserIDs: []int64{u.ID}, Visible: &store.Visibility{UserID: u.ID, ProjectIDs: []int64{p.ID}}, Limit: 50}
	at := func(h int) time.Time { return time.Date(2030, 1, 2, h, 0, 0, 0, time.UTC) }
	// shown checks what GetJob and a list (twice: the second from what the store keeps) show.
	shown := func(when string, id string, explained []string, start time.Time) {
		t.Helper()
		rec, err := st.GetJob(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		recs := []*store.JobRecord{rec}
		for range 2 {
			list, err := st.ListJobs(ctx, filter)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range list {
				if r.Job.UUID == id {
					recs = append(recs, r)
				}
			}
		}
		if len(recs) != 3 {
			t.Fatalf("%s: job %s in %d of 2 lists", when, id[:8], len(recs)-1)
		}
		for k, r := range recs {
			sch := r.Job.State.Scheduling
			got := time.Time{}
			if sch.EstimatedStart != nil {
				got = *sch.EstimatedStart
			}
			if !slices.Equal(sch.QueuedExplanations, explained) || !got.Equal(start) {
				t.Errorf("%s: read %d of job %s shows %q and start %v, want %q and %v", when, k, id[:8], sch.QueuedExplanations, got, explained, start)
			}
		}
	}
	rows := func(id string) int { t.Helper(); return rowsOfJob(t, st, "job_waits", id) }
	one, two := []string{"needs 4 GPUs, none free"}, []string{"needs 4 GPUs, at most 2 free on a slave (sim-1)"}
	shown("before", a.UUID, nil, time.Time{})
	if err := st.SetQueuedExplanations(ctx, map[string][]string{a.UUID: one, b.UUID: one}, nil); err != nil {
		t.Fatal(err)
	}
	shown("explained", a.UUID, one, time.Time{})
	if err := st.SetEstimatedStarts(ctx, map[string]time.Time{a.UUID: at(3), b.UUID: at(4)}); err != nil {
		t.Fatal(err)
	}
	shown("estimated", a.UUID, one, at(3))
	shown("estimated", b.UUID, one, at(4))
	if err := st.SetQueuedExplanations(ctx, nil, map[string][]string{a.UUID: two}); err != nil {
		t.Fatal(err)
	}
	shown("explained again", a.UUID, two, at(3))
	if err := st.SetEstimatedStarts(ctx, map[string]time.Time{a.UUID: at(5)}); err != nil { // b's cleared
		t.Fatal(err)
	}
	shown("estimated again", a.UUID, two, at(5))
	shown("estimated again", b.UUID, one, time.Time{})

	if _, err := st.AssignJobs(ctx, []store.Assignment{{JobUUID: a.UUID, Message: "assigned", Placement: store.Placement{SlaveName: "node1",
		SlaveInstanceID: "inst1", ClusterID: 1, Resources: job.StateResources{SlaveName: "node1", GPUIDs: []int{0}, CPUIDs: []int{0}, CPUMemoryGb: 1}}}}); err != nil {
		t.Fatal(err)
	}
	shown("assigned", a.UUID, nil, time.Time{})
	if n := rows(a.UUID); n != 0 {
		t.Errorf("the assigned job keeps %d rows of what it was told", n)
	}
	if _, err := st.TransitionJob(ctx, b.UUID, []job.Status{job.StatusQueued}, job.StatusCancelled, store.Event{Actor: "owner"}); err != nil {
		t.Fatal(err)
	}
	shown("cancelled", b.UUID, nil, time.Time{})
	if n := rows(b.UUID); n != 0 {
		t.Errorf("the cancelled job keeps %d rows of what it was told", n)
	}
	c := createJob(t, st, u, p, job.StatusQueued)
	if err := st.SetQueuedExplanations(ctx, map[string][]string{c.UUID: one}, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteJobRow(ctx, c.UUID); err != nil {
		t.Fatal(err)
	}
	if n := rows(c.UUID); n != 0 {
		t.Errorf("the deleted job left %d rows of what it was told", n)
	}
}

// rowsOfJob counts the rows of table (one with a job_uuid column) about job id.
func rowsOfJob(t *testing.T, st *store.Store, table, id string) int {
	t.Helper()
	var n int
	if err := st.DB().QueryRow(`SELECT count(*) FROM `+table+` WHERE job_uuid = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A job's events are added only to a job that exists, and go with the job's row (job_events has
// no foreign key: migration 0023).
func TestEventsGoWithTheirJob(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	a, b := createJob(t, st, u, p, job.StatusQueued), createJob(t, st, u, p, job.StatusQueued)
	for _, j := range []*job.Job{a, b} {
		if err := st.AddJobEvent(ctx, store.Event{JobUUID: j.UUID, Kind: store.EventInfo, Actor: "test", Message: "hello"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.AddJobEvent(ctx, store.Event{JobUUID: uuid.NewString(), Kind: store.EventInfo, Actor: "test"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an event for no job: %v, want ErrNotFound", err)
	}
	count := func(id string) int { t.Helper(); return rowsOfJob(t, st, "job_events", id) }
	if err := st.DeleteJobRow(ctx, a.UUID); err != nil {
		t.Fatal(err)
	}
	if n := count(a.UUID); n != 0 {
		t.Errorf("the deleted job left %d events", n)
	}
	if n := count(b.UUID); n != 2 {
		t.Errorf("the other job has %d events, want 2 (submitted, hello)", n)
	}
	var orphans int
	if err := st.DB().QueryRowContext(ctx, `SELECT count(*) FROM job_events e WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.uuid = e.job_uuid)`).Scan(&orphans); err != nil || orphans != 0 {
		t.Errorf("%d events of no job (%v)", orphans, err)
	}
}

// SlavesShown reads a slave's SSH endpoint and, from its inventory, its process id (any the
// slave's int holds: one past 32 bits must not fail every list that shows its jobs) and GPU
// software; a slave without them reads zero values; unknown names are left out.
func TestSlavesShown(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	if _, err := st.CreateCluster(ctx, store.Cluster{ID: 1, Name: "one"}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []store.SlaveRegistration{
		{Name: "gpu1", InstanceID: "i1", ClusterID: 1, Inventory: json.RawMessage(`{"pid": 5000000000, "driverVersion": "550.54.15", "cudaVersion": "12.4", "gpus": []}`),
			SSHHost: "gpu1.test", SSHPort: 2222, SSHHostKey: "ssh-ed25519 AAAA"},
		{Name: "cpu1", InstanceID: "i2", ClusterID: 1, Inventory: json.RawMessage(`{}`)},
	} {
		if _, err := st.RegisterSlave(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := st.SlavesShown(ctx, []string{"gpu1", "cpu1", "gone"})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, func(a, b store.SlaveShown) int { return strings.Compare(a.Name, b.Name) })
	want := []store.SlaveShown{
		{Name: "cpu1", InstanceID: "i2"},
		{Name: "gpu1", InstanceID: "i1", SSHHost: "gpu1.test", SSHPort: 2222, PID: 5000000000, DriverVersion: "550.54.15", CudaVersion: "12.4"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("slaves shown %+v, want %+v", got, want)
	}
	if none, err := st.SlavesShown(ctx, nil); err != nil || none != nil {
		t.Errorf("no names: %v %v", none, err)
	}
}

// Every connection of the store's pool runs with JIT compilation off (store.sessionSetup):
// several connections held at once, so that each is a new one, all say so.
func TestSessionsRunWithoutJIT(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	for i := range 3 {
		conn, err := st.DB().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		var jit string
		if err := conn.QueryRowContext(ctx, `SHOW jit`).Scan(&jit); err != nil {
			t.Fatal(err)
		}
		if jit != "off" {
			t.Errorf("connection %d: jit = %q, want off", i, jit)
		}
	}
}

// ANALYZE of the jobs table leaves out its two large JSON documents (migration 0024: sorting
// them was most of each ANALYZE, and no query uses their statistics) and keeps the rest.
func TestJobsAnalyzeLeavesOutTheJSONDocuments(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	for range 5 {
		createJob(t, st, u, p, job.StatusQueued)
	}
	if _, err := st.DB().ExecContext(ctx, `ANALYZE jobs`); err != nil {
		t.Fatal(err)
	}
	rows, err := st.DB().QueryContext(ctx, `SELECT attname FROM pg_stats WHERE schemaname = current_schema() AND tablename = 'jobs'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var cols []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			t.Fatal(err)
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"status", "user_id", "created_at", "event_times"} {
		if !slices.Contains(cols, c) {
			t.Errorf("no statistics for jobs.%s after ANALYZE: %v", c, cols)
		}
	}
	for _, c := range []string{"request", "resources"} {
		if slices.Contains(cols, c) {
			t.Errorf("statistics for jobs.%s after ANALYZE: %v", c, cols)
		}
	}
}
