package store_test

import (
	"context"
	"testing"

	"github.com/opengpulab/gpulab/store"
)

// TestSchedulerSlavesReadDocumentsOnlyWhenChanged: the scheduler's read of the slaves gives their
// small columns at every pass but their inventory and capacity only when they changed since
// the caller's mark: a heartbeat (usage, online) or a drain does not count, a registration with
// another inventory does, also when its transaction began before the mark.
func TestSchedulerSlavesReadDocumentsOnlyWhenChanged(t *testing.T) {
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
	read := func(since store.ChangeMark) map[string]store.SchedSlave {
		t.Helper()
		ss, err := st.SchedulerSlaves(ctx, since)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]store.SchedSlave{}
		for _, s := range ss {
			out[s.Name] = s
		}
		return out
	}
	mark := func() store.ChangeMark {
		t.Helper()
		m, err := st.TakeChangeMark(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	first := read(0)
	if len(first) != 2 || !first["node1"].Docs || string(first["node1"].Inventory) != `{"cpus": 8}` || !first["node1"].Online {
		t.Fatalf("first read: %+v", first)
	}
	m1 := mark()
	if _, err := st.Heartbeat(ctx, store.Beat{Slave: "node1", InstanceID: "i-node1", Usage: []byte(`{"gpus": []}`)}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetSlaveAccepting(ctx, "node2", false); err != nil {
		t.Fatal(err)
	}
	second := read(m1)
	if second["node1"].Docs || second["node1"].Inventory != nil {
		t.Errorf("after a heartbeat node1's documents were read again: %+v", second["node1"])
	}
	if second["node2"].Docs || second["node2"].AcceptingJobs {
		t.Errorf("node2 after it stopped accepting: %+v (want the flag, not the documents)", second["node2"])
	}
	register("node1", `{"cpus": 4}`)
	third := read(m1)
	if !third["node1"].Docs || string(third["node1"].Inventory) != `{"cpus": 4}` {
		t.Errorf("after node1 registered with another inventory: %+v", third["node1"])
	}
	if third["node2"].Docs {
		t.Errorf("node2 read whole though unchanged: %+v", third["node2"])
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
	m2 := mark()
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if fourth := read(m2); !fourth["node2"].Docs || string(fourth["node2"].Inventory) != `{"cpus": 32}` {
		t.Errorf("node2's new inventory, committed after the mark by an older transaction, not read: %+v", fourth["node2"])
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
