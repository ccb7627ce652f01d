package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/slave"
	slavecontainer "github.com/opengpulab/gpulab/slave/container"
	"github.com/opengpulab/gpulab/slave/gpu"
	"github.com/opengpulab/gpulab/slave/storage"
)

// b3Script is what the B3 jobs and the raw `docker run` both run.
const b3Script = "echo hello from busybox"

// startRealSlave runs the real slave agent (package slave, with the real container runtime on
// the local Docker Engine) in this process, as internal/e2e does, with as many CPUs as the
// machine has.
func startRealSlave(t testing.TB, m *master, d *client.Client, name string) {
	t.Helper()
	cert := m.slaveCert(name, 1)
	mc, err := protocol.NewClient(m.URL, m.CA.CertPEM, &cert)
	if err != nil {
		t.Fatal(err)
	}
	smap, err := storage.ParseMap([]string{"/project=" + filepath.Join(t.TempDir(), "{project}")})
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	inv := protocol.Inventory{Name: name, InstanceID: hex.EncodeToString(b), ClusterID: 1, Host: "127.0.0.1", DNSName: "127.0.0.1",
		Version: "bench", PID: os.Getpid(), CPUs: runtime.NumCPU(), MemoryMiB: 8192, GPUStatus: "none: bench slave", StorageRoots: smap.Roots()}
	logFile, err := os.OpenFile(filepath.Join(outDir(t), safeName(t.Name())+"-slaves.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo})).With("slave", name)
	// The hardening a slave has by default, in this process's own jobs' network.
	h := slavecontainer.DefaultHardening()
	h.Network = testenv.JobNetwork()
	h.CapUlimits()
	rt := slavecontainer.New(d, slavecontainer.Config{Storage: smap, ScratchRoot: t.TempDir(), SlaveName: name, SlaveHost: "127.0.0.1",
		SlaveDNSName: "127.0.0.1", SlaveInstanceID: inv.InstanceID, SlavePID: inv.PID, Version: "bench", Hardening: &h}, log)
	ctx, cancel := context.WithCancel(context.Background())
	// As gpulab-slave does before it registers: its first job then finds the engine checked.
	if err := rt.Prepare(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	agent := slave.New(mc, rt, gpu.NewSampler(nil, nil), inv, slave.Config{}, log)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if err := agent.Run(ctx); err != nil {
			t.Logf("slave %s: %v", name, err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-stopped
		_ = logFile.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cs, err := slaveContainers(ctx, d, name)
		if err == nil {
			for _, c := range cs {
				_ = d.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
			}
		}
	})
}

// waitEnded polls the database (outside the path measured; see waiters) until the job ended
// and returns its state and when the master recorded the end.
func waitEnded(ctx context.Context, m *master, id string) (job.Status, time.Time, error) {
	waiters.Add(1)
	defer waiters.Add(-1)
	for {
		var st string
		var at time.Time
		err := m.Store.DB().QueryRowContext(ctx, `SELECT status, COALESCE((event_times->>status)::timestamptz, now()) FROM jobs WHERE uuid = $1`, id).Scan(&st, &at)
		if err != nil {
			return "", at, err
		}
		if job.Status(st).Ended() {
			return job.Status(st), at, nil
		}
		select {
		case <-ctx.Done():
			return job.Status(st), at, ctx.Err()
		case <-time.After(pollEvery()):
		}
	}
}

// waiters counts the jobs waitEnded is following: each polls every 5 ms times their number, so
// that together they ask the database about 200 times a second however many they are. (Each
// polling every 5 ms, the 20 concurrent B3 jobs asked 4,000 times a second: Postgres and the
// bench then took 0.6 of the machine's 2 cores, which the raw runs they are compared with had
// to themselves.) The end is the time the master recorded, not when the poll sees it: polling
// less often changes no measure.
var waiters atomic.Int32

func pollEvery() time.Duration {
	return 5 * time.Millisecond * time.Duration(max(1, waiters.Load()))
}

// runB3 measures the whole path with real containers: submit through the API, scheduler,
// the real slave agent, Docker create/start/wait, log shipping, FINISHED; against a raw
// `docker run --rm` of the same image and command measured in the same run.
func runB3(t *testing.T, rep *report, sz sizes) {
	d := testenv.Docker(t)
	image := testenv.BusyboxImage(t)
	m := startMaster(t, masterOptions{Loop: loopAuto, HeartbeatInterval: sz.heartbeat})
	u := m.addUser("alice", "vision")
	// One CPU per job and as many CPUs per slave as the machine has (the runtime pins CPU
	// ids): enough slaves for the concurrent jobs.
	nSlaves := max(1, (sz.b3Conc+runtime.NumCPU()-1)/runtime.NumCPU())
	names := make([]string, nSlaves)
	for i := range names {
		// Named for this process: the slave finds (and its cleanup removes) its containers by
		// its name, on an engine another test process may share.
		names[i] = testenv.Name(fmt.Sprintf("docker-%02d", i))
		startRealSlave(t, m, d, names[i])
	}
	waitRegistered(t, m, nSlaves)
	doc, _ := json.Marshal(map[string]any{"name": "b3", "request": map[string]any{
		"resources":  map[string]any{"cpus": 1, "gpus": 0, "cpuMemoryGb": 1},
		"docker":     map[string]any{"image": image, "command": []string{"sh", "-c", b3Script}},
		"scheduling": map[string]any{}}})
	c := m.client(&u.TLS, sz.b3Conc+1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	var mu sync.Mutex
	submitted := map[string]time.Time{}
	one := func() (time.Duration, error) {
		t0 := time.Now()
		id, err := submit(ctx, c, m.URL, string(doc))
		if err != nil {
			return 0, err
		}
		mu.Lock()
		submitted[id] = t0
		mu.Unlock()
		st, end, err := waitEnded(ctx, m, id)
		if err != nil {
			return 0, err
		}
		if st != job.StatusFinished {
			return 0, fmt.Errorf("job %s ended %s", id, st)
		}
		if err := checkLog(ctx, c, m.URL, id); err != nil {
			return 0, err
		}
		return end.Sub(t0), nil
	}
	// Warm-up, not counted: the first job and the first raw run (the jobs' network, which the
	// raw runs use too, was made by the slaves' Prepare).
	if _, err := one(); err != nil {
		t.Fatal(err)
	}
	if err := dockerRun(image, 0); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	clear(submitted)
	mu.Unlock()
	cpu := newCPUMeter(t, m.PID, m.DBURL)
	rawSeq := floorDockerRun(t, image, sz.b3Raw, false)
	var seq []time.Duration
	for range sz.b3Seq {
		dur, err := one()
		if err != nil {
			t.Fatal(err)
		}
		seq = append(seq, dur)
	}
	if !sz.smoke {
		rawSeq = append(rawSeq, floorDockerRun(t, image, sz.b3Raw, false)...)
	}
	rep.note("B3", "sequential: %s; %s", cpu, phases(t, m, submitted))
	clear(submitted)
	cpu.reset()
	// The concurrent jobs in rounds, each batch of jobs between two batches of as many
	// concurrent raw runs (the batch after one round is the batch before the next), so that the
	// jobs and their floor share the engine's state and the machine's load as closely as they
	// can. A single batch of raw runs before the jobs and one after them moved by 0.7 s at the
	// median between themselves, seven times the goal (2 Dec, 79d41df): twenty concurrent
	// starts on two cores wait on the engine's own work (removing the last batch's containers,
	// its exit handling), which one batch measures once.
	rawConc := floorDockerRun(t, image, sz.b3Conc, true)
	var conc []time.Duration
	var rounds []string
	for r := range sz.b3Rounds {
		batch := make([]time.Duration, sz.b3Conc)
		errs := make([]error, sz.b3Conc)
		var wg sync.WaitGroup
		for i := range batch {
			wg.Go(func() { batch[i], errs[i] = one() })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		conc = append(conc, batch...)
		// A job ends at FINISHED and its slave removes the container after that, where a raw
		// `docker run --rm` returns once its container is gone: the next raw batch starts on an
		// engine as idle as the jobs found it.
		waitNoContainers(t, d, names)
		before := rawConc[len(rawConc)-sz.b3Conc:]
		if sz.smoke {
			rounds = append(rounds, fmt.Sprintf("round %d: raw %s, jobs %s", r+1, ms(percentile(before, 50)), ms(percentile(batch, 50))))
			continue
		}
		after := floorDockerRun(t, image, sz.b3Conc, true)
		rawConc = append(rawConc, after...)
		rounds = append(rounds, fmt.Sprintf("round %d: raw %s, jobs %s, raw %s", r+1,
			ms(percentile(before, 50)), ms(percentile(batch, 50)), ms(percentile(after, 50))))
	}
	rep.note("B3", "concurrent: %s; %s", cpu, phases(t, m, submitted))
	rep.note("B3", "concurrent medians by round: %s", strings.Join(rounds, "; "))
	add := func(what string, jobs, raw []time.Duration) {
		over := percentile(jobs, 50) - percentile(raw, 50)
		rep.add(result{Scenario: "B3", Measure: fmt.Sprintf("%s: median submit → FINISHED (p99) minus median raw run", what),
			Value: fmt.Sprintf("%s (%s; job median %s)", ms(over), ms(percentile(jobs, 99)), ms(percentile(jobs, 50))), Goal: "≤ 100 ms", Met: met(over <= 100*time.Millisecond),
			Floor: fmt.Sprintf("raw `docker run --rm` with the job's limits: median %s", ms(percentile(raw, 50))), Ratio: ratio(percentile(jobs, 50).Seconds(), percentile(raw, 50).Seconds())})
	}
	add(fmt.Sprintf("%d sequential busybox jobs", len(seq)), seq, rawSeq)
	add(fmt.Sprintf("%d concurrent busybox jobs", len(conc)), conc, rawConc)
	rep.note("B3", "%d real slave agents (%d CPUs each, one per job) on the local Docker Engine; %d raw runs sequential (half before, half after the jobs), %d concurrent (a batch before and after each round of jobs); end = the FINISHED time the master recorded",
		nSlaves, runtime.NumCPU(), len(rawSeq), len(rawConc))
}

// phases says where the jobs' time went, as medians between the events the master recorded:
// submitted (by the benchmark's clock) → ASSIGNED → STARTING (the slave picked it up) →
// RUNNING (container created and started) → FINISHED (ran, log shipped, reported).
func phases(t testing.TB, m *master, submitted map[string]time.Time) string {
	t.Helper()
	steps := []job.Status{job.StatusAssigned, job.StatusStarting, job.StatusRunning, job.StatusFinished}
	gaps := make([][]time.Duration, len(steps))
	for id, t0 := range submitted {
		var raw []byte
		if err := m.Store.DB().QueryRow(`SELECT event_times FROM jobs WHERE uuid = $1`, id).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		var at map[job.Status]time.Time
		if err := json.Unmarshal(raw, &at); err != nil {
			t.Fatal(err)
		}
		prev := t0
		for i, st := range steps {
			gaps[i] = append(gaps[i], at[st].Sub(prev))
			prev = at[st]
		}
	}
	return fmt.Sprintf("median submit → ASSIGNED %s → STARTING %s → RUNNING %s → FINISHED %s", ms(percentile(gaps[0], 50)),
		ms(percentile(gaps[1], 50)), ms(percentile(gaps[2], 50)), ms(percentile(gaps[3], 50)))
}

// slaveContainers lists the containers of the slave named name, running or not, by the label
// its runtime puts on each.
func slaveContainers(ctx context.Context, d *client.Client, name string) ([]container.Summary, error) {
	return d.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "gpulab.slave="+name))})
}

// waitNoContainers waits until the named slaves hold no container.
func waitNoContainers(t testing.TB, d *client.Client, slaves []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, name := range slaves {
		for {
			cs, err := slaveContainers(ctx, d, name)
			if err != nil {
				t.Fatalf("containers of slave %s not removed: %v", name, err)
			}
			if len(cs) == 0 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// waitRegistered waits until n slaves have registered.
func waitRegistered(t testing.TB, m *master, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		ss, err := m.Store.ListSlaves(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		k := 0
		for _, s := range ss {
			if s.InstanceID != "" && s.Online {
				k++
			}
		}
		if k >= n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%d slaves did not register within a minute", n)
}

// checkLog reads the job's log through the API: the output must have arrived.
func checkLog(ctx context.Context, c *http.Client, base, id string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+apiBase+"/jobs/"+id+"/log", nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != "hello from busybox\n" {
		return fmt.Errorf("log of job %s: %d %q", id, resp.StatusCode, body)
	}
	return nil
}
