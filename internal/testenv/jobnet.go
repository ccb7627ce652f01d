package testenv

import (
	"context"
	"fmt"
	"os"
	"time"

	cerrdefs "github.com/containerd/errdefs"
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
	if err := cli.NetworkRemove(ctx, JobNetwork()); err != nil && !cerrdefs.IsNotFound(err) {
		fmt.Fprintf(os.Stderr, "testenv: remove the jobs' network %s: %v\n", JobNetwork(), err)
	}
}
