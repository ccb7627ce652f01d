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
	if _, err := w.st.CreateCluster(ctx, store.Cluster{ID: 1, Name: "c1"}); err != nil {
		t.Fatal(err)
	}
	slaves := 0
	register := func(n int) {
		for range n {
			name := fmt.Sprintf("node%03d", slaves)
			slaves++
			inv := protocol.Inventory{Name: name, CPUs: 64, MemoryMiB: 512 << 10, CudaVersion: "12.4", GPUStatus: "fake"}
			for k := range gpus {
				inv.GPUs = append(inv.GPUs, protocol.GPU{Index: k, UUID: fmt.Sprintf("GPU-%s-%d", name, k), Model: "V100-32GB", MemoryMiB: 32768, Fake: true})
			}
			doc, _ := json.Marshal(inv)
			if _, err := w.st.RegisterSlave(ctx, store.SlaveRegistration{Name: name, InstanceID: "i-" + name, Host: name, ClusterID: 1, Inventory: doc}); err != nil {
				t.Fatal(err)
			}
		}
	}
	register(firstGPUs / gpus)
	first := w.submit(time.Hour)
	if _, err := w.st.DB().ExecContext(ctx, `INSERT INTO jobs SELECT (x.j).* FROM (SELECT jsonb_populate_record(NULL::jobs, to_jsonb(jobs)
    || jsonb_build_object('uuid', gen_random_uuid(), 'created_at', created_at + g * interval '1 ms')) AS j
  FROM jobs, generate_series(1, $2::int) g WHERE uuid = $1) x`, first, jobs-1); err != nil {
		t.Fatal(err)
	}

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
