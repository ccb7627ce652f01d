package chaos

import (
	"net"
	"os"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/faults"
	"github.com/opengpulab/gpulab/internal/testenv"
)

// builder builds the master and slave binaries once for every scenario of the test binary.
var builder faults.Builder

func TestMain(m *testing.M) {
	code := m.Run()
	builder.Close()
	testenv.RemoveJobNetwork()
	os.Exit(code)
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// waitUntil waits for cond, checking every 100 ms, and fails the test with what after limit.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within %s", what, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
