package leader_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/leader"
	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/store"
)

// feedWorld drives jobs through their states with the store's own writers and compares the
// leader's memory, read through the change feed, with a full read of the database.
type feedWorld struct {
	*estimateWorld
	loop *leader.Loop
}

func newFeedWorld(t *testing.T) *feedWorld {
	w := newEstimateWorld(t)
	loop := leader.NewLoop(w.st, leader.Config{FullReadEvery: time.Hour}, slog.New(slog.DiscardHandler), scheduler.NewSignal(), scheduler.NewSignal())
	return &feedWorld{estimateWorld: w, loop: loop}
}

// read is one pass's read of the memory.
func (w *feedWorld) read() ([]string, []store.Held) {
	w.t.Helper()
	jobs, held, err := w.loop.ReadJobs(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.UUID
	}
	return ids, held
}

// truth is what the database holds now, read in full.
func (w *feedWorld) truth() ([]string, []store.Held) {
	w.t.Helper()
	ctx := context.Background()
	keys, err := w.st.ListQueuedKeys(ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	held, err := w.st.ListHeld(ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = k.UUID
	}
	return ids, held
}

// same fails unless the memory, read now, is what the database holds.
func (w *feedWorld) same(when string) {
	w.t.Helper()
	gotQ, gotH := w.read()
	wantQ, wantH := w.truth()
	if !slices.Equal(gotQ, wantQ) {
		w.t.Fatalf("%s: queued jobs remembered %v, database %v", when, gotQ, wantQ)
	}
	if !reflect.DeepEqual(gotH, wantH) {
		w.t.Fatalf("%s: held remembered\n%+v\ndatabase\n%+v", when, gotH, wantH)
	}
}

// TestMemoryFollowsTheFeed: between full reads the leader reads only the jobs changed since its
// last read, and its memory stays what a full read gives: through submits, cancels, assignments,
// starts, ends, releases confirmed and requeues, done one by one and concurrently with its
// reads. A change made by a transaction that began before a read and committed after it is
// read at the next pass (it was neither in the read nor, had the feed counted from the newest
// change seen, in the next one). A row removed behind the feed's back stays remembered until a
// pass's write finds it changed and asks to read it again.
func TestMemoryFollowsTheFeed(t *testing.T) {
	w := newFeedWorld(t)
	ctx := context.Background()
	a, b := w.submit(time.Hour), w.submit(time.Hour)
	w.same("first read")

	// The transaction that outlives a read.
	tx, err := w.st.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `UPDATE jobs SET status = 'CANCELLED' WHERE uuid = $1`, a); err != nil {
		t.Fatal(err)
	}
	if _, err := w.st.TransitionJob(ctx, b, []job.Status{job.StatusQueued}, job.StatusCancelled, store.Event{}); err != nil {
		t.Fatal(err)
	}
	c := w.submit(time.Hour)
	if got, _ := w.read(); !slices.Equal(got, []string{a, c}) {
		t.Fatalf("with a's cancel not committed: %v, want %v", got, []string{a, c})
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	w.same("after the older transaction committed")

	// A row deleted behind the feed's back (the API deletes only ended jobs).
	if _, err := w.st.DB().ExecContext(ctx, `DELETE FROM jobs WHERE uuid = $1`, c); err != nil {
		t.Fatal(err)
	}
	if got, _ := w.read(); !slices.Equal(got, []string{c}) {
		t.Fatalf("a deleted row is not in the feed, yet the memory has %v", got)
	}
	w.loop.ReadAgain(c)
	w.same("after reading the deleted job again")

	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	d := &driver{w: w, rng: rng}
	for i := range 300 {
		d.step()
		if rng.IntN(4) == 0 {
			w.same(fmt.Sprintf("step %d", i))
		}
	}
	w.same("after the sequential steps")

	// Writers beside the reads: the reads see some of the changes, and a last read all.
	var wg sync.WaitGroup
	for k := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dk := &driver{w: w, rng: rand.New(rand.NewPCG(seed, uint64(k+2)))}
			for range 150 {
				dk.step()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	reads := 0
	for running := true; running; reads++ {
		select {
		case <-done:
			running = false
		default:
		}
		w.read()
	}
	w.same(fmt.Sprintf("after %d reads beside 3 writers", reads))
}

// driver makes random changes with the store's writers. Each takes the state it expects, so
// concurrent drivers that race for a job lose with a state conflict, which is ignored.
type driver struct {
	w   *feedWorld
	rng *rand.Rand
}

func (d *driver) pick(statuses ...string) string {
	var id string
	err := d.w.st.DB().QueryRowContext(context.Background(),
		`SELECT uuid::text FROM jobs WHERE status = ANY($1) ORDER BY random() LIMIT 1`, pq.Array(statuses)).Scan(&id)
	if err != nil {
		return ""
	}
	return id
}

func (d *driver) step() {
	t := d.w.t
	ctx := context.Background()
	move := func(id string, from job.Status, to job.Status) {
		if id == "" {
			return
		}
		if _, err := d.w.st.TransitionJob(ctx, id, []job.Status{from}, to, store.Event{}); err != nil && !isConflict(err) {
			t.Error(err)
		}
	}
	switch d.rng.IntN(9) {
	case 0, 1:
		d.w.submit(time.Duration(1+d.rng.IntN(8)) * time.Hour)
	case 2:
		move(d.pick("QUEUED"), job.StatusQueued, job.StatusCancelled)
	case 3, 4:
		id := d.pick("QUEUED")
		if id == "" {
			return
		}
		g := d.rng.IntN(8)
		_, err := d.w.st.AssignJobs(ctx, []store.Assignment{{JobUUID: id, Placement: store.Placement{SlaveName: "node1", SlaveInstanceID: "i1", ClusterID: 1,
			Resources: job.StateResources{SlaveName: "node1", GPUIDs: []int{g}, CPUIDs: []int{g}, CPUMemoryGb: 1 + g}}}})
		if err != nil {
			t.Error(err)
		}
	case 5:
		move(d.pick("ASSIGNED"), job.StatusAssigned, job.StatusStarting)
	case 6:
		move(d.pick("STARTING"), job.StatusStarting, job.StatusRunning)
	case 7:
		if d.rng.IntN(2) == 0 {
			move(d.pick("RUNNING"), job.StatusRunning, job.StatusFinished)
		} else {
			move(d.pick("ASSIGNED"), job.StatusAssigned, job.StatusQueued)
		}
	case 8:
		var ids []string
		rows, err := d.w.st.DB().QueryContext(ctx, `SELECT job_uuid::text FROM job_releases ORDER BY random() LIMIT 3`)
		if err != nil {
			t.Error(err)
			return
		}
		for rows.Next() {
			var id string
			if rows.Scan(&id) == nil {
				ids = append(ids, id)
			}
		}
		_ = rows.Close()
		if _, err := d.w.st.ConfirmReleases(ctx, "node1", ids, "gone"); err != nil {
			t.Error(err)
		}
	}
}

func isConflict(err error) bool { return errors.Is(err, store.ErrStateConflict) }

// TestOverdueJobsFromMemory: between full reads the housekeeping asks the database only about
// the running jobs its memory says are past their maxDuration (or within a minute of it), and
// still cancels a job that went past it: here one whose RUNNING time is moved back, which the
// feed brings into the memory at the next pass and the pass after cancels. A job not yet due
// is left alone.
func TestOverdueJobsFromMemory(t *testing.T) {
	w := newEstimateWorld(t)
	ctx := context.Background()
	w.oneGPUSlave()
	due, later := w.submit(time.Hour), w.submit(time.Hour)
	loop := leader.NewLoop(w.st, leader.Config{FullReadEvery: time.Hour}, slog.New(slog.DiscardHandler), scheduler.NewSignal(), scheduler.NewSignal())
	pass := func() {
		t.Helper()
		if err := loop.Pass(ctx, w.lead); err != nil {
			t.Fatal(err)
		}
	}
	status := func(id string) job.Status {
		t.Helper()
		rec, err := w.st.GetJob(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Job.State.Status
	}
	run := func(id string) {
		t.Helper()
		for _, step := range [][2]job.Status{{job.StatusAssigned, job.StatusStarting}, {job.StatusStarting, job.StatusRunning}} {
			if _, err := w.st.TransitionJob(ctx, id, []job.Status{step[0]}, step[1], store.Event{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	pass() // the first of the term: reads everything, assigns due (one GPU)
	if status(due) != job.StatusAssigned {
		t.Fatalf("job %s, want ASSIGNED", status(due))
	}
	run(due)
	pass()
	if _, err := w.st.DB().ExecContext(ctx, `UPDATE jobs SET event_times = jsonb_set(event_times, '{RUNNING}', to_jsonb(now() - interval '2 hours')) WHERE uuid = $1`, due); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		pass()
	}
	if got := status(due); got != job.StatusCancelled {
		t.Fatalf("a job past its maxDuration is %s after two passes, want CANCELLED", got)
	}
	if got := status(later); got != job.StatusQueued {
		t.Fatalf("the job behind it is %s, want QUEUED (its slave still holds the first until it confirms)", got)
	}
}

// TestFeedAfterIdsWentBack: Postgres, recovering from a crash, gives out again the transaction
// ids whose log it had not written, below the marks the leader took before (here: marks moved
// ahead of the database's ids). A pass whose mark is older than the last reads the jobs and the
// slaves in full: a slave registered and a job submitted then, stamped below the old marks and
// so never in a feed read from them, are seen, and the job is placed on the slave.
func TestFeedAfterIdsWentBack(t *testing.T) {
	w := newEstimateWorld(t)
	var logs bytes.Buffer
	loop := w.loop(leader.Config{FullReadEvery: time.Hour}, &logs)
	w.pass(loop) // a term's first read, in full: no slave, no job
	loop.MarksAhead(1 << 20)
	w.oneGPUSlave()
	id := w.submit(time.Hour)
	w.pass(loop)
	if rec, evs := w.jobAndEvents(id); rec.Job.State.Status != job.StatusAssigned || rec.Job.State.Resources == nil || rec.Job.State.Resources.SlaveName != "node1" {
		t.Fatalf("the job submitted after the ids went back is %s (resources %+v), events %+v; want ASSIGNED to node1", rec.Job.State.Status, rec.Job.State.Resources, evs)
	}
	if n := strings.Count(logs.String(), "transaction ids went back"); n != 2 {
		t.Errorf("logged %d warnings of ids gone back, want 2 (the jobs and the slaves):\n%s", n, logs.String())
	}
	w.pass(loop) // the marks are the database's again: the feed goes on from them
	if n := strings.Count(logs.String(), "transaction ids went back"); n != 2 {
		t.Errorf("%d warnings after the next pass, want still 2", n)
	}
}

// TestFeedAfterRestart: a database that restarted since the last pass may have lost, in a
// crash, what it had committed without waiting for the disk and the memories had read. A pass
// that finds it started at another time than the last pass found reads the jobs and the slaves
// in full: a queued job the feed does not show (its stamp taken off behind the triggers' back,
// as a crash leaves a change the memory read and the database lost) is seen, and placed.
func TestFeedAfterRestart(t *testing.T) {
	w := newEstimateWorld(t)
	ctx := context.Background()
	var logs bytes.Buffer
	loop := w.loop(leader.Config{FullReadEvery: time.Hour}, &logs)
	w.oneGPUSlave()
	w.pass(loop) // a term's first read, in full: the slave, no job
	id := w.submit(time.Hour)
	conn, err := w.st.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	for _, q := range []string{`SET session_replication_role = replica`, `UPDATE jobs SET sched_xid = '0' WHERE uuid = '` + id + `'`} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	w.pass(loop)
	if rec, _ := w.jobAndEvents(id); rec.Job.State.Status != job.StatusQueued {
		t.Fatalf("the job out of the feed is %s after a pass, want QUEUED (unseen)", rec.Job.State.Status)
	}
	loop.DatabaseRestarted()
	w.pass(loop)
	if rec, _ := w.jobAndEvents(id); rec.Job.State.Status != job.StatusAssigned {
		t.Fatalf("after the database restarted the job is %s, want ASSIGNED", rec.Job.State.Status)
	}
	if !strings.Contains(logs.String(), "the database restarted") {
		t.Errorf("the restart was not logged:\n%s", logs.String())
	}
}

// TestFeedBesideALongTransaction: a transaction left open with an id (an operator's session
// idle in a transaction, a long batch job) does not make the passes read again what they saw.
// The jobs submitted while it runs are read once: the third pass after them reads no job. (With
// a mark that was the oldest transaction still running, every pass read every job changed
// since that one began: in bench B8x, with one such session open from the fill, 65,000 rows a
// pass, passes of 4.8 s.)
func TestFeedBesideALongTransaction(t *testing.T) {
	w := newEstimateWorld(t)
	ctx := context.Background()
	loop := w.loop(leader.Config{FullReadEvery: time.Hour}, nil)
	w.oneGPUSlave()
	w.pass(loop) // a term's first read, in full
	long, err := w.st.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = long.Rollback() }()
	if _, err := long.ExecContext(ctx, `SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}
	const n = 6
	for range n {
		w.submit(time.Hour)
	}
	w.pass(loop)
	if got := loop.LastPass().FeedRows; got < n {
		t.Fatalf("the pass after %d submissions read %d jobs' rows", n, got)
	}
	w.pass(loop) // reads the job the last one assigned
	w.pass(loop)
	if got := loop.LastPass().FeedRows; got != 0 {
		t.Errorf("with nothing changed since the last pass, a pass beside a long transaction read %d jobs' rows, want 0", got)
	}
}
