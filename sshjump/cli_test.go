package sshjump_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/sshjump"
)

// certSSHKey is the login PEM's certificate key in authorized_keys form (what gpulab-cli puts
// in sshPubKeys), read with OpenSSH's own ssh-keygen.
func certSSHKey(t *testing.T, pemFile string) string {
	t.Helper()
	out, err := exec.Command("ssh-keygen", "-y", "-f", pemFile).Output()
	if err != nil {
		t.Fatalf("ssh-keygen -y: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// gpulab-cli ssh, built and run as users run it, through a real master's jump host to a
// stand-in slave with the real OpenSSH client: its ProxyCommand, known_hosts and key work,
// the command's exit status comes back, and --no-proxy goes straight to the slave.
func TestCLISSHThroughJumpHost(t *testing.T) {
	for _, bin := range []string{"ssh", "ssh-keygen"} {
		if _, err := exec.LookPath(bin); err != nil {
			testenv.Missing(t, "OpenSSH client", "no "+bin+" in PATH (apt-get install openssh-client)")
		}
	}
	dir := t.TempDir()
	cli := filepath.Join(dir, "gpulab-cli")
	if out, err := exec.Command("go", "build", "-o", cli, "../cmd/gpulab-cli").CombinedOutput(); err != nil {
		t.Fatalf("build gpulab-cli: %v\n%s", err, out)
	}
	hostKey, _, err := sshjump.LoadOrCreateHostKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	jump := &handlers.SSHJumpHost{Host: "127.0.0.1", Port: l.Addr().(*net.TCPAddr).Port, HostKey: sshjump.AuthorizedKey(hostKey.PublicKey())}
	m := testmaster.Start(t, testmaster.Options{SSHJump: jump})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sshjump.New(m.Store, sshjump.Config{HostKey: hostKey}, slog.New(slog.NewTextHandler(io.Discard, nil))).Serve(ctx, l)
	}()
	t.Cleanup(func() { cancel(); <-done })

	alice := m.AddUser("alice", false, "", "vision")
	port, slaveKey := fakeSlaveSSH(t, "slave1")
	registerSlave(t, m, "cli-slave1", port, slaveKey)
	id := runningJob(t, m, alice, "cli-slave1", certSSHKey(t, alice.CertFile))

	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string) {
		t.Helper()
		cctx, ccancel := context.WithTimeout(ctx, time.Minute)
		defer ccancel()
		cmd := exec.CommandContext(cctx, cli, args...)
		cmd.Env = append(os.Environ(), "HOME="+home, "GPULAB_CERT="+alice.CertFile, "GPULAB_API_BASE="+m.APIBase, "GPULAB_SERVER_CERT="+m.CAFile)
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}
	if code, out := run("ssh", id[:8], "--", "echo", "hi"); code != 3 || !strings.Contains(out, "slave1 ran: echo hi") {
		t.Errorf("gpulab-cli ssh through the jump host: exit %d\n%s", code, out)
	}
	known, err := os.ReadFile(filepath.Join(home, ".gpulab", "known_hosts"))
	if err != nil || !strings.Contains(string(known), jump.HostKey) || !strings.Contains(string(known), strings.TrimSpace(string(ssh.MarshalAuthorizedKey(slaveKey)))) {
		t.Errorf("known_hosts: %v\n%s", err, known)
	}
	if code, out := run("ssh", "--no-proxy", id, "--", "true"); code != 3 || !strings.Contains(out, "slave1 ran: true") {
		t.Errorf("gpulab-cli ssh --no-proxy: exit %d\n%s", code, out)
	}
	if code, out := run("jobs"); code != 0 {
		t.Errorf("jobs: exit %d\n%s", code, out)
	}
	// The hosts entry `jobs` wrote works with plain ssh.
	cmd := exec.CommandContext(ctx, "ssh", "-F", filepath.Join(home, ".ssh", "gpulab_hosts_config"), "-oBatchMode=yes", "gpulab-"+id[:8]+"-proxy", "uname")
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 3 || !strings.Contains(string(out), "slave1 ran: uname") {
		t.Errorf("ssh gpulab-%s-proxy: exit %d\n%s", id[:8], code, out)
	}
}
