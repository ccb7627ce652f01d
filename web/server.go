// Package web wires the master's HTTPS server: one port for the JSON API, the portal and the
// slave protocol, TLS with the master's own CA, authentication (client certificates, and for
// browsers an OpenID Connect login with an encrypted session cookie and CSRF protection), the
// route table and its middleware.
package web

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/metrics"
	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/store"
)

// Config configures the server.
type Config struct {
	// Addr is the listen address, e.g. ":8443".
	Addr string
	// CA signs client certificates and, unless TLSCert is set, the server certificate.
	CA *pki.CA
	// TLSCert, when set, is the server certificate to use instead of one from CA.
	TLSCert *tls.Certificate
	// Hosts are the names and addresses put in a server certificate made from CA.
	Hosts []string
	// Admins are admins whatever the database says, each a verified e-mail address or
	// ISSUER#SUBJECT (see ParseAdmins; a bare name is refused).
	Admins []string
	// AutoCreateCertUsers lets a valid certificate of a user the master does not know create
	// that user; off, such a certificate gets 401.
	AutoCreateCertUsers bool
	// Authority is the URN authority of users created at their first portal login.
	Authority string
	// OIDC configures the portal's browser login; without an Issuer the login is off.
	OIDC OIDCConfig
	// SessionKeys sign and encrypt session cookies (the first makes new cookies, all are
	// accepted). Masters sharing them share sessions; none: a random key for this process.
	SessionKeys []SessionKey
	// Limits bound connections and requests (timeouts, header size, connections per client).
	Limits Limits
	// Metrics, when set, is served at GET /metrics (before authentication, like /healthz: it
	// holds no user's data) and times every request by route pattern.
	Metrics *metrics.Master
}

// Server is the master's HTTPS server.
type Server struct {
	cfg      Config
	store    *store.Store
	h        *handlers.Handlers
	log      *slog.Logger
	admins   AdminSet
	sessions *sessionStore
	oidc     *oidcLogin // nil: portal login off
}

// New makes a server over the given store and handlers.
func New(cfg Config, st *store.Store, h *handlers.Handlers, log *slog.Logger) *Server {
	admins, err := ParseAdmins(cfg.Admins)
	if err != nil {
		// The command line checks them first (exit code 2); a caller that did not gets no
		// admins from the configuration rather than guessed ones.
		log.Error("admins from the configuration ignored", "err", err)
	}
	cfg.Limits = cfg.Limits.withDefaults()
	srv := &Server{cfg: cfg, store: st, h: h, log: log, admins: admins, sessions: newSessionStore(cfg.SessionKeys)}
	if cfg.OIDC.Issuer != "" {
		srv.oidc = newOIDCLogin(cfg.OIDC)
	}
	return srv
}

// Handler returns the routed handler with its middleware (for tests and embedding).
func (s *Server) Handler() http.Handler { return s.routes() }

// TLSConfig returns the server's TLS configuration: client certificates are verified against
// the CA when given, never required, so a browser without one still reaches the portal.
// HTTP/2 is offered beside HTTP/1.1: a slave then makes all its calls (heartbeats, its long
// poll, job updates, logs) on one connection instead of three to five, which at 5,000 slaves
// was 15,000–19,000 connections, their buffers and goroutines most of the master's memory,
// and their handshakes a tenth of its CPU (B8x, B2x).
func (s *Server) TLSConfig() (*tls.Config, error) {
	cert := s.cfg.TLSCert
	if cert == nil {
		c, err := s.cfg.CA.ServerCert(s.cfg.Hosts)
		if err != nil {
			return nil, err
		}
		cert = &c
	}
	return &tls.Config{
		Certificates: []tls.Certificate{*cert},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    s.cfg.CA.Pool(),
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2", "http/1.1"},
	}, nil
}

// responseHeaderTable bounds the HPACK table in which each HTTP/2 connection remembers the
// response headers it sent, so as to send a repeated one as an index: 1 byte keeps none. The
// headers that change at every response (Date, X-Request-Id) filled the default 4 KiB table
// of every connection with entries used once, 12 KiB of memory a connection with its maps
// (62 MB of the master's heap with 5,000 slaves connected, bench/ B8x) and a share of its
// CPU at every response, to save a few dozen bytes of a response's headers.
//
// requestHeaderTable does the same for the table each connection keeps of its client's
// request headers (what SETTINGS_HEADER_TABLE_SIZE tells the client it may index): 23 MB of the
// heap with 5,000 slaves connected, to spare a slave a hundred bytes of headers a heartbeat.
const (
	responseHeaderTable = 1
	requestHeaderTable  = 1
)

// Serve serves HTTPS on l until ctx ends, then shuts down gracefully.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	tlsCfg, err := s.TLSConfig()
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           s.routes(),
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: s.cfg.Limits.ReadHeaderTimeout,
		IdleTimeout:       s.cfg.Limits.IdleTimeout,
		MaxHeaderBytes:    s.cfg.Limits.MaxHeaderBytes,
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: s.cfg.Limits.MaxStreamsPerConn, MaxEncoderHeaderTableSize: responseHeaderTable,
			MaxDecoderHeaderTableSize: requestHeaderTable},
		ErrorLog:    slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		ConnContext: withConnCert,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(tls.NewListener(limitConns(l, s.cfg.Limits.MaxConnsPerIP, s.log), tlsCfg)) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shut down: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// Run listens on cfg.Addr and serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	l, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.cfg.Addr, err)
	}
	s.log.Info("master listening", "addr", l.Addr().String())
	return s.Serve(ctx, l)
}

// ready is /readyz: 200 when the database answers, else 503 (with Retry-After), so a load
// balancer sends requests to a master that can serve them. /healthz only says that the process
// lives: a master whose database is down stays up and recovers by itself.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		s.log.WarnContext(ctx, "not ready", "err", err)
		w.Header().Set("Retry-After", strconv.Itoa(int(handlers.RetryAfter/time.Second)))
		http.Error(w, "database unreachable", http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

// writeError answers a request that failed before its handler ran (authentication, the login
// callback): the portal's error page, or its #flash message for htmx, when a browser asks for
// a page; the API's JSON error otherwise. Both map the error as WriteError does.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if !strings.HasPrefix(r.URL.Path, "/api/") && (r.Header.Get("HX-Request") == "true" || wantsHTML(r)) {
		s.h.WriteErrorPage(w, r, err)
		return
	}
	s.h.WriteError(w, r, err)
}

// recoverer turns a panic into a 500 and a logged stack instead of a dropped connection.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
					panic(v)
				}
				s.log.Error("panic in handler", "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
				s.h.WriteError(w, r, fmt.Errorf("panic: %v", v))
			}
		}()
		next.ServeHTTP(w, r)
	})
}
