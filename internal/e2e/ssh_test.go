package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/slave/sshd"
	"github.com/opengpulab/gpulab/store"
)

// The slave's SSH server against the real OpenSSH client (Debian's openssh-client), a real
// master deciding each login and a real job container on Docker.

// requireOpenSSH fails (with GPULAB_REQUIRE_SERVICES=1) or skips when ssh or sftp is missing.
func requireOpenSSH(t *testing.T) {
	t.Helper()
	for _, bin := range []string{"ssh", "ssh-keygen", "sftp"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("GPULAB_REQUIRE_SERVICES") == "1" {
				t.Fatalf("%s is missing (apt-get install openssh-client): %v", bin, err)
			}
			t.Skipf("%s is missing (apt-get install openssh-client)", bin)
		}
	}
}

// sshServer is a slave's SSH server as the tests reach it.
type sshServer struct {
	port       string
	knownHosts string // a known_hosts file holding its host key
}

// startSSH runs the SSH server of the slave run (in-process, asking the test master with the
// slave's own certificate) on a random local port.
func (e *env) startSSH(run *slaveRun) *sshServer {
	t := e.t
	t.Helper()
	cert := e.m.SlaveCert(run.name, 1)
	caPEM, err := os.ReadFile(e.m.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := protocol.NewClient(e.m.URL, caPEM, &cert)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(testWriter{t, run.name + " sshd"}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	srv, err := sshd.New(sshd.Config{Advertise: ln.Addr().String(), HostKeyFile: filepath.Join(dir, "host_key"), Network: testenv.JobNetwork(),
		MaxFailures: 1000}, pc, e.docker, log)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := srv.Endpoint()
	if err != nil {
		t.Fatal(err)
	}
	kh := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(kh, fmt.Appendf(nil, "[%s]:%d %s\n", ep.Host, ep.Port, ep.HostKey), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ctx, ln); err != nil {
			t.Errorf("ssh server: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return &sshServer{port: fmt.Sprint(ep.Port), knownHosts: kh}
}

// sshKey makes an ed25519 key pair with ssh-keygen and returns the private key's file and the
// public key line.
func sshKey(t *testing.T, name string) (string, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), name)
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", file).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v: %s", err, out)
	}
	pub, err := os.ReadFile(file + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return file, strings.TrimSpace(string(pub))
}

// opts are the OpenSSH options of every call: this server's host key only (no prompt, no
// trust on first use), only the given key, never a password.
func (s *sshServer) opts(key string) []string {
	return []string{"-F", "/dev/null", "-i", key, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
		"-o", "UserKnownHostsFile=" + s.knownHosts, "-o", "ConnectTimeout=30", "-o", "LogLevel=ERROR"}
}

// ssh runs the OpenSSH client and returns its output and exit code.
func (s *sshServer) ssh(t *testing.T, key, user string, args ...string) (string, int) {
	t.Helper()
	a := append(s.opts(key), "-p", s.port, user+"@127.0.0.1")
	cmd := exec.Command("ssh", append(a, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &out, &out, strings.NewReader("")
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("ssh: %v", err)
	}
	return out.String(), cmd.ProcessState.ExitCode()
}

func TestSSHIntoJob(t *testing.T) {
	requireOpenSSH(t)
	e := newEnv(t)
	run := e.startSlave(slaveOpts{name: "ssh1", cluster: 1})
	srv := e.startSSH(run)
	aliceKey, alicePub := sshKey(t, "alice")
	bob := e.m.AddUser("bob", false, "", "vision")
	bobKey, bobPub := sshKey(t, "bob")
	bobFP, err := exec.Command("ssh-keygen", "-lf", bobKey+".pub").Output()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Store.AddSSHKey(context.Background(), bob.ID, "laptop", bobPub, strings.Fields(string(bobFP))[1]); err != nil {
		t.Fatal(err)
	}
	profKey, profPub := sshKey(t, "alice-profile")
	profFP, _ := exec.Command("ssh-keygen", "-lf", profKey+".pub").Output()
	if _, err := e.m.Store.AddSSHKey(context.Background(), e.alice.ID, "desk", profPub, strings.Fields(string(profFP))[1]); err != nil {
		t.Fatal(err)
	}
	projDir := filepath.Join(e.projects, "vision")
	if err := os.MkdirAll(projDir, 0o777); err != nil {
		t.Fatal(err)
	}

	// An interactive-like job: a web server inside, and it waits.
	id := e.submit(e.jobFile("ssh", "ln -s ../../../../../../.. /tmp/esc && ln -s /etc /tmp/abs && mkdir -p /tmp/www && echo hello-through-ssh > /tmp/www/index.html && httpd -p 8080 -h /tmp/www && httpd -p 127.0.0.1:8081 -h /tmp/www && sleep 3600", func(r map[string]any) {
		r["docker"].(map[string]any)["storage"] = []any{map[string]any{"containerPath": "/project"}}
		r["extra"] = map[string]any{"sshPubKeys": []string{alicePub}}
	}))
	e.waitFor(id, job.StatusRunning)

	// A command runs in the job, with its environment, and its exit code comes back.
	out, code := srv.ssh(t, aliceKey, id, "echo job=$GPULAB_JOB_ID user=$(id -u); exit 7")
	if code != 7 || !strings.Contains(out, "job="+id) {
		t.Fatalf("ssh command: exit %d, output %q", code, out)
	}
	// The short id names the job too; a profile key opens it as well.
	if out, code := srv.ssh(t, profKey, id[:8], "echo short-ok"); code != 0 || !strings.Contains(out, "short-ok") {
		t.Fatalf("ssh with the short id and a profile key: exit %d, output %q", code, out)
	}
	// A PTY when asked, with the window size given.
	out, code = srv.ssh(t, aliceKey, id, "-tt", "tty; stty size")
	if code != 0 || !strings.Contains(out, "/dev/pts/") {
		t.Fatalf("ssh -tt: exit %d, output %q", code, out)
	}
	// The client's terminal size reaches the job's terminal (script(1) gives ssh a terminal).
	if _, err := exec.LookPath("script"); err == nil {
		line := strings.Join(append(append([]string{"ssh"}, srv.opts(aliceKey)...), "-p", srv.port, "-tt", id+"@127.0.0.1", "'sleep 0.2; stty size'"), " ")
		sc := exec.Command("script", "-qec", "stty rows 40 cols 100; "+line, "/dev/null")
		sc.Stdin = strings.NewReader("")
		out, err := sc.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "40 100") {
			t.Fatalf("terminal size through ssh -tt: %v %q", err, out)
		}
	}
	// Another user's key is refused, as is alice's key for a job id that does not exist.
	if out, code := srv.ssh(t, bobKey, id, "echo in"); code != 255 || strings.Contains(out, "in\n") {
		t.Fatalf("bob's key: exit %d, output %q", code, out)
	}
	if out, code := srv.ssh(t, aliceKey, "00000000", "echo in"); code != 255 {
		t.Fatalf("an unknown job: exit %d, output %q", code, out)
	}
	// alice's login certificate key (imec's client: ssh -i <login pem>).
	pemFile := filepath.Join(t.TempDir(), "login.pem")
	if err := os.WriteFile(pemFile, e.alice.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := srv.ssh(t, pemFile, id, "echo cert-ok"); code != 0 || !strings.Contains(out, "cert-ok") {
		t.Fatalf("ssh -i <login pem>: exit %d, output %q", code, out)
	}

	// A disabled owner is refused, and accepted again once enabled.
	ctx := context.Background()
	if err := e.m.Store.SetUserDisabled(ctx, "alice", true); err != nil {
		t.Fatal(err)
	}
	if out, code := srv.ssh(t, aliceKey, id, "echo in"); code != 255 {
		t.Fatalf("a disabled owner's key: exit %d, output %q", code, out)
	}
	if err := e.m.Store.SetUserDisabled(ctx, "alice", false); err != nil {
		t.Fatal(err)
	}
	// A certificate key opens the job while the certificate is valid: not once revoked, not
	// once expired.
	certKey, _ := sshKey(t, "alice-cert")
	certFP, _ := exec.Command("ssh-keygen", "-lf", certKey+".pub").Output()
	if err := e.m.Store.RecordCertificate(ctx, "900001", store.CertUser, "alice", time.Now().Add(time.Hour), strings.Fields(string(certFP))[1]); err != nil {
		t.Fatal(err)
	}
	if out, code := srv.ssh(t, certKey, id, "echo in"); code != 0 {
		t.Fatalf("a valid certificate's key: exit %d, output %q", code, out)
	}
	if _, err := e.m.Store.RevokeCertificate(ctx, "900001"); err != nil {
		t.Fatal(err)
	}
	if out, code := srv.ssh(t, certKey, id, "echo in"); code != 255 {
		t.Fatalf("a revoked certificate's key: exit %d, output %q", code, out)
	}
	expKey, _ := sshKey(t, "alice-expired")
	expFP, _ := exec.Command("ssh-keygen", "-lf", expKey+".pub").Output()
	if err := e.m.Store.RecordCertificate(ctx, "900002", store.CertUser, "alice", time.Now().Add(-time.Minute), strings.Fields(string(expFP))[1]); err != nil {
		t.Fatal(err)
	}
	if out, code := srv.ssh(t, expKey, id, "echo in"); code != 255 {
		t.Fatalf("an expired certificate's key: exit %d, output %q", code, out)
	}

	// ssh -L reaches the web servers inside the job, also one listening on the job's loopback
	// only; forwarding elsewhere is refused.
	lport, lport2 := freePort(t), freePort(t)
	fwd := exec.Command("ssh", append(srv.opts(aliceKey), "-p", srv.port, "-N", "-o", "ExitOnForwardFailure=yes",
		"-L", "127.0.0.1:"+lport+":localhost:8080", "-L", "127.0.0.1:"+lport2+":localhost:8081", id+"@127.0.0.1")...)
	var fwdOut bytes.Buffer
	fwd.Stdout, fwd.Stderr = &fwdOut, &fwdOut
	if err := fwd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fwd.Process.Kill(); _ = fwd.Wait() })
	waitUntil(t, "the job's web server through ssh -L", func() bool {
		return strings.Contains(httpGet("127.0.0.1:"+lport), "hello-through-ssh")
	})
	waitUntil(t, "the job's loopback-only web server through ssh -L", func() bool {
		return strings.Contains(httpGet("127.0.0.1:"+lport2), "hello-through-ssh")
	})
	if out, code := srv.ssh(t, aliceKey, id, "-W", "192.0.2.1:80"); code == 0 {
		t.Fatalf("ssh -W to an address outside the job: exit 0, output %q", out)
	}

	// sftp puts a file that appears in the project's storage, and gets it back.
	local := filepath.Join(t.TempDir(), "up.txt")
	if err := os.WriteFile(local, []byte("sent by sftp\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	back := filepath.Join(t.TempDir(), "back.txt")
	batch := filepath.Join(t.TempDir(), "batch")
	_ = os.WriteFile(batch, fmt.Appendf(nil, "put %s /project/up.txt\nmkdir /project/sub\nls /project\nget /project/up.txt %s\nget /etc/passwd\nget /tmp/esc/etc/hostname esc-hostname\nget /tmp/abs/hostname abs-hostname\nput %s /tmp/esc/escaped-%s.txt\n", local, back, local, id), 0o600)
	sf := exec.Command("sftp", append(srv.opts(aliceKey), "-P", srv.port, "-b", batch, id+"@127.0.0.1")...)
	sf.Dir = t.TempDir()
	if out, err := sf.CombinedOutput(); err != nil {
		t.Fatalf("sftp: %v: %s", err, out)
	}
	if data, err := os.ReadFile(filepath.Join(projDir, "up.txt")); err != nil || string(data) != "sent by sftp\n" {
		t.Fatalf("the file put by sftp in the project storage: %q %v", data, err)
	}
	if data, err := os.ReadFile(back); err != nil || string(data) != "sent by sftp\n" {
		t.Fatalf("the file got back by sftp: %q %v", data, err)
	}
	if data, err := os.ReadFile(filepath.Join(sf.Dir, "passwd")); err != nil || !strings.Contains(string(data), "root:") {
		t.Fatalf("the container's /etc/passwd by sftp: %q %v", data, err)
	}

	// Links inside the container resolve inside it, relative or absolute: sftp never reaches
	// the slave's own files.
	hostname, code := srv.ssh(t, aliceKey, id, "cat /etc/hostname")
	if code != 0 || strings.TrimSpace(hostname) == "" {
		t.Fatalf("the container's hostname: exit %d %q", code, hostname)
	}
	for _, f := range []string{"esc-hostname", "abs-hostname"} {
		if data, err := os.ReadFile(filepath.Join(sf.Dir, f)); err != nil || string(data) != hostname {
			t.Errorf("%s through a link: %q %v, want the container's %q", f, data, err, hostname)
		}
	}
	if _, err := os.Stat("/escaped-" + id + ".txt"); err == nil {
		_ = os.Remove("/escaped-" + id + ".txt")
		t.Errorf("sftp wrote through a link into the slave's root")
	}
	if out, code := srv.ssh(t, aliceKey, id, "cat /escaped-"+id+".txt"); code != 0 || out != "sent by sftp\n" {
		t.Errorf("the file put through a link is not in the container's root: exit %d %q", code, out)
	}

	// Every login is an event on the job.
	if ev := e.events(id); !strings.Contains(ev, "ssh login by alice from 127.0.0.1") {
		t.Fatalf("no login event: %s", ev)
	}

	// A session dies when the job is cancelled, and the key no longer opens it.
	logins := strings.Count(e.events(id), "ssh login by alice")
	long := exec.Command("ssh", append(srv.opts(aliceKey), "-p", srv.port, id+"@127.0.0.1", "echo started; sleep 600")...)
	var longOut bytes.Buffer
	long.Stdout, long.Stderr = &longOut, &longOut
	if err := long.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { ended <- long.Wait() }()
	waitUntil(t, "the long session to start", func() bool {
		return strings.Count(e.events(id), "ssh login by alice") > logins
	})
	e.put(id, "CANCELLED")
	select {
	case <-ended:
	case <-time.After(waitLimit):
		_ = long.Process.Kill()
		t.Fatalf("the session outlived the cancelled job: %q", longOut.String())
	}
	e.waitFor(id, job.StatusCancelled)
	if out, code := srv.ssh(t, aliceKey, id, "echo in"); code != 255 {
		t.Fatalf("login into a cancelled job: exit %d, output %q", code, out)
	}
}
