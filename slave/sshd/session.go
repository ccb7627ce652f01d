package sshd

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	"golang.org/x/crypto/ssh"
)

// loginShell is what a shell request runs: bash as a login shell where the image has it, sh
// otherwise.
var loginShell = []string{"/bin/sh", "-c", `if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi`}

// ptyReq is the payload of a pty-req (RFC 4254 6.2).
type ptyReq struct {
	Term          string
	Columns, Rows uint32
	Width, Height uint32
	Modes         string
}

// winChange is the payload of a window-change (RFC 4254 6.7).
type winChange struct {
	Columns, Rows uint32
	Width, Height uint32
}

// session serves one session channel: the requests before the command (pty-req, env) set up
// how it runs, then one exec, shell or subsystem runs it.
func (s *Server) session(ctx context.Context, t *target, ch ssh.Channel, reqs <-chan *ssh.Request, log *slog.Logger) {
	defer func() { _ = ch.Close() }()
	var pty *ptyReq
	var env []string
	resize := make(chan winChange, 4)
	var once sync.Once
	started := false
	for req := range reqs {
		ok := false
		switch req.Type {
		case "pty-req":
			var p ptyReq
			if !started && ssh.Unmarshal(req.Payload, &p) == nil {
				pty, ok = &p, true
			}
		case "env":
			var kv struct{ Name, Value string }
			// Only the locale and the like: the job's own environment stays as submitted.
			if !started && ssh.Unmarshal(req.Payload, &kv) == nil && (kv.Name == "LANG" || strings.HasPrefix(kv.Name, "LC_")) {
				env, ok = append(env, kv.Name+"="+kv.Value), true
			}
		case "window-change":
			var w winChange
			if ssh.Unmarshal(req.Payload, &w) == nil {
				select {
				case resize <- w:
				default: // a burst of changes: the last ones count, the next one comes
				}
			}
			ok = true
		case "exec", "shell", "subsystem":
			if started {
				break
			}
			var cmd []string
			switch req.Type {
			case "exec":
				var p struct{ Command string }
				if ssh.Unmarshal(req.Payload, &p) != nil {
					break
				}
				cmd = []string{"/bin/sh", "-c", p.Command}
			case "shell":
				cmd = loginShell
			case "subsystem":
				var p struct{ Name string }
				if ssh.Unmarshal(req.Payload, &p) != nil || p.Name != "sftp" {
					break
				}
				started, ok = true, true
				_ = req.Reply(true, nil)
				log.Info("ssh sftp session")
				once.Do(func() {
					go func() {
						err := serveSFTP(t, ch)
						if err != nil && !errors.Is(err, io.EOF) {
							log.Info("sftp session ended", "err", err)
						}
						_ = ch.Close()
					}()
				})
				continue
			}
			if cmd == nil {
				break
			}
			started, ok = true, true
			_ = req.Reply(true, nil)
			log.Info("ssh session", "type", req.Type, "pty", pty != nil)
			once.Do(func() {
				go func() {
					code := s.execIn(ctx, t, ch, cmd, pty, env, resize, log)
					_, _ = ch.SendRequest("exit-status", false, binary.BigEndian.AppendUint32(nil, uint32(code)))
					_ = ch.Close()
				}()
			})
			continue
		}
		// auth-agent-req@openssh.com, x11-req, signals and anything else: refused.
		if req.WantReply {
			_ = req.Reply(ok, nil)
		}
	}
}

// execIn runs cmd in the job's container as the container's user, with its environment and
// working directory, wiring the channel to its standard streams, and returns the exit code
// (255 when it could not run).
func (s *Server) execIn(ctx context.Context, t *target, ch ssh.Channel, cmd []string, pty *ptyReq, env []string, resize <-chan winChange, log *slog.Logger) int {
	opts := container.ExecOptions{User: t.cfgUser, WorkingDir: t.workDir, Cmd: cmd, AttachStdin: true, AttachStdout: true, AttachStderr: true,
		Env: append(env, "GPULAB_SSH_USER="+t.user)}
	if pty != nil {
		opts.Tty = true
		term := pty.Term
		if term == "" {
			term = "xterm"
		}
		opts.Env = append(opts.Env, "TERM="+term)
		if pty.Rows > 0 && pty.Columns > 0 {
			opts.ConsoleSize = &[2]uint{uint(pty.Rows), uint(pty.Columns)}
		}
	}
	created, err := s.docker.ContainerExecCreate(ctx, t.id, opts)
	if err != nil {
		log.Warn("ssh exec create", "err", err)
		_, _ = io.WriteString(ch.Stderr(), "gpulab: cannot run in the job's container\r\n")
		return 255
	}
	att, err := s.docker.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{Tty: opts.Tty, ConsoleSize: opts.ConsoleSize})
	if err != nil {
		log.Warn("ssh exec attach", "err", err)
		return 255
	}
	defer att.Close()
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	if pty != nil {
		go func() {
			// Engines before API 1.42 ignore ConsoleSize: size the terminal once it exists (the
			// exec starts with the attach; retried briefly, as the Docker CLI does).
			if pty.Rows > 0 && pty.Columns > 0 {
				size := container.ResizeOptions{Height: uint(pty.Rows), Width: uint(pty.Columns)}
				for i := range 10 {
					if s.docker.ContainerExecResize(rctx, created.ID, size) == nil {
						break
					}
					select {
					case <-time.After(time.Duration(i+1) * 10 * time.Millisecond):
					case <-rctx.Done():
						return
					}
				}
			}
			for {
				select {
				case w := <-resize:
					_ = s.docker.ContainerExecResize(rctx, created.ID, container.ResizeOptions{Height: uint(w.Rows), Width: uint(w.Columns)})
				case <-rctx.Done():
					return
				}
			}
		}()
	}
	go func() {
		_, _ = io.Copy(att.Conn, ch)
		// The client's EOF is the command's, without a terminal. A terminal has no half
		// close (as with OpenSSH's sshd): closing the exec's input would hang it up.
		if pty == nil {
			_ = att.CloseWrite()
		}
	}()
	if opts.Tty {
		_, _ = io.Copy(ch, att.Reader)
	} else {
		_, _ = stdcopy.StdCopy(ch, ch.Stderr(), att.Reader)
	}
	ins, err := s.docker.ContainerExecInspect(context.WithoutCancel(ctx), created.ID)
	if err != nil {
		return 255
	}
	return ins.ExitCode
}
