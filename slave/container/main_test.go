package container

import (
	"os"
	"testing"

	"github.com/opengpulab/gpulab/internal/testenv"
)

// TestMain removes the jobs' network the tests' runtimes created (one per test process) and
// the development registry's build.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveJobNetwork()
	testenv.RemoveRegistryBuild()
	os.Exit(code)
}

// testHardening is the default hardening in the jobs' network of this test process, its
// ulimits within what this machine allows.
func testHardening() Hardening {
	h := DefaultHardening()
	h.Network = testenv.JobNetwork()
	h.CapUlimits()
	return h
}
