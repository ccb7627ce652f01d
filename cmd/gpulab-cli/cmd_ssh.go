package main

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/opengpulab/gpulab/client"
	"github.com/opengpulab/gpulab/job"
)

// SSH into jobs: the job's state.resources says where its slave serves SSH (sshHost,
// sshPort, sshUsername) and, for slaves users cannot reach, the jump host in front of it
// (sshProxyHost, sshProxyPort, sshProxyUsername). The CLI runs the system's OpenSSH with
// exactly those, the host keys the master publishes (kept in ~/.gpulab/known_hosts, so no
// host-key prompt is ever shown) and the user's login PEM as the key, as imec's client does.

// knownHostsPath is the known_hosts file the CLI manages, below the home folder.
const knownHostsPath = ".gpulab/known_hosts"

// sshTarget is where a job's SSH server is.
type sshTarget struct {
	Host      string
	Port      int
	User      string
	ProxyHost string
	ProxyPort int
	ProxyUser string
}

// sshTargetOf reads a job's SSH endpoint; an error says why there is none.
func sshTargetOf(j *job.Job) (sshTarget, error) {
	res := j.State.Resources
	switch {
	case j.State.Status != job.StatusRunning:
		return sshTarget{}, fmt.Errorf("job %s is %s: only a RUNNING job can be logged in to", j.UUID, j.State.Status)
	case res == nil || res.SSHHost == "" || res.SSHUsername == "":
		return sshTarget{}, fmt.Errorf("job %s runs on a slave that serves no SSH", j.UUID)
	case res.SSHUsername == "hidden":
		return sshTarget{}, fmt.Errorf("job %s is not yours: only its owner can log in to it", j.UUID)
	}
	return sshTarget{Host: res.SSHHost, Port: res.SSHPort, User: res.SSHUsername,
		ProxyHost: res.SSHProxyHost, ProxyPort: res.SSHProxyPort, ProxyUser: res.SSHProxyUsername}, nil
}

// sshSetup is how the CLI runs OpenSSH: with which key, which known_hosts file, through the
// jump host or not.
type sshSetup struct {
	Key        string // identity file; empty: OpenSSH's own choice
	KnownHosts string
	Proxy      bool
}

// sshOptions are the options ssh, sftp and the jump host's ssh share: the key alone (no agent
// keys tried first, which a server counts as failures), the managed known_hosts, strict
// checking, no passwords.
func sshOptions(s sshSetup, port int) []string {
	var out []string
	if s.Key != "" {
		out = append(out, "-i", s.Key, "-oIdentitiesOnly=yes")
	}
	if port == 0 {
		port = 22
	}
	out = append(out, "-oPort="+strconv.Itoa(port))
	if s.KnownHosts != "" {
		out = append(out, "-oUserKnownHostsFile="+s.KnownHosts)
	}
	return append(out, "-oStrictHostKeyChecking=yes", "-oPasswordAuthentication=no", "-oKbdInteractiveAuthentication=no")
}

// proxyCommand is the ProxyCommand through the jump host (OpenSSH runs it with /bin/sh, so
// its words are quoted).
func proxyCommand(t sshTarget, s sshSetup) string {
	args := append([]string{"ssh"}, sshOptions(s, t.ProxyPort)...)
	args = append(args, "-W", "%h:%p", t.ProxyUser+"@"+t.ProxyHost)
	return shellJoin(args)
}

// sshCommandLine is the full command line of prog (ssh or sftp) to the job, command (ssh
// only) run there instead of a shell.
func sshCommandLine(prog string, t sshTarget, s sshSetup, command []string) []string {
	args := append([]string{prog}, sshOptions(s, t.Port)...)
	if s.Proxy && t.ProxyHost != "" {
		args = append(args, "-oProxyCommand="+proxyCommand(t, s))
	}
	args = append(args, t.User+"@"+t.Host)
	return append(args, command...)
}

// shortSSHCommand is the command as a person would type it (ssh -J), for --show.
func shortSSHCommand(t sshTarget, s sshSetup, command []string) string {
	args := []string{"ssh"}
	if s.Key != "" {
		args = append(args, "-i", s.Key)
	}
	if s.Proxy && t.ProxyHost != "" {
		jump := t.ProxyUser + "@" + t.ProxyHost
		if t.ProxyPort != 0 && t.ProxyPort != 22 {
			jump += ":" + strconv.Itoa(t.ProxyPort)
		}
		args = append(args, "-J", jump)
	}
	if t.Port != 0 && t.Port != 22 {
		args = append(args, "-p", strconv.Itoa(t.Port))
	}
	args = append(args, t.User+"@"+t.Host)
	return shellJoin(append(args, command...))
}

// shellQuote quotes a word for /bin/sh when it needs it.
func shellQuote(w string) string {
	if w != "" && strings.IndexFunc(w, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && !strings.ContainsRune("-_./:=@%+,", r)
	}) < 0 {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}

func shellJoin(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = shellQuote(w)
	}
	return strings.Join(q, " ")
}

// sshKeyFile is the key ssh logs in to j with: of the login PEM (OpenSSH reads its key
// block) and ~/.ssh's usual keys, the first whose public key the job carries in sshPubKeys;
// else the first of ~/.ssh's keys (it may be on the profile), else the login PEM. A PEM that
// others may read is skipped: OpenSSH refuses such a key. "" leaves the choice to OpenSSH.
func (a *app) sshKeyFile(j *job.Job) string {
	type candidate struct{ file, pub string }
	var cands []candidate
	if a.g.cert != "" {
		pemFile := expandHome(a.g.cert, a.env)
		if abs, err := filepath.Abs(pemFile); err == nil {
			pemFile = abs
		}
		if st, err := os.Stat(pemFile); err == nil && st.Mode().Perm()&0o077 == 0 {
			data, _ := os.ReadFile(pemFile)
			cands = append(cands, candidate{pemFile, certSSHKey(data)})
		}
	}
	var homeKeys []candidate
	if home := a.env("HOME"); home != "" {
		for _, name := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
			f := filepath.Join(home, ".ssh", name)
			if _, err := os.Stat(f); err == nil {
				pub, _ := os.ReadFile(f + ".pub")
				homeKeys = append(homeKeys, candidate{f, strings.TrimSpace(string(pub))})
			}
		}
	}
	cands = append(cands, homeKeys...)
	var jobKeys []string
	if j != nil {
		jobKeys = j.Request.Extra.SSHPubKeys
	}
	for _, c := range cands {
		for _, k := range jobKeys {
			if c.pub != "" && sameSSHKey(c.pub, k) {
				return c.file
			}
		}
	}
	switch {
	case len(homeKeys) > 0:
		return homeKeys[0].file
	case len(cands) > 0:
		return cands[0].file
	}
	return ""
}

// sameSSHKey compares two authorized_keys lines by type and key, not comment.
func sameSSHKey(a, b string) bool {
	fa, fb := strings.Fields(a), strings.Fields(b)
	return len(fa) >= 2 && len(fb) >= 2 && fa[0] == fb[0] && fa[1] == fb[1]
}

// sshPubKeys are the public keys an interactive job is given: the login certificate's (in
// SSH form) and those in ~/.ssh, as imec's client adds them.
func (a *app) sshPubKeys() []string {
	var keys []string
	if a.g.cert != "" {
		if data, err := os.ReadFile(expandHome(a.g.cert, a.env)); err == nil {
			if k := certSSHKey(data); k != "" {
				keys = append(keys, k)
			}
		}
	}
	if home := a.env("HOME"); home != "" {
		for _, name := range []string{"id_ed25519.pub", "id_ecdsa.pub", "id_rsa.pub"} {
			if data, err := os.ReadFile(filepath.Join(home, ".ssh", name)); err == nil {
				if k := strings.TrimSpace(string(data)); k != "" {
					keys = append(keys, k)
				}
			}
		}
	}
	return keys
}

// certSSHKey is the public key of the PEM's first certificate in authorized_keys form; "" when
// there is none.
func certSSHKey(pemData []byte) string {
	for {
		var b *pem.Block
		b, pemData = pem.Decode(pemData)
		if b == nil {
			return ""
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return ""
		}
		pk, err := ssh.NewPublicKey(cert.PublicKey)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pk)))
	}
}

// updateKnownHosts writes the master's published host keys to ~/.gpulab/known_hosts and
// returns its path ("" without a home folder: ssh then uses its own files).
func (a *app) updateKnownHosts(cl *client.Client) (string, error) {
	home := a.env("HOME")
	if home == "" {
		return "", nil
	}
	data, err := cl.SSHKnownHosts(a.ctx)
	if err != nil {
		return "", err
	}
	path := filepath.Join(home, knownHostsPath)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("make %s: %w", filepath.Dir(path), err)
	}
	if err := writeFileAtomic(path, data, 0o600); err != nil {
		return "", err
	}
	return path, nil
}

// writeFileAtomic replaces a file in one step, so that a running ssh never reads half of it.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), mode)); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// sshFlags are the flags of ssh and sftp.
type sshFlags struct {
	show, proxy, noProxy bool
}

func (a *app) cmdSSH(args []string) error  { return a.sshCommand("ssh", args) }
func (a *app) cmdSFTP(args []string) error { return a.sshCommand("sftp", args) }

func (a *app) sshCommand(prog string, args []string) error {
	var o sshFlags
	usage, about := "gpulab-cli ssh [options] JOB [-- COMMAND...]",
		"Log in to a running job of yours with the system's ssh, or run COMMAND there. The master's\n"+
			"published host keys are kept in ~/"+knownHostsPath+"; the key is your login PEM's."
	if prog == "sftp" {
		usage, about = "gpulab-cli sftp [options] JOB", "Copy files from and to a running job of yours with the system's sftp."
	}
	fs := newFlagSet(prog, usage, about)
	fs.Bool(&o.show, "s,show", "print the command (short and in full) instead of running it")
	fs.Bool(&o.proxy, "p,proxy", "go through the master's jump host (the default when the job names one)")
	fs.Bool(&o.noProxy, "P,no-proxy", "connect to the slave directly, not through the jump host")
	pos, err := a.parseCommand(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0:
		return usagef("%s needs a job ID", prog)
	case prog == "sftp" && len(pos) > 1:
		return usagef("sftp takes one job ID, got %d", len(pos))
	case o.proxy && o.noProxy:
		return usagef("give --proxy or --no-proxy, not both")
	}
	cl, err := a.client(true)
	if err != nil {
		return err
	}
	j, err := cl.GetJob(a.ctx, pos[0])
	if err != nil {
		return err
	}
	return a.runSSH(cl, prog, j, o, pos[1:])
}

// runSSH runs (or, with --show, prints) prog to a job.
func (a *app) runSSH(cl *client.Client, prog string, j *job.Job, o sshFlags, command []string) error {
	t, err := sshTargetOf(j)
	if err != nil {
		return err
	}
	if o.proxy && t.ProxyHost == "" {
		return fmt.Errorf("the master serves no jump host for job %s: connect directly (leave out --proxy)", j.UUID)
	}
	s := sshSetup{Key: a.sshKeyFile(j), Proxy: t.ProxyHost != "" && !o.noProxy}
	if s.KnownHosts, err = a.updateKnownHosts(cl); err != nil {
		return err
	}
	line := sshCommandLine(prog, t, s, command)
	if o.show {
		if prog == "ssh" {
			a.stdout.printf("%s\n\n", shortSSHCommand(t, s, command))
		}
		a.stdout.printf("%s\n", shellJoin(line))
		return nil
	}
	return a.exec(line)
}

// exitStatus is a program's exit status that the CLI passes on as its own.
type exitStatus struct{ code int }

func (e *exitStatus) Error() string { return "exit status " + strconv.Itoa(e.code) }

// exec runs a program with the CLI's streams; its non-zero exit status becomes an
// exitStatus error.
func (a *app) exec(line []string) error {
	path, err := exec.LookPath(line[0])
	if err != nil {
		return fmt.Errorf("%s not found: install OpenSSH's client (e.g. apt-get install openssh-client): %w", line[0], err)
	}
	cmd := exec.CommandContext(a.ctx, path, line[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = a.stdin, a.stdout.w, a.stderr.w
	if f, ok := a.stdin.(*os.File); ok {
		cmd.Stdin = f
	}
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code := ee.ExitCode()
		if code < 0 {
			code = 255 // killed by a signal
		}
		return &exitStatus{code: code}
	}
	if err != nil {
		return fmt.Errorf("run %s: %w", line[0], err)
	}
	return nil
}
