package sshd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"
)

// directTCPIPReq is the payload of a direct-tcpip channel open (RFC 4254 7.2).
type directTCPIPReq struct {
	Host       string
	Port       uint32
	OriginHost string
	OriginPort uint32
}

// forwardHost checks the host an `ssh -L` names: only the job itself is reachable, as
// localhost or by its container's address on the jobs' network. It returns the address to dial
// inside the job's network namespace (where localhost is the job's own loopback, never the
// slave's) and the one to dial from the slave when that namespace cannot be entered.
func forwardHost(host, containerIP string) (inside, outside string, err error) {
	switch host {
	case "localhost", "127.0.0.1", "::1":
		inside = "127.0.0.1"
	case "":
	default:
		if host == containerIP {
			inside = containerIP
		}
	}
	if inside == "" {
		return "", "", fmt.Errorf("forwarding reaches only the job itself (localhost), not %q", host)
	}
	return inside, containerIP, nil
}

// dialJob connects to port inside the job: from within the container's network namespace when
// the slave may enter it (a service listening on the job's loopback only, as Jupyter does by
// default, is reached too), else at the container's address from the slave.
func dialJob(ctx context.Context, t *target, inside, outside string, port int) (net.Conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	if t.pid > 0 {
		conn, err := dialInNetns(ctx, &d, t.pid, net.JoinHostPort(inside, strconv.Itoa(port)))
		if !errors.Is(err, errNoNetns) {
			return conn, err
		}
	}
	if outside == "" {
		return nil, errors.New("the job's container has no address")
	}
	return d.DialContext(ctx, "tcp", net.JoinHostPort(outside, strconv.Itoa(port)))
}

// errNoNetns: the job's network namespace could not be entered (the slave lacks the privilege).
var errNoNetns = errors.New("cannot enter the job's network namespace")

// dialInNetns dials addr (a literal IP: no name lookup happens there) from the network
// namespace of process pid. The socket is made on an OS thread moved into that namespace; the
// thread stays locked to its goroutine and ends with it, so no other goroutine ever runs in the
// job's namespace. A socket keeps the namespace it was made in.
func dialInNetns(ctx context.Context, d *net.Dialer, pid int, addr string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread is discarded when the goroutine ends
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- result{err: fmt.Errorf("%w: %w", errNoNetns, err)}
			return
		}
		defer func() { _ = unix.Close(fd) }()
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			done <- result{err: fmt.Errorf("%w: %w", errNoNetns, err)}
			return
		}
		conn, err := d.DialContext(ctx, "tcp", addr)
		done <- result{conn, err}
	}()
	r := <-done
	return r.conn, r.err
}

// directTCPIP serves `ssh -L`: a connection to a port inside the job.
func (s *Server) directTCPIP(ctx context.Context, t *target, nch ssh.NewChannel, log *slog.Logger) {
	var req directTCPIPReq
	if err := ssh.Unmarshal(nch.ExtraData(), &req); err != nil {
		_ = nch.Reject(ssh.ConnectionFailed, "bad direct-tcpip request")
		return
	}
	inside, outside, err := forwardHost(req.Host, t.ip)
	if err != nil || req.Port == 0 || req.Port > 65535 {
		if err == nil {
			err = fmt.Errorf("bad port %d", req.Port)
		}
		log.Info("ssh forwarding refused", "to", req.Host, "port", req.Port, "why", err)
		_ = nch.Reject(ssh.Prohibited, err.Error())
		return
	}
	conn, err := dialJob(ctx, t, inside, outside, int(req.Port))
	if err != nil {
		_ = nch.Reject(ssh.ConnectionFailed, "cannot connect inside the job: "+err.Error())
		return
	}
	defer func() { _ = conn.Close() }()
	ch, reqs, err := nch.Accept()
	if err != nil {
		return
	}
	defer func() { _ = ch.Close() }()
	go ssh.DiscardRequests(reqs)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(conn, ch)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	go func() {
		defer wg.Done()
		_, _ = io.Copy(ch, conn)
		_ = ch.CloseWrite()
	}()
	wg.Wait()
}
