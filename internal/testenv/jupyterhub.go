package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// NotebookImageName is the local notebook image (contrib/jupyterhub/notebook-image).
const NotebookImageName = "gpulab-notebook:latest"

var notebookImage struct {
	once sync.Once
	err  error
}

// RepoRoot is the repository's root folder (where go.mod is).
func RepoRoot(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// NotebookImage makes sure the local notebook image exists (scripts/notebook-image.sh builds it
// from Debian's packages when it is missing or its Dockerfile changed, once per test process)
// and returns its name. Without Docker or Debian's mirror the test is skipped, or fails under
// GPULAB_REQUIRE_SERVICES=1.
func NotebookImage(t testing.TB) string {
	t.Helper()
	Docker(t)
	root := RepoRoot(t)
	notebookImage.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, filepath.Join(root, "scripts", "notebook-image.sh")).CombinedOutput()
		if err != nil {
			notebookImage.err = fmt.Errorf("%w: %s", err, out)
		}
	})
	if notebookImage.err != nil {
		Missing(t, "the notebook image "+NotebookImageName, notebookImage.err.Error())
	}
	return NotebookImageName
}

// Hub is a running JupyterHub (Debian's) configured with contrib/jupyterhub's spawner.
type Hub struct {
	// URL is where users reach it (the proxy); Token an admin API token for its REST API.
	URL, Token string
	// Dir holds its database and secrets; Log its output.
	Dir string
	Log *SyncBuffer

	cfg    HubConfig
	cancel context.CancelFunc
	done   chan struct{}
}

// HubConfig is what a test hub needs to know about GPULab.
type HubConfig struct {
	MasterURL, CAFile, ServiceCertFile string
	// Project is the default project; Images the images offered (default: the notebook image).
	Project string
	Images  []string
	// ConnectHost is the address at which a notebook in its container reaches the hub's API
	// (the jobs' network's gateway).
	ConnectHost string
	// Port is where users reach it (0: a free one).
	Port int
	// Users may log in (empty: anyone the authenticator accepts).
	Users []string
	// Env is more environment for the hub (GPULAB_HUB_* settings of jupyterhub_config.py).
	Env []string
}

// RequireJupyterHub fails (GPULAB_REQUIRE_SERVICES=1) or skips the test when Debian's
// JupyterHub or its proxy is missing.
func RequireJupyterHub(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("configurable-http-proxy"); err != nil {
		Missing(t, "configurable-http-proxy", "apt-get install node-configurable-http-proxy")
	}
	if out, err := exec.Command("/usr/bin/python3", "-c", "import jupyterhub").CombinedOutput(); err != nil {
		Missing(t, "JupyterHub", fmt.Sprintf("apt-get install jupyterhub: %v: %s", err, out))
	}
}

// StartHub runs JupyterHub on free loopback ports (its API on every address, at a free port, so
// notebooks in containers reach it) until the test ends.
func StartHub(t testing.TB, cfg HubConfig) *Hub {
	t.Helper()
	RequireJupyterHub(t)
	dir := t.TempDir()
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	h := &Hub{Dir: dir, Token: hex.EncodeToString(b), cfg: cfg}
	tokenFile := filepath.Join(dir, "api-token")
	if err := os.WriteFile(tokenFile, []byte(h.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port, apiPort, proxyPort := cfg.Port, FreePort(t), FreePort(t)
	if port == 0 {
		port = FreePort(t)
	}
	h.URL = fmt.Sprintf("http://127.0.0.1:%d", port)
	images := cfg.Images
	if len(images) == 0 {
		images = []string{NotebookImageName}
	}
	h.cfg.Env = append([]string{
		"GPULAB_MASTER_URL=" + cfg.MasterURL, "GPULAB_CA=" + cfg.CAFile, "GPULAB_SERVICE_CERT=" + cfg.ServiceCertFile,
		"GPULAB_HUB_DIR=" + filepath.Join(dir, "state"), "GPULAB_HUB_BIND_URL=" + h.URL,
		fmt.Sprintf("GPULAB_HUB_API_BIND=0.0.0.0:%d", apiPort),
		fmt.Sprintf("GPULAB_HUB_CONNECT_URL=http://%s:%d", cfg.ConnectHost, apiPort),
		fmt.Sprintf("GPULAB_HUB_PROXY_API=127.0.0.1:%d", proxyPort),
		"GPULAB_HUB_PROJECT=" + cfg.Project, "GPULAB_HUB_IMAGES=" + strings.Join(images, ","),
		"GPULAB_HUB_USERS=" + strings.Join(cfg.Users, ","), "GPULAB_HUB_API_TOKEN_FILE=" + tokenFile,
	}, cfg.Env...)
	h.Log = &SyncBuffer{}
	h.Start(t)
	t.Cleanup(func() {
		h.Stop(t)
		if t.Failed() {
			t.Logf("JupyterHub's log:\n%s", h.Log.String())
		}
	})
	return h
}

// Start starts the hub process (again, after Stop: a hub restart) and waits until it answers.
func (h *Hub) Start(t testing.TB) {
	t.Helper()
	root := RepoRoot(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "-m", "jupyterhub", "-f", filepath.Join(root, "contrib", "jupyterhub", "jupyterhub_config.py"))
	cmd.Dir = h.Dir
	// Python's own, not a virtual environment's: Debian's jupyterhub is in its dist-packages.
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PYTHON") && !strings.HasPrefix(kv, "VIRTUAL_ENV=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, h.cfg.Env...)
	cmd.Stdout, cmd.Stderr = h.Log, h.Log
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 20 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start JupyterHub: %v", err)
	}
	h.cancel, h.done = cancel, make(chan struct{})
	go func() { _ = cmd.Wait(); close(h.done) }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get(h.URL + "/hub/api/")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-h.done:
			t.Fatalf("JupyterHub exited at start:\n%s", h.Log.String())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("JupyterHub does not answer at %s:\n%s", h.URL, h.Log.String())
		}
	}
}

// Stop stops the hub (SIGINT, as Ctrl-C) and waits for it; its notebooks keep running.
func (h *Hub) Stop(t testing.TB) {
	t.Helper()
	if h.cancel == nil {
		return
	}
	h.cancel()
	<-h.done
	h.cancel = nil
}

// LogContains reports whether the hub's output holds s.
func (h *Hub) LogContains(s string) bool { return bytes.Contains([]byte(h.Log.String()), []byte(s)) }
