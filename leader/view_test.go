package leader

import (
	"testing"
	"time"

	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/store"
)

// TestSlaveViewKeptWhileNothingChanged: the snapshot's slaves and their index are made again
// only when the fleet's slice of slaves is another one or a cluster differs in anything the
// index keeps of it (private, owners, guest limit), and the view made holds every slave.
func TestSlaveViewKeptWhileNothingChanged(t *testing.T) {
	l := &Loop{}
	docs := &slaveDocs{}
	slaves := []fleetSlave{
		{SchedSlave: store.SchedSlave{Name: "a", InstanceID: "i1", ClusterID: 1, Host: "ha", Online: true, AcceptingJobs: true}, docs: docs},
		{SchedSlave: store.SchedSlave{Name: "b", InstanceID: "i2", ClusterID: 2, DNSName: "b.example.org"}, docs: docs},
	}
	clusters := func() map[int]scheduler.Cluster {
		return map[int]scheduler.Cluster{1: {ID: 1}, 2: {ID: 2, Private: true, Projects: []int64{7, 9}, GuestLimit: time.Hour}}
	}
	v := l.makeView(slaves, clusters())
	if len(v.slaves) != 2 || v.slaves[0].Name != "a" || !v.slaves[0].Accepting || v.slaves[1].Accepting || v.index == nil {
		t.Fatalf("view: %+v", v.slaves)
	}
	if v.hosts["a"] != "ha" || v.hosts["b"] != "b.example.org" {
		t.Errorf("hosts %v", v.hosts)
	}
	if !v.of(slaves, clusters()) {
		t.Error("the same slaves and equal clusters: made again")
	}
	if v.of(append([]fleetSlave(nil), slaves...), clusters()) {
		t.Error("another slice of slaves (a slave changed): kept")
	}
	if v.of(slaves[:1], clusters()) {
		t.Error("fewer slaves: kept")
	}
	for name, change := range map[string]func(map[int]scheduler.Cluster){
		"made private":    func(c map[int]scheduler.Cluster) { c[1] = scheduler.Cluster{ID: 1, Private: true} },
		"owners":          func(c map[int]scheduler.Cluster) { c2 := c[2]; c2.Projects = []int64{7}; c[2] = c2 },
		"guest limit":     func(c map[int]scheduler.Cluster) { c2 := c[2]; c2.GuestLimit = time.Minute; c[2] = c2 },
		"cluster added":   func(c map[int]scheduler.Cluster) { c[3] = scheduler.Cluster{ID: 3} },
		"cluster removed": func(c map[int]scheduler.Cluster) { delete(c, 1) },
	} {
		c := clusters()
		change(c)
		if v.of(slaves, c) {
			t.Errorf("cluster %s: kept", name)
		}
	}
	if (&slaveView{}).of(nil, nil) {
		t.Error("no view yet: taken for one of no slaves")
	}
}
