package chaos

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testenv"
)

// The fault injectors of the suite. Each is small and does one thing; they are written here
// rather than taken from a library because each needs a hook no general proxy offers (drop a
// reply after the server acted, swallow traffic without resetting it).

// proxyMode is what a proxy does with traffic.
type proxyMode int32

const (
	modePass      proxyMode = iota
	modeDrop                // forward requests, drop a share of the replies (closing the connection)
	modeBlackhole           // forward nothing, keep connections open: a partition
)

// proxy is a TCP proxy between a slave and a master. In modeDrop, after a client→server burst
// the next server→client burst is dropped with probability dropP, and the connection closed:
// the master did the work, the slave never learns it. It works on TLS because it never looks
// inside: one burst each way is one request and one reply.
type proxy struct {
	l      net.Listener
	target string
	mode   atomic.Int32
	dropP  float64
	rng    *rand.Rand
	rngMu  sync.Mutex
	drops  atomic.Int64
	conns  sync.WaitGroup
	mu     sync.Mutex
	open   map[net.Conn]bool
	closed atomic.Bool
}

func newProxy(t *testing.T, target string, seed uint64) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, target: target, rng: rand.New(rand.NewPCG(seed, 7)), open: map[net.Conn]bool{}}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.l.Addr().String() }

func (p *proxy) set(m proxyMode, dropP float64) {
	p.rngMu.Lock()
	p.dropP = dropP
	p.rngMu.Unlock()
	p.mode.Store(int32(m))
	if m == modePass {
		// Connections swallowed during a partition are dead to their clients: end them.
		p.mu.Lock()
		for c := range p.open {
			_ = c.Close()
		}
		p.mu.Unlock()
	}
}

func (p *proxy) roll() bool {
	p.rngMu.Lock()
	defer p.rngMu.Unlock()
	return p.rng.Float64() < p.dropP
}

func (p *proxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.open[c] = true
	} else {
		delete(p.open, c)
	}
}

func (p *proxy) close() {
	if p.closed.Swap(true) {
		return
	}
	_ = p.l.Close()
	p.mu.Lock()
	for c := range p.open {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.conns.Wait()
}

func (p *proxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.conns.Add(1)
		go func() { defer p.conns.Done(); p.serve(c) }()
	}
}

func (p *proxy) serve(client net.Conn) {
	p.track(client, true)
	defer p.track(client, false)
	defer func() { _ = client.Close() }()
	if proxyMode(p.mode.Load()) == modeBlackhole {
		_, _ = io.Copy(io.Discard, client) // held open, nothing forwarded
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	p.track(server, true)
	defer p.track(server, false)
	defer func() { _ = server.Close() }()
	var asked atomic.Bool // a request went up since the last reply burst
	done := make(chan struct{}, 2)
	go func() {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 32<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 && proxyMode(p.mode.Load()) != modeBlackhole {
				asked.Store(true)
				if _, werr := server.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	go func() {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 32<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 {
				switch proxyMode(p.mode.Load()) {
				case modeBlackhole:
					continue
				case modeDrop:
					if asked.Swap(false) && p.roll() {
						p.drops.Add(1)
						_ = client.Close()
						_ = server.Close()
						return
					}
				}
				if _, werr := client.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	<-done
}

// slowEngine is a Unix-socket proxy in front of the Docker Engine that holds every request
// burst for delay before passing it on: an engine under load. Streams from the engine (logs,
// waits, events) are not held.
type slowEngine struct {
	path  string
	l     net.Listener
	delay atomic.Int64
	wg    sync.WaitGroup
}

func newSlowEngine(t *testing.T, delay time.Duration) *slowEngine {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "sd")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "docker.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := &slowEngine{path: path, l: l}
	s.delay.Store(int64(delay))
	go s.accept()
	t.Cleanup(func() { _ = l.Close(); s.wg.Wait(); _ = os.RemoveAll(dir) })
	return s
}

func (s *slowEngine) host() string { return "unix://" + s.path }

func (s *slowEngine) accept() {
	for {
		c, err := s.l.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { _ = c.Close() }()
			e, err := net.Dial("unix", "/var/run/docker.sock")
			if err != nil {
				return
			}
			defer func() { _ = e.Close() }()
			go func() { _, _ = io.Copy(c, e); _ = c.Close() }()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					time.Sleep(time.Duration(s.delay.Load()))
					if _, werr := e.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// postgres is a Postgres cluster of the scenario's own, which it may stop and start (the
// project's other tests share one that must never stop). env is added to the server's
// environment (faketime, to move its clock).
type postgres struct {
	t    *testing.T
	dir  string
	port int
	bin  string
	env  []string
}

func startPostgres(t *testing.T, env ...string) *postgres {
	t.Helper()
	bin := ""
	for _, v := range []string{"17", "16", "15", "14"} {
		if _, err := os.Stat("/usr/lib/postgresql/" + v + "/bin/initdb"); err == nil {
			bin = "/usr/lib/postgresql/" + v + "/bin"
			break
		}
	}
	if bin == "" {
		testenv.Missing(t, "PostgreSQL", "no /usr/lib/postgresql/*/bin/initdb")
	}
	dir, err := os.MkdirTemp("", "chaos-pg")
	if err != nil {
		t.Fatal(err)
	}
	p := &postgres{t: t, dir: dir, port: freePort(t), bin: bin, env: env}
	if out, err := exec.Command("chown", "-R", "postgres:", dir).CombinedOutput(); err != nil {
		t.Fatalf("chown %s: %v %s", dir, err, out)
	}
	if out, err := exec.Command("runuser", "-u", "postgres", "--", bin+"/initdb", "-D", dir+"/data", "-U", "gpulab", "--auth=trust", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v %s", err, out)
	}
	p.start()
	t.Cleanup(func() {
		p.stop()
		_ = os.RemoveAll(dir)
	})
	return p
}

func (p *postgres) url() string {
	return fmt.Sprintf("postgres://gpulab@127.0.0.1:%d/postgres?sslmode=disable", p.port)
}

func (p *postgres) start() {
	p.t.Helper()
	args := []string{"-u", "postgres", "--", "env"}
	args = append(args, p.env...)
	args = append(args, p.bin+"/pg_ctl", "-D", p.dir+"/data", "-w", "-t", "60", "-l", p.dir+"/log",
		"-o", fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200", p.port, p.dir), "start")
	if out, err := exec.Command("runuser", args...).CombinedOutput(); err != nil {
		log, _ := os.ReadFile(p.dir + "/log")
		p.t.Fatalf("start postgres: %v %s\n%s", err, out, log)
	}
}

// stop stops the cluster at once (connections cut), as a crash or a failover would.
func (p *postgres) stop() {
	_ = exec.Command("runuser", "-u", "postgres", "--", p.bin+"/pg_ctl", "-D", p.dir+"/data", "-w", "-m", "immediate", "stop").Run()
}

// proc is a process of the scenario: a master or a slave binary.
type proc struct {
	t    *testing.T
	name string
	path string
	args []string
	env  []string
	log  string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func startProc(t *testing.T, name, path string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, path: path, args: args, env: env, log: filepath.Join(testenv.OutputDir(t), name+".log")}
	p.start()
	t.Cleanup(p.kill)
	return p
}

func (p *proc) start() {
	p.t.Helper()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	fmt.Fprintf(f, "=== start %s %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(p.args, " "))
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		p.t.Fatalf("start %s: %v", p.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = f.Close(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
}

func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, sig)
	}
}

// kill kills the process with SIGKILL and waits for it.
func (p *proc) kill() {
	p.signal(syscall.SIGCONT) // a stopped process takes SIGKILL too, but its children may not
	p.signal(syscall.SIGKILL)
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done != nil {
		<-done
	}
}

func (p *proc) pause()  { p.signal(syscall.SIGSTOP) }
func (p *proc) resume() { p.signal(syscall.SIGCONT) }

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// waitUntil waits for cond, checking every interval, and fails the test with what after
// limit.
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
