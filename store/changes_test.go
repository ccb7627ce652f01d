package store_test

import (
	"context"
	"testing"

	"github.com/opengpulab/gpulab/store"
)

// TestSchedulerSlavesReadDocumentsOnlyWhenChanged: the scheduler's read of the slaves gives their
// small columns at every pass but their inventory and capacity only when their stamp is not the
// one the caller holds: a heartbeat (usage, online) keeps the stamp, a registration with another
// inventory changes it, a slave the caller holds nothing for is read whole.
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
	read := func(held map[string]string) map[string]store.SchedSlave {
		t.Helper()
		ss, err := st.SchedulerSlaves(ctx, held)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]store.SchedSlave{}
		for _, s := range ss {
			out[s.Name] = s
		}
		return out
	}
	first := read(nil)
	if len(first) != 2 || !first["node1"].Docs || string(first["node1"].Inventory) != `{"cpus": 8}` || first["node1"].Stamp == "" || !first["node1"].Online {
		t.Fatalf("first read: %+v", first)
	}
	held := map[string]string{"node1": first["node1"].Stamp, "node2": first["node2"].Stamp}
	if _, err := st.Heartbeat(ctx, store.Beat{Slave: "node1", InstanceID: "i-node1", Usage: []byte(`{"gpus": []}`)}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetSlaveAccepting(ctx, "node2", false); err != nil {
		t.Fatal(err)
	}
	second := read(held)
	if second["node1"].Docs || second["node1"].Inventory != nil || second["node1"].Stamp != held["node1"] {
		t.Errorf("after a heartbeat node1's documents were read again: %+v", second["node1"])
	}
	if second["node2"].Docs || second["node2"].AcceptingJobs {
		t.Errorf("node2 after it stopped accepting: %+v (want the flag, not the documents)", second["node2"])
	}
	register("node1", `{"cpus": 4}`)
	third := read(held)
	if !third["node1"].Docs || string(third["node1"].Inventory) != `{"cpus": 4}` || third["node1"].Stamp == held["node1"] {
		t.Errorf("after node1 registered with another inventory: %+v", third["node1"])
	}
	if third["node2"].Docs {
		t.Errorf("node2 read whole though unchanged: %+v", third["node2"])
	}
	if fourth := read(map[string]string{"node1": third["node1"].Stamp}); !fourth["node2"].Docs {
		t.Errorf("node2, for which nothing is held, came without its documents: %+v", fourth["node2"])
	}
}
