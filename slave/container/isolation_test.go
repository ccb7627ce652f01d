package container

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/job"
)

// serverScript serves "hello" on port 8080 of the container, published nowhere.
const serverScript = "mkdir -p /www && echo hello > /www/index.html && exec httpd -f -p 8080 -h /www"

// containerIP is the address of a container in a network ("" : its only one).
func (e *env) containerIP(id, network string) string {
	e.t.Helper()
	info, err := e.cli.ContainerInspect(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	for name, n := range info.NetworkSettings.Networks {
		if (network == "" || name == network) && n.IPAddress != "" {
			return n.IPAddress
		}
	}
	e.t.Fatalf("container %s has no address in network %q: %+v", id, network, info.NetworkSettings.Networks)
	return ""
}

// waitServing waits until the host reaches the job's server at ip (the host reaches every
// container of a bridge, inter-container traffic on or off).
func waitServing(t *testing.T, ip string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get("http://" + ip + ":8080/")
		if err == nil {
			_ = resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job's server at %s did not answer the host within a minute: %v", ip, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// reach runs a job that tries to read the server at ip three times, and returns its exit code
// and output.
func (e *env) reach(ip string) (int, string) {
	e.t.Helper()
	s := e.start(e.assignment("sh", "-c", fmt.Sprintf(
		// busybox nc, not wget: the static busybox's wget crashes on some machines.
		`for i in 1 2 3; do if printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 %s 8080; then exit 0; fi; sleep 0.2; done; exit 1`, ip)))
	return e.wait(s.ContainerID), e.logs(s.ContainerID)
}

func TestJobsCannotReachEachOther(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	srv := e.start(e.assignment("sh", "-c", serverScript))
	n, err := e.cli.NetworkInspect(context.Background(), testenv.JobNetwork(), network.InspectOptions{})
	if err != nil || n.Driver != "bridge" || n.Options["com.docker.network.bridge.enable_icc"] != "false" || n.Labels[LabelNetwork] != "jobs" {
		t.Errorf("the jobs' network: %+v, %v; want a bridge with inter-container traffic off", n, err)
	}
	ip := e.containerIP(srv.ContainerID, testenv.JobNetwork())
	waitServing(t, ip)
	code, out := e.reach(ip)
	if code == 0 || strings.Contains(out, "hello") {
		t.Errorf("a job read another job's unpublished port in the jobs' network (exit %d): %q", code, out)
	}
	t.Logf("in the jobs' network: exit %d, %q", code, out)

	// Without it (the engine's default bridge, inter-container traffic on) the same job gets in:
	// the network is what keeps them apart.
	open := newEnv(t, func(c *Config) {
		h := *c.Hardening
		h.Network = ""
		c.Hardening = &h
	})
	srv = open.start(open.assignment("sh", "-c", serverScript))
	ip = open.containerIP(srv.ContainerID, "")
	waitServing(t, ip)
	if code, out := open.reach(ip); code != 0 || !strings.Contains(out, "hello") {
		t.Errorf("on the default bridge the control job did not get in (exit %d): %q", code, out)
	}
}

func TestHostPortsFromRange(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) {
		h := *c.Hardening
		h.PortLow, h.PortHigh, h.MaxPortMappings = 31000, 31099, 3
		c.Hardening = &h
	})
	a := e.assignment("sleep", "30")
	a.Job.Request.Docker.PortMappings = []job.PortMapping{{ContainerPort: 80}, {ContainerPort: 81}, {ContainerPort: 82}}
	s := e.start(a)
	if len(s.Ports) != 3 {
		t.Fatalf("Ports = %+v, want 3", s.Ports)
	}
	for _, p := range s.Ports {
		if p.HostPort < 31000 || p.HostPort > 31099 {
			t.Errorf("container port %d published on host port %d, outside 31000-31099", p.ContainerPort, p.HostPort)
		}
	}

	// Refused before anything is made, with the field and the bound in the reason.
	for _, tc := range []struct {
		pms  []job.PortMapping
		want string
	}{
		{[]job.PortMapping{{ContainerPort: 22, HostPort: 22}}, "request.docker.portMappings[0].hostPort: 22 is outside this slave's host ports 31000-31099"},
		{[]job.PortMapping{{ContainerPort: 80}, {ContainerPort: 80, HostPort: 32000}}, "request.docker.portMappings[1].hostPort: 32000 is outside"},
		{[]job.PortMapping{{ContainerPort: 1}, {ContainerPort: 2}, {ContainerPort: 3}, {ContainerPort: 4}}, "request.docker.portMappings: 4 port mappings, this slave publishes at most 3"},
	} {
		b := e.assignment("true")
		b.Job.Request.Docker.PortMappings = tc.pms
		_, err := e.rt.Start(context.Background(), b)
		var se *StartError
		if !errors.As(err, &se) || !strings.HasPrefix(se.Reason, tc.want) {
			t.Errorf("Start = %v, want a refusal %q", err, tc.want)
		}
		e.assertGone(ContainerName(b.Job.UUID))
	}
}

// engineFinishesCreate is an engine whose create completes even when the caller gives up
// (as the real engine does when the client's request is cancelled mid-way): it cancels the
// caller's context during the create, then answers as a cancelled client call does.
type engineFinishesCreate struct {
	Docker
	cancel context.CancelFunc
}

func (d engineFinishesCreate) ContainerCreate(ctx context.Context, cc *container.Config, hc *container.HostConfig,
	nc *network.NetworkingConfig, p *ocispec.Platform, name string) (container.CreateResponse, error) {
	d.cancel() // the slave stops meanwhile
	resp, err := d.Docker.ContainerCreate(context.WithoutCancel(ctx), cc, hc, nc, p, name)
	if ctx.Err() != nil {
		return container.CreateResponse{}, ctx.Err()
	}
	return resp, err
}

func TestStopDuringCreateLeavesNoContainer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rt := New(engineFinishesCreate{Docker: e.cli, cancel: cancel}, e.cfg, nil)
	a := e.assignment("true")
	if _, err := rt.Start(ctx, a); err == nil {
		t.Fatal("Start succeeded on a stopping slave")
	}
	e.assertGone(ContainerName(a.Job.UUID))
}
