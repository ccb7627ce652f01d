package testenv

import (
	"context"
	"fmt"
	"os"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
)

// JobNetwork is the jobs' Docker network of this test process's slaves ("gpulab-jobs-3fa9c2"):
// the slave creates it on its first job, and RemoveJobNetwork removes it when the process ends
// (from TestMain), so that tests of two checkouts never share one, nor leave one behind.
func JobNetwork() string { return Name("gpulab-jobs") }

// RemoveJobNetwork removes this process's jobs' network, if it was made and the engine answers;
// for TestMain after the tests ran (their containers are gone by then).
func RemoveJobNetwork() {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return
	}
	defer func() { _ = cli.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := cli.NetworkList(ctx, network.ListOptions{Filters: filters.NewArgs(filters.Arg("name", JobNetwork()))})
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: list the jobs' networks %s: %v\n", JobNetwork(), err)
		return
	}
	for _, n := range list { // by id: a name two networks share (a lost race) is ambiguous
		if n.Name != JobNetwork() {
			continue
		}
		if err := cli.NetworkRemove(ctx, n.ID); err != nil && !cerrdefs.IsNotFound(err) {
			fmt.Fprintf(os.Stderr, "testenv: remove the jobs' network %s (%s): %v\n", JobNetwork(), n.ID, err)
		}
	}
}
