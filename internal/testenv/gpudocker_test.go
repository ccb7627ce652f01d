package testenv

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
)

const (
	uuidA = "GPU-aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa"
	uuidB = "GPU-bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb"
)

// createGPUContainer creates (not starts) a busybox container that prints its environment and
// asks for two GPUs by UUID, the way the slave hands GPUs to a job.
func createGPUContainer(t *testing.T, cli *client.Client, image string) string {
	t.Helper()
	ctx := context.Background()
	created, err := cli.ContainerCreate(ctx,
		&container.Config{Image: image, Cmd: []string{"env"}},
		&container.HostConfig{
			NetworkMode: "none",
			Resources: container.Resources{DeviceRequests: []container.DeviceRequest{{
				Driver:       "nvidia",
				DeviceIDs:    []string{uuidA, uuidB},
				Capabilities: [][]string{{"gpu"}},
			}}},
		}, nil, nil, "")
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = cli.ContainerRemove(ctx, created.ID, container.RemoveOptions{Force: true})
	})
	return created.ID
}

func TestGPUHandOffOnStubHookEngine(t *testing.T) {
	var host string
	t.Run("stub hook engine", func(t *testing.T) {
		var cli *client.Client
		cli, host = GPUDocker(t)
		if !strings.HasPrefix(host, "unix:///tmp/dk") {
			t.Errorf("DOCKER_HOST %q, want unix:///tmp/dk…", host)
		}
		id := createGPUContainer(t, cli, BusyboxImageOn(t, cli))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := cli.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
			t.Fatalf("start: %v", err)
		}
		waitC, errC := cli.ContainerWait(ctx, id, container.WaitConditionNotRunning)
		select {
		case w := <-waitC:
			if w.StatusCode != 0 {
				t.Fatalf("env exited %d", w.StatusCode)
			}
		case err := <-errC:
			t.Fatalf("wait: %v", err)
		}
		logs, err := cli.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true})
		if err != nil {
			t.Fatalf("logs: %v", err)
		}
		defer func() { _ = logs.Close() }()
		var stdout, stderr bytes.Buffer
		if _, err := stdcopy.StdCopy(&stdout, &stderr, logs); err != nil {
			t.Fatalf("logs: %v", err)
		}
		var visible []string
		for _, line := range strings.Split(stdout.String(), "\n") {
			if v, ok := strings.CutPrefix(line, "NVIDIA_VISIBLE_DEVICES="); ok {
				visible = append(visible, v)
			}
		}
		if want := uuidA + "," + uuidB; len(visible) != 1 || visible[0] != want {
			t.Fatalf("NVIDIA_VISIBLE_DEVICES %q, want exactly %q; env:\n%s%s", visible, want, stdout.String(), stderr.String())
		}
	})
	if host == "" {
		return // skipped or failed before the engine started
	}
	// After the subtest's cleanup, the engine and all its files are gone.
	dir := filepath.Dir(strings.TrimPrefix(host, "unix://"))
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still there after cleanup (stat: %v)", dir, err)
	}
}

// TestGPUHandOffOnPlainEngine pins the error an engine without the NVIDIA hook gives: the
// container is created, but starting it fails, and the slave reports this reason to the user.
func TestGPUHandOffOnPlainEngine(t *testing.T) {
	cli := Docker(t)
	id := createGPUContainer(t, cli, BusyboxImage(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := cli.ContainerStart(ctx, id, container.StartOptions{})
	if err == nil {
		t.Skip("this engine has the NVIDIA container hook: GPUs can be handed to containers here")
	}
	t.Logf("start on the plain engine: %v", err)
	if !strings.Contains(err.Error(), `could not select device driver "nvidia"`) {
		t.Fatalf("start error %q, want one saying it could not select device driver \"nvidia\"", err)
	}
}
