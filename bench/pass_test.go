package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/leader"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/store"
)

// passEnv sizes TestPassCost: "SLAVESxJOBS" (the B1x is 5000x100000).
const passEnv = "GPULAB_BENCH_PASS"

// TestPassCost measures what one pass of the real leader loop costs on a large cluster, phase
// by phase (housekeeping, each read of the snapshot, Plan, each write of the plan): the
// question behind B1x and B8x's pass p99, asked without the protocol fleet around it. Slaves
// are registered straight through the store (their heartbeats would only load the machine),
// the queue is loaded as B1's burst (bulkInsert), and the loop's passes run back to back:
// the first places the burst, the later ones are the steady state of a full cluster with a
// long queue, the pass every heartbeat and submit pays for (what was assigned is made RUNNING
// between passes, as the slaves would; narrowed: see leader.narrow; the
// full read and plan come every hour here, not every 5 minutes). A CPU profile of the passes is
// written beside the other benchmark outputs.
//
// Run alone: GPULAB_BENCH_PASS=5000x100000 go test ./bench -run TestPassCost -v
// (GPULAB_BENCH_PASS_FULL=1: every pass plans every queued job, the way passes were before).
func TestPassCost(t *testing.T) {
	spec := os.Getenv(passEnv)
	if spec == "" {
		t.Skip(passEnv + "=SLAVESxJOBS runs it (5000x100000 is B1x)")
	}
	nSlaves, nJobs, err := parsePassSize(spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dbURL := testenv.PostgresURL(t)
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	fl := b1Fleet(nSlaves)
	users := make([]*user, 50)
	for i := range users {
		name := fmt.Sprintf("u%02d", i)
		u, err := st.UpsertUser(ctx, "urn:publicid:IDN+bench+user+"+name, name, name+"@example.org", false)
		if err != nil {
			t.Fatal(err)
		}
		p, err := st.CreateProject(ctx, fmt.Sprintf("urn:publicid:IDN+bench+project+p%02d", i), fmt.Sprintf("p%02d", i), "", 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.AddMember(ctx, p.ID, u.ID); err != nil {
			t.Fatal(err)
		}
		users[i] = &user{User: u, Projects: []int64{p.ID}}
	}
	for c := 1; c <= fl.Clusters; c++ {
		if _, err := st.CreateCluster(ctx, store.Cluster{ID: c, Name: fmt.Sprintf("c%d", c)}); err != nil {
			t.Fatal(err)
		}
	}
	loadStart := time.Now()
	for i := range nSlaves {
		name := fmt.Sprintf("s-%05d", i)
		gpus := make([]protocol.GPU, fl.GPUs)
		for k := range gpus {
			gpus[k] = protocol.GPU{Index: k, UUID: fmt.Sprintf("GPU-%s-%d", name, k), Model: "Simulated V100", MemoryMiB: 32 << 10, Fake: true}
		}
		inv, _ := json.Marshal(protocol.Inventory{Name: name, InstanceID: "inst-" + name, ClusterID: 1 + i%fl.Clusters, Host: name + ".bench",
			CPUs: fl.CPUs, MemoryMiB: int64(fl.MemoryGiB) << 10, GPUs: gpus, DriverVersion: "550.54.15", CudaVersion: "12.4", GPUStatus: "fake"})
		if _, err := st.RegisterSlave(ctx, store.SlaveRegistration{Name: name, InstanceID: "inst-" + name, Host: name + ".bench",
			ClusterID: 1 + i%fl.Clusters, Inventory: inv}); err != nil {
			t.Fatal(err)
		}
	}
	jobs := burstJobs(t, nJobs, fl.Clusters, users)
	bulkInsert(t, dbURL, jobs)
	t.Logf("loaded %d slaves × %d GPUs and %d queued jobs in %s", nSlaves, fl.GPUs, nJobs, time.Since(loadStart).Round(time.Millisecond))

	lead, ok, err := st.AcquireLeadership(ctx, "bench-pass", time.Hour)
	if err != nil || !ok {
		t.Fatalf("leadership: %v %v", ok, err)
	}
	cfg := leader.Config{HeartbeatGrace: 24 * time.Hour, Limits: &scheduler.Limits{}, FullReadEvery: time.Hour}
	if os.Getenv(passEnv+"_FULL") == "1" {
		// Every pass plans every queued job, as before issue 16 (the requests stay in memory).
		cfg.Sweep = -1
	}
	loop := leader.NewLoop(st, cfg,
		slog.New(slog.NewTextHandler(io.Discard, nil)), scheduler.NewSignal(), scheduler.NewSignal())
	prof, err := os.Create(filepath.Join(outDir(t), "pass-cost.cpu.pprof"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = prof.Close() }()
	if err := pprof.StartCPUProfile(prof); err != nil {
		t.Fatal(err)
	}
	defer pprof.StopCPUProfile()
	for i := range 4 {
		start, cpu := time.Now(), processCPU()
		if err := loop.Pass(ctx, lead); err != nil {
			t.Fatalf("pass %d: %v", i, err)
		}
		took := time.Since(start)
		t.Logf("pass %d: %s; CPU of this process %s (the wall times stretch on a busy machine)", i, describePhases(took, loop.LastPass()),
			(processCPU() - cpu).Round(time.Millisecond))
		// The slaves would take and start what was assigned: without them, the assignments'
		// leases would run out and the next pass would queue every job again.
		db := st.DB()
		if _, err := db.ExecContext(ctx, `UPDATE jobs SET status = 'RUNNING', event_times = event_times || jsonb_build_object('RUNNING', now()),
    lease_expires_at = NULL, updated_at = now() WHERE status = 'ASSIGNED'`); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("CPU profile of the passes (this process; Postgres's own time is not in it): %s", prof.Name())
}

// parsePassSize reads "SLAVESxJOBS".
func parsePassSize(s string) (int, int, error) {
	a, b, ok := strings.Cut(strings.ToLower(s), "x")
	slaves, err1 := strconv.Atoi(a)
	jobs, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || slaves <= 0 || jobs < 0 {
		return 0, 0, fmt.Errorf("%s=%q: want SLAVESxJOBS, such as 5000x100000", passEnv, s)
	}
	return slaves, jobs, nil
}

// describePhases is one pass's line: the total, the sizes (the jobs' rows read: the change
// feed's, or every job's in a full read), the phases, and each step.
func describePhases(took time.Duration, p leader.Phases) string {
	ms := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64) + " ms"
	}
	full := ""
	if p.FullRead {
		full = " in full"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s total (%d slaves, %d queued, %d planned, %d held, %d assigned, %d jobs' rows read%s): housekeeping %s, compaction %s, read %s, Plan %s, apply %s;",
		ms(took), p.Slaves, p.Queued, p.Planned, p.Running, p.Assigned, p.FeedRows, full,
		ms(p.Housekeeping), ms(p.Compact), ms(p.Read), ms(p.Plan), ms(p.Apply))
	for _, s := range p.Steps {
		fmt.Fprintf(&b, " %s %s,", s.Step, ms(s.Took))
	}
	return strings.TrimSuffix(b.String(), ",")
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
