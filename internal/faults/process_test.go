//go:build linux

package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// procState is the state letter of a process in /proc (R, S, T for stopped, Z for a
// zombie), or "" when there is no such process.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) == 0 {
		return ""
	}
	return fields[0]
}

// gone reports whether pid no longer runs (exited, possibly not yet reaped).
func gone(pid int) bool { st := procState(pid); return st == "" || st == "Z" || st == "X" }

func ticks(out string) int { return strings.Count(out, "tick ") }

func TestBuilderBuildsOnce(t *testing.T) {
	t.Parallel()
	var b Builder
	t.Cleanup(b.Close)
	ctx := context.Background()
	bin, err := b.Build(ctx, "./testdata/helper")
	if err != nil {
		t.Fatal(err)
	}
	first, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	again, err := b.Build(ctx, "./testdata/helper")
	if err != nil || again != bin {
		t.Fatalf("second build: %q, %v; want the first binary %q", again, err, bin)
	}
	if st, err := os.Stat(again); err != nil || !st.ModTime().Equal(first.ModTime()) {
		t.Fatalf("the binary was built again")
	}
	if other, err := b.Build(ctx, "./testdata/helper", "-ldflags=-s"); err != nil || other == bin {
		t.Fatalf("other flags: %q, %v; want a binary of its own", other, err)
	}
	if _, err := b.Build(ctx, "./testdata/nosuchpackage"); err == nil {
		t.Fatal("a build of a missing package succeeded")
	}
	b.Close()
	if _, err := os.Stat(bin); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Close left %s: %v", bin, err)
	}
}

// builds holds this test binary's builds, as a chaos suite's TestMain would hold the
// master's and the slave's: each is built once, whichever test asks first.
var builds Builder

func TestMain(m *testing.M) {
	code := m.Run()
	builds.Close()
	os.Exit(code)
}

func helperBinary(t *testing.T) string {
	t.Helper()
	bin, err := builds.Build(context.Background(), "./testdata/helper")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func TestProcess(t *testing.T) {
	t.Parallel()
	bin := helperBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	p := StartProcess(t, Command{Path: bin, Args: []string{"spawn"}, Env: []string{"HELPER_GREETING=hello"}})
	if err := p.WaitOutput(ctx, "tick 2"); err != nil {
		t.Fatal(err)
	}
	out := p.Output()
	for _, want := range []string{fmt.Sprintf("ready %d\n", p.Pid()), "greeting hello\n", "stderr too\n"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output %q lacks %q", out, want)
		}
	}
	var grandchild int
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "grandchild "); ok {
			grandchild, _ = strconv.Atoi(v)
		}
	}
	if grandchild == 0 || gone(grandchild) {
		t.Fatalf("no grandchild running in %q", out)
	}

	// Stop: the child (and its group) is stopped and writes nothing more.
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "stopped", func() bool { return procState(p.Pid()) == "T" && procState(grandchild) == "T" })
	if err := p.Cont(); err != nil {
		t.Fatal(err)
	}
	n := ticks(p.Output())
	waitFor(t, "ticks after Cont", func() bool { return ticks(p.Output()) > n+2 })

	// Term: a graceful exit with status 0; what the child left in its group goes with it.
	if err := p.Term(); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(ctx); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	if !strings.Contains(p.Output(), "term\n") || !p.Exited() {
		t.Fatalf("no graceful exit: %q", p.Output())
	}
	waitFor(t, "grandchild gone", func() bool { return gone(grandchild) })
	if err := p.Kill(); err == nil {
		t.Fatal("Kill of an exited process succeeded")
	}

	// Restart: a new child, its output appended to the same log.
	first := p.Pid()
	if err := p.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitOutput(ctx, "ready"); err != nil {
		t.Fatal(err)
	}
	if p.Pid() == first || strings.Contains(p.Output(), "term") {
		t.Fatalf("restart: pid %d (was %d), output %q", p.Pid(), first, p.Output())
	}

	// Kill: SIGKILL, seen as such by Wait.
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	err := p.Wait(ctx)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != -1 || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("after Kill, Wait = %v; want killed by a signal", err)
	}
	log, err := os.ReadFile(p.LogPath())
	if err != nil || strings.Count(string(log), "ready ") != 2 || !strings.Contains(string(log), "start 2 of") {
		t.Fatalf("log of both starts: %q, %v", log, err)
	}
}

// TestProcessDiesWithItsTest checks that a process left running, and a stopped one, end
// with the test that started them, their descendants too.
func TestProcessDiesWithItsTest(t *testing.T) {
	t.Parallel()
	bin := helperBinary(t)
	var pids []int
	t.Run("left running", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, name := range []string{"running", "stopped"} {
			p := StartProcess(t, Command{Path: bin, Args: []string{"spawn"}, Name: name})
			if err := p.WaitOutput(ctx, "tick"); err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(p.Output(), "\n") {
				if v, ok := strings.CutPrefix(line, "grandchild "); ok {
					gc, _ := strconv.Atoi(v)
					pids = append(pids, gc)
				}
			}
			pids = append(pids, p.Pid())
			if name == "stopped" {
				if err := p.Stop(); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
	if len(pids) != 4 {
		t.Fatalf("pids %v, want 2 children and 2 grandchildren", pids)
	}
	// The children were reaped by the end of the subtest; their groups got SIGKILL, which
	// ends the grandchildren a moment later.
	for _, pid := range pids {
		waitFor(t, fmt.Sprintf("process %d to end with its test", pid), func() bool { return gone(pid) })
	}
}
