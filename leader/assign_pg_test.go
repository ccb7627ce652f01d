package leader_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/leader"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/store"
)

// TestLargePlanAssignedInParts: a plan that places thousands of jobs is committed in parts,
// every job placed once, no GPU given twice, and every slave that got a job woken on the
// notification channel (by the part that gave it one). A full pass (the first) commits each
// whole part of leader.EarlyPart while Plan goes on, and the rest after it; a narrowed pass (the
// second, once more slaves came) that places more than leader.AssignSplitFrom commits them in
// leader.AssignParts statements at once.
func TestLargePlanAssignedInParts(t *testing.T) {
	w := newEstimateWorld(t)
	ctx := context.Background()
	const gpus = 16
	firstGPUs := 2*leader.EarlyPart + 400      // placed by the first pass: two early parts and the rest
	secondGPUs := leader.AssignSplitFrom + 304 // placed by the second
	jobs := firstGPUs + secondGPUs + 500       // some left waiting
	register := w.largeCluster(gpus)
	register(firstGPUs / gpus)
	w.queueCopies(jobs)

	// Every slave named in a notification of the slaves' channel, from a listener that is
	// listening before the passes.
	var mu sync.Mutex
	woken := map[string]bool{}
	lctx, stop := context.WithCancel(ctx)
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- w.st.Listen(lctx, slog.New(slog.NewTextHandler(io.Discard, nil)), func() {}, func(names []string) {
			mu.Lock()
			defer mu.Unlock()
			for _, n := range names {
				woken[n] = true
			}
		}, func() { close(ready) })
	}()
	defer func() { stop(); <-done }()
	select {
	case <-ready:
	case <-time.After(time.Minute):
		t.Fatal("not listening after a minute")
	}

	loop := w.loop(leader.Config{Limits: &scheduler.Limits{}}, nil)
	w.pass(loop)
	w.placedBy(firstGPUs, 3, "the first pass (two early parts, then the rest)")
	register(secondGPUs / gpus)
	w.pass(loop)
	w.placedBy(firstGPUs+secondGPUs, 3+leader.AssignParts, "both passes (the second's in parts)")

	// Notifications are delivered after their commit, on the listener's own connection.
	given := w.strings(`SELECT DISTINCT assigned_slave_name FROM jobs WHERE status = 'ASSIGNED'`)
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		var missing []string
		for _, n := range given {
			if !woken[n] {
				missing = append(missing, n)
			}
		}
		mu.Unlock()
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the %d slaves given jobs were not woken, such as %s", len(missing), len(given), missing[0])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// largeCluster makes cluster 1 and returns what registers n more slaves of gpus GPUs each in it.
func (w *estimateWorld) largeCluster(gpus int) (register func(n int)) {
	w.t.Helper()
	ctx := context.Background()
	if _, err := w.st.CreateCluster(ctx, store.Cluster{ID: 1, Name: "c1"}); err != nil {
		w.t.Fatal(err)
	}
	slaves := 0
	return func(n int) {
		w.t.Helper()
		for range n {
			name := fmt.Sprintf("node%03d", slaves)
			slaves++
			inv := protocol.Inventory{Name: name, CPUs: 64, MemoryMiB: 512 << 10, CudaVersion: "12.4", GPUStatus: "fake"}
			for k := range gpus {
				inv.GPUs = append(inv.GPUs, protocol.GPU{Index: k, UUID: fmt.Sprintf("GPU-%s-%d", name, k), Model: "V100-32GB", MemoryMiB: 32768, Fake: true})
			}
			doc, _ := json.Marshal(inv)
			if _, err := w.st.RegisterSlave(ctx, store.SlaveRegistration{Name: name, InstanceID: "i-" + name, Host: name, ClusterID: 1, Inventory: doc}); err != nil {
				w.t.Fatal(err)
			}
		}
	}
}

// queueCopies queues n one-GPU jobs of an hour, one submitted and copied in the database (each
// copy a millisecond later), as a large queue is made quickly.
func (w *estimateWorld) queueCopies(n int) {
	w.t.Helper()
	first := w.submit(time.Hour)
	if _, err := w.st.DB().ExecContext(context.Background(), `INSERT INTO jobs SELECT (x.j).* FROM (SELECT jsonb_populate_record(NULL::jobs, to_jsonb(jobs)
    || jsonb_build_object('uuid', gen_random_uuid(), 'created_at', created_at + g * interval '1 ms')) AS j
  FROM jobs, generate_series(1, $2::int) g WHERE uuid = $1) x`, first, n-1); err != nil {
		w.t.Fatal(err)
	}
}

// TestEarlyPartFindsJobsChanged: jobs cancelled while a full plan is decided, after its
// snapshot and before their early part is written, stay cancelled; their part commits the
// others, and the next pass gives the GPUs they were planned on to jobs still waiting, with no
// GPU given twice.
func TestEarlyPartFindsJobsChanged(t *testing.T) {
	w := newEstimateWorld(t)
	ctx := context.Background()
	const gpus = 16
	placed := 2*leader.EarlyPart + 400 // two early parts and the rest
	w.largeCluster(gpus)(placed / gpus)
	w.queueCopies(placed + 100)
	loop := w.loop(leader.Config{Limits: &scheduler.Limits{}}, nil)
	var cancelled []string
	var once sync.Once
	loop.BeforeEarlyPart(func(part []scheduler.Assignment) {
		once.Do(func() {
			for _, a := range []scheduler.Assignment{part[0], part[len(part)/2], part[len(part)-1]} {
				if _, err := w.st.TransitionJob(ctx, a.JobUUID, []job.Status{job.StatusQueued}, job.StatusCancelled, store.Event{Actor: "owner"}); err != nil {
					t.Error(err)
				}
				cancelled = append(cancelled, a.JobUUID)
			}
		})
	})
	stillCancelled := func(when string) {
		t.Helper()
		for _, id := range cancelled {
			if rec, err := w.st.GetJob(ctx, id); err != nil || rec.Job.State.Status != job.StatusCancelled {
				t.Fatalf("%s: job %s cancelled before its part was written: %v %v", when, id, rec.Job.State.Status, err)
			}
		}
	}
	w.pass(loop)
	if len(cancelled) != 3 {
		t.Fatalf("%d jobs cancelled before an early part, want 3: no early part written", len(cancelled))
	}
	stillCancelled("after the first pass")
	w.placedBy(placed-len(cancelled), 3, "the first pass (two early parts, then the rest)")
	w.pass(loop)
	stillCancelled("after the second pass")
	w.placedBy(placed, 4, "the second pass (the GPUs the cancelled jobs left)")
}

// TestExplanationsWrittenInParts: a pass's explanations, from leader.ExplainSplitFrom of them on,
// are written as leader.AssignParts statements at once, every job explained once, the news
// with a scheduler event each; fewer go as one statement.
func TestExplanationsWrittenInParts(t *testing.T) {
	w := newEstimateWorld(t)
	ctx := context.Background()
	n := leader.ExplainSplitFrom + 300
	w.queueCopies(n)
	ids := w.strings(`SELECT uuid::text FROM jobs WHERE status = 'QUEUED' ORDER BY created_at`)
	loop := w.loop(leader.Config{}, nil)
	write := func(ids []string, reason string) {
		t.Helper()
		news, refreshed := map[string][]string{}, map[string][]string{}
		for k, id := range ids {
			if k%3 == 0 {
				refreshed[id] = []string{reason}
			} else {
				news[id] = []string{reason}
			}
		}
		if err := loop.ExplainInParts(ctx, w.lead, news, refreshed); err != nil {
			t.Fatal(err)
		}
	}
	check := func(reason string, explained, xacts, events int) {
		t.Helper()
		var gotExplained, gotXacts, gotEvents int
		if err := w.st.DB().QueryRowContext(ctx, `SELECT count(*), count(DISTINCT xmin::text) FROM job_waits
WHERE explanations = jsonb_build_object('queuedExplanations', jsonb_build_array($1::text))`, reason).Scan(&gotExplained, &gotXacts); err != nil {
			t.Fatal(err)
		}
		if err := w.st.DB().QueryRowContext(ctx, `SELECT count(*) FROM job_events WHERE kind = 'scheduler' AND message = $1`, reason).Scan(&gotEvents); err != nil {
			t.Fatal(err)
		}
		if gotExplained != explained || gotXacts != xacts || gotEvents != events {
			t.Errorf("%q: %d jobs explained by %d transactions with %d events; want %d by %d with %d",
				reason, gotExplained, gotXacts, gotEvents, explained, xacts, events)
		}
	}
	write(ids, "needs 4 GPUs, none free")
	check("needs 4 GPUs, none free", n, leader.AssignParts, n-(n+2)/3)
	few := ids[:leader.ExplainSplitFrom-1]
	write(few, "behind 2 jobs")
	check("behind 2 jobs", len(few), 1, len(few)-(len(few)+2)/3)
}

// placedBy checks that n jobs are assigned, by parts transactions, with no GPU given twice.
func (w *estimateWorld) placedBy(n, parts int, what string) {
	w.t.Helper()
	var assigned, xacts, overlaps int
	db := w.st.DB()
	if err := db.QueryRow(`SELECT count(*), count(DISTINCT xmin::text) FROM jobs WHERE status = 'ASSIGNED'`).Scan(&assigned, &xacts); err != nil {
		w.t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT count(*) FROM (SELECT assigned_slave_name, g FROM jobs,
    jsonb_array_elements(resources->'gpuIds') g WHERE status = 'ASSIGNED' GROUP BY 1, 2 HAVING count(*) > 1) x`).Scan(&overlaps); err != nil {
		w.t.Fatal(err)
	}
	if assigned != n || xacts != parts || overlaps != 0 {
		w.t.Fatalf("after %s: %d jobs assigned by %d transactions (want %d by %d); %d GPUs given twice", what, assigned, xacts, n, parts, overlaps)
	}
}

// strings reads a query's one text column.
func (w *estimateWorld) strings(query string) []string {
	w.t.Helper()
	rows, err := w.st.DB().Query(query)
	if err != nil {
		w.t.Fatal(err)
	}
	defer func() { _ = rows.Close() }()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			w.t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		w.t.Fatal(err)
	}
	return out
}
