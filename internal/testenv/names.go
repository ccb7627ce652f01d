package testenv

import (
	"crypto/rand"
	"encoding/hex"
	mathrand "math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Tests of two checkouts may run at once on one Docker Engine: every slave, container, image
// tag, network and namespace a test names on shared ground carries a suffix of its own test
// process, so that one process never counts, lists or removes what another made.

var suffix = sync.OnceValue(func() string {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		return strconv.Itoa(os.Getpid())
	}
	return hex.EncodeToString(b)
})

// Suffix is the short random suffix of this test process (6 hex digits), the same for all its
// tests.
func Suffix() string { return suffix() }

// Name returns base with this test process's suffix ("s1" → "s1-3fa9c2"): the same base gives
// the same name within a process (a slave restarted by a test keeps its name) and another one
// in another process.
func Name(base string) string { return base + "-" + Suffix() }

// SeedEnv names the variable that makes the randomised tests replay a seed.
const SeedEnv = "GPULAB_TEST_SEED"

// Seed returns the seed of a randomised test: GPULAB_TEST_SEED when set (to replay a failure),
// else a fresh one from the clock. Either way it is logged, with the command that replays it,
// so a failing run can be reproduced.
func Seed(t testing.TB) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(SeedEnv); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", SeedEnv, s, err)
		}
		seed = v
	}
	t.Logf("%s: seed %d (replay it with %s=%d)", t.Name(), seed, SeedEnv, seed)
	return seed
}

// FreePort returns a TCP port of 127.0.0.1 that is free now, for a test that must name a port
// before something listens on it (a redirect URI, a fixed host port for Docker). It is chosen
// at random below the kernel's ephemeral range, where neither the ports handed out for ":0"
// listeners nor those of outgoing connections (Postgres, Docker, this and other test processes)
// can take it in the meantime.
func FreePort(t testing.TB) int {
	t.Helper()
	low := ephemeralLow()
	for range 100 {
		port := 10000 + mathrand.IntN(low-10000)
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			_ = l.Close()
			return port
		}
	}
	t.Fatalf("no free port found below %d", low)
	return 0
}

// FreePorts returns the first of n consecutive TCP ports of 127.0.0.1 that are free now, below
// the kernel's ephemeral range as FreePort's: for a program configured with a range rather than
// a list (Slurm's nodes, one slurmd a port).
func FreePorts(t testing.TB, n int) int {
	t.Helper()
	low := ephemeralLow()
	if n < 1 || n > low-10000 {
		t.Fatalf("FreePorts(%d): want 1 to %d", n, low-10000)
	}
	for range 100 {
		first := 10000 + mathrand.IntN(low-10000-n+1)
		if portsFree(first, n) {
			return first
		}
	}
	t.Fatalf("no %d consecutive free ports found below %d", n, low)
	return 0
}

// portsFree says whether the n ports from first can all be listened on now.
func portsFree(first, n int) bool {
	for p := first; p < first+n; p++ {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			return false
		}
		_ = l.Close()
	}
	return true
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768 when unreadable).
func ephemeralLow() int {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 12000 {
				low = v
			}
		}
	}
	return low
}
