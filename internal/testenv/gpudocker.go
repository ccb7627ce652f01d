package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
)

// stubNvidiaHook stands in for nvidia-container-runtime-hook: dockerd registers its "nvidia"
// device driver only when that hook is on its PATH, and runs it as an OCI prestart hook with the
// container state on stdin. Consuming stdin and succeeding is all a container needs to start.
const stubNvidiaHook = "#!/bin/sh\ncat >/dev/null\nexit 0\n"

// gpuDockerStartTimeout bounds how long a fresh dockerd may take to answer (under a second
// normally; a loaded CI machine, maybe running two test suites, gets slack).
const gpuDockerStartTimeout = 2 * time.Minute

// GPUDocker starts a second, throwaway dockerd whose PATH holds a stub
// nvidia-container-runtime-hook, so containers created with
// DeviceRequests{Driver: "nvidia", DeviceIDs: uuids} start and see NVIDIA_VISIBLE_DEVICES=<uuids>:
// the slave's GPU hand-off is tested end to end without a GPU. It returns a client of that engine
// and its DOCKER_HOST value (unix://…, for a slave under test). The engine has no images (see
// BusyboxImageOn) and its own network namespace (so its bridge is not the host's docker0). The daemon, its containers and
// its folders are removed at cleanup. Skips (fails under GPULAB_REQUIRE_SERVICES=1) when dockerd
// is missing or the test does not run as root.
func GPUDocker(t testing.TB) (*client.Client, string) {
	t.Helper()
	const service = "a throwaway Docker Engine (dockerd)"
	dockerd, err := exec.LookPath("dockerd")
	if err != nil {
		for _, p := range []string{"/usr/sbin/dockerd", "/usr/bin/dockerd"} {
			if _, statErr := os.Stat(p); statErr == nil {
				dockerd, err = p, nil
			}
		}
	}
	if err != nil {
		Missing(t, service, "dockerd not installed (apt-get install docker.io)")
	}
	if os.Geteuid() != 0 {
		Missing(t, service, "starting dockerd needs root")
	}

	// Short on purpose: a unix socket path must fit in about 108 bytes.
	dir, err := os.MkdirTemp("/tmp", "dk")
	if err != nil {
		t.Fatalf("GPU docker: %v", err)
	}
	var (
		bin     = filepath.Join(dir, "bin")
		sock    = filepath.Join(dir, "docker.sock")
		host    = "unix://" + sock
		logPath = filepath.Join(dir, "dockerd.log")
		config  = filepath.Join(dir, "daemon.json")
		ns      = "gpulab-" + filepath.Base(dir)
	)
	removeDir := func() {
		unmountUnder(dir)
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("GPU docker: remove %s: %v", dir, err)
		}
	}
	if err := os.Mkdir(bin, 0o755); err != nil {
		removeDir()
		t.Fatalf("GPU docker: %v", err)
	}
	// An empty config file, so /etc/docker/daemon.json (say, with "hosts") cannot clash with ours.
	if err := errors.Join(
		os.WriteFile(filepath.Join(bin, "nvidia-container-runtime-hook"), []byte(stubNvidiaHook), 0o755),
		os.WriteFile(config, []byte("{}\n"), 0o644),
	); err != nil {
		removeDir()
		t.Fatalf("GPU docker: %v", err)
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		removeDir()
		t.Fatalf("GPU docker: %v", err)
	}
	// Its own network namespace: a dockerd sets up (or, with --bridge=none, deletes) the
	// docker0 bridge, and must not touch the host's, which the main engine uses.
	netns := "gpulab-" + filepath.Base(dir)
	if out, err := exec.Command("ip", "netns", "add", netns).CombinedOutput(); err != nil {
		removeDir()
		Missing(t, service, fmt.Sprintf("ip netns add: %v %s", err, out))
	}
	removeNetns := func() {
		if out, err := exec.Command("ip", "netns", "delete", netns).CombinedOutput(); err != nil {
			t.Logf("GPU docker: ip netns delete %s: %v %s", netns, err, out)
		}
	}
	// nsenter, not `ip netns exec`: the latter remounts /sys, hiding the cgroup mounts dockerd needs.
	cmd := exec.Command("nsenter", "--net=/var/run/netns/"+netns, dockerd,
		"--config-file", config,
		"--data-root", filepath.Join(dir, "data"),
		"--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "docker.pid"),
		"-H", host,
		"--iptables=false", "--ip-masq=false",
		// Its own containerd namespaces, in case both daemons share a system containerd.
		"--containerd-namespace", ns, "--containerd-plugins-namespace", ns+"-plugins",
	)
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "PATH=") || strings.HasPrefix(kv, "DOCKER_")
	}), "PATH="+bin+":"+os.Getenv("PATH")+":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group (a ^C to go test is for go test), and gone if the test binary dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		removeNetns()
		removeDir()
		t.Fatalf("GPU docker: start dockerd: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logFile.Close()
		close(exited)
	}()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(time.Minute):
			t.Logf("GPU docker: dockerd did not stop within a minute; killing it")
			_ = cmd.Process.Kill()
			<-exited
		}
	}

	cli, err := client.NewClientWithOpts(client.WithHost(host), client.WithAPIVersionNegotiation())
	if err != nil {
		stop()
		removeNetns()
		removeDir()
		t.Fatalf("GPU docker: client: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if cs, err := cli.ContainerList(ctx, container.ListOptions{All: true}); err == nil {
			for _, c := range cs {
				if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
					t.Logf("GPU docker: remove container %s: %v", c.ID, err)
				}
			}
		}
		_ = cli.Close()
		stop()
		removeNetns()
		removeDir()
	})

	if err := waitForDocker(cli, exited); err != nil {
		t.Fatalf("GPU docker: %v; end of its log:\n%s", err, logTail(logPath, 20))
	}
	return cli, host
}

// waitForDocker pings until the engine answers, it exits, or gpuDockerStartTimeout passes.
func waitForDocker(cli *client.Client, exited <-chan struct{}) error {
	deadline := time.Now().Add(gpuDockerStartTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ping, err := cli.Ping(ctx)
		cancel()
		if err == nil {
			cli.NegotiateAPIVersionPing(ping) // before the client is shared (see Docker)
			return nil
		}
		select {
		case <-exited:
			return errors.New("dockerd exited before answering")
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("dockerd did not answer within %s: %w", gpuDockerStartTimeout, err)
		}
	}
}

// BusyboxImageOn imports the busybox test image (see BusyboxImage) into the engine behind cli,
// such as one from GPUDocker, which starts empty and cannot pull. Returns its reference.
func BusyboxImageOn(t testing.TB, cli *client.Client) string {
	t.Helper()
	ref, err := importBusybox(cli)
	if err != nil {
		t.Fatalf("busybox image: %v", err)
	}
	return ref
}

// unmountUnder detaches whatever a killed dockerd left mounted below dir (overlay layers,
// network namespaces), deepest first, so the folder can be removed.
func unmountUnder(dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			points = append(points, fields[4])
		}
	}
	_ = f.Close()
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

// logTail returns the last n lines of a file, for error messages.
func logTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
