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

// TestLargePlanAssignedInParts: a pass that places more than leader.AssignSplitFrom jobs
// commits them in leader.AssignParts transactions (each its own statement), every job placed
// once with no GPU given twice, and every slave that got a job woken on the notification
// channel (by the part that gave it one).
func TestLargePlanAssignedInParts(t *testing.T) {
	w := newEstimateWorld(t)
	ctx := context.Background()
	const slaves, gpus = 160, 16
	jobs := leader.AssignSplitFrom + 300 // fewer than the GPUs: every one is placed
	if _, err := w.st.CreateCluster(ctx, store.Cluster{ID: 1, Name: "c1"}); err != nil {
		t.Fatal(err)
	}
	for i := range slaves {
		name := fmt.Sprintf("node%03d", i)
		inv := protocol.Inventory{Name: name, CPUs: 64, MemoryMiB: 512 << 10, CudaVersion: "12.4", GPUStatus: "fake"}
		for k := range gpus {
			inv.GPUs = append(inv.GPUs, protocol.GPU{Index: k, UUID: fmt.Sprintf("GPU-%s-%d", name, k), Model: "V100-32GB", MemoryMiB: 32768, Fake: true})
		}
		doc, _ := json.Marshal(inv)
		if _, err := w.st.RegisterSlave(ctx, store.SlaveRegistration{Name: name, InstanceID: "i-" + name, Host: name, ClusterID: 1, Inventory: doc}); err != nil {
			t.Fatal(err)
		}
	}
	first := w.submit(time.Hour)
	if _, err := w.st.DB().ExecContext(ctx, `INSERT INTO jobs SELECT (x.j).* FROM (SELECT jsonb_populate_record(NULL::jobs, to_jsonb(jobs)
    || jsonb_build_object('uuid', gen_random_uuid(), 'created_at', created_at + g * interval '1 ms')) AS j
  FROM jobs, generate_series(1, $2::int) g WHERE uuid = $1) x`, first, jobs-1); err != nil {
		t.Fatal(err)
	}

	// Every slave named in a notification of the slaves' channel, from a listener that is
	// listening before the pass.
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

	w.pass(w.loop(leader.Config{Limits: &scheduler.Limits{}}, nil))

	var assigned, parts, overlaps int
	if err := w.st.DB().QueryRowContext(ctx, `SELECT count(*), count(DISTINCT xmin::text) FROM jobs WHERE status = 'ASSIGNED'`).Scan(&assigned, &parts); err != nil {
		t.Fatal(err)
	}
	if err := w.st.DB().QueryRowContext(ctx, `SELECT count(*) FROM (SELECT assigned_slave_name, g FROM jobs,
    jsonb_array_elements(resources->'gpuIds') g WHERE status = 'ASSIGNED' GROUP BY 1, 2 HAVING count(*) > 1) x`).Scan(&overlaps); err != nil {
		t.Fatal(err)
	}
	if assigned != jobs || parts != leader.AssignParts || overlaps != 0 {
		t.Errorf("%d of %d jobs assigned by %d transactions (want all, by %d); %d GPUs given twice", assigned, jobs, parts, leader.AssignParts, overlaps)
	}
	rows, err := w.st.DB().QueryContext(ctx, `SELECT DISTINCT assigned_slave_name FROM jobs WHERE status = 'ASSIGNED'`)
	if err != nil {
		t.Fatal(err)
	}
	var given []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		given = append(given, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// Notifications are delivered after their commit, on the listener's own connection.
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
