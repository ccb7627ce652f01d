package leader_test

import (
	"context"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/leader"
)

// A pass that comes between two housekeepings (passes back to back, HousekeepEvery) plans but
// gives no timeout its outcome: a slave silent past its grace stays online until the next
// housekeeping, which Pass always does.
func TestPassBetweenHousekeepingsLeavesTimeoutsAlone(t *testing.T) {
	w := newEstimateWorld(t)
	w.oneGPUSlave()
	ctx := context.Background()
	loop := w.loop(leader.Config{HeartbeatGrace: time.Nanosecond}, nil)
	online := func() bool {
		t.Helper()
		var on bool
		if err := w.st.DB().QueryRowContext(ctx, `SELECT online FROM slaves WHERE name = 'node1'`).Scan(&on); err != nil {
			t.Fatal(err)
		}
		return on
	}
	if err := loop.PassBetweenHousekeepings(ctx, w.lead); err != nil {
		t.Fatal(err)
	}
	if !online() {
		t.Fatal("a pass between housekeepings marked the silent slave offline")
	}
	w.pass(loop)
	if online() {
		t.Error("the housekeeping did not mark the slave, silent past its grace, offline")
	}
}
