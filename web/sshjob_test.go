package web_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/store"
	"github.com/opengpulab/gpulab/web"
)

// testHostKey is a fresh ed25519 public key in authorized_keys form.
func testHostKey(t *testing.T) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp)))
}

// A slave's SSH endpoint from its registration reaches the job JSON of its RUNNING jobs, in
// v3.1 and v4.0, with the master as jump host; other users (in the project: those outside it do not see the job) see the user names hidden; a bad
// endpoint is refused naming the field; GET ssh/known_hosts publishes the host keys.
func TestJobShowsSSHAccess(t *testing.T) {
	jumpKey := testHostKey(t)
	m := testmaster.Start(t, testmaster.Options{SSHJump: &handlers.SSHJumpHost{Host: "jump.test", Port: 2200, HostKey: jumpKey}})
	w := &protoWorld{m: m, alice: m.AddUser("alice", false, "", "vision"), name: "sshslave1"}
	carol := m.AddUser("carol", false, "", "vision")
	w.slave = w.slaveClient(t, w.name)
	ctx := context.Background()
	inv := protocol.Inventory{InstanceID: "i1", CPUs: 8, MemoryMiB: 16384, GPUs: []protocol.GPU{{Index: 0, UUID: "GPU-a", Model: "Fake V100"}},
		SSH: &protocol.SSHEndpoint{Host: "slave1.test", Port: 2222, HostKey: "ssh-ed25519 not-a-key"}}
	if _, err := w.slave.Register(ctx, inv); err == nil || !strings.Contains(err.Error(), "ssh.hostKey") {
		t.Fatalf("bad host key: %v", err)
	}
	inv.SSH.HostKey = testHostKey(t)
	if _, err := w.slave.Register(ctx, inv); err != nil {
		t.Fatal(err)
	}
	sl, err := m.Store.GetSlave(ctx, w.name)
	if err != nil || sl.SSHHost != "slave1.test" || sl.SSHPort != 2222 || sl.SSHHostKey != inv.SSH.HostKey {
		t.Fatalf("stored endpoint: %+v %v", sl, err)
	}
	id, attempt := w.job(t, w.name, 0, false)
	resources := func(u *testmaster.User, base string) map[string]any {
		t.Helper()
		status, data, _ := m.Do(u, "GET", base+"/jobs/"+id, nil)
		if status != 200 {
			t.Fatalf("GET %s as %s: %d %s", base, u.Name, status, data)
		}
		var j struct {
			State struct {
				Resources map[string]any `json:"resources"`
			} `json:"state"`
		}
		if err := json.Unmarshal(data, &j); err != nil {
			t.Fatal(err)
		}
		return j.State.Resources
	}
	if r := resources(w.alice, v31); r["sshHost"] != nil {
		t.Errorf("ASSIGNED job has SSH: %v", r)
	}
	w.advance(t, w.slave, id, attempt, job.StatusRunning)
	for _, base := range []string{v31, v40} {
		r := resources(w.alice, base)
		if r["sshHost"] != "slave1.test" || r["sshPort"] != 2222.0 || r["sshUsername"] != id[:8] ||
			r["sshProxyHost"] != "jump.test" || r["sshProxyPort"] != 2200.0 || r["sshProxyUsername"] != "alice" {
			t.Errorf("%s owner: %v", base, r)
		}
		if r := resources(carol, base); r["sshHost"] != "slave1.test" || r["sshUsername"] != "hidden" || r["sshProxyUsername"] != "hidden" {
			t.Errorf("%s as carol (same project): %v", base, r)
		}
	}
	// Lists share the records the store keeps of listed jobs (store.JobFilter.Shared): what one
	// viewer is shown must not reach another's list, however they interleave (run with -race).
	listed := func(u *testmaster.User, base string) map[string]any {
		status, data, _ := m.Do(u, "GET", base+"/jobs?page_size=50&project_name=vision", nil)
		if status != 200 {
			t.Errorf("list %s as %s: %d %s", base, u.Name, status, data)
			return nil
		}
		var items []json.RawMessage
		if base == v40 {
			var l struct{ Items []json.RawMessage }
			_ = json.Unmarshal(data, &l)
			items = l.Items
		} else {
			_ = json.Unmarshal(data, &items)
		}
		var j struct {
			State struct {
				Resources map[string]any `json:"resources"`
			} `json:"state"`
		}
		if len(items) != 1 || json.Unmarshal(items[0], &j) != nil {
			t.Errorf("list %s as %s: %s", base, u.Name, data)
			return nil
		}
		return j.State.Resources
	}
	var wg sync.WaitGroup
	for range 4 {
		for _, base := range []string{v31, v40} {
			wg.Add(2)
			go func() {
				defer wg.Done()
				if r := listed(w.alice, base); r != nil && r["sshProxyUsername"] != "alice" {
					t.Errorf("%s list as the owner: %v", base, r)
				}
			}()
			go func() {
				defer wg.Done()
				if r := listed(carol, base); r != nil && r["sshProxyUsername"] != "hidden" {
					t.Errorf("%s list as carol: %v", base, r)
				}
			}()
		}
	}
	wg.Wait()
	// The host keys are public, in known_hosts form.
	status, data, _ := m.Do(nil, "GET", v31+"/ssh/known_hosts", nil)
	want := "[jump.test]:2200 " + jumpKey + "\n[slave1.test]:2222 " + inv.SSH.HostKey + "\n"
	if status != 200 || string(data) != want {
		t.Errorf("known_hosts: %d %q, want %q", status, data, want)
	}
	// A registration without an endpoint (SSH turned off) clears it.
	inv.SSH, inv.InstanceID = nil, "i2"
	if _, err := w.slave.Register(ctx, inv); err != nil {
		t.Fatal(err)
	}
	if sl, err := m.Store.GetSlave(ctx, w.name); err != nil || sl.SSHHost != "" || sl.SSHPort != 0 {
		t.Errorf("endpoint after a registration without: %+v %v", sl, err)
	}
}

// The job page shows its owner, while the job runs, the ssh command to copy and its -L form
// for each declared port; another member of the project sees none.
func TestJobPageShowsSSHCommand(t *testing.T) {
	m := testmaster.Start(t, testmaster.Options{})
	h := handlers.New(m.Store, handlers.Config{Authority: testmaster.Authority, Version: "test", JobOptions: job.DefaultOptions(), CA: m.CA,
		SSHJump: &handlers.SSHJumpHost{Host: "jump.test", Port: 2200}}, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil)
	mux := http.NewServeMux()
	for _, rt := range web.PortalRoutes(h) {
		mux.Handle(rt.Method+" "+rt.Path, h.Wrap(rt.Handler))
	}
	p := &portal{t: t, m: m, h: h, mux: mux}
	w := &protoWorld{m: m, alice: m.AddUser("alice", false, "", "vision"), name: "sshslave2"}
	carol := m.AddUser("carol", false, "", "vision")
	w.slave = w.slaveClient(t, w.name)
	if _, err := w.slave.Register(context.Background(), protocol.Inventory{InstanceID: "i1", CPUs: 8, MemoryMiB: 16384,
		SSH: &protocol.SSHEndpoint{Host: "slave2.test", Port: 2222, HostKey: testHostKey(t)}}); err != nil {
		t.Fatal(err)
	}
	status, data, _ := m.Do(w.alice, "POST", v31+"/jobs", strings.NewReader(`{"name": "nb", "request": {"resources": {"cpus": 1, "gpus": 0, "cpuMemoryGb": 1},
	  "docker": {"image": "busybox", "portMappings": [{"containerPort": 8888}, {"containerPort": 6006}]}}}`))
	if status != 201 {
		t.Fatalf("submit: %d %s", status, data)
	}
	id := strings.TrimSpace(string(data))
	if _, err := m.Store.AssignJobs(context.Background(), []store.Assignment{{JobUUID: id, Placement: store.Placement{SlaveName: w.name, SlaveInstanceID: "i1", ClusterID: 1,
		Resources: job.StateResources{SlaveName: w.name, CPUIDs: []int{0}, CPUMemoryGb: 1}}}}); err != nil {
		t.Fatal(err)
	}
	if page := p.get(w.alice, "/jobs/"+id).expect(200); page.has("data-testid", "job-ssh") {
		t.Error("an ASSIGNED job shows an ssh command")
	}
	m.ForceJobStatus(id, job.StatusRunning)
	page := p.get(w.alice, "/jobs/"+id).expect(200)
	login := " -p 2222 " + id[:8] + "@slave2.test"
	if got, want := strings.TrimSpace(textOf(page.one("data-testid", "job-ssh-command"))), "ssh -J alice@jump.test:2200"+login; got != want {
		t.Errorf("ssh command %q, want %q", got, want)
	}
	for _, port := range []string{"8888", "6006"} {
		want := "ssh -J alice@jump.test:2200 -p 2222 -N -L " + port + ":localhost:" + port + " " + id[:8] + "@slave2.test"
		if got := strings.TrimSpace(textOf(page.one("data-testid", "job-ssh-forward-"+port))); got != want {
			t.Errorf("port %s: %q, want %q", port, got, want)
		}
	}
	if got := strings.TrimSpace(textOf(page.one("data-testid", "job-ssh-cli"))); got != "gpulab-cli ssh "+id[:8] {
		t.Errorf("cli command %q", got)
	}
	if p.get(carol, "/jobs/"+id).expect(200).has("data-testid", "job-ssh") {
		t.Error("another project member sees the ssh command")
	}
}
