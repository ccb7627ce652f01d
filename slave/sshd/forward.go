package sshd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// directTCPIPReq is the payload of a direct-tcpip channel open (RFC 4254 7.2).
type directTCPIPReq struct {
	Host       string
	Port       uint32
	OriginHost string
	OriginPort uint32
}

// forwardHost maps the host an `ssh -L` names to the address dialled, or refuses it: only the
// job's own container is reachable, by its address on the jobs' network or as localhost (the
// container's own loopback is its; the slave's never is).
func forwardHost(host, containerIP string) (string, error) {
	if containerIP == "" {
		return "", fmt.Errorf("the job's container has no address")
	}
	switch host {
	case "localhost", "127.0.0.1", "::1", containerIP:
		return containerIP, nil
	}
	return "", fmt.Errorf("forwarding reaches only the job itself (localhost), not %q", host)
}

// directTCPIP serves `ssh -L`: a connection to a port inside the job.
func (s *Server) directTCPIP(ctx context.Context, t *target, nch ssh.NewChannel, log *slog.Logger) {
	var req directTCPIPReq
	if err := ssh.Unmarshal(nch.ExtraData(), &req); err != nil {
		_ = nch.Reject(ssh.ConnectionFailed, "bad direct-tcpip request")
		return
	}
	host, err := forwardHost(req.Host, t.ip)
	if err != nil || req.Port == 0 || req.Port > 65535 {
		if err == nil {
			err = fmt.Errorf("bad port %d", req.Port)
		}
		log.Info("ssh forwarding refused", "to", req.Host, "port", req.Port, "why", err)
		_ = nch.Reject(ssh.Prohibited, err.Error())
		return
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(int(req.Port))))
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
