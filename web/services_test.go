package web_test

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/store"
)

// Service identities (issue 13), against real Postgres: a service certificate acts for the
// user named in X-GPULab-Act-As, with that user's rights in the projects the service may act
// in, never an admin's, never on the portal or the slave protocol; revoking it holds at once.
func TestServiceActsForUser(t *testing.T) {
	w := newWorld(t)
	m := w.m
	ctx := context.Background()
	hub := m.AddService("jupyterhub")
	frank := m.AddUser("frank", false, "", "vision")

	// Acting for alice: the job is hers, in her project, and the event names both.
	status, body, _ := m.DoAs(hub, "alice", "POST", v31+"/jobs", strings.NewReader(jobDoc("nb", projectURN("vision"))))
	if status != http.StatusCreated {
		t.Fatalf("service submitting for alice: %d %s", status, body)
	}
	id := strings.TrimSpace(string(body))
	rec, err := m.Store.GetJob(ctx, id)
	if err != nil || rec.UserID != w.alice.ID || rec.Job.Owner.UserURN != w.alice.URN {
		t.Fatalf("the service's job is not alice's: %+v %v", rec, err)
	}
	status, body, _ = m.Do(w.alice, "GET", v31+"/jobs/"+id+"/debug", nil)
	if status != 200 || !strings.Contains(string(body), "submitted by jupyterhub for alice") {
		t.Fatalf("alice reading the job's events: %d %s, want the submit event naming service and user", status, body)
	}
	// The URN works as the name does; alice's own view of the job, and cancelling it.
	if status, body, _ := m.DoAs(hub, w.alice.URN, "GET", v31+"/jobs/"+id, nil); status != 200 {
		t.Fatalf("service reading alice's job by her URN: %d %s", status, body)
	}
	if status, body, _ := m.DoAs(hub, "alice", "PUT", v31+"/jobs/"+id+"/state/status", strings.NewReader("CANCELLED"), "Content-Type", "text/plain"); status != 200 {
		t.Fatalf("service cancelling alice's job: %d %s", status, body)
	}
	if status, body, _ := m.DoAs(hub, "alice", "GET", v31+"/jobs/"+id+"/debug", nil); status != 200 || !strings.Contains(string(body), "cancelled by jupyterhub for alice") {
		t.Fatalf("the cancel event: %d %s, want it to name service and user", status, body)
	}
	// Acting for bob, the service cannot see alice's job (404, as for none).
	if status, body, _ := m.DoAs(hub, "bob", "GET", v31+"/jobs/"+id, nil); status != 404 {
		t.Fatalf("service acting for bob reading alice's job: %d %s", status, body)
	}

	// Refusals naming what is wrong.
	if _, err := m.Store.UpsertUser(ctx, pki.UserURN(testmaster.Authority, "zoe"), "zoe", "zoe@example.org", false); err != nil {
		t.Fatal(err)
	}
	if err := m.Store.SetUserDisabled(ctx, "zoe", true); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, user, project string
		want                int
		contains            string
	}{
		{"unknown user", "nobody", "vision", 403, "no user nobody"},
		{"disabled user", "zoe", "vision", 403, "zoe is disabled"},
		{"a project the user is not in", "alice", "audio", 403, "audio"},
		{"not a user URN", pki.ProjectURN(testmaster.Authority, "vision"), "vision", 403, "not a user URN"},
		{"no header", "", "vision", 403, handlers.ActAsHeader},
	} {
		status, body, _ := m.DoAs(hub, c.user, "POST", v31+"/jobs", strings.NewReader(jobDoc("x", projectURN(c.project))))
		if status != c.want || !strings.Contains(string(body), c.contains) {
			t.Errorf("%s: %d %s, want %d naming %q", c.name, status, body, c.want, c.contains)
		}
	}
	// Without the header public endpoints answer; user endpoints refuse, naming the header.
	if status, body, _ := m.DoAs(hub, "", "GET", v31+"/version", nil); status != 200 {
		t.Errorf("service without header on a public endpoint: %d %s", status, body)
	}
	if status, body, _ := m.DoAs(hub, "", "GET", v31+"/jobs", nil); status != 403 || !strings.Contains(string(body), handlers.ActAsHeader) {
		t.Errorf("service without header on GET jobs: %d %s", status, body)
	}

	// Never an admin, even for one; no portal, no slave protocol, no credentials of the user.
	for _, c := range []struct{ method, path, body string }{
		{"GET", v31 + "/users", ""},
		{"PUT", v31 + "/users/bob/disabled", `{"disabled": true}`},
		{"PUT", v31 + "/slaves/x/disabled", `{"disabled": true}`},
		{"GET", v31 + "/certificates", ""},
		{"POST", v31 + "/certificates/" + w.dave.Serial + "/revoke", ""},
		{"GET", "/admin", ""},
		{"GET", "/jobs", ""},
		{"GET", "/profile", ""},
		{"POST", "/profile/certificate", ""},
		{"POST", protocol.HeartbeatPath, `{"instanceId": "i1"}`},
	} {
		status, body, _ := m.DoAs(hub, "dave", c.method, c.path, strings.NewReader(c.body), "Content-Type", "application/json")
		if status != http.StatusForbidden {
			t.Errorf("service acting for admin dave: %s %s: %d %s, want 403", c.method, c.path, status, body)
		}
	}
	if u, err := m.Store.GetUserByName(ctx, "bob"); err != nil || u.Disabled {
		t.Fatalf("bob after the service's refused calls: %+v %v", u, err)
	}

	// Credentials that are not a service's may not name another user.
	if status, body, _ := m.Do(w.alice, "GET", v31+"/jobs", nil, handlers.ActAsHeader, "carol"); status != 403 || !strings.Contains(string(body), "only service certificates") {
		t.Errorf("alice's certificate with the act-as header: %d %s", status, body)
	}
	if status, body, _ := m.Do(nil, "GET", v31+"/version", nil, handlers.ActAsHeader, "carol"); status != 403 {
		t.Errorf("no credentials with the act-as header: %d %s", status, body)
	}

	// A service for the members of project audio: bob yes, alice (vision only) no.
	audio := m.AddService("audiohub", "audio")
	if status, body, _ := m.DoAs(audio, "bob", "POST", v31+"/jobs", strings.NewReader(jobDoc("nb", projectURN("audio")))); status != 201 {
		t.Errorf("audio's service for bob: %d %s", status, body)
	}
	if status, body, _ := m.DoAs(audio, "alice", "GET", v31+"/jobs", nil); status != 403 || !strings.Contains(string(body), "alice is in none") {
		t.Errorf("audio's service for alice: %d %s", status, body)
	}
	// A user in both: only the service's project is open to it.
	m.AddUser("both", false, "", "vision", "audio")
	if status, body, _ := m.DoAs(audio, "both", "POST", v31+"/jobs", strings.NewReader(jobDoc("nb", projectURN("vision")))); status != 403 {
		t.Errorf("audio's service for a member of vision and audio, into vision: %d %s", status, body)
	}
	visionJob := w.submit(t, frank, jobDoc("f", projectURN("vision")), "")
	if status, body, _ := m.DoAs(audio, "bob", "GET", v31+"/jobs/"+visionJob, nil); status != 404 {
		t.Errorf("audio's service reading a vision job: %d %s", status, body)
	}

	// Revocation: the next request, at once, is 401; a new certificate enables it again.
	if _, err := m.Store.RevokeService(ctx, "jupyterhub"); err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"alice", ""} {
		if status, body, _ := m.DoAs(hub, user, "GET", v31+"/version", nil); status != 401 || !strings.Contains(string(body), "disabled") {
			t.Errorf("revoked service (act as %q): %d %s, want 401", user, status, body)
		}
	}
	hub2 := m.AddService("jupyterhub")
	if status, body, _ := m.DoAs(hub2, "alice", "GET", v31+"/jobs", nil); status != 200 {
		t.Errorf("the service's new certificate: %d %s", status, body)
	}
	if status, body, _ := m.DoAs(hub, "alice", "GET", v31+"/jobs", nil); status != 401 || !strings.Contains(string(body), "revoked") {
		t.Errorf("the service's revoked first certificate after renewal: %d %s", status, body)
	}
	// A certificate the master has no record of.
	cert, key, err := m.CA.IssueClient(pki.ClientSpec{Kind: pki.KindService, URN: pki.ServiceURN(testmaster.Authority, "jupyterhub"), Name: "jupyterhub"})
	if err != nil {
		t.Fatal(err)
	}
	ghost := &testmaster.Service{TLS: tlsPair(cert, key)}
	if status, body, _ := m.DoAs(ghost, "alice", "GET", v31+"/jobs", nil); status != 401 || !strings.Contains(string(body), "not recorded") {
		t.Errorf("an unrecorded service certificate: %d %s", status, body)
	}
	svcs, err := m.Store.ListServices(ctx)
	if err != nil || len(svcs) != 2 || svcs[1].Name != "jupyterhub" || svcs[1].Certificates != 2 || svcs[1].Disabled {
		t.Errorf("services: %+v %v", svcs, err)
	}
	if c, err := m.Store.GetCertificate(ctx, hub.Serial); err != nil || c.Kind != store.CertService || c.Owner != "jupyterhub" {
		t.Errorf("the service's certificate record: %+v %v", c, err)
	}
}

func tlsPair(cert *x509.Certificate, key crypto.Signer) tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
}

// The fair-use limit of notebooks: a third job named JupyterHub-singleuser is refused (409)
// while two have not ended, whoever submits it; other names are not counted, ended notebooks
// are not either, and another user has his own count.
func TestNotebookLimitPerUser(t *testing.T) {
	w := newWorld(t) // the master's default: 2
	m := w.m
	hub := m.AddService("jupyterhub")
	notebook := jobDoc(handlers.NotebookJobName, projectURN("vision"))
	var ids []string
	for i := 0; i < 2; i++ {
		status, body, _ := m.DoAs(hub, "alice", "POST", v31+"/jobs", strings.NewReader(notebook))
		if status != http.StatusCreated {
			t.Fatalf("notebook %d: %d %s", i+1, status, body)
		}
		ids = append(ids, strings.TrimSpace(string(body)))
	}
	const refusal = "user alice already has 2 notebook jobs (limit --max-notebooks-per-user 2): stop one first"
	status, body, _ := m.DoAs(hub, "alice", "POST", v31+"/jobs", strings.NewReader(notebook))
	if status != http.StatusConflict || !strings.Contains(string(body), refusal) {
		t.Fatalf("third notebook through the service: %d %s, want 409 %q", status, body, refusal)
	}
	if status, body, _ := m.Do(w.alice, "POST", v31+"/jobs", strings.NewReader(notebook)); status != http.StatusConflict {
		t.Fatalf("third notebook by alice herself: %d %s", status, body)
	}
	// Other names, other users: not counted.
	w.submit(t, w.alice, jobDoc("JupyterHub-singleuser-2", projectURN("vision")), "")
	w.submit(t, w.carol, notebook, "")
	// A notebook running still counts; an ended one frees its place.
	m.ForceJobStatus(ids[0], "ASSIGNED")
	m.ForceJobStatus(ids[0], "STARTING")
	m.ForceJobStatus(ids[0], "RUNNING")
	if status, _, _ := m.Do(w.alice, "POST", v31+"/jobs", strings.NewReader(notebook)); status != http.StatusConflict {
		t.Fatalf("third notebook while one runs: %d", status)
	}
	m.ForceJobStatus(ids[1], "CANCELLED")
	if status, body, _ := m.DoAs(hub, "alice", "POST", v31+"/jobs", strings.NewReader(notebook)); status != http.StatusCreated {
		t.Fatalf("a notebook after one ended: %d %s", status, body)
	}
	// A repeated submission (same idempotency key) answers its job, whatever the count.
	m2 := testmaster.Start(t, testmaster.Options{MaxNotebooksPerUser: 1})
	gus := m2.AddUser("gus", false, "", "vision")
	var first string
	for i := 0; i < 2; i++ {
		status, body, _ := m2.Do(gus, "POST", v31+"/jobs", strings.NewReader(notebook), "Idempotency-Key", "nb-1")
		if status != http.StatusCreated || (first != "" && string(body) != first) {
			t.Fatalf("repeated notebook submission %d: %d %s (first %s)", i+1, status, body, first)
		}
		first = string(body)
	}
	if status, body, _ := m2.Do(gus, "POST", v31+"/jobs", strings.NewReader(notebook)); status != http.StatusConflict ||
		!strings.Contains(string(body), "limit --max-notebooks-per-user 1") {
		t.Fatalf("second notebook with limit 1: %d %s", status, body)
	}
	// No limit.
	m3 := testmaster.Start(t, testmaster.Options{MaxNotebooksPerUser: -1})
	hal := m3.AddUser("hal", false, "", "vision")
	for i := 0; i < 4; i++ {
		if status, body, _ := m3.Do(hal, "POST", v31+"/jobs", strings.NewReader(notebook)); status != http.StatusCreated {
			t.Fatalf("notebook %d without limit: %d %s", i+1, status, body)
		}
	}
}
