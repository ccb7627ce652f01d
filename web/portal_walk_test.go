package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/store"
)

// The Create Job defects of a new user's walk (issue 17): a GPU by default, an example image,
// and a job pasted on one line shown back laid out.
func TestCreateJobFormWalk(t *testing.T) {
	p := newPortal(t)
	alice := p.m.AddUser("alice", false, "", "demo")
	r := p.get(alice, "/jobs/new").expect(http.StatusOK)
	if got := r.fieldValue("field-gpus"); got != "1" {
		t.Errorf("GPUs default %q, want 1", got)
	}
	if ph := attrOf(r.one("id", "field-image"), "placeholder"); !strings.Contains(ph, ":") {
		t.Errorf("image field placeholder %q, want an example image", ph)
	}
	form := formOf(t, r)
	form.Set("json", `{"name": "x", "request": {"resourcs": {"cpus": 1}, "docker": {"image": "busybox"}}}`)
	r = p.post(alice, "/jobs/new", form).expect(http.StatusBadRequest)
	ed := r.fieldValue("field-json")
	if n := strings.Count(ed, "\n"); n < 5 || !strings.Contains(ed, `"resourcs"`) {
		t.Errorf("pasted one-line job shown back with %d line breaks:\n%s", n, ed)
	}
}

// An admin makes a slave join token in the portal: shown once with the join command, stored
// as its hash only, usable once by the slave. Others get 403; bad input a 400 naming its field.
func TestAdminSlaveToken(t *testing.T) {
	p := newPortal(t)
	admin := p.m.AddUser("root", true, "", "admins")
	alice := p.m.AddUser("alice", false, "", "demo")
	ctx := context.Background()
	if _, err := p.m.Store.CreateCluster(ctx, store.Cluster{ID: 7, Name: "lab"}); err != nil {
		t.Fatal(err)
	}
	page := p.get(admin, "/admin").expect(http.StatusOK)
	page.one("data-testid", "slave-token-form")
	form := url.Values{"name": {"gpu9"}, "clusterId": {"7"}, "valid": {"2h"}}
	r := p.post(admin, "/admin/slave-token", form).expect(http.StatusOK)
	if cc := r.header().Get("Cache-Control"); cc != "no-store" {
		t.Errorf("token page Cache-Control %q", cc)
	}
	token := strings.TrimSpace(textOf(r.one("data-testid", "slave-token-value")))
	cmd := textOf(r.one("data-testid", "slave-token-command"))
	if len(token) < 30 || !strings.Contains(cmd, "gpulab-slave join --master ") || !strings.Contains(cmd, "--token "+token) {
		t.Fatalf("token %q, command %q", token, cmd)
	}
	name, cluster, err := p.m.Store.UseSlaveToken(ctx, handlers.HashToken(token))
	if err != nil || name != "gpu9" || cluster != 7 {
		t.Fatalf("the token joins %q in cluster %d (%v), want gpu9 in 7", name, cluster, err)
	}
	if _, _, err := p.m.Store.UseSlaveToken(ctx, handlers.HashToken(token)); err == nil {
		t.Error("the token worked twice")
	}

	p.post(alice, "/admin/slave-token", form).expect(http.StatusForbidden)
	for field, bad := range map[string]url.Values{
		"name":      {"name": {"GPU 9"}, "clusterId": {"7"}},
		"clusterId": {"name": {"gpu9"}, "clusterId": {"99"}},
		"valid":     {"name": {"gpu9"}, "clusterId": {"7"}, "valid": {"forever"}},
	} {
		r := p.post(admin, "/admin/slave-token", bad).expect(http.StatusBadRequest)
		if !strings.Contains(r.body(), field) {
			t.Errorf("bad %s: the answer does not name it: %.300s", field, r.body())
		}
	}
}

// The Jobs list pages, 25 a page, through plain links (no JavaScript needed); a bad page
// number is a 400 naming the field.
func TestJobsListPages(t *testing.T) {
	p := newPortal(t)
	alice := p.m.AddUser("alice", false, "", "demo")
	for i := range 30 {
		p.submit(alice, jobDoc(fmt.Sprintf("job-%02d", i), projectURN("demo")))
	}
	rows := func(r *pageResponse) []string {
		var out []string
		for _, n := range r.find("data-testid", "job-link") {
			out = append(out, strings.TrimSpace(textOf(n)))
		}
		return out
	}
	r := p.get(alice, "/jobs").expect(http.StatusOK)
	first := rows(r)
	if len(first) != 25 || first[0] != "job-29" {
		t.Fatalf("first page: %d jobs from %v", len(first), first[:min(len(first), 1)])
	}
	older := attrOf(r.one("data-testid", "jobs-older"), "href")
	if older != "/jobs?page=2" {
		t.Fatalf("older link %q", older)
	}
	r = p.get(alice, older).expect(http.StatusOK)
	if second := rows(r); len(second) != 5 || second[4] != "job-00" {
		t.Errorf("second page: %v", second)
	}
	if r.has("data-testid", "jobs-older") || attrOf(r.one("data-testid", "jobs-newer"), "href") != "/jobs" {
		t.Errorf("second page links wrong")
	}
	r = p.get(alice, "/jobs?page=0").expect(http.StatusBadRequest)
	if !strings.Contains(r.body(), "page") {
		t.Errorf("bad page answer does not name the field: %.200s", r.body())
	}
}
