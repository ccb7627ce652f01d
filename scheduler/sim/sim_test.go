package sim

import (
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/scheduler"
)

var t0 = time.Date(2017, 10, 1, 0, 0, 0, 0, time.UTC)

func tj(at, dur time.Duration, gpus int, user string) TraceJob {
	return TraceJob{Submit: t0.Add(at), Duration: dur, GPUs: gpus, User: user}
}

func TestReadTrace(t *testing.T) {
	f, err := os.Open("testdata/small.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	jobs, st, err := ReadTrace(f, TraceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows != 9 || st.Malformed != 5 || st.Kept != 4 {
		t.Fatalf("stats %+v, want 9 rows, 5 malformed, 4 kept", st)
	}
	at := func(s string) time.Time { t, _ := time.Parse(traceTime, s); return t }
	want := []TraceJob{
		{Submit: at("2017-10-09 06:13:03"), Duration: 2951 * time.Second, GPUs: 2, User: "6214e9"},
		{Submit: at("2017-10-09 06:13:03"), Duration: 100500 * time.Millisecond, GPUs: 16, User: "b436b2"},
		{Submit: at("2017-10-09 07:01:55"), Duration: 66 * time.Second, GPUs: 1, User: "11cb48"},
		{Submit: at("2017-10-09 08:00:00"), Duration: 2 * time.Hour, GPUs: 8, User: "11cb48"},
	}
	if !reflect.DeepEqual(jobs, want) {
		t.Fatalf("jobs\n%v\nwant\n%v", jobs, want)
	}
	jobs, _, err = ReadTraceFile("testdata/small.csv", TraceOptions{Limit: 2})
	if err != nil || len(jobs) != 2 || jobs[1].User != "b436b2" {
		t.Fatalf("limit 2: %v %v", jobs, err)
	}
	jobs, st, err = ReadTraceFile("testdata/small.csv", TraceOptions{From: at("2017-10-09 07:00:00"), To: at("2017-10-09 08:00:00")})
	if err != nil || len(jobs) != 1 || jobs[0].Duration != 66*time.Second || st.Kept != 1 {
		t.Fatalf("window: %v %+v %v", jobs, st, err)
	}
	if _, _, err := ReadTrace(stringsReader("a,b\n1,2\n"), TraceOptions{}); err == nil {
		t.Fatal("header without the columns accepted")
	}
}

func TestEstimate(t *testing.T) {
	for _, c := range []struct{ d, want time.Duration }{
		{0, time.Hour}, {time.Second, time.Hour}, {time.Hour, time.Hour}, {time.Hour + time.Second, 2 * time.Hour},
		{5 * time.Hour, 8 * time.Hour}, {30 * time.Hour, 48 * time.Hour}, {3 * 24 * time.Hour, 7 * 24 * time.Hour},
		{15 * 24 * time.Hour, 21 * 24 * time.Hour},
	} {
		if got := Estimate(c.d); got != c.want {
			t.Errorf("Estimate(%s) = %s, want %s", c.d, got, c.want)
		}
	}
}

// TestFIFOByHand: 2 slaves × 1 GPU; A (10m) and B (20m) at 0, C (5m) at 1m. C waits for A.
func TestFIFOByHand(t *testing.T) {
	jobs := []TraceJob{tj(0, 10*time.Minute, 1, "u"), tj(0, 20*time.Minute, 1, "u"), tj(time.Minute, 5*time.Minute, 1, "v")}
	r := Run(Config{Policy: scheduler.PolicyFIFO, Slaves: 2, GPUsPerSlave: 1}, jobs)
	if r.Failed+r.Dropped+r.Stuck != 0 || len(r.Outcomes) != 3 {
		t.Fatalf("result %+v", r)
	}
	starts := []time.Duration{0, 0, 10 * time.Minute}
	for i, o := range r.Outcomes {
		if o.Start != t0.Add(starts[i]) || o.End != o.Start.Add(jobs[i].Duration) {
			t.Errorf("job %d ran %s..%s", i, o.Start.Sub(t0), o.End.Sub(t0))
		}
	}
	if r.Outcomes[0].Slave == r.Outcomes[1].Slave {
		t.Errorf("A and B share slave %s", r.Outcomes[0].Slave)
	}
	m := r.Metrics
	want := Metrics{Jobs: 3, AvgJCT: 44 * time.Minute / 3, P50JCT: 14 * time.Minute, P95JCT: 20 * time.Minute, P99JCT: 20 * time.Minute,
		AvgWait: 3 * time.Minute, P50Wait: 0, P95Wait: 9 * time.Minute, P99Wait: 9 * time.Minute, Utilisation: 35.0 / 40, Makespan: 20 * time.Minute}
	want.Jain, want.AvgSlowdown = m.Jain, m.AvgSlowdown
	if m != want {
		t.Fatalf("metrics\n%+v\nwant\n%+v", m, want)
	}
	// Slowdowns: u = (1 + 1)/2 = 1, v = 14/5 = 2.8.
	if j := Jain([]float64{1, 2.8}); math.Abs(m.Jain-j) > 1e-12 {
		t.Fatalf("Jain %v, want %v", m.Jain, j)
	}
}

// TestBackfillHeadByHand: one slave × 4 GPUs, four 1-GPU jobs running from 0 (10 to 40 min,
// each with the maxDuration Estimate gives: 1 h); H (4 GPUs, 10 min) comes at 1 min, then four
// 1-GPU jobs of 60 min. When the first GPU frees, H is the backfill head: its start is planned
// at the running jobs' maxDuration (1 h), and the 60-min jobs, which would end after it, are
// held back. So H starts at 40 min, when the last of the four ends, and the others after it.
// (Given only the jobs that fit the emptiest slave, as the simulator's passes once were, H
// waited behind all four of them, until 100 min.)
func TestBackfillHeadByHand(t *testing.T) {
	jobs := []TraceJob{tj(0, 10*time.Minute, 1, "a"), tj(0, 20*time.Minute, 1, "a"), tj(0, 30*time.Minute, 1, "a"), tj(0, 40*time.Minute, 1, "a"),
		tj(time.Minute, 10*time.Minute, 4, "h")}
	for range 4 {
		jobs = append(jobs, tj(2*time.Minute, time.Hour, 1, "s"))
	}
	for _, trimmed := range []bool{true, false} {
		r := Run(Config{Policy: scheduler.PolicyFIFO, Slaves: 1, GPUsPerSlave: 4, noTrim: !trimmed}, jobs)
		if r.Failed+r.Dropped+r.Stuck != 0 || len(r.Outcomes) != len(jobs) {
			t.Fatalf("result %+v", r)
		}
		if h := r.Outcomes[4]; h.Start != t0.Add(40*time.Minute) {
			t.Errorf("trimmed %v: the 4-GPU head started at %s, want 40m", trimmed, h.Start.Sub(t0))
		}
		for _, o := range r.Outcomes[5:] {
			if o.Start != t0.Add(50*time.Minute) {
				t.Errorf("trimmed %v: a job held back started at %s, want 50m (when the head ends)", trimmed, o.Start.Sub(t0))
			}
		}
	}
}

func TestDropped(t *testing.T) {
	r := Run(Config{Policy: scheduler.PolicyFIFO, Slaves: 4, GPUsPerSlave: 2}, []TraceJob{tj(0, time.Hour, 4, "u"), tj(0, time.Hour, 2, "u")})
	if r.Dropped != 1 || len(r.Outcomes) != 1 || r.Metrics.Utilisation != 0.25 {
		t.Fatalf("dropped %d, outcomes %d, util %v", r.Dropped, len(r.Outcomes), r.Metrics.Utilisation)
	}
}

// TestSJFBeatsFIFO: one GPU busy for an hour; then a long job and two short ones queue behind it.
func TestSJFBeatsFIFO(t *testing.T) {
	jobs := []TraceJob{
		tj(0, time.Hour, 1, "a"),
		tj(time.Minute, 3*time.Hour, 1, "b"),
		tj(2*time.Minute, time.Minute, 1, "c"),
		tj(3*time.Minute, 2*time.Minute, 1, "d"),
	}
	cfg := Config{Slaves: 1, GPUsPerSlave: 1}
	cfg.Policy = scheduler.PolicyFIFO
	fifo := Run(cfg, jobs)
	cfg.Policy = scheduler.PolicySJFOracle
	sjf := Run(cfg, jobs)
	if sjf.Metrics.AvgWait >= fifo.Metrics.AvgWait || sjf.Metrics.AvgJCT >= fifo.Metrics.AvgJCT {
		t.Fatalf("sjf wait %s JCT %s, fifo wait %s JCT %s", sjf.Metrics.AvgWait, sjf.Metrics.AvgJCT, fifo.Metrics.AvgWait, fifo.Metrics.AvgJCT)
	}
	if got := sjf.Outcomes[2].Start; got != t0.Add(time.Hour) {
		t.Fatalf("sjf: shortest job started at %s, want 1h", got.Sub(t0))
	}
	if got := fifo.Outcomes[1].Start; got != t0.Add(time.Hour) {
		t.Fatalf("fifo: oldest job started at %s, want 1h", got.Sub(t0))
	}
}

// TestFairFavoursLightUser: heavy has run a job for two hours when the other GPU frees up; his
// older queued job yields to light's under fair, not under fifo.
func TestFairFavoursLightUser(t *testing.T) {
	jobs := []TraceJob{
		tj(0, 10*time.Hour, 1, "heavy"),
		tj(0, 2*time.Hour, 1, "mid"),
		tj(time.Hour, time.Hour, 1, "heavy"),
		tj(time.Hour+time.Minute, time.Hour, 1, "light"),
	}
	cfg := Config{Slaves: 2, GPUsPerSlave: 1}
	for _, c := range []struct {
		p                scheduler.Policy
		heavyAt, lightAt time.Duration
	}{
		{scheduler.PolicyFair, 3 * time.Hour, 2 * time.Hour},
		{scheduler.PolicyFIFO, 2 * time.Hour, 3 * time.Hour},
	} {
		cfg.Policy = c.p
		r := Run(cfg, jobs)
		if h, l := r.Outcomes[2].Start.Sub(t0), r.Outcomes[3].Start.Sub(t0); h != c.heavyAt || l != c.lightAt {
			t.Errorf("%s: heavy started at %s, light at %s; want %s, %s", c.p, h, l, c.heavyAt, c.lightAt)
		}
	}
}

func TestJain(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 1}, {[]float64{0, 0}, 1}, {[]float64{3, 3, 3}, 1}, {[]float64{1, 0, 0}, 1.0 / 3}, {[]float64{1, 2}, 9.0 / 10},
	} {
		if got := Jain(c.xs); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("Jain(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
	if s := Slowdown(Outcome{Job: tj(0, time.Second, 1, "u"), End: t0.Add(time.Minute)}); s != 6 {
		t.Errorf("bounded slowdown %v, want 6", s)
	}
}

func TestDeterministic(t *testing.T) {
	var jobs []TraceJob
	// A pseudo-random but fixed workload with ties in submission time, several users and sizes.
	x := uint32(1)
	for i := range 400 {
		x = x*1664525 + 1013904223
		g := []int{1, 1, 1, 2, 4, 8}[x>>29%6]
		jobs = append(jobs, tj(time.Duration(i/3)*time.Minute, time.Duration(x>>20%7200+1)*time.Second, g, string(rune('a'+x>>8%5))))
	}
	for _, p := range []scheduler.Policy{scheduler.PolicyFIFO, scheduler.PolicyFair, scheduler.PolicySJFOracle} {
		cfg := Config{Policy: p, Slaves: 3, GPUsPerSlave: 8}
		a, b := Run(cfg, jobs), Run(cfg, jobs)
		a.Wall, b.Wall = 0, 0
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: two runs differ", p)
		}
		if len(a.Outcomes) != len(jobs) || a.Failed+a.Stuck+a.Dropped != 0 {
			t.Fatalf("%s: %d of %d completed, failed %d stuck %d", p, len(a.Outcomes), len(jobs), a.Failed, a.Stuck)
		}
		// No GPU is ever oversubscribed: check each slave's concurrent GPUs at every start.
		for _, o := range a.Outcomes {
			used := 0
			for _, q := range a.Outcomes {
				if q.Slave == o.Slave && !q.Start.After(o.Start) && q.End.After(o.Start) {
					used += q.Job.GPUs
				}
			}
			if used > 8 {
				t.Fatalf("%s: slave %s holds %d GPUs at %s", p, o.Slave, used, o.Start)
			}
		}
	}
}

func BenchmarkRun(b *testing.B) {
	var jobs []TraceJob
	x := uint32(7)
	for i := range 5000 {
		x = x*1664525 + 1013904223
		jobs = append(jobs, tj(time.Duration(i)*20*time.Second, time.Duration(x>>18%14400+1)*time.Second, 1+int(x>>30), string(rune('a'+x>>8%15))))
	}
	for b.Loop() {
		Run(Config{Policy: scheduler.PolicyFair, Slaves: 16, GPUsPerSlave: 8}, jobs)
	}
}

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }

// TestTrimClose: leaving out the jobs that cannot be reached changes little, under every
// policy, on a workload that keeps a long mixed queue: nothing without halting (a pass whose
// backfill head left GPUs free is planned again whole, see trim), a little with it.
func TestTrimClose(t *testing.T) {
	var jobs []TraceJob
	x := uint32(3)
	for i := range 600 {
		x = x*1664525 + 1013904223
		g := []int{1, 1, 1, 1, 2, 4, 8, 1}[x>>29]
		jobs = append(jobs, tj(time.Duration(i/2)*time.Minute, time.Duration(x>>16%20000+1)*time.Second, g, string(rune('a'+x>>8%6))))
	}
	for _, c := range []struct {
		p       scheduler.Policy
		halting bool
	}{{scheduler.PolicyFIFO, false}, {scheduler.PolicyFair, false}, {scheduler.PolicySJFOracle, false}, {scheduler.PolicyFair, true}, {scheduler.PolicyLAS, true}} {
		cfg := Config{Policy: c.p, Halting: c.halting, Slaves: 4, GPUsPerSlave: 8}
		a := Run(cfg, Assign(jobs, DefaultRules))
		cfg.noTrim = true
		b := Run(cfg, Assign(jobs, DefaultRules))
		if a.Metrics.AvgWait < time.Hour {
			t.Fatalf("%s: avg wait %s: the workload does not build a queue", c.p, a.Metrics.AvgWait)
		}
		t.Logf("%s halting %v: avg JCT %s trimmed, %s untrimmed; plan calls %d, %d", c.p, c.halting, a.Metrics.AvgJCT, b.Metrics.AvgJCT, a.PlanCalls, b.PlanCalls)
		if !c.halting && digest(a) != digest(b) {
			t.Errorf("%s: trimmed run decided differently: %+v vs %+v", c.p, a.Metrics, b.Metrics)
		}
		if d := math.Abs(a.Metrics.AvgJCT.Seconds()/b.Metrics.AvgJCT.Seconds() - 1); d > 0.1 {
			t.Errorf("%s halting %v: trimmed run differs by %.1f %%: %+v vs %+v", c.p, c.halting, 100*d, a.Metrics, b.Metrics)
		}
	}
}
