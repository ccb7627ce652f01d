package leader_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/leader"
	"github.com/opengpulab/gpulab/metrics"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/store"
)

// TestFleetFollowsTheFeed: the leader's memory of the slaves, read through the change feed, is
// what a full read gives after every kind of change the scheduler sees (registrations with
// other inventories, instances, clusters and hosts; drains; disabling; going offline and
// coming back by a heartbeat), in a seeded random order; plain heartbeats are no change. A
// change made behind the feed's back (the trigger off) stays unseen until the periodic full
// read, which logs and counts it as drift and replaces the memory.
func TestFleetFollowsTheFeed(t *testing.T) {
	w := newEstimateWorld(t)
	ctx := context.Background()
	for _, id := range []int{1, 2} {
		if _, err := w.st.CreateCluster(ctx, store.Cluster{ID: id, Name: fmt.Sprintf("c%d", id)}); err != nil {
			t.Fatal(err)
		}
	}
	var logs bytes.Buffer
	mets := metrics.NewMaster(nil, metrics.MasterOptions{})
	loop := leader.NewLoop(w.st, leader.Config{FullReadEvery: time.Hour, Metrics: mets},
		slog.New(slog.NewTextHandler(&logs, nil)), scheduler.NewSignal(), scheduler.NewSignal())
	slaves := func(l *leader.Loop) []scheduler.Slave {
		t.Helper()
		snap, err := l.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return snap.Slaves
	}
	truth := func() []scheduler.Slave {
		t.Helper()
		return slaves(leader.NewLoop(w.st, leader.Config{}, slog.New(slog.DiscardHandler), scheduler.NewSignal(), scheduler.NewSignal()))
	}

	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	const n = 6
	instance := map[string]string{}
	register := func(name string) {
		t.Helper()
		inv, _ := json.Marshal(protocol.Inventory{Name: name, CPUs: 8 << rng.IntN(3), MemoryMiB: 65536, CudaVersion: "12.4", GPUStatus: "fake",
			GPUs: []protocol.GPU{{Index: 0, UUID: "GPU-" + name, Model: "V100-32GB", MemoryMiB: 32768, Fake: true}}})
		instance[name] = fmt.Sprintf("i%d", rng.IntN(2))
		if _, err := w.st.RegisterSlave(ctx, store.SlaveRegistration{Name: name, InstanceID: instance[name],
			Host: fmt.Sprintf("h%d", rng.IntN(2)), ClusterID: 1 + rng.IntN(2), Inventory: inv}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		register(fmt.Sprintf("node%d", i))
	}
	if got, want := slaves(loop), truth(); !reflect.DeepEqual(got, want) {
		t.Fatalf("first read:\n%+v\nwant\n%+v", got, want)
	}
	kinds := map[string]int{}
	for step := range 300 {
		name := fmt.Sprintf("node%d", rng.IntN(n))
		var what string
		var err error
		switch rng.IntN(6) {
		case 0:
			what = "register"
			register(name)
		case 1:
			what = "accepting"
			err = w.st.SetSlaveAccepting(ctx, name, rng.IntN(2) == 0)
		case 2:
			what = "disabled"
			_, err = w.st.SetSlaveDisabled(ctx, name, rng.IntN(3) == 0)
		case 3:
			what = "offline"
			_, err = w.st.DB().ExecContext(ctx, `UPDATE slaves SET online = FALSE, offline_since = now() WHERE name = $1`, name)
		default:
			what = "heartbeat"
			_, err = w.st.Heartbeat(ctx, store.Beat{Slave: name, InstanceID: instance[name], Usage: []byte(`{}`)})
		}
		if err != nil {
			t.Fatalf("step %d, %s of %s: %v", step, what, name, err)
		}
		kinds[what]++
		if got, want := slaves(loop), truth(); !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d, after %s of %s:\n%+v\nwant\n%+v", step, what, name, got, want)
		}
	}
	t.Logf("changes: %v", kinds)
	if strings.Contains(logs.String(), "drift") {
		t.Fatalf("drift logged before any check:\n%s", logs.String())
	}

	// Behind the feed's back: the trigger is off for this transaction.
	tx, err := w.st.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
		t.Fatal(err)
	}
	// Its stamp is set far back too, to an id every mark has seen committed: the flip must not
	// come with a stamp of its own.
	if _, err := tx.ExecContext(ctx, `UPDATE slaves SET online = NOT online, sched_xid = '3'::xid8 WHERE name = 'node0'`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if got, want := slaves(loop), truth(); reflect.DeepEqual(got, want) {
		t.Fatalf("a change behind the feed's back was seen before the check (the test proves nothing): %+v", got)
	}
	loop.CheckFleetNow()
	if got, want := slaves(loop), truth(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after the check:\n%+v\nwant\n%+v", got, want)
	}
	if !strings.Contains(logs.String(), "a slave differs") || !strings.Contains(logs.String(), "node0") {
		t.Errorf("the check did not log the drift of node0:\n%s", logs.String())
	}
	if drift := driftCounted(t, mets); drift != 1 {
		t.Errorf("gpulab_scheduler_memory_drift_total = %v, want 1", drift)
	}

	// A check's read runs beside the passes: changes after it, before and after a pass that
	// goes on without it, are no drift.
	deliver := loop.HoldFleetCheck()
	register("node1")
	if err := w.st.SetSlaveAccepting(ctx, "node2", false); err != nil {
		t.Fatal(err)
	}
	slaves(loop)
	if _, err := w.st.SetSlaveDisabled(ctx, "node3", true); err != nil {
		t.Fatal(err)
	}
	deliver()
	if got, want := slaves(loop), truth(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a check with changes beside it:\n%+v\nwant\n%+v", got, want)
	}
	if drift := driftCounted(t, mets); drift != 1 {
		t.Errorf("gpulab_scheduler_memory_drift_total = %v after a check with changes beside it, want still 1", drift)
	}
}
