package container

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/google/uuid"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/slave/storage"
)

// env is one test's slave: a real engine, the busybox image, its own slave name (tests of two
// checkouts may share one engine) and its own storage folders.
type env struct {
	t     *testing.T
	cli   *client.Client
	image string
	cfg   Config
	rt    *Runtime
}

func newEnv(t *testing.T, tune func(*Config)) *env {
	t.Helper()
	cli := testenv.Docker(t)
	img := testenv.BusyboxImage(t)
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h := testHardening()
	cfg := Config{
		Hardening: &h,
		Storage: storage.Map{
			"/project":         filepath.Join(base, "projects", storage.ProjectPlaceholder),
			"/project_scratch": filepath.Join(base, "scratch", storage.ProjectPlaceholder),
		},
		ScratchRoot:     filepath.Join(base, "slave"),
		SlaveName:       "test-" + uuid.NewString()[:8],
		SlaveHost:       "testhost",
		SlaveDNSName:    "testhost.example.org",
		SlaveInstanceID: uuid.NewString(),
		Version:         "test",
		SlavePID:        os.Getpid(),
		CancelGrace:     time.Second,
		HaltGrace:       3 * time.Second,
		PullTimeout:     time.Minute,
	}
	if tune != nil {
		tune(&cfg)
	}
	return &env{t: t, cli: cli, image: img, cfg: cfg, rt: New(cli, cfg, nil)}
}

// assignment is a one-CPU, 1 GiB job running cmd in the busybox image.
func (e *env) assignment(cmd ...string) protocol.Assignment {
	id := uuid.NewString()
	a := protocol.Assignment{
		Job: job.Job{
			UUID: id,
			Request: job.Request{
				Resources: job.Resources{CPUs: 1, CPUMemoryGb: 1},
				Docker: job.Docker{
					Image:   e.image,
					Command: job.Command{List: cmd, IsList: true},
				},
			},
		},
		CPUIDs:     []int{0},
		MemoryGb:   1,
		UserName:   "alice",
		UserURN:    "urn:publicid:IDN+example.org+user+alice",
		UserMiniID: "alice@example",
		Project:    "demo",
		ProjectGID: 4242,
		ClusterID:  7,
		WorkerID:   1,
	}
	// Whatever happens, the container goes: the engine may be shared.
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := e.cli.ContainerRemove(ctx, ContainerName(id), container.RemoveOptions{Force: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			e.t.Logf("cleanup %s: %v", ContainerName(id), err)
		}
	})
	return a
}

func (e *env) start(a protocol.Assignment) *Started {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := e.rt.Start(ctx, a)
	if err != nil {
		e.t.Fatalf("Start: %v", err)
	}
	return s
}

func (e *env) wait(id string) int {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, err := e.rt.Wait(ctx, id)
	if err != nil {
		e.t.Fatalf("Wait: %v", err)
	}
	return code
}

// logs reads the whole log of a container, following it until it exits.
func (e *env) logs(id string) string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc, err := e.rt.Logs(ctx, id, true)
	if err != nil {
		e.t.Fatalf("Logs: %v", err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		e.t.Fatalf("read logs: %v", err)
	}
	return string(b)
}

// waitForLine follows the log until a line equals want, so that a test signals a job only
// once its trap is set.
func (e *env) waitForLine(id, want string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc, err := e.rt.Logs(ctx, id, true)
	if err != nil {
		e.t.Fatalf("Logs: %v", err)
	}
	defer rc.Close()
	sc := bufio.NewScanner(rc)
	for sc.Scan() {
		if sc.Text() == want {
			return
		}
	}
	e.t.Fatalf("log ended without %q: %v", want, sc.Err())
}

func (e *env) assertGone(name string) {
	e.t.Helper()
	_, err := e.cli.ContainerInspect(context.Background(), name)
	if !cerrdefs.IsNotFound(err) {
		e.t.Errorf("container %s still exists (inspect: %v)", name, err)
	}
}

func TestRunLogsAndExit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	// The engine reads stdout and stderr through two pipes, so writes to different streams
	// closer than a few milliseconds may be recorded in either order (docker logs shows the
	// same); writes further apart keep their order, and so does each stream on its own.
	const script = "echo a; sleep 0.05; echo b >&2; sleep 0.05; echo c; sleep 0.05; echo d >&2; sleep 0.05; echo e"
	const want = "a\nb\nc\nd\ne\n"
	s := e.start(e.assignment("sh", "-c", script))
	if got := e.logs(s.ContainerID); got != want {
		t.Errorf("logs = %q, want stdout and stderr in order %q", got, want)
	}
	if code := e.wait(s.ContainerID); code != 0 {
		t.Errorf("exit code = %d", code)
	}
	// The log stays readable after the exit, from the start.
	rc, err := e.rt.Logs(context.Background(), s.ContainerID, false)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	_ = rc.Close()
	if string(b) != want {
		t.Errorf("logs after exit = %q", b)
	}
}

func TestLogsEachStreamInOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	s := e.start(e.assignment("sh", "-c", "i=0; while [ $i -lt 200 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done"))
	lines := strings.Split(strings.TrimSuffix(e.logs(s.ContainerID), "\n"), "\n")
	if len(lines) != 400 {
		t.Fatalf("%d lines, want 400", len(lines))
	}
	next := map[string]int{"out": 0, "err": 0}
	for _, l := range lines {
		stream := l[:3]
		if want := fmt.Sprintf("%s%d", stream, next[stream]); l != want {
			t.Fatalf("line %q, want %q: a stream lost its order", l, want)
		}
		next[stream]++
	}
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	s := e.start(e.assignment("sh", "-c", "exit 3"))
	if code := e.wait(s.ContainerID); code != 3 {
		t.Errorf("exit code = %d, want 3", code)
	}
	// Wait on an exited container answers at once, with the same code.
	if code := e.wait(s.ContainerID); code != 3 {
		t.Errorf("second Wait = %d, want 3", code)
	}
}

func TestEnvironmentInside(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	a := e.assignment("env")
	a.Job.Request.Docker.Environment = map[string]string{"DEMO_A": "1", "DEMO_B": "two words"}
	a.Job.Request.Docker.ProjectGidVariableName = "DEMO_PROJECT_GID"
	s := e.start(a)
	out := e.logs(s.ContainerID)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, kv := range environment(a, e.rt.cfg) {
		if !slices.Contains(lines, kv) {
			t.Errorf("%s missing inside the container", kv)
		}
	}
	for _, name := range []string{"GPULAB_USERNAME", "GPULAB_USER_URN", "GPULAB_USER_MINI_ID", "GPULAB_PROJECT",
		"GPULAB_JOB_ID", "GPULAB_CLUSTER_ID", "GPULAB_SLAVE_HOSTNAME", "GPULAB_SLAVE_DNSNAME", "GPULAB_SLAVE_INSTANCE_ID",
		"GPULAB_SLAVE_PID", "GPULAB_WORKER_ID", "GPULAB_CPUS_RESERVED", "GPULAB_GPUS_RESERVED", "GPULAB_MEM_RESERVED",
		"GPULAB_VERSION", "GPULAB_RESTART_COUNT", "GPULAB_RESTART_INITIAL_JOB_ID", "DEMO_PROJECT_GID", "DEMO_A", "DEMO_B"} {
		if !strings.Contains("\n"+out, "\n"+name+"=") {
			t.Errorf("%s not set inside the container", name)
		}
	}
	for _, want := range []string{"GPULAB_JOB_ID=" + a.Job.UUID, "GPULAB_MEM_RESERVED=1024m", "DEMO_PROJECT_GID=4242",
		"DEMO_B=two words", "GPULAB_RESTART_INITIAL_JOB_ID=" + a.Job.UUID, "NVIDIA_VISIBLE_DEVICES=void"} {
		if !slices.Contains(lines, want) {
			t.Errorf("%s not in the container's environment", want)
		}
	}
}

func TestPublishedPort(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	a := e.assignment("sh", "-c", "mkdir -p /www && echo hello > /www/index.html && exec httpd -f -p 8080 -h /www")
	a.Job.Request.Docker.PortMappings = []job.PortMapping{{ContainerPort: 8080}}
	s := e.start(a)
	if len(s.Ports) != 1 || s.Ports[0].ContainerPort != 8080 || s.Ports[0].HostPort == 0 {
		t.Fatalf("Ports = %+v, want 8080 on a host port Docker picked", s.Ports)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/", s.Ports[0].HostPort)
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == 200 && string(body) == "hello\n" {
				break
			}
			err = fmt.Errorf("status %d body %q", resp.StatusCode, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("an answer from the job's web server at %s did not come within a minute: %v", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	if s.Ports[0].HostPort < DefaultPortLow || s.Ports[0].HostPort > DefaultPortHigh {
		t.Errorf("Docker picked host port %d, outside the slave's range %d-%d", s.Ports[0].HostPort, DefaultPortLow, DefaultPortHigh)
	}

	// A fixed host port of the slave's range is published where asked. The port was free a
	// moment ago; should another process take it meanwhile, another is tried.
	for attempt := 1; ; attempt++ {
		free := freePortIn(t, DefaultPortLow, DefaultPortHigh)
		b := e.assignment("sleep", "30")
		b.Job.Request.Docker.PortMappings = []job.PortMapping{{ContainerPort: 9000, HostPort: free, HostIP: "127.0.0.1"}}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		s, err := e.rt.Start(ctx, b)
		cancel()
		var se *StartError
		if errors.As(err, &se) && attempt < 5 && (strings.Contains(se.Reason, "address already in use") || strings.Contains(se.Reason, "port is already allocated")) {
			t.Logf("host port %d was taken meanwhile: %s", free, se.Reason)
			continue
		}
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		want := []job.PortMapping{{ContainerPort: 9000, HostPort: free, HostIP: "127.0.0.1"}}
		if !slices.Equal(s.Ports, want) {
			t.Errorf("Ports = %+v, want %+v", s.Ports, want)
		}
		return
	}
}

// freePortIn returns a TCP port of 127.0.0.1 in low..high that is free now.
func freePortIn(t *testing.T, low, high int) int {
	t.Helper()
	for range 100 {
		port := low + rand.IntN(high-low+1)
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			_ = l.Close()
			return port
		}
	}
	t.Fatalf("no free port in %d-%d", low, high)
	return 0
}

func TestBindMount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	a := e.assignment("sh", "-c", "cat /data/in.txt && echo written > /data/out.txt && ls /project_scratch && echo ok")
	a.Job.Request.Docker.Storage = []job.Storage{
		{HostPath: "/project/sub/dir", ContainerPath: "/data"},
		{HostPath: "/project_scratch", ContainerPath: "/project_scratch"},
		{HostPath: "tmpfs", ContainerPath: "/ram", SizeGb: 1},
	}
	hostDir := filepath.Join(strings.ReplaceAll(e.cfg.Storage["/project"], storage.ProjectPlaceholder, "demo"), "sub", "dir")
	if err := os.MkdirAll(hostDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hostDir, "in.txt"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := e.start(a)
	if code := e.wait(s.ContainerID); code != 0 {
		t.Fatalf("exit %d; logs: %s", code, e.logs(s.ContainerID))
	}
	if got := e.logs(s.ContainerID); got != "from the host\nok\n" {
		t.Errorf("logs = %q", got)
	}
	b, err := os.ReadFile(filepath.Join(hostDir, "out.txt"))
	if err != nil || string(b) != "written\n" {
		t.Errorf("file written inside: %q, %v", b, err)
	}
}

func TestStorageRefusedBeforeContainer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	for _, tc := range []struct {
		name    string
		storage []job.Storage
		prepare func(t *testing.T)
		want    string
	}{
		{"unknown root", []job.Storage{{HostPath: "/data", ContainerPath: "/data"}}, nil,
			"storage request.docker.storage[0]: unknown storage root /data: this slave offers /project, /project_scratch"},
		{"docker socket", []job.Storage{{HostPath: ".ssh"}, {HostPath: "/var/run/docker.sock", ContainerPath: "/d.sock"}}, nil,
			"storage request.docker.storage[1]: hostPath /var/run/docker.sock is the Docker socket"},
		{"symlink out of the project", []job.Storage{{HostPath: "/project/escape", ContainerPath: "/host"}}, func(t *testing.T) {
			dir := strings.ReplaceAll(e.cfg.Storage["/project"], storage.ProjectPlaceholder, "demo")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("/", filepath.Join(dir, "escape")); err != nil {
				t.Fatal(err)
			}
		}, "storage request.docker.storage[0]: hostPath /project/escape leads outside the project's folder of /project"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.prepare != nil {
				tc.prepare(t)
			}
			a := e.assignment("true")
			a.Job.Request.Docker.Storage = tc.storage
			_, err := e.rt.Start(context.Background(), a)
			var se *StartError
			if !errors.As(err, &se) {
				t.Fatalf("Start = %v, want a *StartError", err)
			}
			if !strings.HasPrefix(se.Reason, tc.want) {
				t.Errorf("Reason = %q, want %q", se.Reason, tc.want)
			}
			e.assertGone(ContainerName(a.Job.UUID))
			if _, err := os.Stat(storage.JobDir(e.cfg.ScratchRoot, a.Job.UUID)); !os.IsNotExist(err) {
				t.Errorf("job folder left after a refusal: %v", err)
			}
		})
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)

	// busybox sleep as PID 1 has no handler for SIGTERM, so the kernel drops it: only the
	// SIGKILL after the grace ends it.
	s := e.start(e.assignment("sleep", "1000"))
	begin := time.Now()
	if err := e.rt.Cancel(context.Background(), s.ContainerID); err != nil {
		t.Fatal(err)
	}
	took := time.Since(begin)
	if took < e.cfg.CancelGrace {
		t.Errorf("Cancel took %v, less than the grace %v", took, e.cfg.CancelGrace)
	}
	if code := e.wait(s.ContainerID); code != 137 {
		t.Errorf("exit code = %d, want 137 (SIGKILL)", code)
	}
	// Cancelling a stopped container is fine.
	if err := e.rt.Cancel(context.Background(), s.ContainerID); err != nil {
		t.Errorf("second Cancel: %v", err)
	}

	// A job that handles SIGTERM ends at once, with its own code.
	s = e.start(e.assignment("sh", "-c", "trap 'echo bye; exit 0' TERM; echo ready; while true; do sleep 0.1; done"))
	e.waitForLine(s.ContainerID, "ready")
	if err := e.rt.Cancel(context.Background(), s.ContainerID); err != nil {
		t.Fatal(err)
	}
	// Its own exit code and its goodbye, not the SIGKILL after the grace (137).
	if code := e.wait(s.ContainerID); code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
	if got := e.logs(s.ContainerID); got != "ready\nbye\n" {
		t.Errorf("logs = %q", got)
	}

	var err error
	if err = e.rt.Cancel(context.Background(), "gpulab-no-such-container-"+uuid.NewString()); !errors.Is(err, ErrNotFound) {
		t.Errorf("Cancel of a missing container = %v, want ErrNotFound", err)
	}
}

func TestHalt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	for _, tc := range []struct {
		name   string
		script string
		halted bool
		code   int
	}{
		{"exits 123", "trap 'exit 123' USR1; echo ready; while true; do sleep 0.1; done", true, 123},
		{"exits otherwise", "trap 'exit 5' USR1; echo ready; while true; do sleep 0.1; done", false, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := e.start(e.assignment("sh", "-c", tc.script))
			e.waitForLine(s.ContainerID, "ready")
			// The job's own exit code shows it ended on SIGUSR1, not on the SIGKILL after the
			// grace (137).
			halted, code, err := e.rt.Halt(context.Background(), s.ContainerID)
			if err != nil {
				t.Fatal(err)
			}
			if halted != tc.halted || code != tc.code {
				t.Errorf("Halt = %v, %d; want %v, %d", halted, code, tc.halted, tc.code)
			}
		})
	}
	// A job that already ended did not halt.
	s := e.start(e.assignment("true"))
	e.wait(s.ContainerID)
	halted, code, err := e.rt.Halt(context.Background(), s.ContainerID)
	if err != nil || halted || code != 0 {
		t.Errorf("Halt of an exited job = %v, %d, %v", halted, code, err)
	}
}

// TestHaltIgnoredDefaultGrace runs with the real 15 s grace: a job that ignores SIGUSR1 is
// killed after it, not before (how soon after is for `make bench`: a loaded machine may be slow).
func TestHaltIgnoredDefaultGrace(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.HaltGrace = 0 })
	if e.rt.cfg.HaltGrace != 15*time.Second {
		t.Fatalf("default HaltGrace = %v", e.rt.cfg.HaltGrace)
	}
	s := e.start(e.assignment("sleep", "1000")) // PID 1 without a handler: USR1 is dropped
	begin := time.Now()
	halted, code, err := e.rt.Halt(context.Background(), s.ContainerID)
	took := time.Since(begin)
	if err != nil {
		t.Fatal(err)
	}
	if halted || code != 137 {
		t.Errorf("Halt = %v, %d; want false, 137", halted, code)
	}
	if took < 15*time.Second {
		t.Errorf("Halt took %v, less than the 15 s grace", took)
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	running := e.assignment("sleep", "30")
	exited := e.assignment("sh", "-c", "exit 4")
	sr := e.start(running)
	se := e.start(exited)
	e.wait(se.ContainerID)

	other := newEnv(t, nil) // another slave on the same engine
	so := other.start(other.assignment("sleep", "30"))

	list, err := e.rt.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Container{}
	for _, c := range list {
		got[c.JobUUID] = c
		if c.ID == so.ContainerID {
			t.Errorf("List returned another slave's container")
		}
	}
	if len(got) != 2 {
		t.Fatalf("List = %+v, want 2 containers", list)
	}
	if c := got[running.Job.UUID]; c.ID != sr.ContainerID || !c.Running || c.State != "running" {
		t.Errorf("running job: %+v", c)
	}
	if c := got[exited.Job.UUID]; c.ID != se.ContainerID || c.Running || c.State != "exited" {
		t.Errorf("exited job: %+v", c)
	}
}

func TestMissingImage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	a := e.assignment("true")
	ref := "gpulab-test-missing-" + uuid.NewString()[:8] + ":v1"
	a.Job.Request.Docker.Image = "user:hunter2@" + "registry.invalid/" + ref
	_, err := e.rt.Start(context.Background(), a)
	var se *StartError
	if !errors.As(err, &se) {
		t.Fatalf("Start = %v, want a *StartError", err)
	}
	if want := "pull registry.invalid/" + ref + ": "; !strings.HasPrefix(se.Reason, want) || len(se.Reason) == len(want) {
		t.Errorf("Reason = %q, want %q and the engine's message", se.Reason, want)
	}
	if strings.Contains(se.Reason, "hunter2") || strings.Contains(se.Reason, "Error response from daemon") {
		t.Errorf("Reason = %q", se.Reason)
	}
	t.Logf("reason: %s", se.Reason)
	e.assertGone(ContainerName(a.Job.UUID))

	// Docker Hub names fail the same way here (no registry is reachable).
	b := e.assignment("true")
	b.Job.Request.Docker.Image = ref
	_, err = e.rt.Start(context.Background(), b)
	if !errors.As(err, &se) || !strings.HasPrefix(se.Reason, "pull "+ref+": ") {
		t.Errorf("Start = %v", err)
	}
	e.assertGone(ContainerName(b.Job.UUID))
}

func TestGPUOnPlainEngine(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	info, err := e.cli.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := info.Runtimes["nvidia"]; ok {
		t.Skip("this engine has the NVIDIA runtime")
	}
	a := e.assignment("true")
	a.Job.Request.Resources.GPUs = 1
	a.GPUs = []protocol.GPU{{Index: 0, UUID: "GPU-00000000-1111-2222-3333-444444444444"}}
	_, err = e.rt.Start(context.Background(), a)
	var se *StartError
	if !errors.As(err, &se) {
		t.Fatalf("Start = %v, want a *StartError", err)
	}
	if want := `start: could not select device driver "nvidia"`; !strings.HasPrefix(se.Reason, want) {
		t.Errorf("Reason = %q, want %q…", se.Reason, want)
	}
	e.assertGone(ContainerName(a.Job.UUID))
}

func TestLimitsInInspect(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	a := e.assignment("sleep", "30")
	a.Job.Request.Docker.Storage = []job.Storage{{HostPath: "tmpfs", ContainerPath: "/ram", SizeGb: 1}, {HostPath: ".ssh"}}
	a.Job.Request.Docker.PortMappings = []job.PortMapping{{ContainerPort: 8888}}
	a.Job.Request.Extra.SSHPubKeys = []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample alice@example"}
	a.MemoryGb = a.Job.Request.TotalMemoryGb() // as the scheduler books it: 1 GiB + the 1 GiB RAM disk
	s := e.start(a)
	info, err := e.cli.ContainerInspect(context.Background(), s.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	hc := info.HostConfig
	if hc.Memory != 2<<30 || hc.MemorySwap != 2<<30 {
		t.Errorf("Memory %d MemorySwap %d, want 2 GiB (what was booked: 1 + 1 GiB tmpfs, not the tmpfs twice)", hc.Memory, hc.MemorySwap)
	}
	if !slices.Contains(info.Config.Env, "GPULAB_MEM_RESERVED=1024m") {
		t.Errorf("Env %v, want GPULAB_MEM_RESERVED=1024m (cpuMemoryGb)", info.Config.Env)
	}
	if hc.NanoCPUs != 1e9 || hc.CpusetCpus != "0" {
		t.Errorf("NanoCPUs %d CpusetCpus %q", hc.NanoCPUs, hc.CpusetCpus)
	}
	h := *e.cfg.Hardening
	if hc.Privileged || hc.NetworkMode.IsHost() || hc.PidMode.IsHost() || hc.IpcMode.IsHost() || len(hc.Devices) != 0 {
		t.Errorf("privileges: %+v", hc)
	}
	// The engine names capabilities with their CAP_ prefix.
	wantCaps := make([]string, len(h.Capabilities))
	for i, c := range h.Capabilities {
		wantCaps[i] = "CAP_" + c
	}
	if !slices.Equal(hc.CapDrop, []string{"ALL"}) || !slices.Equal(hc.CapAdd, wantCaps) {
		t.Errorf("CapDrop %v CapAdd %v, want ALL and %v", hc.CapDrop, hc.CapAdd, wantCaps)
	}
	if !slices.Equal(hc.SecurityOpt, []string{"no-new-privileges"}) {
		t.Errorf("SecurityOpt %v", hc.SecurityOpt)
	}
	if hc.PidsLimit == nil || *hc.PidsLimit != DefaultPidsLimit {
		t.Errorf("PidsLimit %v, want %d", hc.PidsLimit, DefaultPidsLimit)
	}
	var ulimits []string
	for _, u := range hc.Ulimits {
		ulimits = append(ulimits, u.String())
	}
	if want := []string{fmt.Sprintf("nofile=%d:%d", h.NoFile, h.NoFile), fmt.Sprintf("nproc=%d:%d", h.NProc, h.NProc)}; !slices.Equal(ulimits, want) {
		t.Errorf("Ulimits %v, want %v", ulimits, want)
	}
	if string(hc.NetworkMode) != testenv.JobNetwork() {
		t.Errorf("NetworkMode %q, want %q", hc.NetworkMode, testenv.JobNetwork())
	}
	if hc.LogConfig.Type != "local" || hc.LogConfig.Config["max-size"] != "20m" || hc.LogConfig.Config["max-file"] != "5" {
		t.Errorf("LogConfig %+v", hc.LogConfig)
	}
	if b := hc.PortBindings["8888/tcp"]; len(b) != 1 || b[0].HostPort != "30000-32767" {
		t.Errorf("PortBindings %v, want 8888 on a host port of 30000-32767", hc.PortBindings)
	}
	// Inside: the limits hold for the job's own processes.
	out, err := exec.Command("docker", "exec", s.ContainerID, "sh", "-c",
		"ulimit -n; ulimit -u; cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status").CombinedOutput()
	if err != nil {
		t.Fatalf("docker exec: %v: %s", err, out)
	}
	inside := strings.Fields(string(out))
	// CapEff: root with exactly the ten capabilities (Docker's default set is a80425fb); NoNewPrivs 1.
	want := []string{strconv.FormatInt(h.NoFile, 10), strconv.FormatInt(h.NProc, 10), strconv.Itoa(DefaultPidsLimit), "CapEff:", "00000000200404fb", "NoNewPrivs:", "1"}
	if !slices.Equal(inside, want) {
		t.Errorf("inside the container: %q, want %q", inside, want)
	}
	if info.Name != "/"+ContainerName(a.Job.UUID) {
		t.Errorf("Name = %q", info.Name)
	}
	if info.Config.Labels[LabelJob] != a.Job.UUID || info.Config.Labels[LabelSlave] != e.cfg.SlaveName || info.Config.Labels[LabelProject] != "demo" {
		t.Errorf("Labels = %v", info.Config.Labels)
	}
	sshDir := storage.SSHDir(e.cfg.ScratchRoot, a.Job.UUID)
	var sawTmpfs, sawSSH bool
	for _, m := range info.Mounts {
		switch m.Destination {
		case "/ram":
			sawTmpfs = m.Type == "tmpfs"
		case "/root/.ssh":
			// Docker mounts the staging path that storage.Pin bound the job's .ssh folder onto.
			sawSSH = m.Type == "bind" && strings.HasPrefix(m.Source, filepath.Join(e.cfg.ScratchRoot, "pins", a.Job.UUID)+"/")
		}
	}
	if !sawTmpfs || !sawSSH {
		t.Errorf("Mounts = %+v", info.Mounts)
	}
	if b, err := os.ReadFile(filepath.Join(sshDir, "authorized_keys")); err != nil || !strings.Contains(string(b), "alice@example") {
		t.Errorf("authorized_keys: %q, %v", b, err)
	}

	// Remove takes the container and the job's own folder; a second Remove is fine.
	if err := e.rt.Remove(context.Background(), s.ContainerID); err != nil {
		t.Fatal(err)
	}
	e.assertGone(ContainerName(a.Job.UUID))
	if _, err := os.Stat(storage.JobDir(e.cfg.ScratchRoot, a.Job.UUID)); !os.IsNotExist(err) {
		t.Errorf("job folder left: %v", err)
	}
	if err := e.rt.Remove(context.Background(), s.ContainerID); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	s := e.start(e.assignment("sh", "-c", "while true; do :; done"))
	// A busy loop on one CPU: how much of it the loop gets depends on what else the machine
	// runs, so samples are taken until one shows it busy.
	var u protocol.Usage
	deadline := time.Now().Add(time.Minute)
	for {
		var err error
		if u, err = e.rt.Usage(context.Background(), s.ContainerID); err != nil {
			t.Fatal(err)
		}
		if u.CPUPercent > 110 {
			t.Fatalf("CPUPercent = %v, more than the one CPU the job has", u.CPUPercent)
		}
		if u.CPUPercent >= 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a busy loop did not show 10 %% CPU within a minute (last sample %+v)", u)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("usage: %+v", u)
	if u.MemoryMiB < 0 || u.MemoryMiB > 1024 {
		t.Errorf("MemoryMiB = %d", u.MemoryMiB)
	}
	if _, err := e.rt.Usage(context.Background(), "gpulab-no-such-container-"+uuid.NewString()); !errors.Is(err, ErrNotFound) {
		t.Errorf("Usage of a missing container = %v, want ErrNotFound", err)
	}
}

func TestStartReplacesStoppedLeftover(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	a := e.assignment("sh", "-c", "echo run")
	s1 := e.start(a)
	e.wait(s1.ContainerID)
	// The same assignment again (the slave restarted before reporting STARTING).
	s2 := e.start(a)
	if s2.ContainerID == s1.ContainerID {
		t.Fatal("the stopped container was reused")
	}
	if got := e.logs(s2.ContainerID); got != "run\n" {
		t.Errorf("logs = %q", got)
	}
	// A running container of the job is never replaced.
	b := e.assignment("sleep", "30")
	b.Job.Request.Docker.Storage = []job.Storage{{HostPath: ".ssh"}}
	sb := e.start(b)
	_, err := e.rt.Start(context.Background(), b)
	var se *StartError
	if !errors.As(err, &se) || !strings.HasPrefix(se.Reason, "create: the job already runs in a container of this slave") {
		t.Errorf("second Start of a running job = %v", err)
	}
	if info, err := e.cli.ContainerInspect(context.Background(), sb.ContainerID); err != nil || !info.State.Running {
		t.Errorf("the running container was touched: %v", err)
	}
	if _, err := os.Stat(storage.SSHDir(e.cfg.ScratchRoot, b.Job.UUID)); err != nil {
		t.Errorf("the running job's .ssh folder went: %v", err)
	}
}

// TestPullTimeout pulls from a "registry" that accepts connections and never answers: the
// pull ends at PullTimeout with a reason that says so, not with a hang (the reason names the
// timeout; the test's own limit catches a hang).
func TestPullTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.PullTimeout = time.Second })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c) // held open, never answered
		}
	}()
	t.Cleanup(func() { _ = l.Close(); <-done })
	a := e.assignment("true")
	ref := fmt.Sprintf("%s/gpulab-test/silent:%s", l.Addr(), uuid.NewString()[:8])
	a.Job.Request.Docker.Image = ref
	begin := time.Now()
	_, err = e.rt.Start(context.Background(), a)
	took := time.Since(begin)
	var se *StartError
	if !errors.As(err, &se) {
		t.Fatalf("Start = %v, want a *StartError", err)
	}
	if want := "pull " + ref + ": timed out after 1s"; se.Reason != want {
		t.Errorf("Reason = %q, want %q", se.Reason, want)
	}
	if took < time.Second {
		t.Errorf("Start took %v, less than the 1 s pull timeout", took)
	}
	e.assertGone(ContainerName(a.Job.UUID))
}

// countInspects counts the runtime's reads of containers.
type countInspects struct {
	Docker
	n atomic.Int32
}

func (d *countInspects) ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error) {
	d.n.Add(1)
	return d.Docker.ContainerInspect(ctx, id)
}

// TestStartReadsTheContainerBackOnlyWhenNeeded: a job that publishes no port and mounts no
// storage is started without reading the container back (the engine is slow to answer about a
// container just started); one with storage is read back, for the check of what it mounted.
// (Ports: TestHostPortsFromRange.)
func TestStartReadsTheContainerBackOnlyWhenNeeded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	d := &countInspects{Docker: e.cli}
	e.rt = New(d, e.cfg, nil)
	s := e.start(e.assignment("true"))
	if code := e.wait(s.ContainerID); code != 0 || d.n.Load() != 0 {
		t.Fatalf("plain job: exit %d, %d inspects; want 0, 0", code, d.n.Load())
	}
	a := e.assignment("sh", "-c", "echo x > /s/f")
	a.Job.Request.Docker.Storage = []job.Storage{{HostPath: "/project_scratch", ContainerPath: "/s"}}
	s = e.start(a)
	if code := e.wait(s.ContainerID); code != 0 || d.n.Load() != 1 || len(s.Ports) != 0 {
		t.Fatalf("job with storage: exit %d, %d inspects, ports %v; want 0, 1, none", code, d.n.Load(), s.Ports)
	}
}
