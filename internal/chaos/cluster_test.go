package chaos

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	dockerclient "github.com/docker/docker/client"

	"github.com/opengpulab/gpulab/client"
	"github.com/opengpulab/gpulab/internal/faults"
	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
)

// The timings of a scenario's masters: short, so faults play out in seconds, and in the
// proportions of the defaults (a slave fences itself well before its jobs run elsewhere).
const (
	heartbeat      = 500 * time.Millisecond
	heartbeatGrace = 3 * time.Second
	jobGrace       = 10 * time.Second // the slaves' fence time
	fenceMargin    = 20 * time.Second // > the longest stop: a 15 s halt and a kill
	passInterval   = 500 * time.Millisecond
	assignLease    = 5 * time.Second
	handOverLease  = 15 * time.Second // an assignment no poll has returned
	startLease     = 20 * time.Second
	haltLease      = 40 * time.Second
	// leaseSlack is how late past its lease an in-between state may still be seen: a pass
	// runs every interval, and a loaded machine delays it.
	leaseSlack = 15 * time.Second
)

func buildBinaries(t *testing.T) (master, slave string) {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if master, err = builder.Build(ctx, filepath.Join(root, "cmd", "gpulab-master")); err != nil {
		t.Fatal(err)
	}
	if slave, err = builder.Build(ctx, filepath.Join(root, "cmd", "gpulab-slave")); err != nil {
		t.Fatal(err)
	}
	return master, slave
}

func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; d != "/"; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("no go.mod above %s", wd)
}

// cluster is one scenario's GPULab: its own Postgres, masters and slaves as processes, a user
// alice in project chaos, and the checker's own view of the database and the engine.
type cluster struct {
	t        *testing.T
	name     string // unique prefix of the scenario's slaves (and so of its containers)
	dir      string
	pg       *faults.Postgres
	masterB  string
	slaveB   string
	env      []string // DATABASE_URL, GPULAB_DATA_DIR
	masters  []*masterProc
	slaves   map[string]*slaveProc
	st       *store.Store
	docker   *dockerclient.Client
	image    string
	tl       *faults.Timeline
	alice    *client.Client
	alicePEM []byte

	mu       sync.Mutex
	accepted []string
	overdue  int // in-between states seen past their lease (+ slack)
}

type masterProc struct {
	*faults.Process
	name string
	port int
}

func (m *masterProc) url() string { return fmt.Sprintf("https://127.0.0.1:%d", m.port) }

type slaveProc struct {
	*faults.Process
	name  string
	proxy *faults.Proxy
}

type clusterOpts struct {
	masters int
	pgEnv   []string
}

func newCluster(t *testing.T, o clusterOpts) *cluster {
	t.Helper()
	masterB, slaveB := buildBinaries(t)
	docker := testenv.Docker(t)
	image := testenv.BusyboxImage(t)
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	c := &cluster{t: t, name: "chaos" + hex.EncodeToString(b) + "-", dir: t.TempDir(), masterB: masterB, slaveB: slaveB,
		slaves: map[string]*slaveProc{}, docker: docker, image: image}
	c.pg = faults.StartPostgresWith(t, faults.PostgresOptions{Env: o.pgEnv})
	c.env = []string{"DATABASE_URL=" + c.pg.URL(), "GPULAB_DATA_DIR=" + filepath.Join(c.dir, "data"), "GPULAB_AUTHORITY=chaos.test"}
	c.admin("migrate")
	c.admin("project", "add", "chaos")
	c.admin("cluster", "add", "1", "--name", "chaos")
	c.admin("member", "add", "chaos", "alice", "--email", "alice@example.org")
	pemFile := filepath.Join(c.dir, "alice.pem")
	c.admin("user-cert", "--user", "alice", "--email", "alice@example.org", "--out", pemFile)
	var err error
	if c.alicePEM, err = os.ReadFile(pemFile); err != nil {
		t.Fatal(err)
	}
	for i := range max(o.masters, 1) {
		c.startMaster(fmt.Sprintf("master%d", i+1))
	}
	caPEM, err := os.ReadFile(filepath.Join(c.dir, "data", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	var bases []string
	for _, m := range c.masters {
		bases = append(bases, m.url()+"/api/gpulab/v3.1")
	}
	c.alice, err = client.New(client.Config{BaseURL: strings.Join(bases, ","), CertPEM: c.alicePEM, ServerCA: caPEM, RetryMaxTime: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if c.st, err = store.Open(context.Background(), c.pg.URL()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.st.Close() })
	var names []string
	for _, short := range slaveNames {
		names = append(names, c.name+short)
	}
	if c.tl, err = faults.WatchSlaves(context.Background(), docker, names...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.removeContainers)
	t.Cleanup(c.tl.Close)
	go c.watchLeases()
	return c
}

// admin runs a gpulab-master admin command against the scenario's database.
func (c *cluster) admin(args ...string) string {
	c.t.Helper()
	cmd := exec.Command(c.masterB, args...)
	cmd.Env = append(os.Environ(), c.env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		c.t.Fatalf("gpulab-master %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return strings.TrimSpace(out.String())
}

func (c *cluster) startMaster(name string) *masterProc {
	c.t.Helper()
	port := freePort(c.t)
	m := &masterProc{name: name, port: port}
	m.Process = faults.StartProcess(c.t, faults.Command{Path: c.masterB, Env: c.env, Name: c.name + name, Args: []string{"serve", "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--hostnames", "127.0.0.1", "--heartbeat-interval", heartbeat.String(), "--heartbeat-grace", heartbeatGrace.String(),
		"--job-grace", jobGrace.String(), "--fence-margin", fenceMargin.String(), "--scheduler-interval", passInterval.String(),
		"--assign-lease", assignLease.String(), "--handover-lease", handOverLease.String(), "--start-lease", startLease.String(), "--halt-lease", haltLease.String(),
		"--max-running-per-user", "0", "--max-running-per-project", "0"}})
	c.masters = append(c.masters, m)
	c.waitReady(m)
	return m
}

// waitReady waits until the master answers /readyz.
func (c *cluster) waitReady(m *masterProc) {
	c.t.Helper()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: insecureTLS()}, Timeout: 2 * time.Second}
	waitUntil(c.t, 60*time.Second, "master "+m.name+" ready", func() bool {
		resp, err := hc.Get(m.url() + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// slaveNames are the short names scenarios give their slaves (the container timeline
// watches them all from the start).
var slaveNames = []string{"s1", "s2", "a", "b", "slow"}

// addSlave joins a slave (fake GPUs, 32 CPUs offered) and runs it; through a proxy when
// proxied, on another Docker Engine host when dockerHost is set.
func (c *cluster) addSlave(short string, gpus int, proxied bool, dockerHost string) *slaveProc {
	c.t.Helper()
	name := c.name + short
	token := c.admin("slave-token", "--name", name, "--cluster", "1")
	state := filepath.Join(c.dir, name)
	ca := filepath.Join(c.dir, "data", "ca.pem")
	tokenFile := filepath.Join(c.dir, name+"-token") // a file, not an argument: ps shows arguments
	if err := os.WriteFile(tokenFile, []byte(strings.TrimSpace(token)+"\n"), 0o600); err != nil {
		c.t.Fatalf("token file: %v", err)
	}
	join := exec.Command(c.slaveB, "join", "--master", c.masters[0].url(), "--ca", ca, "--token-file", tokenFile, "--state-dir", state)
	if out, err := join.CombinedOutput(); err != nil {
		c.t.Fatalf("join %s: %v %s", name, err, out)
	}
	s := &slaveProc{name: name}
	var urls []string
	for _, m := range c.masters {
		urls = append(urls, m.url())
	}
	if proxied {
		var err error
		if s.proxy, err = faults.NewProxy(fmt.Sprintf("127.0.0.1:%d", c.masters[0].port)); err != nil {
			c.t.Fatal(err)
		}
		c.t.Cleanup(s.proxy.Close)
		urls = []string{"https://" + s.proxy.Addr()}
	}
	env := []string{"GPULAB_LOG_LEVEL=info"}
	if dockerHost != "" {
		env = append(env, "DOCKER_HOST="+dockerHost)
	}
	projects := filepath.Join(c.dir, "projects")
	_ = os.MkdirAll(projects, 0o755)
	args := []string{"run", "--state-dir", state, "--master", strings.Join(urls, ","),
		"--scratch-root", filepath.Join(state, "scratch"), "--cpus", "32", "--storage", "/project=" + projects + "/{project}",
		"--network", testenv.JobNetwork()}
	if gpus > 0 {
		args = append(args, "--fake-gpus", fmt.Sprintf("%dxV100-32GB", gpus))
	}
	s.Process = faults.StartProcess(c.t, faults.Command{Path: c.slaveB, Env: env, Name: name, Args: args})
	c.slaves[short] = s
	waitUntil(c.t, 60*time.Second, "slave "+name+" online", func() bool {
		sl, err := c.st.GetSlave(context.Background(), name)
		return err == nil && sl.Online && sl.InstanceID != ""
	})
	return s
}

// spec is a job of the workload.
type spec struct {
	name        string
	script      string
	gpus        int
	restartable bool
	slave       string // pin to a slave (short name)
}

// shortJob runs a few seconds and ends by itself.
func shortJob(i int) spec {
	return spec{name: fmt.Sprintf("short-%d", i), gpus: 1,
		script: fmt.Sprintf(`echo start %d; sleep %d; echo done %d`, i, 1+i%3, i)}
}

// longJob runs until stopped; it halts cleanly (exit 123) on SIGUSR1.
func longJob(i int, restartable bool) spec {
	return spec{name: fmt.Sprintf("long-%d", i), gpus: 1, restartable: restartable,
		script: `trap 'echo halted; exit 123' USR1; trap 'echo stopped; exit 0' TERM; echo start; while true; do sleep 0.3; done`}
}

func (c *cluster) body(s spec) []byte {
	sched := map[string]any{"maxDuration": "1 hour", "minDuration": "1 minute"}
	if s.restartable {
		sched["restartable"] = true
	}
	res := map[string]any{"cpus": 1, "gpus": s.gpus, "cpuMemoryGb": 1}
	if s.slave != "" {
		res["slaveName"] = c.name + s.slave
	}
	b, _ := json.Marshal(map[string]any{"name": s.name, "request": map[string]any{
		"resources":  res,
		"docker":     map[string]any{"image": c.image, "command": []string{"sh", "-c", s.script}},
		"scheduling": sched,
	}})
	return b
}

// submit submits a job as alice (retrying through outages) and records it as accepted.
func (c *cluster) submit(s spec) string {
	c.t.Helper()
	id, err := c.trySubmit(s)
	if err != nil {
		c.t.Fatal(err)
	}
	return id
}

// trySubmit is submit for goroutines other than the test's.
func (c *cluster) trySubmit(s spec) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	id, err := c.alice.SubmitJob(ctx, c.body(s), false)
	if err != nil {
		return "", fmt.Errorf("submit %s: %w", s.name, err)
	}
	c.accept(id)
	return id, nil
}

func (c *cluster) accept(id string) {
	c.mu.Lock()
	c.accepted = append(c.accepted, id)
	c.mu.Unlock()
}

func (c *cluster) setStatus(id string, st job.Status) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := c.alice.SetStatus(ctx, id, st); err != nil {
		c.t.Fatalf("set %s to %s: %v", id, st, err)
	}
}

func (c *cluster) job(id string) *store.JobRecord {
	c.t.Helper()
	rec, err := c.st.GetJob(context.Background(), id)
	if err != nil {
		c.t.Fatalf("job %s: %v", id, err)
	}
	return rec
}

func (c *cluster) waitStatus(id string, limit time.Duration, want ...job.Status) {
	c.t.Helper()
	waitUntil(c.t, limit, fmt.Sprintf("job %s reaching %v", id, want), func() bool {
		rec, err := c.st.GetJob(context.Background(), id)
		return err == nil && slices.Contains(want, rec.Job.State.Status)
	})
}

// removeContainers removes what the scenario's slaves left on the engine (after a failure).
func (c *cluster) removeContainers() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, short := range slaveNames {
		cs, err := c.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "gpulab.slave="+c.name+short))})
		if err != nil {
			return
		}
		for _, ct := range cs {
			_ = c.docker.ContainerRemove(ctx, ct.ID, container.RemoveOptions{Force: true})
		}
	}
}

// jobs lists every job of the scenario (restarts included) with its lineage (the job it
// restarts, else itself).
func (c *cluster) jobs() map[string]*store.JobRecord {
	c.t.Helper()
	recs, err := c.st.ListJobs(context.Background(), store.JobFilter{})
	if err != nil {
		c.t.Fatal(err)
	}
	out := map[string]*store.JobRecord{}
	for _, r := range recs {
		out[r.Job.UUID] = r
	}
	return out
}

func lineage(r *store.JobRecord) string {
	if r.Job.RestartInfo != nil {
		return r.Job.RestartInfo.InitialJobUUID
	}
	return r.Job.UUID
}

// watchLeases samples, every second, the jobs in an in-between state past their lease by more
// than leaseSlack (database clock): the housekeeping must have given them their outcome.
func (c *cluster) watchLeases() {
	for {
		select {
		case <-c.t.Context().Done():
			return
		case <-time.After(time.Second):
		}
		var n int
		err := c.st.DB().QueryRowContext(c.t.Context(), `SELECT count(*) FROM jobs j JOIN slaves s ON s.name = j.assigned_slave_name
WHERE j.status IN ('ASSIGNED','STARTING','MUSTHALT','HALTING') AND j.lease_expires_at < now() - make_interval(secs => $1)
AND (j.status = 'ASSIGNED' OR s.online)`, leaseSlack.Seconds()).Scan(&n)
		if err == nil && n > 0 {
			c.mu.Lock()
			c.overdue = max(c.overdue, n)
			c.mu.Unlock()
		}
	}
}

// endAll cancels every job that has not ended (the long ones) and waits for all to end.
func (c *cluster) endAll(limit time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		open := 0
		for id, r := range c.jobs() {
			st := r.Job.State.Status
			if st.Ended() {
				continue
			}
			open++
			if st == job.StatusRunning || st == job.StatusQueued || st == job.StatusOnHold {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_ = c.alice.SetStatus(ctx, id, job.StatusCancelled)
				cancel()
			}
		}
		if open == 0 || time.Now().After(deadline) {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}
