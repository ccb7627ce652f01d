package container

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opengpulab/gpulab/internal/testenv"
)

// TestDuplicateJobNetworksMended: two networks of one name (what two slave processes racing to
// create it left on engines before API 1.44, after which every job failed to start with
// "ambiguous") are mended at the next start: one is kept and the job starts in it.
func TestDuplicateJobNetworksMended(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	name := testenv.Name("gpulab-dup")
	t.Cleanup(func() { removeNetworks(t, e, name) })
	// The engine's own duplicate check is skipped by asking for it off, as an old client did.
	for range 2 {
		req, err := http.NewRequestWithContext(ctx, "POST", "http://docker/v1.41/networks/create",
			strings.NewReader(`{"Name": "`+name+`", "CheckDuplicate": false, "Driver": "bridge"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := e.cli.HTTPClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Skipf("this engine refuses duplicate network names (%s): nothing to mend", resp.Status)
		}
	}
	if n := len(networksNamed(t, e, name)); n != 2 {
		t.Fatalf("%d networks named %s, want the 2 made", n, name)
	}
	if err := e.rt.ensureNetwork(ctx, name); err != nil {
		t.Fatalf("ensure the network: %v", err)
	}
	if n := len(networksNamed(t, e, name)); n != 1 {
		t.Fatalf("%d networks named %s after mending, want 1", n, name)
	}
}

// newNetworkEnv is newEnv with a jobs' network of its own (a name of this test process's, from
// prefix), removed after the test.
func newNetworkEnv(t *testing.T, prefix string) (*env, string) {
	name := testenv.Name(prefix)
	e := newEnv(t, func(c *Config) {
		h := *c.Hardening
		h.Network = name
		c.Hardening = &h
	})
	t.Cleanup(func() { removeNetworks(t, e, name) })
	return e, name
}

func networksNamed(t *testing.T, e *env, name string) []network.Summary {
	t.Helper()
	list, err := e.cli.NetworkList(context.Background(), network.ListOptions{Filters: filters.NewArgs(filters.Arg("name", name))})
	if err != nil {
		t.Fatal(err)
	}
	var out []network.Summary
	for _, n := range list {
		if n.Name == name {
			out = append(out, n)
		}
	}
	return out
}

func removeNetworks(t *testing.T, e *env, name string) {
	for _, n := range networksNamed(t, e, name) {
		_ = e.cli.NetworkRemove(context.Background(), n.ID)
	}
}

// TestJobNetworkCheckedOnce: once a start found the jobs' network, later starts do not check it
// again under the host-wide lock (a start succeeds while another process holds that lock),
// and a network removed behind the slave's back is made again by the next start.
func TestJobNetworkCheckedOnce(t *testing.T) {
	e, name := newNetworkEnv(t, "gpulab-netonce")
	run := func() {
		t.Helper()
		s := e.start(e.assignment("true"))
		if code := e.wait(s.ContainerID); code != 0 {
			t.Fatalf("exit code %d", code)
		}
		if err := e.rt.Remove(context.Background(), s.ContainerID); err != nil {
			t.Fatal(err)
		}
	}
	run()
	if n := len(networksNamed(t, e, name)); n != 1 {
		t.Fatalf("%d networks named %s after the first start, want 1", n, name)
	}

	unlock, err := lockHostWide("gpulab-network-" + name)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); run() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		unlock()
		<-done
		t.Fatal("a start waited for the host-wide lock of a network it had found before")
	}
	unlock()

	removeNetworks(t, e, name)
	run()
	if n := len(networksNamed(t, e, name)); n != 1 {
		t.Fatalf("%d networks named %s after a start that found it removed, want 1 (made again)", n, name)
	}
}

// TestPrepareMakesTheJobNetwork: Prepare (gpulab-slave's start-up) finds or makes the jobs'
// network, with inter-container traffic off, before any job; the slave's first start then
// does not check it again under the host-wide lock (it starts while another process holds it).
func TestPrepareMakesTheJobNetwork(t *testing.T) {
	e, name := newNetworkEnv(t, "gpulab-netprep")
	if n := len(networksNamed(t, e, name)); n != 0 {
		t.Fatalf("%d networks named %s before Prepare, want none", n, name)
	}
	if err := e.rt.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	nets := networksNamed(t, e, name)
	if len(nets) != 1 {
		t.Fatalf("%d networks named %s after Prepare, want 1", len(nets), name)
	}
	n, err := e.cli.NetworkInspect(context.Background(), nets[0].ID, network.InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Options[iccOption] != "false" {
		t.Fatalf("the network's options are %v: inter-container traffic is not off", n.Options)
	}
	unlock, err := lockHostWide("gpulab-network-" + name)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var started *Started
	go func() {
		defer close(done)
		var err error
		if started, err = e.rt.Start(context.Background(), e.assignment("true")); err != nil {
			t.Errorf("Start: %v", err)
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		unlock()
		<-done
		t.Fatal("the first start after Prepare waited for the host-wide lock of the jobs' network")
	}
	unlock()
	if started != nil {
		if code := e.wait(started.ContainerID); code != 0 {
			t.Fatalf("exit code %d", code)
		}
		if err := e.rt.Remove(context.Background(), started.ContainerID); err != nil {
			t.Fatal(err)
		}
	}
}

// refuseCreateOnce is the engine, but for one container create, once armed, that it refuses
// as not found: what an engine that checks the network at the create (not the start) says
// when the jobs' network is gone.
type refuseCreateOnce struct {
	Docker
	armed atomic.Bool
}

func (d *refuseCreateOnce) ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig,
	networkingConfig *network.NetworkingConfig, platform *ocispec.Platform, name string) (container.CreateResponse, error) {
	if d.armed.CompareAndSwap(true, false) {
		return container.CreateResponse{}, fmt.Errorf("network %s not found: %w", hostConfig.NetworkMode, cerrdefs.ErrNotFound)
	}
	return d.Docker.ContainerCreate(ctx, config, hostConfig, networkingConfig, platform, name)
}

// TestStartMakesTheNetworkAgainWhenCreateSaysItIsGone: on an engine that refuses the create
// when the jobs' network is gone, the start checks the network again, makes it, and creates
// the container again.
func TestStartMakesTheNetworkAgainWhenCreateSaysItIsGone(t *testing.T) {
	e, name := newNetworkEnv(t, "gpulab-netcreate")
	d := &refuseCreateOnce{Docker: e.cli}
	e.rt = New(d, e.cfg, nil)
	run := func() {
		t.Helper()
		s := e.start(e.assignment("true"))
		if code := e.wait(s.ContainerID); code != 0 {
			t.Fatalf("exit code %d", code)
		}
		if err := e.rt.Remove(context.Background(), s.ContainerID); err != nil {
			t.Fatal(err)
		}
	}
	run()
	removeNetworks(t, e, name)
	d.armed.Store(true)
	run()
	if d.armed.Load() {
		t.Fatal("the create was never refused: the test proves nothing")
	}
	if n := len(networksNamed(t, e, name)); n != 1 {
		t.Fatalf("%d networks named %s after a create refused for it, want 1 (made again)", n, name)
	}
}
