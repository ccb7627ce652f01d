package web_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/pki"
)

// The profile lists the user's certificates by serial; a download is a new one (renewal) with
// the 90-day default lifetime; the user revokes his own (not another's) and the revoked one is
// refused at once. The admin page disables users and slaves and revokes any certificate.
func TestPortalCertificatesAndDisabling(t *testing.T) {
	p := newPortal(t)
	bob := p.m.AddUser("bob", false, "", "vision")
	carol := p.m.AddUser("carol", false, "", "vision")
	root := p.m.AddUser("root", true, "")

	page := p.get(bob, "/profile").expect(200)
	if !page.has("data-testid", "certificate-"+bob.Serial) || page.has("data-testid", "certificate-"+carol.Serial) {
		t.Fatalf("bob's profile does not list exactly his certificate: %s", clip(page.body()))
	}
	dl := p.post(bob, "/profile/certificate", url.Values{}).expect(200)
	renewed, err := pki.LoadClientPEM(dl.rec.Body.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	if life := time.Until(renewed.Leaf.NotAfter); life < 89*24*time.Hour || life > 90*24*time.Hour {
		t.Errorf("a portal certificate lives %s, want 90 days", life)
	}
	if !p.get(bob, "/profile").expect(200).has("data-testid", "certificate-"+renewed.Leaf.SerialNumber.String()) {
		t.Fatal("the renewed certificate is not listed")
	}

	p.post(bob, "/profile/certificates/"+carol.Serial+"/revoke", nil).expect(404)
	p.post(bob, "/profile/certificates/"+bob.Serial+"/revoke", nil).expect(303)
	if status, _, _ := p.m.Do(bob, "GET", v31+"/jobs", nil); status != 401 {
		t.Fatalf("bob's revoked certificate: %d", status)
	}
	if status, _, _ := p.m.Do(carol, "GET", v31+"/jobs", nil); status != 200 {
		t.Fatalf("carol's certificate after bob revoked his: %d", status)
	}

	// Admin controls: not for users; an admin disables carol and a slave, revokes a certificate.
	p.post(carol, "/admin/users/bob/disabled", url.Values{"disabled": {"true"}}).expect(403)
	admin := p.get(root, "/admin").expect(200)
	if !admin.has("data-testid", "admin-certificate-"+carol.Serial) || !admin.has("data-testid", "disable-user") {
		t.Fatalf("admin page without certificate or disable controls: %s", clip(admin.body()))
	}
	p.post(root, "/admin/users/carol/disabled", url.Values{"disabled": {"true"}}).expect(303)
	if status, _, _ := p.m.Do(carol, "GET", v31+"/jobs", nil); status != 401 {
		t.Fatalf("disabled carol: %d", status)
	}
	p.post(root, "/admin/users/root/disabled", url.Values{"disabled": {"true"}}).expect(409)
	p.m.SlaveCert("gpu9", 1)
	p.post(root, "/admin/slaves/gpu9/disabled", url.Values{"disabled": {"true"}}).expect(303)
	if sl, err := p.m.Store.GetSlave(t.Context(), "gpu9"); err != nil || !sl.Disabled {
		t.Fatalf("slave after the admin disabled it: %+v %v", sl, err)
	}
	p.post(root, "/admin/certificates/"+root.Serial+"/revoke", nil).expect(303)
	if c, err := p.m.Store.GetCertificate(t.Context(), root.Serial); err != nil || c.State(time.Now()) != "revoked" {
		t.Fatalf("certificate after the admin revoked it: %+v %v", c, err)
	}
}
