package e2e

import (
	"os"
	"testing"

	"github.com/opengpulab/gpulab/internal/testenv"
	slavecontainer "github.com/opengpulab/gpulab/slave/container"
)

// TestMain removes the jobs' network the tests' slaves created (one per test process).
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveJobNetwork()
	os.Exit(code)
}

// testHardening is a slave's default hardening in this test process's jobs' network, its
// ulimits within what this machine allows.
func testHardening() slavecontainer.Hardening {
	h := slavecontainer.DefaultHardening()
	h.Network = testenv.JobNetwork()
	h.CapUlimits()
	return h
}
