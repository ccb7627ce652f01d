package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// proxyMode is what a Proxy does with the bytes it carries.
type proxyMode int

const (
	modePass      proxyMode = iota // forward both ways
	modeDropConn                   // selected connections are cut at their first reply
	modeDropReply                  // each reply is dropped by chance
	modeBlackhole                  // swallow everything, keep connections open
	modeRefuse                     // reset every connection
)

func (m proxyMode) String() string {
	return [...]string{"pass", "drop-replies", "drop-replies-per-request", "blackhole", "refuse"}[m]
}

// ProxyStats counts what a Proxy did, so a scenario can tell that a fault really happened
// (a run in which no reply was dropped proves nothing about retries).
type ProxyStats struct {
	Connections    int64 // accepted
	DroppedReplies int64 // replies withheld from the client, its connection cut
	BytesToServer  int64 // forwarded client→server
	BytesToClient  int64 // forwarded server→client
	Swallowed      int64 // bytes read and never passed on (blackhole, dropped replies)
}

// dialTimeout bounds the proxy's connection to its target; a target that does not answer is
// reported to the client as a closed connection.
const dialTimeout = 10 * time.Second

// Proxy is a TCP proxy between clients (a slave, the CLI) and a server (the master) whose
// behaviour a chaos scenario changes while traffic flows: pass, drop replies after the server
// did the work, partition (blackhole), or refuse. Mode changes are safe from any goroutine
// and act on existing connections as well as new ones.
//
// It is hand-written rather than built on Toxiproxy: Toxiproxy's toxics each see one direction
// of a connection, while dropping "the reply to a request" needs both directions at once (a
// reply is only a reply after a request went up), and a TLS client's handshake must not count
// as a request (see requestWatch).
type Proxy struct {
	target string
	ln     net.Listener
	ctx    context.Context // canceled by Close: stops dials in flight
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	mode   proxyMode
	prob   float64
	rng    *rand.Rand // nil: math/rand/v2's global source
	links  map[*link]struct{}
	closed bool
	stats  ProxyStats
}

// link is one client connection and, unless it was accepted during a blackhole, its
// connection to the target. Fields below the line are guarded by Proxy.mu.
type link struct {
	client net.Conn
	watch  requestWatch // only the client→server goroutine touches it

	server   net.Conn // nil while dialing, or forever when accepted during a blackhole
	selected bool     // DropReplies picked it: cut at its next reply
	pending  bool     // request bytes went up and no reply came back yet
	cut      bool     // a reply was dropped: client side closed, server side drained
	broken   bool     // bytes were swallowed: the stream is beyond repair
	closed   bool
	running  int // forwarding goroutines still running
}

// NewProxy listens on a free port of 127.0.0.1 and forwards each connection to target
// (host:port), in Pass mode. Close it when done (t.Cleanup(p.Close)).
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy for %s: %w", target, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{target: target, ln: ln, ctx: ctx, cancel: cancel, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr is where clients connect (127.0.0.1:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Pass forwards both ways. Leaving a blackhole closes the connections whose bytes were
// swallowed: their streams have holes no protocol recovers from.
func (p *Proxy) Pass() { p.setMode(modePass, 0, nil) }

// DropReplies selects each connection (those open now and each new one) with probability
// prob; a selected connection carries the client's request to the server, but when the
// server's reply starts, the client's side is closed and the reply never passed on: the
// server did the work (committed) and the client never learns it. The server's side stays
// open and is drained, as after a real network failure, so the server finishes the request
// instead of seeing its client leave (Go's net/http would cancel the request's context).
// rng makes a run repeatable; nil uses a random source. A TLS client's handshake is not a
// request (see requestWatch), so HTTPS works too.
func (p *Proxy) DropReplies(prob float64, rng *rand.Rand) { p.setMode(modeDropConn, prob, rng) }

// DropRepliesPerRequest decides per request instead of per connection: after each burst of
// request bytes, the next reply is dropped (and its connection cut) with probability prob.
// On a keep-alive connection this drops a share of requests, not of connections.
func (p *Proxy) DropRepliesPerRequest(prob float64, rng *rand.Rand) {
	p.setMode(modeDropReply, prob, rng)
}

// Blackhole partitions: open connections stop forwarding in both directions (bytes are
// read and swallowed, connections stay open) and new ones are accepted but never forwarded,
// so clients see timeouts, not errors, as behind a dead network link.
func (p *Proxy) Blackhole() { p.setMode(modeBlackhole, 0, nil) }

// Refuse resets every open connection and each new one as soon as it is accepted, as when
// the server's process is gone.
func (p *Proxy) Refuse() { p.setMode(modeRefuse, 0, nil) }

// Mode names the current mode, for logs.
func (p *Proxy) Mode() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode.String()
}

// Stats returns the counters so far.
func (p *Proxy) Stats() ProxyStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Close stops listening, closes every connection and waits for the proxy's goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	links := p.closeLinksLocked(func(*link) bool { return true })
	p.mu.Unlock()
	p.cancel()
	_ = p.ln.Close()
	closeAll(links, false)
	p.wg.Wait()
}

func (p *Proxy) setMode(m proxyMode, prob float64, rng *rand.Rand) {
	p.mu.Lock()
	prev := p.mode
	p.mode, p.prob, p.rng = m, prob, rng
	var doomed []net.Conn
	switch {
	case m == modeRefuse:
		doomed = p.closeLinksLocked(func(*link) bool { return true })
	case prev == modeBlackhole && m != modeBlackhole:
		doomed = p.closeLinksLocked(func(l *link) bool { return l.broken })
	}
	if m == modeDropConn {
		for l := range p.links {
			l.selected = p.chanceLocked()
		}
	}
	p.mu.Unlock()
	closeAll(doomed, m == modeRefuse)
}

// chanceLocked draws true with the mode's probability.
func (p *Proxy) chanceLocked() bool {
	if p.prob <= 0 {
		return false
	}
	if p.rng != nil {
		return p.rng.Float64() < p.prob
	}
	return rand.Float64() < p.prob
}

// closeLinksLocked marks the links that match as closed and returns their connections, to
// be closed once p.mu is released.
func (p *Proxy) closeLinksLocked(match func(*link) bool) []net.Conn {
	var conns []net.Conn
	for l := range p.links {
		if l.closed || !match(l) {
			continue
		}
		l.closed = true
		conns = append(conns, l.client)
		if l.server != nil {
			conns = append(conns, l.server)
		}
	}
	return conns
}

// closeAll closes conns; reset sends a TCP reset instead of an orderly close.
func closeAll(conns []net.Conn, reset bool) {
	for _, c := range conns {
		if tc, ok := c.(*net.TCPConn); ok && reset {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			return
		}
		p.stats.Connections++
		if p.mode == modeRefuse {
			p.mu.Unlock()
			closeAll([]net.Conn{c}, true)
			continue
		}
		l := &link{client: c, running: 1}
		l.selected = p.mode == modeDropConn && p.chanceLocked()
		blackholed := p.mode == modeBlackhole
		l.broken = blackholed
		p.links[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		if blackholed {
			go p.swallow(l)
		} else {
			go p.connect(l)
		}
	}
}

// swallow reads a connection accepted during a blackhole until it is closed (the client
// gives up, or the blackhole ends).
func (p *Proxy) swallow(l *link) {
	defer p.wg.Done()
	defer p.finish(l)
	buf := make([]byte, 32<<10)
	for {
		n, err := l.client.Read(buf)
		p.mu.Lock()
		p.stats.Swallowed += int64(n)
		p.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// connect dials the target and starts forwarding both ways.
func (p *Proxy) connect(l *link) {
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(p.ctx, dialTimeout)
	defer cancel()
	var d net.Dialer
	srv, err := d.DialContext(ctx, "tcp", p.target)
	p.mu.Lock()
	if err != nil || l.closed {
		l.closed = true
		p.mu.Unlock()
		if srv != nil {
			_ = srv.Close()
		}
		closeAll([]net.Conn{l.client}, err != nil)
		p.finish(l)
		return
	}
	l.server = srv
	l.running = 2
	p.wg.Add(2)
	p.mu.Unlock()
	go p.up(l)
	go p.down(l)
}

// up forwards client→server, noting when request bytes go up.
func (p *Proxy) up(l *link) {
	defer p.wg.Done()
	defer p.finish(l)
	buf := make([]byte, 32<<10)
	for {
		n, err := l.client.Read(buf)
		if n > 0 {
			request := l.watch.feed(buf[:n])
			p.mu.Lock()
			if p.mode == modeBlackhole || l.cut {
				l.broken = l.broken || !l.cut
				p.stats.Swallowed += int64(n)
				p.mu.Unlock()
				continue
			}
			// Set before the bytes go up, so that the reply cannot overtake the flag.
			l.pending = l.pending || request
			p.stats.BytesToServer += int64(n)
			p.mu.Unlock()
			if _, werr := l.server.Write(buf[:n]); werr != nil {
				p.closeLink(l)
				return
			}
		}
		if err != nil {
			p.mu.Lock()
			cut, hole := l.cut, p.mode == modeBlackhole
			l.broken = l.broken || hole
			p.mu.Unlock()
			switch {
			case cut: // the server's side is being drained: leave it open
			case hole: // a partition hides the close too; the end of the blackhole closes the link
			case errors.Is(err, io.EOF):
				_ = l.server.(*net.TCPConn).CloseWrite() // pass the half-close on
			default:
				p.closeLink(l)
			}
			return
		}
	}
}

// down forwards server→client, dropping replies as the mode says.
func (p *Proxy) down(l *link) {
	defer p.wg.Done()
	defer p.finish(l)
	buf := make([]byte, 32<<10)
	for {
		n, err := l.server.Read(buf)
		if n > 0 {
			p.mu.Lock()
			if p.mode == modeBlackhole || l.cut {
				l.broken = l.broken || !l.cut
				p.stats.Swallowed += int64(n)
				p.mu.Unlock()
				continue
			}
			drop := false
			if l.pending {
				l.pending = false
				switch p.mode {
				case modeDropConn:
					drop = l.selected
				case modeDropReply:
					drop = p.chanceLocked()
				}
			}
			if drop {
				l.cut = true
				p.stats.DroppedReplies++
				p.stats.Swallowed += int64(n)
			} else {
				p.stats.BytesToClient += int64(n)
			}
			p.mu.Unlock()
			if drop {
				_ = l.client.Close()
				continue
			}
			if _, werr := l.client.Write(buf[:n]); werr != nil {
				p.closeLink(l)
				return
			}
		}
		if err != nil {
			p.mu.Lock()
			hole := p.mode == modeBlackhole && !l.cut
			l.broken = l.broken || hole
			p.mu.Unlock()
			switch {
			case hole: // as in up
			case errors.Is(err, io.EOF):
				_ = l.client.(*net.TCPConn).CloseWrite()
			default:
				p.closeLink(l)
			}
			return
		}
	}
}

// closeLink closes both sides of l now.
func (p *Proxy) closeLink(l *link) {
	p.mu.Lock()
	conns := p.closeLinksLocked(func(x *link) bool { return x == l })
	p.mu.Unlock()
	closeAll(conns, false)
}

// finish is called by each of l's goroutines as it ends; the last one closes both sides
// and forgets the link.
func (p *Proxy) finish(l *link) {
	p.mu.Lock()
	l.running--
	last := l.running == 0
	var conns []net.Conn
	if last {
		conns = p.closeLinksLocked(func(x *link) bool { return x == l })
		delete(p.links, l)
	}
	p.mu.Unlock()
	closeAll(conns, false)
}
