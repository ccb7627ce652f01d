package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultDockerSocket is the engine's socket: DOCKER_HOST's when it names a Unix socket,
// else /var/run/docker.sock.
func DefaultDockerSocket() string {
	if h, ok := strings.CutPrefix(os.Getenv("DOCKER_HOST"), "unix://"); ok && h != "" {
		return h
	}
	return "/var/run/docker.sock"
}

// SlowDocker is a Unix-socket proxy in front of the Docker Engine that holds every request
// for a delay before passing it on, as an engine under load does (a slow `docker create`,
// a stalled pull): the slave's timeouts, retries and leases must cope. What the engine sends
// back (replies, followed logs, waits, event streams) passes at once, so a stream that
// has started keeps streaming.
//
// The delay applies to each burst of bytes the client sends, counted from when the burst
// arrives: a delay line, not a queue, so a request written in several pieces is late by one
// delay, not by one per piece. Changing the delay affects bursts that arrive afterwards.
type SlowDocker struct {
	target string
	dir    string // holds the socket; removed by Close
	sock   string
	ln     net.Listener
	delay  atomic.Int64 // nanoseconds
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// NewSlowDocker listens on a new socket under /tmp (short, as a socket path must be) and
// forwards to the engine socket target ("" for DefaultDockerSocket) with the given delay.
func NewSlowDocker(target string, delay time.Duration) (*SlowDocker, error) {
	if target == "" {
		target = DefaultDockerSocket()
	}
	dir, err := os.MkdirTemp("/tmp", "sd")
	if err != nil {
		return nil, fmt.Errorf("slow docker: %w", err)
	}
	sock := filepath.Join(dir, "d.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("slow docker: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &SlowDocker{target: target, dir: dir, sock: sock, ln: ln, ctx: ctx, cancel: cancel,
		conns: map[net.Conn]struct{}{}}
	s.delay.Store(int64(delay))
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

// Socket is the proxy's socket path.
func (s *SlowDocker) Socket() string { return s.sock }

// DockerHost is the DOCKER_HOST value that reaches the engine through the proxy, for
// client.WithHost or a slave's environment.
func (s *SlowDocker) DockerHost() string { return "unix://" + s.sock }

// SetDelay changes how long each request is held.
func (s *SlowDocker) SetDelay(d time.Duration) { s.delay.Store(int64(d)) }

// Delay is how long each request is held now.
func (s *SlowDocker) Delay() time.Duration { return time.Duration(s.delay.Load()) }

// Close stops listening, closes every connection, waits for the proxy's goroutines and
// removes the socket.
func (s *SlowDocker) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	conns := make([]net.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	s.cancel()
	_ = s.ln.Close()
	closeAll(conns, false)
	s.wg.Wait()
	_ = os.RemoveAll(s.dir)
}

// track remembers c for Close; it reports false (and closes c) when Close came first.
func (s *SlowDocker) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = c.Close()
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *SlowDocker) untrack(conns ...net.Conn) {
	s.mu.Lock()
	for _, c := range conns {
		delete(s.conns, c)
	}
	s.mu.Unlock()
	closeAll(conns, false)
}

func (s *SlowDocker) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return // closed
		}
		if !s.track(c) {
			return
		}
		s.wg.Add(1)
		go s.relay(c.(*net.UnixConn))
	}
}

// chunk is one burst from the client and when it may go on.
type chunk struct {
	data []byte
	due  time.Time
}

// relay carries one connection: the client's bursts through a delay line, the engine's
// bytes straight back. Half-closes pass through (a hijacked attach closes stdin that way).
func (s *SlowDocker) relay(client *net.UnixConn) {
	defer s.wg.Done()
	var d net.Dialer
	sc, err := d.DialContext(s.ctx, "unix", s.target)
	if err != nil {
		s.untrack(client)
		return
	}
	server := sc.(*net.UnixConn)
	if !s.track(server) {
		s.untrack(client)
		return
	}
	defer s.untrack(client, server)

	line := make(chan chunk, 64)
	var inner sync.WaitGroup
	inner.Add(3)
	go func() { // client → delay line
		defer inner.Done()
		defer close(line)
		for {
			buf := make([]byte, 32<<10)
			n, err := client.Read(buf)
			if n > 0 {
				line <- chunk{data: buf[:n], due: time.Now().Add(s.Delay())}
			}
			if err != nil {
				return
			}
		}
	}()
	go func() { // delay line → engine
		defer inner.Done()
		for c := range line {
			if wait := time.Until(c.due); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-s.ctx.Done():
					t.Stop()
					s.drain(line)
					return
				}
			}
			if _, err := server.Write(c.data); err != nil {
				_ = client.Close()
				s.drain(line)
				return
			}
		}
		_ = server.CloseWrite()
	}()
	go func() { // engine → client, at once
		defer inner.Done()
		_, err := io.Copy(client, server)
		if err != nil && !errors.Is(err, net.ErrClosed) {
			_ = server.Close()
		}
		_ = client.CloseWrite()
	}()
	inner.Wait()
}

// drain empties the line so its reader, blocked on a full line, can see its closed
// connection and end.
func (s *SlowDocker) drain(line <-chan chunk) {
	for range line {
	}
}
