package testenv

import (
	"bufio"
	"context"
	"crypto/rand"
	"io"
	"os"
	"os/exec"
	"strings"
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

// registryBuild is internal/devregistry (its own module), built once per test process.
var registryBuild = ModuleBinary{Dir: "internal/devregistry", Name: "gpulab-devregistry"}

// RemoveRegistryBuild removes what was built into a temporary folder (from TestMain).
func RemoveRegistryBuild() { registryBuild.Remove() }

// StartRegistry starts a development registry for the test's duration: private (one user
// with a random password: nothing is read or written without credentials) or public (no
// users). If it cannot be built, the test is skipped (it fails under GPULAB_REQUIRE_SERVICES=1).
func StartRegistry(t testing.TB, private bool) *Registry {
	t.Helper()
	bin, err := registryBuild.Path()
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
