package web_test

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/opengpulab/gpulab/internal/testmaster"
)

// The Profile's e-mail form turns mail categories off and on again, per user.
func TestProfileMailSettings(t *testing.T) {
	p := newPortal(t)
	alice := p.m.AddUser("alice", false, "", "demo")
	bob := p.m.AddUser("bob", false, "")
	users := map[string]*testmaster.User{"alice": alice, "bob": bob}
	checked := func(u string, name string) bool {
		t.Helper()
		r := p.get(users[u], "/profile").expect(http.StatusOK)
		for _, a := range r.one("data-testid", "mail-"+name).Attr {
			if a.Key == "checked" {
				return true
			}
		}
		return false
	}
	for _, c := range []string{"queue", "run", "end", "halt", "restart", "reminder", "idle"} {
		if !checked("alice", c) {
			t.Errorf("category %s off by default", c)
		}
	}
	r := p.post(alice, "/profile/mail", url.Values{"on": {"queue", "run", "reminder"}}).expect(http.StatusSeeOther)
	if r.header().Get("Location") != "/profile#mail" {
		t.Errorf("location %q", r.header().Get("Location"))
	}
	off, err := p.m.Store.GetMailOff(context.Background(), alice.ID)
	if err != nil || !slices.Equal(off, []string{"end", "halt", "restart", "idle"}) {
		t.Fatalf("stored: %v, %v", off, err)
	}
	if checked("alice", "end") || !checked("alice", "run") {
		t.Errorf("the form does not show the settings")
	}
	if !checked("bob", "end") {
		t.Errorf("alice's settings changed bob's")
	}
	if off, _ := p.m.Store.GetMailOff(context.Background(), bob.ID); len(off) != 0 {
		t.Errorf("bob's settings: %v", off)
	}
	p.post(alice, "/profile/mail", url.Values{"on": {"queue", "spam"}}).expect(http.StatusBadRequest)
	p.post(alice, "/profile/mail", url.Values{"on": {"queue", "run", "end", "halt", "restart", "reminder", "idle"}}).expect(http.StatusSeeOther)
	if off, _ := p.m.Store.GetMailOff(context.Background(), alice.ID); len(off) != 0 {
		t.Errorf("all back on: %v", off)
	}
	p.post(nil, "/profile/mail", url.Values{"on": {"queue"}}).expect(http.StatusUnauthorized)
}
