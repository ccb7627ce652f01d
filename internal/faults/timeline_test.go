package faults

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/opengpulab/gpulab/internal/testenv"
	jobcontainer "github.com/opengpulab/gpulab/slave/container"
)

func TestOverlaps(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(1_700_000_000+int64(s), 0) }
	run := func(a, b int) Run {
		if b < 0 {
			return Run{Start: at(a)}
		}
		return Run{Start: at(a), End: at(b)}
	}
	ctr := func(id string, runs ...Run) Container { return Container{ID: id, Name: id, Runs: runs} }
	tests := []struct {
		name string
		cs   []Container
		want int
	}{
		{"apart", []Container{ctr("a", run(0, 10)), ctr("b", run(20, 30))}, 0},
		{"touching", []Container{ctr("a", run(0, 10)), ctr("b", run(10, 20))}, 0},
		{"overlapping", []Container{ctr("a", run(0, 10)), ctr("b", run(5, 20))}, 1},
		{"inside", []Container{ctr("a", run(0, 30)), ctr("b", run(5, 20))}, 1},
		{"still running", []Container{ctr("a", run(0, -1)), ctr("b", run(50, 60))}, 1},
		{"both running", []Container{ctr("a", run(0, -1)), ctr("b", run(5, -1))}, 1},
		{"restarted later", []Container{ctr("a", run(0, 10), run(40, 50)), ctr("b", run(20, 30))}, 0},
		{"restarted into", []Container{ctr("a", run(0, 10), run(25, 50)), ctr("b", run(20, 30))}, 1},
		{"three at once", []Container{ctr("a", run(0, 10)), ctr("b", run(1, 10)), ctr("c", run(2, 10))}, 3},
		{"one container", []Container{ctr("a", run(0, 10), run(5, 20))}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := overlaps(map[string][]Container{"GPU-1": tt.cs})
			if len(got) != tt.want {
				t.Fatalf("got %d violations %q, want %d", len(got), got, tt.want)
			}
		})
	}
}

func TestGPUsOf(t *testing.T) {
	tests := []struct {
		env  []string
		hc   *container.HostConfig
		want []string
	}{
		{[]string{"A=1", "NVIDIA_VISIBLE_DEVICES=GPU-a, GPU-b"}, nil, []string{"GPU-a", "GPU-b"}},
		{[]string{"NVIDIA_VISIBLE_DEVICES=void"}, nil, nil},
		{[]string{"NVIDIA_VISIBLE_DEVICES=none"}, nil, nil},
		{nil, &container.HostConfig{Resources: container.Resources{DeviceRequests: []container.DeviceRequest{
			{Driver: "nvidia", DeviceIDs: []string{"GPU-c"}}}}}, []string{"GPU-c"}},
		{nil, &container.HostConfig{}, nil},
	}
	for _, tt := range tests {
		if got := gpusOf(tt.env, tt.hc); !slices.Equal(got, tt.want) {
			t.Errorf("gpusOf(%q) = %q, want %q", tt.env, got, tt.want)
		}
	}
}

// jobContainer runs a busybox container labelled as a job of slave, holding gpus.
func jobContainer(t *testing.T, cli *client.Client, slave, job, lineage, gpus string, cmd ...string) string {
	t.Helper()
	return runContainer(t, cli, &container.Config{
		Cmd: cmd,
		Env: []string{"NVIDIA_VISIBLE_DEVICES=" + gpus},
		Labels: map[string]string{
			jobcontainer.LabelSlave: slave,
			jobcontainer.LabelJob:   job,
			"faults.lineage":        lineage,
		},
	})
}

// recorded is a WaitFor condition: the containers with these ids are recorded, inspected,
// and have started (and ended, when ended is set).
func recorded(ended bool, ids ...string) func([]Container) bool {
	return func(cs []Container) bool {
		for _, id := range ids {
			i := slices.IndexFunc(cs, func(c Container) bool { return c.ID == id })
			if i < 0 || !cs[i].Inspected || len(cs[i].Runs) == 0 || (ended && cs[i].Alive()) {
				return false
			}
		}
		return true
	}
}

func TestTimeline(t *testing.T) {
	t.Parallel()
	cli := testenv.Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	slave, other := uniqueName("slave"), uniqueName("slave")
	tl, err := WatchSlaves(ctx, cli, slave)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tl.Close)

	// One after the other on one GPU: no violation.
	a := jobContainer(t, cli, slave, "job-a", "lin-a", "GPU-seq", "true")
	if err := tl.WaitFor(ctx, recorded(true, a)); err != nil {
		t.Fatal(err)
	}
	b := jobContainer(t, cli, slave, "job-b", "lin-b", "GPU-seq", "true")
	if err := tl.WaitFor(ctx, recorded(true, b)); err != nil {
		t.Fatal(err)
	}
	// Another slave's container is not recorded, though it holds the same GPU UUID.
	jobContainer(t, cli, other, "job-o", "lin-o", "GPU-seq", "sleep", "30")
	if v := tl.OverlapsByGPU(); len(v) != 0 {
		t.Fatalf("sequential containers reported: %q", v)
	}

	// At the same time, sharing one of their GPUs, and of one lineage: violations.
	c := jobContainer(t, cli, slave, "job-c", "lin-c", "GPU-x,GPU-shared", "sleep", "30")
	d := jobContainer(t, cli, slave, "job-d", "lin-c", "GPU-shared,GPU-y", "sleep", "30")
	if err := tl.WaitFor(ctx, recorded(false, c, d)); err != nil {
		t.Fatal(err)
	}
	if alive := tl.Alive(); len(alive) != 2 {
		t.Fatalf("alive: %v, want the two sleeping containers", alive)
	}
	for _, id := range []string{c, d} {
		if err := cli.ContainerKill(ctx, id, "KILL"); err != nil {
			t.Fatal(err)
		}
	}
	if err := tl.WaitFor(ctx, recorded(true, c, d)); err != nil {
		t.Fatal(err)
	}
	v := tl.OverlapsByGPU()
	if len(v) != 1 || !strings.Contains(v[0], "GPU-shared") || !strings.Contains(v[0], "job-c") || !strings.Contains(v[0], "job-d") {
		t.Fatalf("GPU overlaps %q, want one on GPU-shared between job-c and job-d", v)
	}
	t.Logf("violation: %s", v[0])
	v = tl.OverlapsBy(func(c Container) string { return c.Labels["faults.lineage"] })
	if len(v) != 1 || !strings.Contains(v[0], "lin-c") {
		t.Fatalf("lineage overlaps %q, want one for lin-c", v)
	}

	got := tl.Containers()
	if len(got) != 4 {
		t.Fatalf("recorded %d containers, want 4", len(got))
	}
	for _, c := range got {
		if c.Slave != slave || !strings.HasPrefix(c.Job, "job-") || !strings.HasPrefix(c.Name, "faults-") ||
			len(c.GPUs) == 0 || len(c.Runs) != 1 || c.Runs[0].End.Before(c.Runs[0].Start) {
			t.Errorf("recorded %+v", c)
		}
	}

	left, err := tl.Leftovers(ctx)
	if err != nil || len(left) != 4 {
		t.Fatalf("leftovers %q, %v; want the 4 containers not yet removed", left, err)
	}
	for _, id := range []string{a, b, c, d} {
		if err := cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
	}
	if left, err := tl.Leftovers(ctx); err != nil || len(left) != 0 {
		t.Fatalf("leftovers %q, %v; want none", left, err)
	}
	if err := tl.WaitFor(ctx, func(cs []Container) bool {
		return !slices.ContainsFunc(cs, func(c Container) bool { return !c.Destroyed })
	}); err != nil {
		t.Fatal(err)
	}
}

// TestTimelineSeesExisting checks that a container running before the watch began is
// recorded, with its run.
func TestTimelineSeesExisting(t *testing.T) {
	t.Parallel()
	cli := testenv.Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	slave := uniqueName("slave")
	id := jobContainer(t, cli, slave, "job-e", "lin-e", "GPU-e", "sleep", "30")
	waitFor(t, "container running", func() bool {
		info, err := cli.ContainerInspect(ctx, id)
		return err == nil && info.State.Running
	})
	tl, err := WatchSlaves(ctx, cli, slave)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tl.Close)
	if alive := tl.Alive(); len(alive) != 1 || alive[0].ID != id || !slices.Equal(alive[0].GPUs, []string{"GPU-e"}) {
		t.Fatalf("alive %+v, want the running container with GPU-e", alive)
	}
	if err := cli.ContainerKill(ctx, id, "KILL"); err != nil {
		t.Fatal(err)
	}
	if err := tl.WaitFor(ctx, recorded(true, id)); err != nil {
		t.Fatal(err)
	}
}
