package web

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/opengpulab/gpulab/handlers"
)

// Limits bound what one client can hold of the server: a client that sends its headers or body
// a byte at a time, keeps idle connections open, or opens thousands of them, must not exhaust
// the master's goroutines, memory or file descriptors. Zero fields take DefaultLimits.
type Limits struct {
	// ReadHeaderTimeout is the time a client has to send a request's headers.
	ReadHeaderTimeout time.Duration
	// BodyTimeout is the time a client has to send a request's body, from the end of its
	// headers. It ends when the body has been read, so that a long poll or a stream answered
	// after the body goes on as long as it must.
	BodyTimeout time.Duration
	// IdleTimeout closes a kept-alive connection that sends no new request.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes int
	// MaxConnsPerIP bounds the connections open at once from one client address; more are
	// closed as soon as they are accepted.
	MaxConnsPerIP int
	// MaxStreamsPerConn bounds the requests one HTTP/2 connection carries at once (what one
	// HTTP/1.1 connection carries is one): a client that wants more opens another connection,
	// which MaxConnsPerIP counts.
	MaxStreamsPerConn int
}

// DefaultLimits are generous for slaves (one long poll and a few calls each), scripts and
// browsers, and small enough that one client cannot take the master down.
func DefaultLimits() Limits {
	return Limits{
		ReadHeaderTimeout: 10 * time.Second,
		BodyTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		MaxConnsPerIP:     256,
		MaxStreamsPerConn: 32,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = d.ReadHeaderTimeout
	}
	if l.BodyTimeout <= 0 {
		l.BodyTimeout = d.BodyTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = d.IdleTimeout
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = d.MaxHeaderBytes
	}
	if l.MaxConnsPerIP <= 0 {
		l.MaxConnsPerIP = d.MaxConnsPerIP
	}
	if l.MaxStreamsPerConn <= 0 {
		l.MaxStreamsPerConn = d.MaxStreamsPerConn
	}
	return l
}

// limitRequests refuses an unreadable path and an oversized or unreadable query string (400
// naming it) and gives a
// request's body its deadline. The deadline is lifted as soon as the body has been read to its
// end, before the handler answers: a slave's long poll reads its small body at once and then
// waits as long as it asks.
func (s *Server) limitRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := handlers.CheckURL(r); err != nil {
			s.h.WriteError(w, r, err)
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			rc := http.NewResponseController(w)
			ri := infoFrom(r.Context())
			if err := rc.SetReadDeadline(time.Now().Add(s.cfg.Limits.BodyTimeout)); err == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, lift: func() {
					_ = rc.SetReadDeadline(time.Time{})
					if ri != nil {
						ri.bodyRead = time.Now()
					}
				}}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the body deadline when the body has been read to its end. After any other
// error (the deadline passed) it stays: the server then cannot wait for the rest of the body
// before it answers, and closes the connection after the 408.
type deadlineBody struct {
	io.ReadCloser
	lift func()
	once sync.Once
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.once.Do(b.lift)
	}
	return n, err
}

// connLimiter is a net.Listener that closes a connection at once when its client address
// already holds max open connections.
type connLimiter struct {
	net.Listener
	max int
	log *slog.Logger
	mu  sync.Mutex
	n   map[string]int
	// logged is when a refusal was last logged: a flood of refusals logs once a minute.
	logged time.Time
}

func limitConns(l net.Listener, max int, log *slog.Logger) net.Listener {
	return &connLimiter{Listener: l, max: max, log: log, n: map[string]int{}}
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host, _, err := net.SplitHostPort(c.RemoteAddr().String())
		if err != nil {
			host = c.RemoteAddr().String()
		}
		l.mu.Lock()
		if l.n[host] >= l.max {
			logIt := time.Since(l.logged) > time.Minute
			if logIt {
				l.logged = time.Now()
			}
			l.mu.Unlock()
			_ = c.Close()
			if logIt {
				l.log.Warn("connections refused: too many from one client (logged once a minute)", "client", host, "max_conns_per_ip", l.max)
			}
			continue
		}
		l.n[host]++
		l.mu.Unlock()
		return &countedConn{Conn: c, release: func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.n[host]--; l.n[host] <= 0 {
				delete(l.n, host)
			}
		}}, nil
	}
}

// countedConn gives its place back when it is closed (once, however often Close is called).
type countedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
