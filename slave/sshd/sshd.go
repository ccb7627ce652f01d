// Package sshd is the slave's SSH server for its running jobs. It needs nothing in the job's
// image: a login names the job (SSH user = job UUID or its first 8 characters), the master
// decides each public-key login (protocol.SSHAuthRequest), and a session is a Docker exec into
// the job's own container, so nothing runs as root on the slave host on a user's behalf.
//
// What a connection may do: session channels (shell, exec, with a PTY and window changes when
// asked, and the sftp subsystem over the container's file system), and direct-tcpip (ssh -L)
// to ports inside the job's own network namespace. Agent forwarding, remote forwarding, X11
// and every other channel or request are refused. Every connection closes when the job's
// container stops (the job ended, was cancelled or halted).
package sshd

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"golang.org/x/crypto/ssh"

	"github.com/opengpulab/gpulab/internal/acceptloop"
	"github.com/opengpulab/gpulab/internal/loginlimit"
	"github.com/opengpulab/gpulab/protocol"
	slavecontainer "github.com/opengpulab/gpulab/slave/container"
)

// Authorizer asks the master whether a key may log in to a job (protocol.Client.SSHAuth).
type Authorizer interface {
	SSHAuth(ctx context.Context, req protocol.SSHAuthRequest) (protocol.SSHAuthAnswer, error)
}

// Docker is the part of the Docker client the SSH server uses.
type Docker interface {
	ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error)
	ContainerInspect(ctx context.Context, containerID string) (container.InspectResponse, error)
	ContainerWait(ctx context.Context, containerID string, condition container.WaitCondition) (<-chan container.WaitResponse, <-chan error)
	ContainerExecCreate(ctx context.Context, containerID string, options container.ExecOptions) (container.ExecCreateResponse, error)
	ContainerExecAttach(ctx context.Context, execID string, config container.ExecAttachOptions) (types.HijackedResponse, error)
	ContainerExecInspect(ctx context.Context, execID string) (container.ExecInspect, error)
	ContainerExecResize(ctx context.Context, execID string, options container.ResizeOptions) error
}

// Config configures the server.
type Config struct {
	// Listen is the address to listen on (":2222").
	Listen string
	// Advertise is where users connect (HOST:PORT), reported to the master.
	Advertise string
	// HostKeyFile holds the ed25519 host key; made on the first start and reused, so that the
	// host key users' known_hosts hold stays the same.
	HostKeyFile string
	// Network is the Docker network of the jobs: forwarded ports are dialled at the
	// container's address on it.
	Network string
	// MaxFailures failed logins (refused keys) from one client address within FailureWindow lock
	// that address out until the window has passed (defaults 20 and 5 minutes).
	MaxFailures   int
	FailureWindow time.Duration
}

// Server is the SSH server.
type Server struct {
	cfg     Config
	auth    Authorizer
	docker  Docker
	log     *slog.Logger
	sshCfg  *ssh.ServerConfig
	hostKey ssh.Signer
	limit   *loginlimit.Window
}

// New makes a server, making or loading its host key.
func New(cfg Config, auth Authorizer, docker Docker, log *slog.Logger) (*Server, error) {
	if cfg.MaxFailures <= 0 {
		cfg.MaxFailures = 20
	}
	if cfg.FailureWindow <= 0 {
		cfg.FailureWindow = 5 * time.Minute
	}
	key, err := LoadOrMakeHostKey(cfg.HostKeyFile)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, auth: auth, docker: docker, log: log, hostKey: key, limit: loginlimit.New(cfg.MaxFailures, cfg.FailureWindow)}
	s.sshCfg = &ssh.ServerConfig{
		PublicKeyCallback: s.checkKey,
		// No password, no keyboard-interactive: only keys, each decided by the master.
		MaxAuthTries:  6,
		ServerVersion: "SSH-2.0-gpulab",
	}
	s.sshCfg.AddHostKey(key)
	return s, nil
}

// LoadOrMakeHostKey reads an ed25519 host key (OpenSSH PEM) from path, or makes one there
// (mode 0600) when the file does not exist.
func LoadOrMakeHostKey(path string) (ssh.Signer, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("make ssh host key: %w", err)
		}
		block, err := ssh.MarshalPrivateKey(priv, "gpulab slave host key")
		if err != nil {
			return nil, fmt.Errorf("encode ssh host key: %w", err)
		}
		data = pem.EncodeToMemory(block)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, fmt.Errorf("write ssh host key: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("read ssh host key: %w", err)
	}
	signer, err := ssh.ParsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("ssh host key %s: %w", path, err)
	}
	return signer, nil
}

// Endpoint is what the slave reports to the master: where users connect and the host key.
func (s *Server) Endpoint() (*protocol.SSHEndpoint, error) {
	host, port, err := net.SplitHostPort(s.cfg.Advertise)
	if err != nil {
		return nil, fmt.Errorf("ssh advertise address %q: %w", s.cfg.Advertise, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return nil, fmt.Errorf("ssh advertise address %q: bad port", s.cfg.Advertise)
	}
	key := string(ssh.MarshalAuthorizedKey(s.hostKey.PublicKey()))
	return &protocol.SSHEndpoint{Host: host, Port: p, HostKey: key[:len(key)-1]}, nil
}

// Run listens on cfg.Listen and serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("ssh listen: %w", err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves connections from ln until ctx ends; it closes ln.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	return acceptloop.Serve(ctx, ln, "ssh", s.handleConn)
}

// Permission extensions that carry the master's answer from the key check to the connection.
const (
	extJob  = "gpulab-job"
	extUser = "gpulab-user"
)

// checkKey asks the master about one offered key. A client address with too many recent
// failures is refused without asking.
func (s *Server) checkKey(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
	addr := meta.RemoteAddr().String()
	host := addrHost(meta.RemoteAddr())
	if s.limit.Blocked(host, loginlimit.User(meta.User())) {
		return nil, errors.New("too many failed logins from this address or as this user: try later")
	}
	line := string(ssh.MarshalAuthorizedKey(key))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	ans, err := s.auth.SSHAuth(ctx, protocol.SSHAuthRequest{User: meta.User(), PublicKey: line[:len(line)-1], RemoteAddr: addr})
	if err != nil {
		s.log.Warn("ssh login: cannot ask the master", "user", meta.User(), "from", addr, "err", err)
		return nil, errors.New("cannot reach the master")
	}
	if !ans.Allowed {
		s.limit.Fail(host, loginlimit.User(meta.User()))
		s.log.Info("ssh login refused", "user", meta.User(), "from", addr, "key", ssh.FingerprintSHA256(key), "why", ans.Reason)
		return nil, errors.New("refused")
	}
	return &ssh.Permissions{Extensions: map[string]string{extJob: ans.JobUUID, extUser: ans.UserName}}, nil
}

func addrHost(a net.Addr) string {
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.String()
}

// target is the job's container a connection works in.
type target struct {
	jobUUID, user string
	id            string // container id
	pid           int    // its init process on the host
	ip            string // its address on the jobs' network
	cfgUser       string
	workDir       string
	env           []string
}

// findContainer finds the running container of a job.
func (s *Server) findContainer(ctx context.Context, jobUUID string) (*target, error) {
	list, err := s.docker.ContainerList(ctx, container.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", slavecontainer.LabelJob+"="+jobUUID), filters.Arg("status", "running"))})
	if err != nil {
		return nil, fmt.Errorf("find the container of job %s: %w", jobUUID, err)
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("job %s has no running container here", jobUUID)
	}
	info, err := s.docker.ContainerInspect(ctx, list[0].ID)
	if err != nil {
		return nil, fmt.Errorf("inspect the container of job %s: %w", jobUUID, err)
	}
	t := &target{jobUUID: jobUUID, id: info.ID}
	if info.State != nil {
		t.pid = info.State.Pid
	}
	if info.Config != nil {
		t.cfgUser, t.workDir, t.env = info.Config.User, info.Config.WorkingDir, info.Config.Env
	}
	if info.NetworkSettings != nil {
		if n, ok := info.NetworkSettings.Networks[s.cfg.Network]; ok && n != nil {
			t.ip = n.IPAddress
		}
		if t.ip == "" {
			for _, n := range info.NetworkSettings.Networks {
				if n != nil && n.IPAddress != "" {
					t.ip = n.IPAddress
					break
				}
			}
		}
	}
	return t, nil
}

// handleConn runs one client connection: handshake, then its channels until the client goes
// or the job's container stops.
func (s *Server) handleConn(ctx context.Context, nc net.Conn) {
	defer func() { _ = nc.Close() }()
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second)) // the handshake's bound
	conn, chans, reqs, err := ssh.NewServerConn(nc, s.sshCfg)
	if err != nil {
		s.log.Debug("ssh handshake failed", "from", nc.RemoteAddr().String(), "err", err)
		return
	}
	_ = nc.SetDeadline(time.Time{})
	defer func() { _ = conn.Close() }()
	jobUUID, user := conn.Permissions.Extensions[extJob], conn.Permissions.Extensions[extUser]
	log := s.log.With("job", jobUUID, "user", user, "from", nc.RemoteAddr().String())
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t, err := s.findContainer(cctx, jobUUID)
	if err != nil {
		log.Warn("ssh login without a container", "err", err)
		return
	}
	t.user = user
	log.Info("ssh login")
	// The job's end ends its sessions: wait for the container to stop.
	go func() {
		waitC, errC := s.docker.ContainerWait(cctx, t.id, container.WaitConditionNotRunning)
		select {
		case <-waitC:
			log.Info("ssh connection closed: the job's container stopped")
		case err := <-errC:
			if cctx.Err() == nil {
				log.Info("ssh connection closed: cannot watch the job's container", "err", err)
			}
		case <-cctx.Done(): // the client left, or the server stops
		}
		_ = conn.Close()
	}()
	go ssh.DiscardRequests(reqs) // global requests: tcpip-forward (ssh -R) and others are refused
	for nch := range chans {
		switch nch.ChannelType() {
		case "session":
			ch, creqs, err := nch.Accept()
			if err != nil {
				continue
			}
			go s.session(cctx, t, ch, creqs, log)
		case "direct-tcpip":
			go s.directTCPIP(cctx, t, nch, log)
		default:
			_ = nch.Reject(ssh.UnknownChannelType, "not allowed on this server")
		}
	}
}
