package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testenv"
)

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == "master" {
		if err := runMaster(); err != nil {
			fmt.Fprintln(os.Stderr, "bench master:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	testenv.RemoveJobNetwork()
	os.Exit(code)
}

// scenario is one benchmark of issue 6 (B1–B8), of issue 16 (B1x, B2x, B8x, and Slurm's S1
// and S2).
type scenario struct {
	id  string
	run func(t *testing.T, rep *report, sz sizes)
}

var scenarios = []scenario{
	{"B1", runB1},
	{"B1x", runB1x},
	{"B2", runB2},
	{"B2x", runB2x},
	{"B3", runB3},
	{"B4", runB4},
	{"B5", runB5},
	{"B7", runB7},
	{"B8", runB8},
	{"B8x", runB8x},
	// Slurm measured on the same machine (slurm_test.go); each after the scenario it repeats,
	// whose figures it is compared with when both run.
	{"S1", runS1},
	{"S2", runS2},
}

// sizes are the scenarios' parameters: the in a real run, toy ones in TestSmoke.
type sizes struct {
	smoke bool
	// heartbeat is the interval slaves are told (serve's default: 5 s).
	heartbeat time.Duration
	// B1: slaves (8 GPUs each) and queued jobs of the burst.
	b1Slaves, b1Jobs int
	// B1x: the same at issue 16's size.
	b1xSlaves, b1xJobs int
	// B2: slaves, jobs submitted and the submit rate.
	b2Slaves, b2Jobs int
	b2Rate           float64
	// B2x: slaves, jobs submitted, the submit rate and the jobs queued behind them.
	b2xSlaves, b2xJobs, b2xBacklog int
	b2xRate                        float64
	// B3: sequential and concurrent busybox jobs; raw `docker run`s for the floor; the
	// rounds of concurrent jobs, each between two batches of as many concurrent raw runs.
	b3Seq, b3Conc, b3Raw, b3Rounds int
	// B4: jobs in the database, connections, warm-up and measured time per endpoint.
	b4Jobs, b4Conns     int
	b4Warm, b4Measure   time.Duration
	b5Warm, b5Measure   time.Duration
	floorWarm, floorDur time.Duration
	// B7: the trace and how many of its jobs (0: all).
	b7Trace string
	b7Limit int
	// B8: slaves, soak length, mean job run time, queued backlog, readers.
	b8Slaves, b8Backlog, b8Readers int
	b8Duration, b8Window, b8Fill   time.Duration
	b8MeanRun                      time.Duration
	// B8x: the same soak at issue 16's size (GPULAB_BENCH_SOAK sets both lengths).
	b8xSlaves, b8xBacklog            int
	b8xDuration, b8xFill, b8xMeanRun time.Duration
}

func fullSizes() sizes {
	s := sizes{
		heartbeat: 5 * time.Second,
		b1Slaves:  500, b1Jobs: 10000,
		b1xSlaves: 5000, b1xJobs: 100000,
		b2Slaves: 500, b2Jobs: 1500, b2Rate: 50,
		b2xSlaves: 1000, b2xJobs: 6000, b2xRate: 200, b2xBacklog: 20000,
		b3Seq: 100, b3Conc: 20, b3Raw: 20, b3Rounds: 3,
		b4Jobs: 100000, b4Conns: 64, b4Warm: 2 * time.Second, b4Measure: 10 * time.Second,
		b5Warm: 2 * time.Second, b5Measure: 10 * time.Second,
		floorWarm: time.Second, floorDur: 5 * time.Second,
		b7Trace:  filepath.Join(moduleRoot(), "..", "shared", "traces", "philly.csv"),
		b8Slaves: 500, b8Backlog: 1000, b8Readers: 4,
		b8Duration: 10 * time.Minute, b8Window: time.Minute, b8Fill: 60 * time.Second, b8MeanRun: 200 * time.Second,
		b8xSlaves: 5000, b8xBacklog: 20000, b8xDuration: 30 * time.Minute, b8xFill: 2 * time.Minute, b8xMeanRun: 800 * time.Second,
	}
	if tr := os.Getenv("GPULAB_BENCH_TRACE"); tr != "" {
		s.b7Trace = tr
	}
	if d, err := time.ParseDuration(os.Getenv("GPULAB_BENCH_SOAK")); err == nil && d > 0 {
		s.b8Duration, s.b8xDuration = d, d
	}
	// B8x at another cluster size, all of it in proportion (heartbeats, finishes and submits a
	// second, the queue: 4 jobs a slave), to find the largest a master serves at the goals.
	if n, err := strconv.Atoi(os.Getenv("GPULAB_BENCH_B8X_SLAVES")); err == nil && n > 0 {
		s.b8xSlaves, s.b8xBacklog = n, 4*n
	}
	return s
}

func smokeSizes() sizes {
	return sizes{
		smoke:     true,
		heartbeat: 300 * time.Millisecond,
		b1Slaves:  4, b1Jobs: 40,
		b1xSlaves: 6, b1xJobs: 60,
		b2Slaves: 4, b2Jobs: 10, b2Rate: 50,
		b2xSlaves: 4, b2xJobs: 10, b2xRate: 50, b2xBacklog: 20,
		b3Seq: 1, b3Conc: 1, b3Raw: 1, b3Rounds: 1,
		b4Jobs: 300, b4Conns: 4, b4Warm: 100 * time.Millisecond, b4Measure: 300 * time.Millisecond,
		b5Warm: 100 * time.Millisecond, b5Measure: 300 * time.Millisecond,
		floorWarm: 100 * time.Millisecond, floorDur: 200 * time.Millisecond,
		b7Trace:  filepath.Join(moduleRoot(), "scheduler", "sim", "testdata", "small.csv"),
		b8Slaves: 4, b8Backlog: 10, b8Readers: 1,
		b8Duration: time.Second, b8Window: 500 * time.Millisecond, b8Fill: 500 * time.Millisecond, b8MeanRun: time.Second,
		b8xSlaves: 6, b8xBacklog: 12, b8xDuration: time.Second, b8xFill: 500 * time.Millisecond, b8xMeanRun: time.Second,
	}
}

// selected reads GPULAB_BENCH: "all" or a list of scenario ids.
func selected(spec string) ([]scenario, error) {
	if strings.EqualFold(strings.TrimSpace(spec), "all") {
		return scenarios, nil
	}
	var out []scenario
	for _, id := range strings.Split(spec, ",") {
		id = strings.TrimSpace(id)
		if id == "" {
			continue
		}
		i := slices.IndexFunc(scenarios, func(s scenario) bool { return strings.EqualFold(s.id, id) })
		if i < 0 {
			return nil, fmt.Errorf("unknown scenario %q (B1, B1x, B2, B2x, B3, B4, B5, B7, B8, B8x, S1, S2 or all)", id)
		}
		out = append(out, scenarios[i])
	}
	return out, nil
}

// TestScenarios runs the scenarios GPULAB_BENCH names against DATABASE_URL (which must have
// fsync on), prints the table and appends it to bench/RESULTS.md (GPULAB_BENCH_RECORD=0: not).
func TestScenarios(t *testing.T) {
	spec := os.Getenv("GPULAB_BENCH")
	if spec == "" {
		t.Skip("benchmarks run only with GPULAB_BENCH=all (or B1,B2,…): `make bench`")
	}
	chosen, err := selected(spec)
	if err != nil {
		t.Fatal(err)
	}
	m := describeMachine(os.Getenv("DATABASE_URL"))
	if m.Fsync != "on" && os.Getenv("GPULAB_BENCH_ALLOW_FSYNC_OFF") != "1" {
		t.Fatalf("PostgreSQL at DATABASE_URL has fsync %q: the benchmarks measure with fsync on (`make bench` starts such a cluster in .tmp/pgbench)", m.Fsync)
	}
	rep := &report{}
	sz := fullSizes()
	var ids []string
	quiet := 5 * time.Minute
	if d, err := time.ParseDuration(os.Getenv("GPULAB_BENCH_QUIET_WAIT")); err == nil {
		quiet = d
	}
	for _, sc := range chosen {
		ids = append(ids, sc.id)
		if others := waitQuiet(t, quiet); others >= 0.25 {
			rep.note(sc.id, "started although the rest of the machine used %.2f cores (waited %s for it to calm down)", others, quiet)
		}
		if !t.Run(sc.id, func(t *testing.T) { sc.run(t, rep, sz) }) {
			rep.add(result{Scenario: sc.id, Measure: "did not complete (see the test log)", Value: "FAILED"})
		}
	}
	file := filepath.Join(moduleRoot(), "bench", "RESULTS.md")
	if os.Getenv("GPULAB_BENCH_RECORD") == "0" {
		file = ""
	}
	if err := record(os.Stdout, file, m, ids, os.Getenv("GPULAB_BENCH_LABEL"), rep); err != nil {
		t.Fatalf("record results: %v", err)
	}
}

// TestSmoke runs every scenario at toy sizes, so that `make test` keeps the harness working;
// it records nothing.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	rep := &report{}
	sz := smokeSizes()
	// All at once, whatever -parallel says: most of their time is waiting.
	var wg sync.WaitGroup
	for _, sc := range scenarios {
		wg.Add(1)
		go func() { defer wg.Done(); t.Run(sc.id, func(t *testing.T) { sc.run(t, rep, sz) }) }()
	}
	wg.Wait()
	t.Log("\n" + rep.table())
	loads := map[string]bool{}
	for _, r := range rep.rows {
		if r.Value == "" {
			t.Errorf("%s %s: no value", r.Scenario, r.Measure)
		}
		// A soak says how much work its first and last windows had (its load drifts).
		if strings.HasPrefix(r.Measure, "the load: ") && strings.Count(r.Value, "CPU a job: master ") == 2 {
			loads[r.Scenario] = true
		}
		// B8x's heartbeat goal is compared with the heartbeat's floor measured after its soak.
		if strings.HasPrefix(r.Measure, "heartbeat p99 at the slaves") && !strings.Contains(r.Floor, "p99") {
			t.Errorf("%s %s: no heartbeat floor (%q)", r.Scenario, r.Measure, r.Floor)
		}
	}
	for _, id := range []string{"B8", "B8x"} {
		if !loads[id] {
			t.Errorf("%s: no row for the load of its first and last windows", id)
		}
	}
}
