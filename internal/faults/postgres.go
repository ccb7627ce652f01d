package faults

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/lib/pq" // the Postgres driver

	"github.com/opengpulab/gpulab/internal/testenv"
)

// postgresStartTimeout bounds initdb and a start; a fresh cluster takes about two seconds.
const postgresStartTimeout = 2 * time.Minute

// Postgres is a private, throwaway PostgreSQL cluster that a chaos test may stop, crash and
// start again under a running master (the project's tests share one cluster, which must
// never be stopped). It listens on 127.0.0.1 on a port of its own, with fsync off (a test
// cluster needs no durability against power loss; a fast or immediate shutdown loses
// nothing committed either way), and keeps its port and data across stops.
type Postgres struct {
	t    testing.TB
	bin  string // folder of initdb, pg_ctl
	dir  string // data, socket and server log; removed by Close
	port int
	url  string
	env  []string // added to the server's environment

	mu      sync.Mutex // serializes Start, Stop and Close
	running bool
	closed  bool
}

// StartPostgres makes a cluster in a new folder under /tmp, starts it, creates the
// database "gpulab" and returns the cluster, stopped and removed when the test ends. Run as
// root, the server runs as the postgres user (Postgres refuses to run as root). It skips the
// test (fails it under GPULAB_REQUIRE_SERVICES=1) when the server binaries are missing.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	return StartPostgresWith(t, PostgresOptions{})
}

// PostgresOptions change the cluster StartPostgresWith makes.
type PostgresOptions struct {
	// Env is added to the server's environment at every start: LD_PRELOAD of libfaketime and
	// FAKETIME move its clock, so a test can run a master against a database whose clock is
	// off the master's.
	Env []string
}

// StartPostgresWith is StartPostgres with options.
func StartPostgresWith(t testing.TB, o PostgresOptions) *Postgres {
	t.Helper()
	bin := postgresBin()
	if bin == "" {
		testenv.Missing(t, "PostgreSQL server binaries", "initdb not found (apt-get install postgresql)")
	}
	// Short and not under t.TempDir(): the socket path must fit in about 100 bytes, and the
	// postgres user must be able to reach the folder.
	dir, err := os.MkdirTemp("/tmp", "pg")
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	p := &Postgres{t: t, bin: bin, dir: dir, env: o.Env}
	t.Cleanup(p.Close)
	if os.Geteuid() == 0 {
		if err := chownToPostgres(dir); err != nil {
			testenv.Missing(t, "PostgreSQL", err.Error())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), postgresStartTimeout)
	defer cancel()
	if out, err := p.pg(ctx, "initdb", "-D", p.data(), "-U", "gpulab", "--auth=trust", "--no-sync", "-E", "UTF8"); err != nil {
		t.Fatalf("postgres: initdb: %v\n%s", err, out)
	}
	// A free port now; another process could take it before the server binds, so try again.
	for try := 0; ; try++ {
		if p.port, err = freePort(); err != nil {
			t.Fatalf("postgres: %v", err)
		}
		err = p.Start(ctx)
		if err == nil {
			break
		}
		if try == 2 || !strings.Contains(p.log(), "could not bind") {
			t.Fatalf("postgres: %v", err)
		}
	}
	p.url = fmt.Sprintf("postgres://gpulab@127.0.0.1:%d/gpulab?sslmode=disable", p.port)
	admin, err := sql.Open("postgres", fmt.Sprintf("postgres://gpulab@127.0.0.1:%d/postgres?sslmode=disable", p.port))
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	defer func() { _ = admin.Close() }()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE gpulab"); err != nil {
		t.Fatalf("postgres: create database: %v", err)
	}
	return p
}

// URL is the database's URL (user gpulab, database gpulab, no password).
func (p *Postgres) URL() string { return p.url }

// Port is the port the cluster listens on, the same across restarts.
func (p *Postgres) Port() int { return p.port }

// Start starts the stopped cluster on its port, with its data.
func (p *Postgres) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("postgres: closed")
	}
	if p.running {
		return nil
	}
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off", p.port, p.dir)
	if out, err := p.pg(ctx, "pg_ctl", "-D", p.data(), "-l", p.logPath(), "-w", "-t", "60", "-o", opts, "start"); err != nil {
		return fmt.Errorf("start postgres: %w\n%s\n%s", err, out, tail(p.log(), 10))
	}
	p.running = true
	return nil
}

// Stop shuts the cluster down fast: open connections are cut (clients get "terminating
// connection due to administrator command"), new ones are refused.
func (p *Postgres) Stop(ctx context.Context) error { return p.stop(ctx, "fast") }

// Crash stops the cluster as a crash would (immediate shutdown: no checkpoint, the next
// start recovers from the write-ahead log).
func (p *Postgres) Crash(ctx context.Context) error { return p.stop(ctx, "immediate") }

// KillBackend kills one of the cluster's server processes (SIGKILL), as the kernel's
// out-of-memory killer would: Postgres then ends every session and recovers from the crash
// (replays its write-ahead log, losing what was committed without waiting for it) while its
// postmaster goes on running. It returns once the cluster has recovered and takes connections.
func (p *Postgres) KillBackend(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	db, err := sql.Open("postgres", p.url)
	if err != nil {
		return err
	}
	defer func() { _ = db.Close() }()
	var pid int
	if err := db.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		return fmt.Errorf("find a server process: %w", err)
	}
	const ready = "database system is ready to accept connections"
	readies := strings.Count(p.log(), ready)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill server process %d: %w", pid, err)
	}
	for strings.Count(p.log(), ready) == readies {
		select {
		case <-ctx.Done():
			return fmt.Errorf("postgres did not recover after server process %d was killed: %w", pid, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// Restart stops the cluster fast and starts it again.
func (p *Postgres) Restart(ctx context.Context) error {
	if err := p.Stop(ctx); err != nil {
		return err
	}
	return p.Start(ctx)
}

func (p *Postgres) stop(ctx context.Context, mode string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running {
		return nil
	}
	if out, err := p.pg(ctx, "pg_ctl", "-D", p.data(), "-m", mode, "-w", "-t", "60", "stop"); err != nil {
		return fmt.Errorf("stop postgres (%s): %w\n%s", mode, err, out)
	}
	p.running = false
	return nil
}

// Close stops the cluster and removes its folder; after a failed test the server's log is
// kept in the test's output folder.
func (p *Postgres) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.stop(ctx, "immediate"); err != nil {
		p.t.Logf("%v", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	if p.t.Failed() {
		if log := p.log(); log != "" {
			out := filepath.Join(testenv.OutputDir(p.t), "postgres.log")
			if err := os.WriteFile(out, []byte(log), 0o644); err == nil {
				p.t.Logf("postgres log: %s", out)
			}
		}
	}
	if err := os.RemoveAll(p.dir); err != nil {
		p.t.Logf("remove postgres folder: %v", err)
	}
}

func (p *Postgres) data() string    { return filepath.Join(p.dir, "data") }
func (p *Postgres) logPath() string { return filepath.Join(p.dir, "server.log") }

// log is the server's log so far, or "".
func (p *Postgres) log() string {
	b, _ := os.ReadFile(p.logPath())
	return string(b)
}

// pg runs one of the server's programs, as the postgres user when we are root.
func (p *Postgres) pg(ctx context.Context, prog string, args ...string) ([]byte, error) {
	name, argv := filepath.Join(p.bin, prog), args
	if len(p.env) > 0 && prog == "pg_ctl" {
		// env(1) between runuser and the program: runuser resets the environment.
		name, argv = "env", append(append(slices.Clone(p.env), name), args...)
	}
	if os.Geteuid() == 0 {
		name, argv = "runuser", append([]string{"-u", "postgres", "--", name}, argv...)
	}
	cmd := exec.CommandContext(ctx, name, argv...)
	cmd.Dir = p.dir
	// pg_ctl's server keeps the output pipes open; a log file (-l) takes its output instead,
	// but do not wait on stragglers either way.
	cmd.WaitDelay = 5 * time.Second
	return cmd.CombinedOutput()
}

// postgresBin finds the newest installed server's binaries (Debian keeps them out of PATH).
func postgresBin() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return versionOf(b) - versionOf(a) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	return ""
}

// versionOf reads the major version out of /usr/lib/postgresql/<v>/bin.
func versionOf(bin string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(bin)))
	return v
}

// chownToPostgres gives dir to the postgres user, who runs the server.
func chownToPostgres(dir string) error {
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("no postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return fmt.Errorf("chown %s: %w", dir, err)
	}
	if _, err := exec.LookPath("runuser"); err != nil {
		return fmt.Errorf("runuser not found: %w", err)
	}
	return nil
}

// freePort asks the kernel for a port of 127.0.0.1 that is free now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
