package scheduler

import (
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
)

func TestQueueOrderPolicies(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func(id string, user int64, submitted int, interactive bool, maxHours int, oracle time.Duration) Job {
		j := Job{UUID: id, UserID: user, Submitted: base.Add(time.Duration(submitted) * time.Minute), OracleDuration: oracle}
		j.Request.Scheduling.Interactive = interactive
		j.Request.Scheduling.MaxDuration = job.Duration(time.Duration(maxHours) * time.Hour)
		return j
	}
	queued := []Job{
		mk("a-old-heavy-user", 1, 0, false, 10, 5*time.Hour),
		mk("b-light-user", 2, 1, false, 10, 1*time.Hour),
		mk("c-interactive", 1, 2, true, 10, 3*time.Hour),
		mk("d-light-user-short", 2, 3, false, 1, 2*time.Hour),
	}
	tallies := map[int64]float64{1: 100, 2: 5}
	cases := []struct {
		policy Policy
		want   []string
	}{
		{PolicyFIFO, []string{"a-old-heavy-user", "b-light-user", "c-interactive", "d-light-user-short"}},
		{PolicyFair, []string{"c-interactive", "d-light-user-short", "b-light-user", "a-old-heavy-user"}},
		{"", []string{"c-interactive", "d-light-user-short", "b-light-user", "a-old-heavy-user"}},
		{PolicySJFOracle, []string{"b-light-user", "d-light-user-short", "c-interactive", "a-old-heavy-user"}},
	}
	for _, c := range cases {
		t.Run(string(c.policy), func(t *testing.T) {
			got := queueOrder(Snapshot{Policy: c.policy, Tallies: tallies, Queued: queued})
			for i, j := range got {
				if j.UUID != c.want[i] {
					t.Fatalf("position %d: %s, want order %v", i, j.UUID, c.want)
				}
			}
		})
	}
	if _, err := ParsePolicy("lottery"); err == nil {
		t.Fatal("unknown policy accepted")
	}
}
