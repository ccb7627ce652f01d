// Package sshjump is the master's SSH jump host: users whose slaves are out of their reach
// (`ssh -J master job@slave`) pass through it, with the keys that open their jobs, to the SSH
// endpoint of a slave running one of their jobs, and nowhere else. It serves no shell, no
// other channel, no agent and no remote forwarding: only direct-tcpip channels.
package sshjump

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/opengpulab/gpulab/internal/acceptloop"
	"github.com/opengpulab/gpulab/internal/loginlimit"
	"github.com/opengpulab/gpulab/store"
)

// Logins reads a user's SSH login facts afresh (store.Store does).
type Logins interface {
	GetSSHLogin(ctx context.Context, userName string) (store.SSHLogin, error)
}

// Config tunes the jump host. Zero values take the defaults.
type Config struct {
	// HostKey signs the handshakes (LoadOrCreateHostKey).
	HostKey ssh.Signer
	// MaxFailures failed logins from one address within FailureWindow refuse that address
	// until the window has passed (defaults 10 and 5 minutes).
	MaxFailures   int
	FailureWindow time.Duration
	// HandshakeTimeout bounds a connection's key exchange and login (default 30 s);
	// DialTimeout a forward's connection to the slave (default 10 s).
	HandshakeTimeout, DialTimeout time.Duration
}

// Server is the jump host. Create it with New, run it with Serve.
type Server struct {
	cfg    Config
	logins Logins
	log    *slog.Logger
	fails  *loginlimit.Window
}

// New makes a jump host.
func New(logins Logins, cfg Config, log *slog.Logger) *Server {
	if cfg.MaxFailures == 0 {
		cfg.MaxFailures = 10
	}
	if cfg.FailureWindow == 0 {
		cfg.FailureWindow = 5 * time.Minute
	}
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = 30 * time.Second
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	return &Server{cfg: cfg, logins: logins, log: log, fails: loginlimit.New(cfg.MaxFailures, cfg.FailureWindow)}
}

// errDenied is all a refused client learns.
var errDenied = errors.New("permission denied")

// Serve accepts connections on l until ctx ends; it closes l then, and the open connections.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	return acceptloop.Serve(ctx, l, "ssh jump host", s.serveConn)
}

// clientIP is the host part of a remote address (the unit of the failure limit).
func clientIP(a net.Addr) string {
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// serverConfig is a connection's SSH configuration: public keys only, checked against the
// user's current keys. A connection's first refused key counts as one failed login for its
// address, at once (not when the client hangs up, which it may do after trying again); a key
// accepted later on the same connection takes that failure back, so a client that offers a
// few keys before the right one is not punished.
func (s *Server) serverConfig(ctx context.Context, ip string) *ssh.ServerConfig {
	counted := false
	cfg := &ssh.ServerConfig{
		MaxAuthTries: 6,
		PublicKeyCallback: func(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if s.fails.Blocked(loginlimit.User(meta.User())) {
				return nil, errDenied // too many failed logins as this user, from anywhere
			}
			login, err := s.logins.GetSSHLogin(ctx, meta.User())
			if err == nil && !login.Disabled && (hasKey(login.Keys, key) || slices.Contains(login.CertKeys, ssh.FingerprintSHA256(key))) {
				if counted {
					s.fails.Forgive(ip, loginlimit.User(meta.User()))
					counted = false
				}
				return &ssh.Permissions{}, nil
			}
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				s.log.WarnContext(ctx, "ssh jump host: read login", "user", meta.User(), "err", err)
			}
			if !counted {
				s.fails.Fail(ip, loginlimit.User(meta.User()))
				counted = true
				s.log.InfoContext(ctx, "ssh jump host: key refused", "user", meta.User(), "from", meta.RemoteAddr().String())
			}
			return nil, errDenied
		},
		ServerVersion: "SSH-2.0-GPULab-jump",
	}
	cfg.AddHostKey(s.cfg.HostKey)
	return cfg
}

// hasKey says whether key is among keys (authorized_keys lines; unreadable ones never match).
func hasKey(keys []string, key ssh.PublicKey) bool {
	want := key.Marshal()
	for _, k := range keys {
		pk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(k))
		if err == nil && bytes.Equal(pk.Marshal(), want) {
			return true
		}
	}
	return false
}

func (s *Server) serveConn(ctx context.Context, nc net.Conn) {
	defer func() { _ = nc.Close() }()
	ip := clientIP(nc.RemoteAddr())
	if s.fails.Blocked(ip) {
		return
	}
	_ = nc.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	sc, chans, reqs, err := ssh.NewServerConn(nc, s.serverConfig(ctx, ip))
	if err != nil {
		s.log.DebugContext(ctx, "ssh jump host: no login", "from", nc.RemoteAddr().String(), "err", err)
		return
	}
	_ = nc.SetDeadline(time.Time{})
	defer func() { _ = sc.Close() }()
	user := sc.User()
	s.log.InfoContext(ctx, "ssh jump host: login", "user", user, "from", nc.RemoteAddr().String())
	// Global requests (remote forwarding, keepalives) are all answered no.
	go ssh.DiscardRequests(reqs)
	stop := context.AfterFunc(ctx, func() { _ = sc.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for nch := range chans {
		if nch.ChannelType() != "direct-tcpip" {
			_ = nch.Reject(ssh.Prohibited, "this host only forwards to jobs (ssh -J)")
			continue
		}
		var to struct {
			Host     string
			Port     uint32
			FromHost string
			FromPort uint32
		}
		if err := ssh.Unmarshal(nch.ExtraData(), &to); err != nil {
			_ = nch.Reject(ssh.ConnectionFailed, "bad direct-tcpip request")
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.forward(ctx, user, nch, to.Host, int(to.Port))
		}()
	}
}

// allowed says whether target is the SSH endpoint of a slave running one of the user's jobs,
// read afresh (a job that ended, a user disabled since the login: no).
func (s *Server) allowed(ctx context.Context, user, host string, port int) bool {
	login, err := s.logins.GetSSHLogin(ctx, user)
	if err != nil || login.Disabled {
		return false
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	for _, t := range login.Targets {
		if strings.EqualFold(t.Host, host) && t.Port == port {
			return true
		}
	}
	return false
}

// forward joins a direct-tcpip channel to the slave's SSH endpoint, if the user may go there.
func (s *Server) forward(ctx context.Context, user string, nch ssh.NewChannel, host string, port int) {
	target := net.JoinHostPort(host, strconv.Itoa(port))
	if !s.allowed(ctx, user, host, port) {
		s.log.InfoContext(ctx, "ssh jump host: forward refused", "user", user, "to", target)
		_ = nch.Reject(ssh.Prohibited, "no job of yours runs behind "+target)
		return
	}
	d := net.Dialer{Timeout: s.cfg.DialTimeout}
	up, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		s.log.WarnContext(ctx, "ssh jump host: reach slave", "to", target, "err", err)
		_ = nch.Reject(ssh.ConnectionFailed, "cannot reach "+target)
		return
	}
	ch, reqs, err := nch.Accept()
	if err != nil {
		_ = up.Close()
		return
	}
	go ssh.DiscardRequests(reqs)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, ch); closeWrite(up); done <- struct{}{} }()
	go func() { _, _ = io.Copy(ch, up); _ = ch.CloseWrite(); done <- struct{}{} }()
	// Either side ending ends the forward: an SSH transport has no use for a half-open one.
	select {
	case <-done:
	case <-ctx.Done():
	}
	_ = ch.Close()
	_ = up.Close()
}

// closeWrite half-closes a TCP connection, so the slave sees the client's EOF.
func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}
