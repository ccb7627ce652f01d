package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/pki"
)

// The Admin page's Services section (issue 13): admins only; the form creates a service and
// answers its certificate as a download, which acts for users at the master; the job it
// submits shows both identities on its page; revoking it holds at the next request.
func TestPortalServices(t *testing.T) {
	p := newPortal(t)
	bob := p.m.AddUser("bob", false, "", "vision")
	root := p.m.AddUser("root", true, "")

	if !p.get(root, "/admin").expect(200).has("data-testid", "admin-services-empty") {
		t.Fatal("the admin page has no empty services section")
	}
	p.post(bob, "/admin/services", url.Values{"name": {"hub"}}).expect(403)
	if r := p.post(root, "/admin/services", url.Values{"name": {"Bad Name"}}).expect(400); !strings.Contains(r.body(), "name") {
		t.Errorf("a bad service name: %s", clip(r.body()))
	}
	if r := p.post(root, "/admin/services", url.Values{"name": {"hub"}, "projects": {"vision, nope"}}).expect(400); !strings.Contains(r.body(), "nope") {
		t.Errorf("an unknown project: %s", clip(r.body()))
	}
	dl := p.post(root, "/admin/services", url.Values{"name": {"hub"}, "projects": {"vision"}}).expect(200)
	if cd := dl.header().Get("Content-Disposition"); !strings.Contains(cd, "gpulab-service-hub.pem") {
		t.Errorf("service download named %q", cd)
	}
	cert, err := pki.LoadClientPEM(dl.rec.Body.Bytes(), "")
	if err != nil {
		t.Fatalf("the download is no certificate with key: %v", err)
	}
	if id, err := pki.IdentityOf(cert.Leaf); err != nil || id.Kind != pki.KindService || id.URN != pki.ServiceURN(testmaster.Authority, "hub") {
		t.Fatalf("downloaded certificate: %+v %v", id, err)
	}
	admin := p.get(root, "/admin").expect(200)
	row := admin.one("data-testid", "admin-service-hub")
	if txt := textOf(row); !strings.Contains(txt, "members of vision") || !strings.Contains(txt, "active") {
		t.Errorf("the service's row: %q", txt)
	}

	hub := &testmaster.Service{Name: "hub", TLS: cert}
	status, body, _ := p.m.DoAs(hub, "bob", "POST", v31+"/jobs", strings.NewReader(jobDoc("nb", projectURN("vision"))))
	if status != http.StatusCreated {
		t.Fatalf("the downloaded service certificate submitting for bob: %d %s", status, body)
	}
	id := strings.TrimSpace(string(body))
	if page := p.get(bob, "/jobs/"+id).expect(200); !strings.Contains(page.body(), "submitted by hub for bob") {
		t.Errorf("the job's page does not show both identities: %s", clip(page.body()))
	}

	p.post(root, "/admin/services/nope/revoke", nil).expect(404)
	p.post(root, "/admin/services/hub/revoke", nil).expect(303)
	if status, body, _ := p.m.DoAs(hub, "bob", "GET", v31+"/jobs", nil); status != http.StatusUnauthorized {
		t.Fatalf("the revoked service: %d %s", status, body)
	}
	if txt := textOf(p.get(root, "/admin").expect(200).one("data-testid", "admin-service-hub")); !strings.Contains(txt, "revoked") {
		t.Errorf("the revoked service's row: %q", txt)
	}
}
