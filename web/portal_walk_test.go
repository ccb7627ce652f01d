package web_test

import (
	"net/http"
	"strings"
	"testing"
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
