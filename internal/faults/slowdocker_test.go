package faults

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/opengpulab/gpulab/internal/testenv"
)

// uniqueName names a test's container or label value: tests of two checkouts may share
// one engine.
func uniqueName(prefix string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// runContainer creates and starts a busybox container with cmd, removed at cleanup.
func runContainer(t *testing.T, cli *client.Client, cc *container.Config) string {
	t.Helper()
	ctx := context.Background()
	cc.Image = testenv.BusyboxImage(t)
	name := uniqueName("faults")
	created, err := cli.ContainerCreate(ctx, cc, nil, nil, nil, name)
	if err != nil {
		t.Fatalf("create container: %v", err)
	}
	t.Cleanup(func() {
		_ = cli.ContainerRemove(context.Background(), created.ID, container.RemoveOptions{Force: true})
	})
	if err := cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		t.Fatalf("start container: %v", err)
	}
	return created.ID
}

// slowClient returns a Docker client through sd, its API version settled before any delay.
func slowClient(t *testing.T, sd *SlowDocker) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.WithHost(sd.DockerHost()), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	ping, err := cli.Ping(context.Background())
	if err != nil {
		t.Fatalf("ping through slow docker: %v", err)
	}
	cli.NegotiateAPIVersionPing(ping)
	return cli
}

func newSlowDocker(t *testing.T) *SlowDocker {
	t.Helper()
	testenv.Docker(t) // skips (or fails under GPULAB_REQUIRE_SERVICES=1) without an engine
	sd, err := NewSlowDocker("", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sd.Close)
	if n := len(sd.Socket()); n >= 100 {
		t.Fatalf("socket path %q is %d bytes, too long for a Unix socket", sd.Socket(), n)
	}
	return sd
}

func TestSlowDockerDelaysRequests(t *testing.T) {
	t.Parallel()
	sd := newSlowDocker(t)
	cli := slowClient(t, sd)
	ctx := context.Background()

	sd.SetDelay(time.Second)
	start := time.Now()
	if _, err := cli.ContainerList(ctx, container.ListOptions{}); err != nil {
		t.Fatalf("list through slow docker: %v", err)
	}
	if took := time.Since(start); took < time.Second {
		t.Fatalf("list took %v, want at least the delay of %v", took, sd.Delay())
	}

	sd.SetDelay(0)
	if _, err := cli.ContainerList(ctx, container.ListOptions{}); err != nil {
		t.Fatalf("list without delay: %v", err)
	}
}

// TestSlowDockerStreams checks that what the engine sends passes at once: a followed log of
// a container that never ends keeps delivering lines while requests are held.
func TestSlowDockerStreams(t *testing.T) {
	t.Parallel()
	sd := newSlowDocker(t)
	cli := slowClient(t, sd)
	id := runContainer(t, testenv.Docker(t), &container.Config{
		Cmd: []string{"sh", "-c", "i=0; while :; do echo line $i; i=$((i+1)); sleep 0.05; done"},
	})

	sd.SetDelay(time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs, err := cli.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, Follow: true})
	if err != nil {
		t.Fatalf("follow logs through slow docker: %v", err)
	}
	defer logs.Close()
	pr, pw := io.Pipe()
	go func() { _, err := stdcopy.StdCopy(pw, io.Discard, logs); pw.CloseWithError(err) }()

	sc := bufio.NewScanner(pr)
	var got []string
	for len(got) < 10 && sc.Scan() {
		got = append(got, sc.Text())
	}
	if len(got) < 10 {
		t.Fatalf("log stream ended after %q: %v", got, sc.Err())
	}
	for i := 1; i < len(got); i++ {
		var a, b int
		if _, err := fmt.Sscanf(got[i-1], "line %d", &a); err != nil {
			t.Fatalf("line %q: %v", got[i-1], err)
		}
		if _, err := fmt.Sscanf(got[i], "line %d", &b); err != nil || b != a+1 {
			t.Fatalf("lines %q", strings.Join(got, ", "))
		}
	}
	inspect, err := testenv.Docker(t).ContainerInspect(context.Background(), id)
	if err != nil || !inspect.State.Running {
		t.Fatalf("the container should still run while its log streams: %v", err)
	}
}
