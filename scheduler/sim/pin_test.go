package sim

import (
	"fmt"
	"hash/fnv"
	"math"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/scheduler"
)

// pinnedJobs is a fixed workload that keeps a queue on a small cluster: a few heavy users and
// many light ones, sizes from 1 to 8 GPUs, run times from seconds to a day (heavy-tailed), with
// bursts of submissions at the same instant.
func pinnedJobs() []TraceJob {
	var jobs []TraceJob
	x := uint64(11)
	next := func() uint64 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return x
	}
	at := time.Duration(0)
	for range 1000 {
		r := next()
		if r%4 != 0 { // a quarter of the jobs come at the same instant as the one before
			at += time.Duration(r>>8%1200) * time.Second
		}
		g := []int{1, 1, 1, 1, 1, 2, 2, 4, 4, 8}[r>>20%10]
		// Log-uniform run time from 10 s to a day.
		d := time.Duration(10*math.Exp(float64(r>>32%10000)/10000*math.Log(8640))) * time.Second
		u := "light" + fmt.Sprint(r>>40%12)
		if h := r >> 50 % 10; h < 5 {
			u = "heavy" + fmt.Sprint(h%3)
		}
		jobs = append(jobs, tj(at, d, g, u))
	}
	return Assign(jobs, DefaultRules)
}

// digest sums up the decisions of a run: every job's start, end, slave, halts and GPU time held.
func digest(r Result) uint64 {
	h := fnv.New64a()
	for _, o := range r.Outcomes {
		fmt.Fprintf(h, "%d %d %s %d %d\n", o.Start.UnixNano(), o.End.UnixNano(), o.Slave, o.Halts, o.Held)
	}
	fmt.Fprintf(h, "%d %d %d %d %d", r.Halts, r.Lost, r.InteractiveFailed, r.Failed, r.Stuck)
	return h.Sum64()
}

// TestPinnedReplay pins the decisions of a fixed replay under every policy the simulate command
// compares, with its halting options: an optimisation of Plan or of the simulator must leave
// them exactly as they are. A deliberate policy change updates the figures here, knowingly.
func TestPinnedReplay(t *testing.T) {
	jobs := pinnedJobs()
	for _, c := range []struct {
		name    string
		p       scheduler.Policy
		halting bool
		digest  uint64
		avgJCT  time.Duration
		jain    float64
		halts   int
	}{
		// Since 1 Dec the policies without halting are given every queued job when a pass can
		// assign one, not only those that fit the emptiest slave, so that a blocked 2–8-GPU
		// job is the backfill head as in the master (sim.go). Before: fifo 0x56c075cb155e6d1c,
		// 3h9m26.788s, Jain 0.6523; fair 0x55eeacd28a850dcf, 3h3m43.653s, Jain 0.4582;
		// sjf-oracle 0xf0f3b3b6383acb91, 2h54m32.646s, Jain 0.5509.
		{"fifo", scheduler.PolicyFIFO, false, 0x5ee6d915facc6aac, 11046071213640, 0.7190, 0},
		// The fair order by FairRank (tally × maxDuration) since issue 15: before, fair was
		// 0x96d60db9c078e357, 3h13m12.777s, Jain 0.4937; fair-halt 0x70921a26167797c2,
		// 2h53m59.857s, Jain 0.3470, 94 halts.
		{"fair", scheduler.PolicyFair, false, 0x6a08767182daf949, 10794522000000, 0.6984, 0},
		{"fair-halt", scheduler.PolicyFair, true, 0xa19352f804bcc837, 9895613000000, 0.6932, 142},
		{"sjf-oracle", scheduler.PolicySJFOracle, false, 0x2b187aafc72537c6, 10309038038038, 0.6046, 0},
		{"las", scheduler.PolicyLAS, true, 0xe6a70665f56b28f, 10145709000000, 0.6280, 220},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := Run(Config{Policy: c.p, Halting: c.halting, HaltFactor: DefaultHaltFactor, HaltRestartableOnly: true,
				Slaves: 8, GPUsPerSlave: 8}, jobs)
			m := r.Metrics
			t.Logf("%s: digest %#x, avg JCT %s, p99 wait %s, Jain %.4f, halts %d, plan calls %d, wall %s",
				c.name, digest(r), m.AvgJCT, m.P99Wait, m.Jain, r.Halts, r.PlanCalls, r.Wall)
			if r.Failed+r.Stuck != 0 || len(r.Outcomes)+r.Lost+r.InteractiveFailed != len(jobs) {
				t.Fatalf("failed %d, stuck %d; %d outcomes, %d lost, %d interactive failed of %d jobs",
					r.Failed, r.Stuck, len(r.Outcomes), r.Lost, r.InteractiveFailed, len(jobs))
			}
			if got := digest(r); got != c.digest || m.AvgJCT != c.avgJCT || math.Abs(m.Jain-c.jain) > 1e-4 || r.Halts != c.halts {
				t.Errorf("decisions changed: digest %#x, avg JCT %s, Jain %.4f, halts %d; pinned %#x, %s, %.4f, %d",
					got, m.AvgJCT, m.Jain, r.Halts, c.digest, c.avgJCT, c.jain, c.halts)
			}
		})
	}
}
