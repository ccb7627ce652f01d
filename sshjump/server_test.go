package sshjump_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/sshjump"
	"github.com/opengpulab/gpulab/store"
)

// fakeSlaveSSH stands in for a slave's SSH server: any key may log in, and an exec request
// answers with the slave's name and the command. It returns the port and the host key.
func fakeSlaveSSH(t *testing.T, name string) (int, ssh.PublicKey) {
	t.Helper()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(ssh.ConnMetadata, ssh.PublicKey) (*ssh.Permissions, error) { return nil, nil }}
	cfg.AddHostKey(signer)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = nc.Close() }()
				_, chans, reqs, err := ssh.NewServerConn(nc, cfg)
				if err != nil {
					return
				}
				go ssh.DiscardRequests(reqs)
				for nch := range chans {
					ch, creqs, err := nch.Accept()
					if err != nil {
						continue
					}
					go func() {
						defer func() { _ = ch.Close() }()
						for r := range creqs {
							if r.Type != "exec" {
								_ = r.Reply(false, nil)
								continue
							}
							var cmd struct{ Command string }
							_ = ssh.Unmarshal(r.Payload, &cmd)
							_ = r.Reply(true, nil)
							_, _ = fmt.Fprintf(ch, "%s ran: %s\n", name, cmd.Command)
							_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{3}))
							return
						}
					}()
				}
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port, signer.PublicKey()
}

// userKey writes a fresh private key file and returns it with its public key.
func userKey(t *testing.T, dir, name string) (string, ssh.PublicKey) {
	t.Helper()
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	block, err := ssh.MarshalPrivateKey(priv, name)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, name)
	if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	sp, _ := ssh.NewPublicKey(pub)
	return file, sp
}

// runningJob submits a job as u (with extra keys) and runs it on slave.
func runningJob(t *testing.T, m *testmaster.Master, u *testmaster.User, slave string, keys ...string) string {
	t.Helper()
	extra := ""
	if len(keys) > 0 {
		extra = `, "extra": {"sshPubKeys": ["` + strings.Join(keys, `", "`) + `"]}`
	}
	status, data, _ := m.Do(u, "POST", "/api/gpulab/v3.1/jobs", strings.NewReader(`{"name": "s", "request": {"resources": {"cpus": 1, "gpus": 0, "cpuMemoryGb": 1},
	  "docker": {"image": "busybox"}`+extra+`}}`))
	if status != 201 {
		t.Fatalf("submit: %d %s", status, data)
	}
	id := strings.TrimSpace(string(data))
	if _, err := m.Store.AssignJobs(context.Background(), []store.Assignment{{JobUUID: id, Placement: store.Placement{SlaveName: slave, SlaveInstanceID: "i1", ClusterID: 1,
		Resources: job.StateResources{SlaveName: slave, CPUIDs: []int{0}, CPUMemoryGb: 1}}}}); err != nil {
		t.Fatal(err)
	}
	m.ForceJobStatus(id, job.StatusRunning)
	return id
}

// registerSlave registers a slave whose SSH endpoint is 127.0.0.1:port.
func registerSlave(t *testing.T, m *testmaster.Master, name string, port int, hostKey ssh.PublicKey) {
	t.Helper()
	cert := m.SlaveCert(name, 1)
	caPEM, err := os.ReadFile(m.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := protocol.NewClient(m.URL, caPEM, &cert)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Register(context.Background(), protocol.Inventory{InstanceID: "i1", CPUs: 4, MemoryMiB: 8192,
		SSH: &protocol.SSHEndpoint{Host: "127.0.0.1", Port: port, HostKey: sshjump.AuthorizedKey(hostKey)}}); err != nil {
		t.Fatal(err)
	}
}

// TestJumpHostWithOpenSSH runs the real OpenSSH client through the jump host: to the slave
// of the user's running job it passes (the command's output and exit status come back); to
// another slave, with another user's key, or for a disabled user it does not.
func TestJumpHostWithOpenSSH(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		testenv.Missing(t, "OpenSSH client", "no ssh in PATH (apt-get install openssh-client)")
	}
	m := testmaster.Start(t, testmaster.Options{})
	ctx := context.Background()
	alice := m.AddUser("alice", false, "", "vision")
	bob := m.AddUser("bob", false, "", "other")
	dir := t.TempDir()
	aliceKey, alicePub := userKey(t, dir, "alice_key")
	bobKey, bobPub := userKey(t, dir, "bob_key")
	if _, err := m.Store.AddSSHKey(ctx, alice.ID, "laptop", sshjump.AuthorizedKey(alicePub), ssh.FingerprintSHA256(alicePub)); err != nil {
		t.Fatal(err)
	}
	port1, hk1 := fakeSlaveSSH(t, "slave1")
	port2, hk2 := fakeSlaveSSH(t, "slave2")
	registerSlave(t, m, "sshslave1", port1, hk1)
	registerSlave(t, m, "sshslave2", port2, hk2)
	aliceJob := runningJob(t, m, alice, "sshslave1")
	runningJob(t, m, bob, "sshslave2", sshjump.AuthorizedKey(bobPub)) // bob's key: only in his job

	signer, created, err := sshjump.LoadOrCreateHostKey(dir)
	if err != nil || !created {
		t.Fatalf("host key: %v %v", created, err)
	}
	if again, created, err := sshjump.LoadOrCreateHostKey(dir); err != nil || created || sshjump.AuthorizedKey(again.PublicKey()) != sshjump.AuthorizedKey(signer.PublicKey()) {
		t.Fatalf("host key made twice: %v %v", created, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	jctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() {
		done <- sshjump.New(m.Store, sshjump.Config{HostKey: signer, MaxFailures: 100}, log).Serve(jctx, l)
	}()
	t.Cleanup(func() { cancel(); <-done })
	jport := l.Addr().(*net.TCPAddr).Port

	known := filepath.Join(dir, "known_hosts")
	var lines []string
	for _, hk := range []struct {
		port int
		key  ssh.PublicKey
	}{{jport, signer.PublicKey()}, {port1, hk1}, {port2, hk2}} {
		lines = append(lines, knownhosts.Line([]string{knownhosts.Normalize("127.0.0.1:" + strconv.Itoa(hk.port))}, hk.key))
	}
	if err := os.WriteFile(known, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// ssh -J hands -F (not -i or -o) to the ssh it runs for the jump: the settings go in a file.
	config := func(key string) string {
		f := filepath.Join(dir, "config-"+filepath.Base(key))
		data := fmt.Sprintf("Host *\n  IdentityFile %s\n  IdentitiesOnly yes\n  UserKnownHostsFile %s\n  GlobalKnownHostsFile /dev/null\n"+
			"  StrictHostKeyChecking yes\n  BatchMode yes\n  ConnectTimeout 20\n", key, known)
		if err := os.WriteFile(f, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	run := func(key, jumpUser string, port int) (int, string) {
		t.Helper()
		cctx, ccancel := context.WithTimeout(ctx, time.Minute)
		defer ccancel()
		cmd := exec.CommandContext(cctx, "ssh", "-F", config(key), "-J", jumpUser+"@127.0.0.1:"+strconv.Itoa(jport),
			"-p", strconv.Itoa(port), aliceJob[:8]+"@127.0.0.1", "echo", "hi")
		cmd.Env = append(os.Environ(), "HOME="+dir)
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}

	if code, out := run(aliceKey, "alice", port1); code != 3 || !strings.Contains(out, "slave1 ran: echo hi") {
		t.Errorf("alice to her job's slave: exit %d, %q", code, out)
	}
	if code, out := run(aliceKey, "alice", port2); code != 255 || !strings.Contains(out, "prohibited") {
		t.Errorf("alice to another slave: exit %d, %q", code, out)
	}
	if code, out := run(bobKey, "alice", port1); code != 255 || !strings.Contains(out, "Permission denied") {
		t.Errorf("bob's key as alice: exit %d, %q", code, out)
	}
	if code, out := run(bobKey, "bob", port2); code != 3 || !strings.Contains(out, "slave2 ran") {
		t.Errorf("bob with his job's key to his job's slave: exit %d, %q", code, out)
	}
	// imec's client logs in with the login certificate's key (ssh -i login.pem): valid, it
	// passes the jump host; revoked, it does not.
	if code, out := run(alice.CertFile, "alice", port1); code != 3 || !strings.Contains(out, "slave1 ran: echo hi") {
		t.Errorf("alice with her login certificate: exit %d, %q", code, out)
	}
	if _, err := m.Store.RevokeCertificate(ctx, alice.Serial); err != nil {
		t.Fatal(err)
	}
	if code, out := run(alice.CertFile, "alice", port1); code != 255 || !strings.Contains(out, "Permission denied") {
		t.Errorf("alice with her revoked login certificate: exit %d, %q", code, out)
	}
	if err := m.Store.SetUserDisabled(ctx, "alice", true); err != nil {
		t.Fatal(err)
	}
	if code, out := run(aliceKey, "alice", port1); code != 255 || !strings.Contains(out, "Permission denied") {
		t.Errorf("disabled alice: exit %d, %q", code, out)
	}
}

// A login gets nothing but forwards to jobs; failed logins are limited per address: after
// MaxFailures refused logins, even the right key is refused from that address until the
// window has passed.
func TestJumpHostLimitsFailedLogins(t *testing.T) {
	m := testmaster.Start(t, testmaster.Options{})
	ctx := context.Background()
	alice := m.AddUser("alice", false, "", "vision")
	dir := t.TempDir()
	_, alicePub := userKey(t, dir, "alice_key")
	aliceSigner := signerOf(t, filepath.Join(dir, "alice_key"))
	_, _ = userKey(t, dir, "mallory_key")
	mallory := signerOf(t, filepath.Join(dir, "mallory_key"))
	if _, err := m.Store.AddSSHKey(ctx, alice.ID, "laptop", sshjump.AuthorizedKey(alicePub), ssh.FingerprintSHA256(alicePub)); err != nil {
		t.Fatal(err)
	}
	hostKey, _, err := sshjump.LoadOrCreateHostKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	jctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- sshjump.New(m.Store, sshjump.Config{HostKey: hostKey, MaxFailures: 2, FailureWindow: time.Hour},
			slog.New(slog.NewTextHandler(io.Discard, nil))).Serve(jctx, l)
	}()
	t.Cleanup(func() { cancel(); <-done })
	login := func(s ssh.Signer) error {
		c, err := ssh.Dial("tcp", l.Addr().String(), &ssh.ClientConfig{User: "alice", Auth: []ssh.AuthMethod{ssh.PublicKeys(s)},
			HostKeyCallback: ssh.FixedHostKey(hostKey.PublicKey()), Timeout: 10 * time.Second})
		if err == nil {
			_ = c.Close()
		}
		return err
	}
	// Logged in, alice gets no shell, no agent and no remote forwarding: only forwards to jobs.
	c, err := ssh.Dial("tcp", l.Addr().String(), &ssh.ClientConfig{User: "alice", Auth: []ssh.AuthMethod{ssh.PublicKeys(aliceSigner)},
		HostKeyCallback: ssh.FixedHostKey(hostKey.PublicKey()), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("alice's key: %v", err)
	}
	if s, err := c.NewSession(); err == nil {
		_ = s.Close()
		t.Error("the jump host opened a session")
	}
	if _, _, err := c.OpenChannel("auth-agent@openssh.com", nil); err == nil {
		t.Error("the jump host opened an agent channel")
	}
	if rl, err := c.Listen("tcp", "127.0.0.1:0"); err == nil {
		_ = rl.Close()
		t.Error("the jump host accepted a remote forward")
	}
	if _, err := c.Dial("tcp", "127.0.0.1:22"); err == nil {
		t.Error("the jump host forwarded to a place no job of alice's runs")
	}
	_ = c.Close()
	for i := range 2 {
		if err := login(mallory); err == nil {
			t.Fatalf("mallory's key accepted (try %d)", i+1)
		}
	}
	if err := login(aliceSigner); err == nil {
		t.Error("the right key got in after 2 failures from this address")
	}
}

func signerOf(t *testing.T, file string) ssh.Signer {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.ParsePrivateKey(data)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
