package bench

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	slavecontainer "github.com/opengpulab/gpulab/slave/container"
)

// The floors: what the same machine does with the least possible work on the same path, so
// every scenario's figure reads as a multiple of what cannot be avoided.

// floorHTTPS is GET on an empty handler behind the master's own TLS configuration (the same
// certificate, client certificate verification and Go HTTP server, none of the master's
// middleware or handlers), over conns keep-alive connections with a user certificate.
func floorHTTPS(t testing.TB, m *master, u *user, conns int, warm, measure time.Duration) loadResult {
	t.Helper()
	clients := floorClients(m, u, conns)
	res := closedLoop(conns, warm, measure, func(ctx context.Context, w, i int) error {
		return get(ctx, clients[w], m.Floor+"/", nil)
	})
	if res.FirstErr != nil {
		t.Fatalf("floor HTTPS: %v", res.FirstErr)
	}
	return res
}

// floorClients are conns keep-alive clients of the master with u's certificate, one
// connection each, for the floors' requests to its empty handler.
func floorClients(m *master, u *user, conns int) []*http.Client {
	clients := make([]*http.Client, conns)
	for i := range clients {
		clients[i] = &http.Client{Transport: m.transport(&u.TLS, 1), Timeout: time.Minute}
	}
	return clients
}

// get does a GET and reads the whole answer, which must be 200.
func get(ctx context.Context, c *http.Client, url string, header http.Header) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d", url, resp.StatusCode)
	}
	return nil
}

// floorPayload is a job request's worth of JSON.
var floorPayload = jobDoc("floor", 1, 2, 8, 0)

// floorInsert is a bare INSERT of one row (a job request's worth of JSON) committed on its own,
// by clients connections at once, on the benchmark's database.
func floorInsert(t testing.TB, dbURL string, clients int, warm, measure time.Duration) loadResult {
	t.Helper()
	ctx := context.Background()
	db := openDB(t, dbURL, clients)
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS bench_floor (id BIGSERIAL PRIMARY KEY,
created_at TIMESTAMPTZ NOT NULL DEFAULT now(), payload JSONB NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	conns := make([]*sql.Conn, clients)
	for i := range conns {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		conns[i] = c
	}
	res := closedLoop(clients, warm, measure, func(ctx context.Context, w, i int) error {
		_, err := conns[w].ExecContext(ctx, `INSERT INTO bench_floor (payload) VALUES ($1)`, floorPayload)
		return err
	})
	if res.FirstErr != nil {
		t.Fatalf("floor insert: %v", res.FirstErr)
	}
	return res
}

// floorUpdates times n single-row UPDATEs (a resources-sized JSON each) in one transaction on a
// bare table: the round trips of writing n assignments row by row, with one commit.
func floorUpdates(t testing.TB, dbURL string, n int) time.Duration {
	t.Helper()
	ctx := context.Background()
	db := openDB(t, dbURL, 1)
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS bench_floor_rows (id INT PRIMARY KEY, status TEXT NOT NULL, payload JSONB)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `TRUNCATE bench_floor_rows`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO bench_floor_rows (id, status) SELECT g, 'QUEUED' FROM generate_series(1, $1::int) g`, n); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `ANALYZE bench_floor_rows`); err != nil {
		t.Fatal(err)
	}
	payload := `{"clusterId":1,"gpuIds":[0],"cpuIds":[0,1],"cpuMemoryGb":8,"slaveName":"sim-0001","slaveHost":"sim-0001.bench","slaveInstanceId":"inst-sim-0001","portMappings":[]}`
	start := time.Now()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		if _, err := tx.ExecContext(ctx, `UPDATE bench_floor_rows SET status = 'ASSIGNED', payload = $2 WHERE id = $1 AND status = 'QUEUED'`, i, payload); err != nil {
			_ = tx.Rollback()
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

// floorBeats is a heartbeat's least work at rate a second for measure (after warm): GET on the
// empty handler over one of conns keep-alive connections, then a one-row UPDATE of a slaves-sized
// table committed without waiting for the disk in the same statement (as the heartbeat's own
// statement is), on a pool of dbConns connections, each call in its own goroutine (open
// loop: a slow answer does not slow the rate). Latencies are of the two together.
func floorBeats(t testing.TB, m *master, u *user, rate float64, rows, conns, dbConns int, warm, measure time.Duration) loadResult {
	t.Helper()
	ctx := context.Background()
	db := openDB(t, m.DBURL, dbConns)
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS bench_floor_beats (id INT PRIMARY KEY, at TIMESTAMPTZ, payload JSONB)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO bench_floor_beats (id) SELECT g FROM generate_series(1, $1::int) g ON CONFLICT DO NOTHING`, rows); err != nil {
		t.Fatal(err)
	}
	clients := floorClients(m, u, conns)
	payload := `{"usage":{"gpus":[0.97,0.95,0.99,0.96,0.98,0.97,0.94,0.99]},"jobs":8}`
	n := int(rate * (warm + measure).Seconds())
	skip := int(rate * warm.Seconds())
	var res loadResult
	var mu sync.Mutex
	start := time.Now()
	openLoop(rate, n, func(i int) {
		t0 := time.Now()
		err := get(ctx, clients[i%conns], m.Floor+"/", nil)
		if err == nil {
			_, err = db.ExecContext(ctx, `WITH async AS (SELECT set_config('synchronous_commit', 'off', true))
UPDATE bench_floor_beats SET at = now(), payload = $2 FROM async WHERE id = $1`, 1+i%rows, payload)
		}
		d := time.Since(t0)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case i < skip:
		case err != nil:
			res.Errors++
			if res.FirstErr == nil {
				res.FirstErr = err
			}
		default:
			res.N++
			res.Lat = append(res.Lat, d)
		}
	})
	res.Window = max(time.Since(start)-warm, time.Millisecond)
	if res.FirstErr != nil {
		t.Fatalf("floor heartbeats: %v", res.FirstErr)
	}
	return res
}

func openDB(t testing.TB, dbURL string, conns int) *sql.DB {
	t.Helper()
	db, err := sql.Open("postgres", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(conns + 1)
	db.SetMaxIdleConns(conns + 1)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// dockerRun is the raw `docker run --rm` of the same image and command as the B3 jobs, with
// what makes a job's container cost what it costs: the container configuration the slave
// would create for a B3 job pinned to CPU cpu (slave/container.Spec: CPU quota and cpuset,
// memory without swap, /dev/shm, pids and ulimits, dropped capabilities, no-new-privileges,
// bounded log, the jobs' network, the root file system's size where the engine applies it,
// the GPULAB_* environment). A bare `docker run` would make the floor cheaper than any job.
func dockerRun(image string, cpu int) error {
	args, err := jobLikeRunArgs(image, cpu)
	if err != nil {
		return err
	}
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil && strings.Contains(string(out), "--storage-opt") {
		// As the slave's runtime does where the engine cannot limit the size (overlay2 off xfs).
		args = slices.DeleteFunc(args, func(a string) bool { return a == "--storage-opt" || strings.HasPrefix(a, "size=") })
		out, err = exec.Command("docker", args...).CombinedOutput()
	}
	if err != nil {
		return fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// jobLikeRunArgs turns the configuration slave/container.Spec makes for a B3 job into `docker
// run` flags (only the fields Spec sets for such a job: no GPUs, mounts or ports).
func jobLikeRunArgs(image string, cpu int) ([]string, error) {
	h := slavecontainer.DefaultHardening()
	h.Network = testenv.JobNetwork()
	h.CapUlimits()
	doc := fmt.Sprintf(`{"name": "b3", "request": {"resources": {"cpus": 1, "gpus": 0, "cpuMemoryGb": 1},
		"docker": {"image": %q, "command": ["sh", "-c", %q]}, "scheduling": {}}}`, image, b3Script)
	j, err := job.Parse([]byte(doc), job.Options{})
	if err != nil {
		return nil, fmt.Errorf("the B3 job: %w", err)
	}
	j.UUID = "b3-floor"
	a := protocol.Assignment{Job: *j, Attempt: 1, CPUIDs: []int{cpu}, MemoryGb: 1, UserName: "alice", Project: "vision", ClusterID: 1}
	cc, hc, err := slavecontainer.Spec(a, slavecontainer.Config{SlaveName: "b3-floor", SlaveHost: "127.0.0.1", Version: "bench", Hardening: &h}, nil)
	if err != nil {
		return nil, fmt.Errorf("the B3 job's container: %w", err)
	}
	r := hc.Resources
	args := []string{"run", "--rm", "--network", string(hc.NetworkMode),
		"--cpus", strconv.FormatFloat(float64(r.NanoCPUs)/1e9, 'f', -1, 64), "--cpuset-cpus", r.CpusetCpus,
		"--memory", strconv.FormatInt(r.Memory, 10), "--memory-swap", strconv.FormatInt(r.MemorySwap, 10),
		"--shm-size", strconv.FormatInt(hc.ShmSize, 10), "--log-driver", hc.LogConfig.Type,
		"--stop-signal", cc.StopSignal, "--stop-timeout", strconv.Itoa(*cc.StopTimeout)}
	if hc.PidsLimit != nil {
		args = append(args, "--pids-limit", strconv.FormatInt(*hc.PidsLimit, 10))
	}
	for _, u := range hc.Ulimits {
		args = append(args, "--ulimit", fmt.Sprintf("%s=%d:%d", u.Name, u.Soft, u.Hard))
	}
	for _, c := range hc.CapDrop {
		args = append(args, "--cap-drop", c)
	}
	for _, c := range hc.CapAdd {
		args = append(args, "--cap-add", c)
	}
	for _, o := range hc.SecurityOpt {
		args = append(args, "--security-opt", o)
	}
	for _, k := range slices.Sorted(maps.Keys(hc.LogConfig.Config)) {
		args = append(args, "--log-opt", k+"="+hc.LogConfig.Config[k])
	}
	for _, k := range slices.Sorted(maps.Keys(hc.StorageOpt)) {
		args = append(args, "--storage-opt", k+"="+hc.StorageOpt[k])
	}
	for _, e := range cc.Env {
		args = append(args, "--env", e)
	}
	return append(append(args, cc.Image), cc.Cmd...), nil
}

// floorDockerRun times n raw `docker run --rm` of image, concurrently when concurrent is set.
func floorDockerRun(t testing.TB, image string, n int, concurrent bool) []time.Duration {
	t.Helper()
	out := make([]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		one := func() {
			start := time.Now()
			errs[i] = dockerRun(image, i%runtime.NumCPU())
			out[i] = time.Since(start)
		}
		if concurrent {
			wg.Add(1)
			go func() { defer wg.Done(); one() }()
		} else {
			one()
		}
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}
