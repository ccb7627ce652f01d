package testenv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Chromium on Linux watches the host's interfaces over netlink and, when an address appears or
// goes (Docker adds and removes a veth or a bridge for every container and network), aborts the
// connections it is opening and its HTTP/2 sessions with net::ERR_NETWORK_CHANGED, loopback
// included. No switch turns that off: NetworkChangeNotifierLinux is created unconditionally,
// with an empty list of ignored interfaces. So a test browser runs in a network namespace of
// its own, which holds only a loopback interface that nothing changes, and reaches the host
// through a SOCKS5 proxy whose listening socket lives in that namespace while the proxy dials
// from the host's.

// browserNet is the network namespace of one test browser and its proxy.
type browserNet struct {
	// nsPath names the namespace (for nsenter --net=); proxy is the proxy's address inside it.
	nsPath, proxy string
}

// isolateBrowser makes the network namespace and starts the proxy, both removed at cleanup.
// It fails (and the browser then shares the host's network) without root, `ip` or `nsenter`.
func isolateBrowser(t testing.TB) (*browserNet, error) {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil, errors.New("a network namespace needs root")
	}
	for _, tool := range []string{"ip", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s: %w", tool, err)
		}
	}
	name := Name("gpulab-browser") + "-" + strconv.Itoa(int(browserNets.Add(1)))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %w: %s", name, err, out)
	}
	removeNS := func() {
		if out, err := exec.Command("ip", "netns", "delete", name).CombinedOutput(); err != nil {
			t.Logf("ip netns delete %s: %v %s", name, err, out)
		}
	}
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		removeNS()
		return nil, fmt.Errorf("loopback up in %s: %w: %s", name, err, out)
	}
	nsPath := "/var/run/netns/" + name
	l, err := listenIn(nsPath)
	if err != nil {
		removeNS()
		return nil, err
	}
	p := &socksProxy{l: l, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		p.close()
		removeNS()
	})
	return &browserNet{nsPath: nsPath, proxy: l.Addr().String()}, nil
}

// browserNets numbers the namespaces of this process.
var browserNets atomic.Int64

// listenIn opens a loopback TCP listener inside the network namespace at nsPath. A socket
// belongs to the namespace of the thread that made it, so a locked thread enters the namespace,
// listens and comes back; a thread that cannot come back is never used again (its goroutine
// ends locked, which ends the thread).
func listenIn(nsPath string) (net.Listener, error) {
	type result struct {
		l   net.Listener
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("open own network namespace: %w", err)}
			return
		}
		defer func() { _ = home.Close() }()
		target, err := os.Open(nsPath)
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("open %s: %w", nsPath, err)}
			return
		}
		defer func() { _ = target.Close() }()
		if err := setns(target); err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("enter %s: %w", nsPath, err)}
			return
		}
		l, listenErr := net.Listen("tcp", "127.0.0.1:0")
		if err := setns(home); err != nil {
			if l != nil {
				_ = l.Close()
			}
			done <- result{err: fmt.Errorf("leave %s: %w", nsPath, err)} // the thread stays locked and dies
			return
		}
		runtime.UnlockOSThread()
		done <- result{l: l, err: listenErr}
	}()
	r := <-done
	return r.l, r.err
}

func setns(f *os.File) error {
	return unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
}

// socksProxy is the smallest SOCKS5 server Chromium needs: no authentication, CONNECT only,
// to an IPv4, IPv6 or named address, which it dials from the host's network namespace.
type socksProxy struct {
	l     net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  bool
}

func (p *socksProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			_ = c.Close()
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(c)
			p.handle(c)
		}()
	}
}

// track remembers a connection so close can end it; false once the proxy is closing.
func (p *socksProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *socksProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *socksProxy) close() {
	p.mu.Lock()
	p.done = true
	_ = p.l.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// handle speaks SOCKS5 (RFC 1928) on c and then copies both ways until either side closes.
func (p *socksProxy) handle(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	var hdr [2]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil || hdr[0] != 5 {
		return
	}
	if _, err := io.ReadFull(c, make([]byte, hdr[1])); err != nil { // the offered methods
		return
	}
	if _, err := c.Write([]byte{5, 0}); err != nil { // no authentication
		return
	}
	var req [4]byte
	if _, err := io.ReadFull(c, req[:]); err != nil || req[0] != 5 {
		return
	}
	reply := func(code byte) error {
		_, err := c.Write([]byte{5, code, 0, 1, 0, 0, 0, 0, 0, 0})
		return err
	}
	if req[1] != 1 { // CONNECT only
		_ = reply(7)
		return
	}
	var host string
	switch req[3] {
	case 1, 4:
		ip := make([]byte, map[byte]int{1: 4, 4: 16}[req[3]])
		if _, err := io.ReadFull(c, ip); err != nil {
			return
		}
		host = net.IP(ip).String()
	case 3:
		var n [1]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return
		}
		name := make([]byte, n[0])
		if _, err := io.ReadFull(c, name); err != nil {
			return
		}
		host = string(name)
	default:
		_ = reply(8)
		return
	}
	var port [2]byte
	if _, err := io.ReadFull(c, port[:]); err != nil {
		return
	}
	up, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(int(binary.BigEndian.Uint16(port[:])))), 30*time.Second)
	if err != nil {
		_ = reply(5) // connection refused
		return
	}
	if !p.track(up) {
		_ = up.Close()
		return
	}
	defer p.untrack(up)
	if err := reply(0); err != nil {
		return
	}
	_ = c.SetDeadline(time.Time{})
	copied := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); closeWrite(up); copied <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); closeWrite(c); copied <- struct{}{} }()
	<-copied
	<-copied
}

// closeWrite passes an end of stream on: the other side may still answer.
func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
		return
	}
	_ = c.Close()
}
