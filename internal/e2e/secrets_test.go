package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/internal/testmaster"
)

// TestNoSecretInArgumentsOrLogs runs the stack exactly as `make run` does (scripts/run.sh with
// freshly built binaries: Dex, a master with the portal login, a slave), logs in to the portal
// with alice's password, makes a password-protected certificate, submits a job with a secret
// environment value through gpulab-cli with that certificate, and follows it to its end. All
// the while `ps -eo args` is sampled; at the end every log (run.sh's output, master, slave,
// Dex, the CLI's output, the job's log) is read. No password, client secret, session key,
// join token or the job's secret may show in any of them.
func TestNoSecretInArgumentsOrLogs(t *testing.T) {
	docker := testenv.Docker(t)
	image := testenv.BusyboxImage(t)
	db := testenv.PostgresURL(t)
	root := moduleRoot(t)
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin, "./cmd/gpulab-master", "./cmd/gpulab-slave", "./cmd/gpulab-cli")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	idp, err := testmaster.DevIdPBinary()
	if err != nil {
		testenv.Missing(t, "Dex development IdP (internal/devidp)", err.Error())
	}
	if err := os.Symlink(idp, filepath.Join(bin, "gpulab-devidp")); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	port, idpPort, sshPort := freePort(t), freePort(t), freePort(t)
	slave := slaveName("secrets")
	t.Cleanup(func() { removeContainers(docker, slave) })

	// ps, sampled every 50 ms from before the start to the end.
	ps := &psSampler{lines: map[string]bool{}}
	stopPS := ps.run(t)
	defer stopPS()

	var runOut testenv.SyncBuffer
	ready := make(chan struct{})
	run := exec.Command("bash", filepath.Join(root, "scripts", "run.sh"), db, dir, port, bin)
	run.Dir = root
	// Ports of its own, so that a `make run` or another test run beside it does not collide.
	run.Env = append(os.Environ(), "GPULAB_DEVIDP_PORT="+idpPort, "GPULAB_RUN_SLAVE="+slave, "GPULAB_SSH_LISTEN=127.0.0.1:"+sshPort,
		"GPULAB_RUN_SSH_PORT="+freePort(t), "GPULAB_RUN_SMTP_PORT="+freePort(t), "GPULAB_HUB_PORT="+freePort(t), "GPULAB_HUB_API_PORT="+freePort(t), "GPULAB_HUB_PROXY_PORT="+freePort(t))
	run.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	run.Stdout, run.Stderr = &watchWriter{w: &runOut, want: "Stop with Ctrl-C", seen: ready}, &runOut
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-run.Process.Pid, syscall.SIGTERM) // run.sh's trap stops Dex, master and slave
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-run.Process.Pid, syscall.SIGKILL)
		}
	})
	select {
	case <-ready:
	case err := <-exited:
		t.Fatalf("run.sh stopped: %v\n%s", err, runOut.String())
	case <-time.After(3 * time.Minute):
		t.Fatalf("run.sh did not get ready in 3 minutes:\n%s", runOut.String())
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	secrets := map[string]string{
		"alice's portal password":  read("alice-password"),
		"OIDC client secret":       read("oidc-client-secret"),
		"slave join token":         read("slave-token"),
		"JupyterHub's API token":   read("hub/api-token"),
		"JupyterHub's proxy token": read("hub/proxy-token"),
	}
	for i, k := range strings.Split(read("data/session-keys"), ",") {
		secrets[fmt.Sprintf("session key %d", i+1)] = strings.TrimSpace(k)
	}
	certPassword, jobSecret := randomHex(t, 12), randomHex(t, 16)
	secrets["certificate password"], secrets["the job's secret environment value"] = certPassword, jobSecret
	for name, s := range secrets {
		if len(s) < 8 {
			t.Fatalf("%s is %q: too short to look for", name, s)
		}
	}

	// The portal login: Dex checks alice's password, the master the client secret, the
	// session cookie is made with the session keys.
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	master := "https://localhost:" + port
	status, at, body, err := testmaster.BrowserLogin(browser, master, "alice", secrets["alice's portal password"])
	if err != nil || status != http.StatusOK || at.Host != "localhost:"+port {
		master, _ := os.ReadFile(filepath.Join(dir, "master.log"))
		t.Fatalf("portal login: %d at %v: %v %.300s\nrun.sh:\n%s\nmaster.log:\n%s", status, at, err, body, runOut.String(), lastLines(string(master), 40))
	}

	// A password-protected certificate, its password in a file, used by gpulab-cli.
	pwFile := filepath.Join(dir, "cert-password")
	if err := os.WriteFile(pwFile, []byte(certPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var cliOut testenv.SyncBuffer
	runTool := func(stdin string, env []string, name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdin = strings.NewReader(stdin)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		_, _ = cliOut.Write(out.Bytes())
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out.String())
		}
		return out.String()
	}
	masterEnv := []string{"DATABASE_URL=" + db, "GPULAB_DATA_DIR=" + filepath.Join(dir, "data"), "GPULAB_AUTHORITY=gpulab.local"}
	encPEM := filepath.Join(dir, "alice-encrypted.pem")
	runTool("", masterEnv, "gpulab-master", "user-cert", "--user", "alice", "--email", "alice@example.org", "--password-file", pwFile, "--out", encPEM)
	cliEnv := []string{"GPULAB_CERT=" + encPEM, "GPULAB_PASSWORD_FILE=" + pwFile, "GPULAB_API_BASE=" + master + "/api/gpulab/v3.1",
		"GPULAB_SERVER_CERT=" + filepath.Join(dir, "ca.pem"), "GPULAB_PASSWORD="}
	jobJSON := fmt.Sprintf(`{"name": "secrets", "request": {"resources": {"clusterId": 1, "gpus": 0, "cpus": 1, "cpuMemoryGb": 1},
		"docker": {"image": %q, "command": "echo hello-from-the-job; sleep 2", "environment": {"JOB_TOKEN": %q}}}}`, image, jobSecret)
	out := runTool(jobJSON, cliEnv, "gpulab-cli", "submit", "--project", "demo", "--wait-done")
	id := firstUUID(out)
	if id == "" {
		t.Fatalf("submit printed no job id: %s", out)
	}
	jobLog := runTool("", cliEnv, "gpulab-cli", "log", id)
	if !strings.Contains(jobLog, "hello-from-the-job") {
		t.Fatalf("job log: %q", jobLog)
	}
	interactive(t, bin, dir, master, image, &cliOut)

	// `make env` (the run's env.sh) gives another shell this run's database, folders and port,
	// which are not the defaults here: the CLI and an admin command work from its exports alone.
	shell := exec.Command("bash", "-c", `. "$1" && gpulab-cli jobs && gpulab-master project list`, "env", filepath.Join(dir, "env.sh"))
	shell.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	envOut, err := shell.CombinedOutput()
	_, _ = cliOut.Write(envOut)
	if err != nil || !strings.Contains(string(envOut), id) || !strings.Contains(string(envOut), "demo") {
		t.Errorf("the CLI and an admin command from env.sh's exports: %v\n%s", err, envOut)
	}
	stopPS()

	// Every log of the run.
	logs := map[string]string{"run.sh output": runOut.String(), "gpulab-cli output": cliOut.String(), "job log": jobLog}
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		logs[filepath.Base(f)] = string(b)
	}
	for _, want := range []string{"master.log", "slave.log", "devidp.log", "hub.log"} {
		if _, ok := logs[want]; !ok {
			t.Errorf("no %s in %s", want, dir)
		}
	}
	hits, logBytes := 0, 0
	for name, text := range logs {
		logBytes += len(text)
		for what, s := range secrets {
			if strings.Contains(text, s) {
				hits++
				t.Errorf("%s shows the %s", name, what)
			}
		}
	}
	samples, lines := ps.stats()
	for line := range lines {
		for what, s := range secrets {
			if strings.Contains(line, s) {
				hits++
				t.Errorf("ps shows the %s: %s", what, line)
			}
		}
	}
	t.Logf("secrets: %d looked for (%d session keys), %d ps samples with %d distinct command lines, %d logs of %d bytes, %d hits",
		len(secrets), len(secrets)-7, samples, len(lines), len(logs), logBytes, hits)
	if !ps.sawTool("gpulab-devidp") || !ps.sawTool("gpulab-master serve") || !ps.sawTool("gpulab-slave run") || !ps.sawTool("jupyterhub") {
		t.Errorf("ps never showed the stack's programs: the sampling missed them")
	}
}

func moduleRoot(t *testing.T) string {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

func randomHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func firstUUID(s string) string {
	for _, f := range strings.Fields(s) {
		if len(f) == 36 && strings.Count(f, "-") == 4 {
			return f
		}
	}
	return ""
}

// psSampler collects the distinct command lines `ps -eo args` shows.
type psSampler struct {
	mu      sync.Mutex
	lines   map[string]bool
	samples int
}

func (p *psSampler) run(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			out, err := exec.Command("ps", "-eo", "args").Output()
			if err != nil {
				t.Errorf("ps: %v", err)
				return
			}
			p.mu.Lock()
			p.samples++
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				p.lines[sc.Text()] = true
			}
			p.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }
}

func (p *psSampler) stats() (int, map[string]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.samples, p.lines
}

func (p *psSampler) sawTool(s string) bool {
	_, lines := p.stats()
	for l := range lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// watchWriter passes output on and closes seen once it has shown want.
type watchWriter struct {
	w    io.Writer
	want string
	seen chan struct{}
	buf  strings.Builder
	once sync.Once
}

func (w *watchWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return w.w.Write(p)
}

// interactive is the README's first SSH step on the stack run.sh started: `gpulab-cli
// interactive` (with the login certificate of make run, through the master as jump host, in a
// terminal that script(1) gives it) reaches a shell in the job and runs what is typed there;
// then `gpulab-cli ssh JOB -- cmd` passes the command's exit status back. Its output goes to
// the logs searched for secrets.
func interactive(t *testing.T, bin, dir, master, image string, out *testenv.SyncBuffer) {
	t.Helper()
	requireOpenSSH(t)
	if _, err := exec.LookPath("script"); err != nil {
		testenv.Missing(t, "script(1) (bsdutils)", err.Error())
	}
	home := t.TempDir() // ~/.gpulab/known_hosts and ~/.ssh/gpulab_hosts_config of this test only
	env := append(os.Environ(), "HOME="+home, "GPULAB_CERT="+filepath.Join(dir, "alice.pem"), "GPULAB_API_BASE="+master+"/api/",
		"GPULAB_SERVER_CERT="+filepath.Join(dir, "ca.pem"), "GPULAB_PASSWORD=", "GPULAB_PASSWORD_FILE=")
	cli := filepath.Join(bin, "gpulab-cli")
	line := cli + " interactive --project demo --duration-minutes 10 --docker-image " + image
	sc := exec.Command("script", "-qec", line, "/dev/null")
	sc.Env = env
	sc.Stdin = strings.NewReader("nvidia-smi || echo no-gpu; echo \"JOB=$GPULAB_JOB_ID\"; exit\n")
	b, err := sc.CombinedOutput()
	_, _ = out.Write(b)
	got := strings.ReplaceAll(string(b), "\r", "")
	id := firstUUID(got)
	if err != nil || id == "" || !strings.Contains(got, "no-gpu") || !strings.Contains(got, "JOB="+id) {
		t.Fatalf("gpulab-cli interactive: %v\n%s", err, got)
	}
	cmd := exec.Command(cli, "ssh", id, "--", "echo ssh-in $GPULAB_JOB_ID; exit 3")
	cmd.Env, cmd.Stdin = env, strings.NewReader("")
	b, _ = cmd.CombinedOutput()
	_, _ = out.Write(b)
	if code := cmd.ProcessState.ExitCode(); code != 3 || !strings.Contains(string(b), "ssh-in "+id) {
		t.Fatalf("gpulab-cli ssh %s: exit %d\n%s", id, code, b)
	}
	cancel := exec.Command(cli, "cancel", id)
	cancel.Env = env
	if b, err := cancel.CombinedOutput(); err != nil {
		t.Fatalf("gpulab-cli cancel %s: %v\n%s", id, err, b)
	}
}

// lastLines is the end of a log, for a failure message.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
