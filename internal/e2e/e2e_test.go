// Package e2e runs the master (real Postgres, real TLS, the scheduler loop) and slaves (the real
// agent and container runtime on the real Docker Engine) together, and checks what users see
// through the API.
package e2e

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/slave"
	slavecontainer "github.com/opengpulab/gpulab/slave/container"
	"github.com/opengpulab/gpulab/slave/gpu"
	"github.com/opengpulab/gpulab/slave/storage"
	"github.com/opengpulab/gpulab/store"
)

const v31 = "/api/gpulab/v3.1"

// env is a master with a user alice in project "vision" and helpers to run slaves.
type env struct {
	t        *testing.T
	m        *testmaster.Master
	alice    *testmaster.User
	image    string
	docker   *client.Client
	projects string // host folder holding the projects' folders
	scratch  string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, testmaster.Options{})
}

// newEnvWith is newEnv with a master of the given options (the scheduler always runs).
func newEnvWith(t *testing.T, opts testmaster.Options) *env {
	t.Helper()
	docker := testenv.Docker(t)
	image := testenv.BusyboxImage(t)
	opts.Scheduler = true
	m := testmaster.Start(t, opts)
	e := &env{t: t, m: m, image: image, docker: docker, projects: t.TempDir(), scratch: t.TempDir()}
	e.alice = m.AddUser("alice", false, "", "vision")
	return e
}

// slaveRun is one running slave agent.
type slaveRun struct {
	name    string
	cancel  context.CancelFunc
	stopped chan struct{} // closed when the agent returned
	gpus    *gpu.Sampler  // the agent's GPU sampler (SetFakeUtil scripts the fake GPUs)
}

// stop stops the agent as a crash would: its containers keep running.
func (s *slaveRun) stop(t *testing.T) {
	t.Helper()
	s.cancel()
	select {
	case <-s.stopped:
	case <-time.After(waitLimit):
		t.Fatalf("slave %s did not stop within %s", s.name, waitLimit)
	}
}

type slaveOpts struct {
	// name is the slave's name before slaveName makes it unique to the test process.
	name     string
	cluster  int
	fakeGPUs string
	docker   *client.Client
	// deviceRequests hands fake GPUs over as real ones (on the stub-hook engine).
	deviceRequests bool
	// master, when set, is the URL the slave talks to (a proxy in front of the master);
	// wrap, when set, wraps the slave's protocol client (to inject faults).
	master string
	wrap   func(protocol.Master) protocol.Master
	// config tunes the agent (PollWait defaults to 2 s).
	config slave.Config
	// fakeGPUUtil scripts the fake GPUs' utilisation (--fake-gpu-util); slaveRun.gpus can
	// change it while the slave runs.
	fakeGPUUtil []float64
	// cpus is the CPUs the slave offers (default 4; jobs are pinned to their ids, so a test
	// running more jobs at once than the machine has CPUs must offer no more than it has).
	cpus int
}

// slaveName is the name a test slave really has: base with the test process's suffix, since
// the slave labels its containers with its name and finds (and removes) its containers by that
// label on an engine another test process may share.
func slaveName(base string) string { return testenv.Name(base) }

// startSlave runs a slave agent in-process against the master, with the real container runtime.
// The slave is named slaveName(o.name).
func (e *env) startSlave(o slaveOpts) *slaveRun {
	t := e.t
	t.Helper()
	o.name = slaveName(o.name)
	if o.docker == nil {
		o.docker = e.docker
	}
	cert := e.m.SlaveCert(o.name, o.cluster)
	caPEM, err := os.ReadFile(e.m.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	url := e.m.URL
	if o.master != "" {
		url = o.master
	}
	pc, err := protocol.NewClient(url, caPEM, &cert)
	if err != nil {
		t.Fatal(err)
	}
	var mc protocol.Master = pc
	if o.wrap != nil {
		mc = o.wrap(pc)
	}
	smap, err := storage.ParseMap([]string{"/project=" + filepath.Join(e.projects, "{project}")})
	if err != nil {
		t.Fatal(err)
	}
	gi := gpu.Inventory{Status: "none: test slave"}
	if o.fakeGPUs != "" {
		if gi, err = gpu.Fake(o.fakeGPUs, "12.4"); err != nil {
			t.Fatal(err)
		}
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	inv := protocol.Inventory{Name: o.name, InstanceID: hex.EncodeToString(b), ClusterID: o.cluster, Host: "127.0.0.1", DNSName: "127.0.0.1",
		Version: "test", PID: os.Getpid(), CPUs: cmp.Or(o.cpus, 4), MemoryMiB: 8192, GPUs: gi.GPUs, CudaVersion: gi.CudaVersion, GPUStatus: gi.Status,
		StorageRoots: smap.Roots()}
	log := slog.New(slog.NewTextHandler(testWriter{t, o.name}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	h := testHardening()
	rt := slavecontainer.New(o.docker, slavecontainer.Config{Storage: smap, ScratchRoot: e.scratch, SlaveName: o.name, SlaveHost: "127.0.0.1",
		SlaveDNSName: "127.0.0.1", SlaveInstanceID: inv.InstanceID, SlavePID: inv.PID, Version: "test", FakeGPUDeviceRequests: o.deviceRequests,
		Hardening: &h}, log)
	ctx, cancel := context.WithCancel(context.Background())
	sampler := gpu.NewSampler(nil, gi.GPUs)
	sampler.SetFakeUtil(o.fakeGPUUtil)
	run := &slaveRun{name: o.name, cancel: cancel, stopped: make(chan struct{}), gpus: sampler}
	if o.config.PollWait == 0 {
		o.config.PollWait = 2 * time.Second
	}
	agent := slave.New(mc, rt, sampler, inv, o.config, log)
	go func() {
		defer close(run.stopped)
		if err := agent.Run(ctx); err != nil {
			t.Logf("slave %s: %v", o.name, err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-run.stopped
		removeContainers(o.docker, o.name)
	})
	// The agent registers in the background: wait for it, or a job submitted next could be
	// planned before the slave exists (and fail as impossible).
	waitUntil(t, "the registration of slave "+o.name, func() bool {
		ss, err := e.m.Store.ListSlaves(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(ss, func(s store.Slave) bool { return s.Name == o.name && s.InstanceID == inv.InstanceID && s.Online })
	})
	return run
}

// removeContainers removes every container of a test slave (also those a stopped agent left);
// slaveName is the slave's full name.
func removeContainers(d *client.Client, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := d.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "gpulab.slave="+name))})
	if err != nil {
		return
	}
	for _, c := range cs {
		_ = d.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
	}
}

type testWriter struct {
	t      *testing.T
	prefix string
}

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(w.prefix + ": " + strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// jobFile makes a job request running cmd (a shell script) in the busybox image.
func (e *env) jobFile(name, script string, edit func(r map[string]any)) string {
	req := map[string]any{
		"resources":  map[string]any{"cpus": 1, "gpus": 0, "cpuMemoryGb": 1},
		"docker":     map[string]any{"image": e.image, "command": []string{"sh", "-c", script}},
		"scheduling": map[string]any{},
	}
	if edit != nil {
		edit(req)
	}
	b, _ := json.Marshal(map[string]any{"name": name, "request": req})
	return string(b)
}

func (e *env) submit(body string) string {
	e.t.Helper()
	status, data, _ := e.m.Do(e.alice, "POST", v31+"/jobs", strings.NewReader(body))
	if status != 201 {
		e.t.Fatalf("submit: %d %s", status, data)
	}
	return strings.TrimSpace(string(data))
}

func (e *env) job(id string) *job.Job {
	e.t.Helper()
	status, data, _ := e.m.Do(e.alice, "GET", v31+"/jobs/"+id, nil)
	if status != 200 {
		e.t.Fatalf("get job %s: %d %s", id, status, data)
	}
	var j job.Job
	if err := json.Unmarshal(data, &j); err != nil {
		e.t.Fatalf("decode job: %v", err)
	}
	return &j
}

// waitLimit is how long a test waits for something to happen before it fails: a generous
// bound, since two test processes may share the machine's two cores and one Docker Engine.
// Tests wait on conditions, never on time; speed is measured by `make bench`.
const waitLimit = 2 * time.Minute

// waitUntil polls cond until it holds, and fails the test when it does not within waitLimit.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within %s", what, waitLimit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitFor polls the job until it reaches one of want (failing on any other ended state).
func (e *env) waitFor(id string, want ...job.Status) *job.Job {
	e.t.Helper()
	deadline := time.Now().Add(waitLimit)
	var j *job.Job
	for time.Now().Before(deadline) {
		j = e.job(id)
		for _, w := range want {
			if j.State.Status == w {
				return j
			}
		}
		if j.State.Status.Ended() {
			e.t.Fatalf("job %s ended %s, want %v; events:\n%s", id, j.State.Status, want, e.events(id))
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.t.Fatalf("job %s did not reach %v within %s (it is %s); events:\n%s", id, want, waitLimit, j.State.Status, e.events(id))
	return nil
}

func (e *env) events(id string) string {
	_, data, _ := e.m.Do(e.alice, "GET", v31+"/jobs/"+id+"/debug", nil)
	return string(data)
}

func (e *env) logOf(id string) string {
	e.t.Helper()
	status, data, _ := e.m.Do(e.alice, "GET", v31+"/jobs/"+id+"/log", nil)
	if status != 200 && status != 204 {
		e.t.Fatalf("log: %d %s", status, data)
	}
	return string(data)
}

// waitLog polls the log until it contains want.
func (e *env) waitLog(id, want string) string {
	e.t.Helper()
	deadline := time.Now().Add(waitLimit)
	var l string
	for time.Now().Before(deadline) {
		if l = e.logOf(id); strings.Contains(l, want) {
			return l
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.t.Fatalf("the log of %s did not show %q within %s:\n%s", id, want, waitLimit, l)
	return ""
}

func (e *env) put(id, status string) {
	e.t.Helper()
	code, data, _ := e.m.Do(e.alice, "PUT", v31+"/jobs/"+id+"/state/status", strings.NewReader(status))
	if code != 200 {
		e.t.Fatalf("PUT %s: %d %s", status, code, data)
	}
}

func TestHelloWorldRunsToFinished(t *testing.T) {
	e := newEnv(t)
	e.startSlave(slaveOpts{name: "s1", cluster: 1})
	id := e.submit(e.jobFile("hello", "echo 'Hello World!'; sleep 0.2; echo to-stderr >&2; sleep 0.2; echo done", nil))
	j := e.waitFor(id, job.StatusFinished)
	if j.State.Resources == nil || j.State.Resources.ExitCode == nil || *j.State.Resources.ExitCode != 0 {
		t.Fatalf("exit code: %+v", j.State.Resources)
	}
	for _, s := range []job.Status{job.StatusQueued, job.StatusAssigned, job.StatusStarting, job.StatusRunning, job.StatusFinished} {
		if j.State.EventTimes[s].IsZero() {
			t.Errorf("no event time for %s: %v", s, j.State.EventTimes)
		}
	}
	if j.State.Resources.SlaveName != slaveName("s1") || j.State.Scheduling.AssignedSlaveName != slaveName("s1") {
		t.Errorf("slave: %+v %+v", j.State.Resources, j.State.Scheduling)
	}
	if l := e.waitLog(id, "done"); l != "Hello World!\nto-stderr\ndone\n" {
		t.Errorf("log = %q", l)
	}
	// The container is removed once the end is reported (right after FINISHED).
	waitUntil(t, "the removal of the finished job's container", func() bool { return countContainers(t, e.docker, slaveName("s1")) == 0 })
	// A non-zero exit is FAILED with its exit code.
	id = e.submit(e.jobFile("fail", "echo failing; exit 3", nil))
	j = e.waitFor(id, job.StatusFailed)
	if j.State.Resources.ExitCode == nil || *j.State.Resources.ExitCode != 3 {
		t.Errorf("exit code of a failing job: %+v", j.State.Resources)
	}
}

// countContainers counts the containers of the slave of that (full) name, running or not.
func countContainers(t *testing.T, d *client.Client, name string) int {
	t.Helper()
	cs, err := d.ContainerList(context.Background(), container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "gpulab.slave="+name))})
	if err != nil {
		t.Fatal(err)
	}
	return len(cs)
}

func TestEnvironmentPortsAndStorage(t *testing.T) {
	e := newEnv(t)
	e.startSlave(slaveOpts{name: "s1", cluster: 1})
	// Every GPULAB_* variable, the project GID, the request's environment.
	id := e.submit(e.jobFile("env", "env | sort", func(r map[string]any) {
		d := r["docker"].(map[string]any)
		d["environment"] = map[string]any{"DEMO_A": 1, "DEMO_B": "two"}
		d["projectGidVariableName"] = "DEMO_PROJECT_GID"
	}))
	e.waitFor(id, job.StatusFinished)
	l := e.waitLog(id, "GPULAB_WORKER_ID")
	p, _ := e.m.Store.GetProjectByName(context.Background(), "vision")
	want := map[string]string{
		"GPULAB_USERNAME": "alice", "GPULAB_USER_URN": e.alice.URN, "GPULAB_PROJECT": "vision", "GPULAB_JOB_ID": id,
		"GPULAB_CLUSTER_ID": "1", "GPULAB_SLAVE_HOSTNAME": "127.0.0.1", "GPULAB_SLAVE_DNSNAME": "127.0.0.1",
		"GPULAB_CPUS_RESERVED": "1", "GPULAB_GPUS_RESERVED": "0", "GPULAB_VERSION": "test", "GPULAB_RESTART_COUNT": "0",
		"GPULAB_RESTART_INITIAL_JOB_ID": id, "DEMO_A": "1", "DEMO_B": "two", "DEMO_PROJECT_GID": fmt.Sprint(p.GID),
	}
	for k, v := range want {
		if !strings.Contains(l, "\n"+k+"="+v+"\n") && !strings.HasPrefix(l, k+"="+v+"\n") {
			t.Errorf("%s=%s not in the container's environment:\n%s", k, v, l)
		}
	}
	for _, k := range []string{"GPULAB_USER_MINI_ID", "GPULAB_SLAVE_INSTANCE_ID", "GPULAB_SLAVE_PID", "GPULAB_WORKER_ID", "GPULAB_MEM_RESERVED"} {
		if !strings.Contains(l, k+"=") {
			t.Errorf("%s missing:\n%s", k, l)
		}
	}

	// A published port is reachable at the host port the job reports.
	id = e.submit(e.jobFile("web", "mkdir -p /www && echo hello-from-job > /www/index.html && httpd -f -p 8080 -h /www", func(r map[string]any) {
		r["docker"].(map[string]any)["portMappings"] = []any{8080}
	}))
	j := e.waitFor(id, job.StatusRunning)
	if len(j.State.Resources.PortMappings) != 1 || j.State.Resources.PortMappings[0].HostPort == 0 {
		t.Fatalf("port mappings: %+v", j.State.Resources.PortMappings)
	}
	addr := net.JoinHostPort("127.0.0.1", fmt.Sprint(j.State.Resources.PortMappings[0].HostPort))
	waitUntil(t, "an answer from the job's web server at "+addr, func() bool { return strings.Contains(httpGet(addr), "hello-from-job") })
	e.put(id, "CANCELLED")

	// The project folder is mounted; a symlink in it pointing outside is refused before any
	// container exists.
	projDir := filepath.Join(e.projects, "vision")
	if err := os.MkdirAll(projDir, 0o770); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(projDir, "input.txt"), []byte("project data\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	id = e.submit(e.jobFile("storage", "cat /project/input.txt; echo written > /project/out.txt", func(r map[string]any) {
		r["docker"].(map[string]any)["storage"] = []any{map[string]any{"containerPath": "/project"}}
	}))
	e.waitFor(id, job.StatusFinished)
	if l := e.waitLog(id, "project data"); !strings.Contains(l, "project data") {
		t.Fatalf("log: %q", l)
	}
	if data, err := os.ReadFile(filepath.Join(projDir, "out.txt")); err != nil || string(data) != "written\n" {
		t.Fatalf("write from the job: %q %v", data, err)
	}
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(projDir, "escape")); err != nil {
		t.Fatal(err)
	}
	before := countContainers(t, e.docker, slaveName("s1"))
	id = e.submit(e.jobFile("escape", "ls /data", func(r map[string]any) {
		r["docker"].(map[string]any)["storage"] = []any{map[string]any{"hostPath": "/project/escape", "containerPath": "/data"}}
	}))
	j = e.waitFor(id, job.StatusFailed)
	if ev := e.events(id); !strings.Contains(ev, "storage") {
		t.Errorf("the failure does not say why: %s", ev)
	}
	if j.State.Resources != nil && j.State.Resources.ExitCode != nil {
		t.Errorf("a refused job has an exit code: %+v", j.State.Resources)
	}
	if after := countContainers(t, e.docker, slaveName("s1")); after > before {
		t.Errorf("a container was created for a refused storage request (%d → %d)", before, after)
	}
}

func httpGet(addr string) string {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return ""
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	_, _ = fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: x\r\n\r\n")
	buf := make([]byte, 4096)
	n, _ := c.Read(buf)
	return string(buf[:n])
}
