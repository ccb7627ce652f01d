package testenv

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/registry"
	"github.com/docker/docker/client"
)

// Registry is a running development registry (internal/devregistry): the Distribution
// registry with htpasswd users, on a loopback port the Docker Engine pulls from over plain HTTP.
type Registry struct {
	Addr           string // 127.0.0.1:PORT
	User, Password string
}

var registryBuild struct {
	once    sync.Once
	bin     string
	tempDir string
	err     error
}

// registryBinary builds internal/devregistry (its own module) once per test process, into
// <module>/.tmp/bin (Go's build cache makes later builds a link step) or, when that cannot be
// written, into a temporary folder that RemoveRegistryBuild removes.
func registryBinary() (string, error) {
	b := &registryBuild
	b.once.Do(func() {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			b.err = fmt.Errorf("go env GOMOD: %w", err)
			return
		}
		root := filepath.Dir(strings.TrimSpace(string(out)))
		dir := filepath.Join(root, ".tmp", "bin")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			if dir, err = os.MkdirTemp("", "gpulab-devregistry-"); err != nil {
				b.err = fmt.Errorf("make build folder: %w", err)
				return
			}
			b.tempDir = dir
		}
		// Built under a name of this process, then renamed: another test process may be
		// running the previous binary.
		tmp := filepath.Join(dir, fmt.Sprintf(".gpulab-devregistry-%d", os.Getpid()))
		cmd := exec.Command("go", "build", "-o", tmp, ".")
		cmd.Dir = filepath.Join(root, "internal", "devregistry")
		if out, err := cmd.CombinedOutput(); err != nil {
			_ = os.Remove(tmp)
			b.err = fmt.Errorf("go build internal/devregistry: %w\n%s", err, out)
			return
		}
		b.bin = filepath.Join(dir, "gpulab-devregistry")
		if err := os.Rename(tmp, b.bin); err != nil {
			b.err = fmt.Errorf("install gpulab-devregistry: %w", err)
		}
	})
	return b.bin, b.err
}

// RemoveRegistryBuild removes what registryBinary built into a temporary folder (from TestMain).
func RemoveRegistryBuild() {
	if registryBuild.tempDir != "" {
		_ = os.RemoveAll(registryBuild.tempDir)
	}
}

// StartRegistry starts a development registry for the test's duration: private (one user
// with a random password: nothing is read or written without credentials) or public (no
// users). If it cannot be built, the test is skipped (it fails under GPULAB_REQUIRE_SERVICES=1).
func StartRegistry(t testing.TB, private bool) *Registry {
	t.Helper()
	bin, err := registryBinary()
	if err != nil {
		Missing(t, "development registry (internal/devregistry)", err.Error())
	}
	reg := &Registry{}
	args := []string{"--listen", "127.0.0.1:0"}
	if private {
		reg.User, reg.Password = "alice", "pw-"+rand.Text()
		args = append(args, "--user", reg.User+":"+reg.Password)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 5 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		t.Fatalf("registry stdout: %v", err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start the registry: %v", err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			addr <- sc.Text()
		}
		close(addr)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case a, ok := <-addr:
		if !ok {
			t.Fatalf("the registry exited before it listened")
		}
		reg.Addr = a
	case <-time.After(2 * time.Minute):
		t.Fatalf("the registry did not start within 2 minutes")
	}
	return reg
}

// Auth is the X-Registry-Auth value of the registry's user ("" for a public registry).
func (r *Registry) Auth(t testing.TB) string {
	t.Helper()
	if r.User == "" {
		return ""
	}
	auth, err := registry.EncodeAuthConfig(registry.AuthConfig{Username: r.User, Password: r.Password, ServerAddress: r.Addr})
	if err != nil {
		t.Fatal(err)
	}
	return auth
}

// Push pushes the local image src to the registry as REGISTRY/REPO:TAG (TAG: this process's
// suffix) and removes the local tag again, so that the engine has the image only under its own
// name: a job must pull the new name. It returns the pushed reference.
func (r *Registry) Push(t testing.TB, cli *client.Client, src, repo string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ref := r.Addr + "/" + repo + ":" + Suffix()
	if err := cli.ImageTag(ctx, src, ref); err != nil {
		t.Fatalf("tag %s: %v", ref, err)
	}
	auth := r.Auth(t)
	if auth == "" { // the engine wants the header also for a registry without users
		auth, _ = registry.EncodeAuthConfig(registry.AuthConfig{})
	}
	rc, err := cli.ImagePush(ctx, ref, image.PushOptions{RegistryAuth: auth})
	if err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	body, _ := io.ReadAll(rc)
	_ = rc.Close()
	if strings.Contains(string(body), `"error"`) {
		t.Fatalf("push %s: %s", ref, body)
	}
	UntagImage(t, cli, ref)
	return ref
}

// UntagImage removes a tag this test made (the image stays under its other names).
func UntagImage(t testing.TB, cli *client.Client, ref string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cli.ImageRemove(ctx, ref, image.RemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
		t.Logf("untag %s: %v", ref, err)
	}
}
