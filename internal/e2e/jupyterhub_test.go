package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/docker/docker/api/types/network"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/job"
)

// JupyterHub (Debian's, with contrib/jupyterhub's GPULabSpawner and its configuration file)
// against a real master, a slave on Docker and the notebook image built from Debian's packages.

// hubAPI is JupyterHub's REST API with the test hub's admin token.
type hubAPI struct {
	t   *testing.T
	hub *testenv.Hub
}

func (h hubAPI) do(method, path, token string, body any) (int, []byte) {
	h.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, h.hub.URL+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if token == "" {
		token = h.hub.Token
	}
	req.Header.Set("Authorization", "token "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// server is the hub's record of a user's (default) server; nil when he has none.
func (h hubAPI) server(user string) map[string]any {
	h.t.Helper()
	code, body := h.do("GET", "/hub/api/users/"+user, "", nil)
	if code != http.StatusOK {
		h.t.Fatalf("GET user %s: %d %s", user, code, body)
	}
	var u struct {
		Servers map[string]map[string]any `json:"servers"`
	}
	if err := json.Unmarshal(body, &u); err != nil {
		h.t.Fatal(err)
	}
	return u.Servers[""]
}

// spawn asks the hub to start the user's server and waits until the hub counts it ready; it
// returns the time from the request to a notebook that answers through the hub's proxy.
func (h hubAPI) spawn(user string, options map[string]any) time.Duration {
	h.t.Helper()
	start := time.Now()
	if code, body := h.do("POST", "/hub/api/users/"+user+"/server", "", options); code != http.StatusCreated && code != http.StatusAccepted {
		h.t.Fatalf("spawn for %s: %d %s", user, code, body)
	}
	waitUntil(h.t, "the notebook server of "+user+" to be ready", func() bool {
		s := h.server(user)
		return s != nil && s["ready"] == true
	})
	tok := h.token(user)
	waitUntil(h.t, "the notebook of "+user+" to answer through the hub's proxy", func() bool {
		code, _ := h.do("GET", "/user/"+user+"/api/status", tok, nil)
		return code == http.StatusOK
	})
	return time.Since(start)
}

// token is a new API token of the user (what his browser's session stands for).
func (h hubAPI) token(user string) string {
	h.t.Helper()
	code, body := h.do("POST", "/hub/api/users/"+user+"/tokens", "", map[string]any{"note": "test", "expires_in": 3600})
	if code != http.StatusCreated && code != http.StatusOK {
		h.t.Fatalf("token for %s: %d %s", user, code, body)
	}
	var tok struct{ Token string }
	_ = json.Unmarshal(body, &tok)
	return tok.Token
}

// hubctl runs contrib/jupyterhub/hubctl.py (the script users run against the hub's REST API).
func (h hubAPI) hubctl(args ...string) (string, error) {
	h.t.Helper()
	root := testenv.RepoRoot(h.t)
	a := append([]string{filepath.Join(root, "contrib", "jupyterhub", "hubctl.py"), "--hub", h.hub.URL,
		"--token-file", filepath.Join(h.hub.Dir, "api-token")}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	out, err := exec.CommandContext(ctx, "/usr/bin/python3", a...).CombinedOutput()
	return string(out), err
}

// bridgeGateway is the host's address on Docker's default bridge: a container on any bridge
// network reaches the host there (the jobs' network keeps containers apart, not from the host).
func bridgeGateway(t *testing.T, e *env) string {
	t.Helper()
	n, err := e.docker.NetworkInspect(context.Background(), "bridge", network.InspectOptions{})
	if err != nil {
		t.Fatalf("inspect Docker's bridge network: %v", err)
	}
	if len(n.IPAM.Config) > 0 && n.IPAM.Config[0].Gateway != "" {
		return n.IPAM.Config[0].Gateway
	}
	// The engine may leave the gateway out of the network's IPAM configuration (seen here with
	// Docker 20.10, IPAM listing the subnet alone): the bridge interface's own IPv4 address is
	// the gateway.
	name := cmp.Or(n.Options["com.docker.network.bridge.name"], "docker0")
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		t.Fatalf("Docker's bridge network names no gateway, and its interface %s: %v", name, err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		t.Fatalf("addresses of %s: %v", name, err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			return ipn.IP.String()
		}
	}
	t.Fatalf("Docker's bridge network names no gateway, and its interface %s has no IPv4 address: %v", name, addrs)
	return ""
}

func TestJupyterHub(t *testing.T) {
	testenv.RequireJupyterHub(t)
	image := testenv.NotebookImage(t)
	e := newEnv(t)
	e.m.AddUser("bob", false, "", "vision")
	svc := e.m.AddService("jupyterhub")
	e.startSlave(slaveOpts{name: "hub", cluster: 1, fakeGPUs: "2xV100-32GB", cpus: 4})
	// Users log in to the hub through the same OpenID provider as the portal (Dex).
	port := testenv.FreePort(t)
	password := "hub-" + testenv.Suffix()
	idp := testmaster.StartDevIdP(t, fmt.Sprintf("http://127.0.0.1:%d/hub/oauth_callback", port),
		testmaster.IdPUser{Name: "alice", Email: "alice@example.org", Password: password})
	secretFile := filepath.Join(t.TempDir(), "client-secret")
	if err := os.WriteFile(secretFile, []byte(idp.ClientSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	hub := testenv.StartHub(t, testenv.HubConfig{
		MasterURL: e.m.URL, CAFile: e.m.CAFile, ServiceCertFile: svc.CertFile, Project: "vision",
		Images: []string{image}, ConnectHost: bridgeGateway(t, e), Port: port,
		Env: []string{"GPULAB_HUB_OIDC_ISSUER=" + idp.Issuer, "GPULAB_HUB_OIDC_CLIENT_ID=" + idp.ClientID,
			"GPULAB_HUB_OIDC_CLIENT_SECRET_FILE=" + secretFile, "GPULAB_HUB_POLL_INTERVAL=2"},
	})
	api := hubAPI{t: t, hub: hub}
	for _, u := range []string{"alice", "bob"} {
		if code, body := api.do("POST", "/hub/api/users/"+u, "", nil); code != http.StatusCreated && code != http.StatusConflict {
			t.Fatalf("create hub user %s: %d %s", u, code, body)
		}
	}

	// 1. The spawn form, in a browser: log in at the OpenID provider, pick the project and one
	// GPU, start.
	t.Run("form", func(t *testing.T) {
		ctx := testenv.Browser(t)
		ctx, cancel := context.WithTimeout(ctx, 3*waitLimit)
		defer cancel()
		err := chromedp.Do(ctx,
			testenv.Navigate(hub.URL+"/hub/spawn"),
			chromedp.WaitVisible(chromedp.CSS(`input[name="login"]`)),
			chromedp.SendKeys(chromedp.CSS(`input[name="login"]`), "alice@example.org"),
			chromedp.SendKeys(chromedp.CSS(`input[name="password"]`), password),
			chromedp.Submit(chromedp.CSS(`input[name="password"]`)),
			chromedp.WaitVisible(chromedp.ID("gpulab-gpus")),
			chromedp.SetValue(chromedp.ID("gpulab-project"), "vision"),
			chromedp.SetValue(chromedp.ID("gpulab-gpus"), "1"),
		)
		if err != nil {
			testenv.Screenshot(t, ctx, "hub-form-failed")
			t.Fatalf("spawn form: %v", err)
		}
		testenv.Screenshot(t, ctx, "hub-spawn-form")
		if err := chromedp.Do(ctx, chromedp.Submit(chromedp.ID("gpulab-gpus"))); err != nil {
			t.Fatalf("submit the spawn form: %v", err)
		}
		// The hub shows its spawn-pending page, then sends the browser to the notebook.
		var url string
		waitUntil(t, "the browser to reach alice's notebook", func() bool {
			url, _ = chromedp.Run(ctx, chromedp.Location())
			return strings.Contains(url, "/user/alice/")
		})
		// The notebook's own page (the classic notebook's file list, in this image).
		if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("notebook_list"))); err != nil {
			testenv.Screenshot(t, ctx, "hub-notebook-failed")
			t.Fatalf("the notebook's page at %s: %v", url, err)
		}
		testenv.Screenshot(t, ctx, "hub-notebook")
		t.Logf("the browser landed on %s", url)
		if code, body := api.do("DELETE", "/hub/api/users/alice/server", "", nil); code != http.StatusNoContent && code != http.StatusAccepted {
			t.Fatalf("stop: %d %s", code, body)
		}
		waitUntil(t, "alice's server to stop", func() bool { return api.server("alice") == nil })
	})

	// 2. Through the REST API: the job in GPULab, the notebook through the proxy, a cell.
	took := api.spawn("alice", map[string]any{"gpus": 1})
	t.Logf("spawn through the REST API: %s from the request to a notebook answering through the proxy", took.Round(time.Millisecond))
	state, _ := api.server("alice")["state"].(map[string]any)
	jobID, _ := state["job_id"].(string)
	if jobID == "" {
		t.Fatalf("the spawner keeps no job id in the hub's state: %v", state)
	}
	j := e.job(jobID)
	if j.Name != job.JupyterHubJobName || !j.Request.Scheduling.Interactive || j.State.Status != job.StatusRunning ||
		!strings.HasSuffix(j.Owner.UserURN, "+alice") || !strings.HasSuffix(j.Owner.ProjectURN, "+vision") || j.Request.Resources.GPUs != 1 {
		t.Fatalf("notebook job = %s %s interactive=%v owner=%v gpus=%d", j.Name, j.State.Status, j.Request.Scheduling.Interactive, j.Owner, j.Request.Resources.GPUs)
	}
	if ev := e.events(jobID); !strings.Contains(ev, "jupyterhub for alice") {
		t.Errorf("the job's events do not name the service and the user: %s", ev)
	}
	if tok := j.Request.Docker.Environment["JUPYTERHUB_API_TOKEN"]; tok != job.RedactedPassword {
		t.Errorf("the notebook's API token is shown in the API: %q", tok)
	}
	out, err := api.hubctl("run-cell", "alice", `import os; print(os.environ["GPULAB_JOB_ID"])`)
	if err != nil || strings.TrimSpace(out) != jobID {
		t.Fatalf("a cell printing GPULAB_JOB_ID gave %q (%v), want %s", out, err, jobID)
	}

	// 3. A spawn that cannot start now fails at once, with the master's reason in the hub.
	out, err = api.hubctl("spawn", "bob", "--options", `{"gpus": 2}`)
	if err == nil || !strings.Contains(out, "interactive job cannot start now") {
		t.Fatalf("bob's spawn of 2 GPUs while alice holds 1 of 2: err=%v, output %q", err, out)
	}
	if api.server("bob") != nil {
		t.Error("bob has a server after a failed spawn")
	}

	// 4. A restarted hub still sees the running server (and routes to it again).
	hub.Stop(t)
	hub.Start(t)
	if s := api.server("alice"); s == nil || s["ready"] != true {
		t.Fatalf("after a hub restart alice's server is %v", s)
	}
	tok := api.token("alice")
	waitUntil(t, "alice's notebook to answer through the restarted hub", func() bool {
		code, _ := api.do("GET", "/user/alice/api/status", tok, nil)
		return code == http.StatusOK
	})
	if got := e.job(jobID).State.Status; got != job.StatusRunning {
		t.Fatalf("the hub restart changed the job: %s", got)
	}

	// 5. A job ended by GPULab (cancelled by its owner in the portal or CLI) is a stopped server.
	e.put(jobID, "CANCELLED")
	waitUntil(t, "the hub to see alice's cancelled job as a stopped server", func() bool { return api.server("alice") == nil })

	// 6. Stop through the hub cancels the job.
	api.spawn("alice", nil)
	state, _ = api.server("alice")["state"].(map[string]any)
	second, _ := state["job_id"].(string)
	if out, err := api.hubctl("stop", "alice"); err != nil {
		t.Fatalf("hubctl stop: %v %s", err, out)
	}
	if got := e.waitFor(second, job.StatusCancelled); got.State.Status != job.StatusCancelled {
		t.Fatalf("stopping through the hub left job %s %s", second, got.State.Status)
	}
}

// TestSpawnerAgainstMaster runs the spawner's Python unit tests (contrib/jupyterhub/tests)
// against this real master and slave, with a real service identity; none may be skipped.
func TestSpawnerAgainstMaster(t *testing.T) {
	testenv.RequireJupyterHub(t)
	e := newEnv(t)
	svc := e.m.AddService("jupyterhub")
	e.startSlave(slaveOpts{name: "spawner", cluster: 1})
	root := testenv.RepoRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "-m", "unittest", "discover", "-v", "-s", filepath.Join(root, "contrib", "jupyterhub", "tests"))
	cmd.Env = append(os.Environ(), "GPULAB_TEST_MASTER_URL="+e.m.URL, "GPULAB_TEST_CA="+e.m.CAFile,
		"GPULAB_TEST_SERVICE_CERT="+svc.CertFile, "GPULAB_TEST_USER=alice", "GPULAB_TEST_PROJECT=vision", "GPULAB_TEST_IMAGE="+e.image)
	out, err := cmd.CombinedOutput()
	t.Logf("python3 -m unittest:\n%s", out)
	if err != nil {
		t.Fatalf("the spawner's unit tests failed: %v", err)
	}
	if strings.Contains(string(out), "skipped") {
		t.Fatalf("some of the spawner's unit tests were skipped")
	}
}
