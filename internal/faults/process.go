//go:build linux

package faults

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testenv"
)

// errExitedCleanly stands for a child's exit with status 0 where an error is due.
var errExitedCleanly = errors.New("exit status 0")

// Builder builds Go programs (the master, the slave) once per test process however many
// scenarios run them, into a folder of its own. The zero value is ready; keep one for the
// whole test binary (in TestMain, which calls Close after m.Run) so builds are shared.
type Builder struct {
	mu     sync.Mutex
	dir    string
	builds map[string]*build
}

// build is one binary, built by the first caller that asks for it.
type build struct {
	once sync.Once
	path string
	err  error
}

// Build runs `go build` with flags (say "-race") for the package pkg (an import path, or a
// path relative to the test's package folder) once, and returns the binary's path. Calls for
// the same package and flags share one build, also concurrent ones.
func (b *Builder) Build(ctx context.Context, pkg string, flags ...string) (string, error) {
	key := strings.Join(append([]string{pkg}, flags...), "\x00")
	b.mu.Lock()
	if b.dir == "" {
		dir, err := os.MkdirTemp("", "faults-bin")
		if err != nil {
			b.mu.Unlock()
			return "", fmt.Errorf("build %s: %w", pkg, err)
		}
		b.dir, b.builds = dir, map[string]*build{}
	}
	bd, ok := b.builds[key]
	if !ok {
		bd = &build{path: filepath.Join(b.dir, fmt.Sprintf("%s-%d", filepath.Base(pkg), len(b.builds)))}
		b.builds[key] = bd
	}
	b.mu.Unlock()
	bd.once.Do(func() {
		args := append(append([]string{"build", "-o", bd.path}, flags...), pkg)
		if out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput(); err != nil {
			bd.err = fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	})
	return bd.path, bd.err
}

// Close removes the binaries.
func (b *Builder) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
		b.dir, b.builds = "", nil
	}
}

// Command is what a Process runs.
type Command struct {
	Path string   // the binary, say from Builder.Build
	Args []string // without the program name
	Env  []string // added to the test process's environment (later entries win)
	Dir  string   // working folder; "" for the test's
	// Name names the log file, <test output folder>/<Name>.log; it must be unique within a
	// test. Default: the binary's base name.
	Name string
}

// Process is a program (a master, a slave) run as a child of the test, so that a chaos
// scenario can kill it (a crash), pause it (a hang the network cannot tell from a crash),
// resume it, and start it again with the same arguments. Its stdout and stderr go to one
// file in the test's output folder, kept after the run for post-mortems.
//
// The child leads a process group of its own: Kill, Stop and Cont act on the whole group,
// so nothing it started escapes; when the child ends, what it left in its group is killed.
// The child is killed when the test ends (t.Cleanup), and by the kernel if the test process
// dies first (Pdeathsig), so no child outlives its test.
type Process struct {
	t       testing.TB
	cmd     Command
	logPath string

	mu     sync.Mutex
	cur    *exec.Cmd
	done   chan struct{} // closed when cur has exited
	err    error         // cur's exit, once done
	offset int64         // where cur's output starts in the log
	starts int
}

// StartProcess starts the command and returns it, killed at the end of the test. It fails
// the test if the program cannot start.
func StartProcess(t testing.TB, c Command) *Process {
	t.Helper()
	if c.Name == "" {
		c.Name = filepath.Base(c.Path)
	}
	p := &Process{t: t, cmd: c, logPath: filepath.Join(testenv.OutputDir(t), c.Name+".log")}
	if err := os.WriteFile(p.logPath, nil, 0o644); err != nil {
		t.Fatalf("process %s: %v", c.Name, err)
	}
	t.Cleanup(p.Close)
	if err := p.start(); err != nil {
		t.Fatalf("process %s: %v", c.Name, err)
	}
	return p
}

func (p *Process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := os.OpenFile(p.logPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	defer func() { _ = f.Close() }() // the child has its own copy
	if p.starts > 0 {
		fmt.Fprintf(f, "\n----- faults: start %d of %s -----\n", p.starts+1, p.cmd.Name)
	}
	info, err := f.Stat()
	if err != nil {
		return fmt.Errorf("log: %w", err)
	}
	cmd := exec.Command(p.cmd.Path, p.cmd.Args...)
	cmd.Env = append(os.Environ(), p.cmd.Env...)
	cmd.Dir = p.cmd.Dir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.cmd.Path, err)
	}
	done := make(chan struct{})
	p.cur, p.done, p.err, p.offset = cmd, done, nil, info.Size()
	p.starts++
	go func() {
		err := cmd.Wait()
		// The group dies with its leader; a pgid stays reserved while a member lives.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// Pid is the current child's process id (also its process group's).
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur.Process.Pid
}

// LogPath is the file that holds the output of every start.
func (p *Process) LogPath() string { return p.logPath }

// Output is what the current child wrote so far (not earlier starts).
func (p *Process) Output() string {
	p.mu.Lock()
	off := p.offset
	p.mu.Unlock()
	b, _ := os.ReadFile(p.logPath)
	if int64(len(b)) < off {
		return ""
	}
	return string(b[off:])
}

// WaitOutput waits until the current child has written s (a "listening on" line), or it
// exits, or ctx ends.
func (p *Process) WaitOutput(ctx context.Context, s string) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if strings.Contains(p.Output(), s) {
			return nil
		}
		p.mu.Lock()
		done := p.done
		p.mu.Unlock()
		select {
		case <-done:
			if strings.Contains(p.Output(), s) {
				return nil
			}
			return fmt.Errorf("%s exited before writing %q: %w", p.cmd.Name, s, cmp.Or(p.exitErr(), errExitedCleanly))
		case <-ctx.Done():
			return fmt.Errorf("%s did not write %q: %w", p.cmd.Name, s, ctx.Err())
		case <-tick.C:
		}
	}
}

// Kill sends SIGKILL to the child's group: a crash, no chance to clean up.
func (p *Process) Kill() error { return p.signal(syscall.SIGKILL, true) }

// Stop sends SIGSTOP to the group: the program hangs, its sockets stay open, and peers
// see silence rather than closed connections.
func (p *Process) Stop() error { return p.signal(syscall.SIGSTOP, true) }

// Cont resumes a stopped group.
func (p *Process) Cont() error { return p.signal(syscall.SIGCONT, true) }

// Term sends SIGTERM to the child alone, asking for a graceful shutdown; the child stops
// what it started (what it leaves is killed when it exits), as under systemd's
// KillMode=mixed.
func (p *Process) Term() error { return p.signal(syscall.SIGTERM, false) }

func (p *Process) signal(sig syscall.Signal, group bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return fmt.Errorf("signal %s: %s has exited", sig, p.cmd.Name)
	default:
	}
	var err error
	if group {
		err = syscall.Kill(-p.cur.Process.Pid, sig)
	} else {
		err = p.cur.Process.Signal(sig) // through a pidfd: never a stranger that reused the pid
	}
	if err != nil {
		return fmt.Errorf("signal %s to %s: %w", sig, p.cmd.Name, err)
	}
	return nil
}

// Wait waits for the current child to exit and returns how it ended (nil for status 0, an
// *exec.ExitError otherwise), or ctx's error.
func (p *Process) Wait(ctx context.Context) error {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
		return p.exitErr()
	case <-ctx.Done():
		return fmt.Errorf("wait for %s: %w", p.cmd.Name, ctx.Err())
	}
}

// Exited reports whether the current child has exited.
func (p *Process) Exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *Process) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Restart kills the child if it still runs, waits for it, and starts the command again;
// its output is appended to the same log.
func (p *Process) Restart(ctx context.Context) error {
	if err := p.killAndWait(ctx); err != nil {
		return err
	}
	return p.start()
}

func (p *Process) killAndWait(ctx context.Context) error {
	if err := p.Kill(); err != nil && !p.Exited() {
		return err
	}
	if err := p.Wait(ctx); err != nil && ctx.Err() != nil {
		return err
	}
	return nil
}

// Close kills the child's group and waits for it; StartProcess registers it with t.Cleanup.
func (p *Process) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.killAndWait(ctx); err != nil {
		p.t.Errorf("process %s: %v", p.cmd.Name, err)
	}
}
