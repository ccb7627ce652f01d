package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/pki"
)

func projectURN(name string) string { return pki.ProjectURN(testmaster.Authority, name) }

// rowIDs are the jobs a list shows, by their row test ids.
func rowIDs(r *pageResponse) []string {
	var ids []string
	for _, n := range r.find("data-testid", "") {
		if id, ok := strings.CutPrefix(attrOf(n, "data-testid"), "job-row-"); ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

func sorted(ids ...string) []string { slices.Sort(ids); return ids }

func TestJobsPage(t *testing.T) {
	p := newPortal(t)
	alice := p.m.AddUser("alice", false, "", "demo")
	bob := p.m.AddUser("bob", false, "", "demo")
	carol := p.m.AddUser("carol", false, "", "ml")
	root := p.m.AddUser("root", true, "")
	a1 := p.submit(alice, jobDoc("a-one", projectURN("demo")))
	a2 := p.submit(alice, jobDoc("a-two", projectURN("demo")))
	b1 := p.submit(bob, jobDoc("b-one", projectURN("demo")))
	c1 := p.submit(carol, jobDoc("c-secret", projectURN("ml")))
	p.setStatus(c1, job.StatusQueued, job.StatusRunning)
	p.setStatus(a2, job.StatusQueued, job.StatusCancelled)

	t.Run("mine", func(t *testing.T) {
		r := p.get(alice, "/jobs").expect(http.StatusOK)
		if got := rowIDs(r); !slices.Equal(got, sorted(a1, a2)) {
			t.Errorf("rows %v", got)
		}
		r.one("id", "job-filters")
		if st := attrOf(r.one("data-testid", "job-row-"+a1), "data-status"); st != "QUEUED" {
			t.Errorf("row status %q", st)
		}
		// An admin's "mine" is his own jobs too.
		if got := rowIDs(p.get(root, "/jobs").expect(http.StatusOK)); len(got) != 0 {
			t.Errorf("admin's own jobs: %v", got)
		}
	})
	t.Run("projects", func(t *testing.T) {
		r := p.get(alice, "/jobs?scope=projects").expect(http.StatusOK)
		if got := rowIDs(r); !slices.Equal(got, sorted(a1, a2, b1)) {
			t.Errorf("rows %v", got)
		}
		// Bob's job: alice sees it in full but may not change it.
		row := r.one("data-testid", "job-row-"+b1)
		if len(findAll(row, "data-testid", "job-link")) != 1 || len(findAll(row, "data-testid", "action-cancel")) != 0 {
			t.Errorf("bob's row for alice: link and no actions expected")
		}
	})
	t.Run("running", func(t *testing.T) {
		r := p.get(alice, "/jobs?scope=running").expect(http.StatusOK)
		if got := rowIDs(r); !slices.Equal(got, []string{c1}) {
			t.Errorf("rows %v", got)
		}
		row := r.one("data-testid", "job-row-"+c1)
		if strings.Contains(textOf(row), "c-secret") || len(findAll(row, "data-testid", "job-link")) != 0 {
			t.Errorf("another project's job is not sanitized: %s", textOf(row))
		}
	})
	t.Run("filters", func(t *testing.T) {
		if got := rowIDs(p.get(alice, "/jobs?state=pending").expect(http.StatusOK)); !slices.Equal(got, []string{a1}) {
			t.Errorf("pending: %v", got)
		}
		if got := rowIDs(p.get(alice, "/jobs?state=cancelled").expect(http.StatusOK)); !slices.Equal(got, []string{a2}) {
			t.Errorf("state name: %v", got)
		}
		if got := rowIDs(p.get(root, "/jobs?scope=projects&project=ml").expect(http.StatusOK)); len(got) != 0 {
			t.Errorf("admin in no project: %v", got)
		}
		if got := rowIDs(p.get(alice, "/jobs?project=ml").expect(http.StatusOK)); len(got) != 0 {
			t.Errorf("project filter: %v", got)
		}
		r := p.get(alice, "/jobs?cluster=x").expect(http.StatusBadRequest)
		if attrOf(r.one("data-testid", "error-page"), "data-status") != "400" || !strings.Contains(textOf(r.one("data-testid", "error-message")), "cluster") {
			t.Errorf("bad filter: %s", textOf(r.one("data-testid", "error-message")))
		}
		p.get(alice, "/jobs?scope=everything").expect(http.StatusBadRequest)
	})
	t.Run("htmx partial", func(t *testing.T) {
		r := p.get(alice, "/jobs?scope=projects", "HX-Request", "true").expect(http.StatusOK)
		if strings.Contains(r.body(), "<html") || !strings.HasPrefix(strings.TrimSpace(r.body()), `<div id="job-list"`) {
			t.Errorf("partial is not the list alone: %s", clip(r.body()))
		}
		if got := rowIDs(r); len(got) != 3 {
			t.Errorf("partial rows %v", got)
		}
		if !strings.Contains(r.header().Get("Vary"), "HX-Request") {
			t.Errorf("no Vary: HX-Request")
		}
	})
	t.Run("json", func(t *testing.T) {
		r := p.get(alice, "/jobs?scope=running", "Accept", "application/json").expect(http.StatusOK)
		var jobs []job.Job
		if err := json.Unmarshal([]byte(r.body()), &jobs); err != nil {
			t.Fatal(err)
		}
		if len(jobs) != 1 || jobs[0].UUID != c1 || jobs[0].Name != "job-"+c1[:6] {
			t.Errorf("json face: %+v", jobs)
		}
		r = p.get(alice, "/jobs?scope=nope", "Accept", "application/json").expect(http.StatusBadRequest)
		if !strings.Contains(r.body(), `"error"`) {
			t.Errorf("json error: %s", r.body())
		}
	})
	t.Run("no caller", func(t *testing.T) {
		p.get(nil, "/jobs").expect(http.StatusUnauthorized)
	})
}

func TestJobPage(t *testing.T) {
	p := newPortal(t)
	alice := p.m.AddUser("alice", false, "", "demo")
	carol := p.m.AddUser("carol", false, "", "ml")
	id := p.submit(alice, `{"name": "web", "owner": {"projectUrn": "`+projectURN("demo")+`"}, "request": {"resources": {"cpus": 1, "gpus": 0, "cpuMemoryGb": 1},
		"docker": {"image": "user:pw@reg.example.org/x:1", "portMappings": [8888]}}}`)
	ctx := context.Background()
	if err := p.m.Store.AppendJobLog(ctx, id, 0, []byte("hello <world>\n")); err != nil {
		t.Fatal(err)
	}

	r := p.get(alice, "/jobs/"+id).expect(http.StatusOK)
	if textOf(r.one("data-testid", "job-name")) != "web" || attrOf(r.one("data-testid", "job-status"), "data-status") != "QUEUED" {
		t.Errorf("detail head")
	}
	if got := textOf(r.one("id", "job-log")); got != "hello <world>\n" {
		t.Errorf("log %q", got)
	}
	if attrOf(r.one("id", "job-log-poller"), "data-offset") != "14" {
		t.Errorf("log offset %q", attrOf(r.one("id", "job-log-poller"), "data-offset"))
	}
	if strings.Contains(r.body(), "user:pw@") || !strings.Contains(textOf(r.one("data-testid", "job-image")), "user:XXXX@") {
		t.Errorf("the image password shows")
	}
	if !strings.Contains(textOf(r.one("data-testid", "job-events")), "submitted by alice") {
		t.Errorf("events")
	}
	// Ports requested but not published yet.
	if !strings.Contains(textOf(r.one("data-testid", "port-8888")), "not published") {
		t.Errorf("port before start")
	}

	// Short ids work as in the API.
	p.get(alice, "/jobs/"+id[:8]).expect(http.StatusOK)

	// htmx refreshes the live part only.
	r = p.get(alice, "/jobs/"+id, "HX-Request", "true").expect(http.StatusOK)
	if !strings.HasPrefix(strings.TrimSpace(r.body()), `<div id="job-live"`) || r.has("id", "job-log") {
		t.Errorf("live partial: %s", clip(r.body()))
	}

	// JSON is the API's answer.
	r = p.get(alice, "/jobs/"+id, "Accept", "application/json").expect(http.StatusOK)
	var j job.Job
	if err := json.Unmarshal([]byte(r.body()), &j); err != nil || j.UUID != id || j.Request.Docker.Image != "user:XXXX@reg.example.org/x:1" {
		t.Errorf("json face: %v %+v", err, j)
	}

	// Not visible to another project: 404, as in the API.
	r = p.get(carol, "/jobs/"+id).expect(http.StatusNotFound)
	r.one("data-testid", "error-page")

	// Running: port links to the slave.
	p.setStatus(id, job.StatusQueued, job.StatusRunning)
	if _, err := p.m.Store.DB().ExecContext(ctx, `UPDATE jobs SET resources = $2 WHERE uuid = $1`, id,
		`{"slaveName": "node1", "slaveHost": "node1.example.org", "portMappings": [{"containerPort": 8888, "hostPort": 32001}]}`); err != nil {
		t.Fatal(err)
	}
	r = p.get(alice, "/jobs/"+id).expect(http.StatusOK)
	if href := attrOf(r.one("data-testid", "port-8888"), "href"); href != "http://node1.example.org:32001/" {
		t.Errorf("port link %q", href)
	}
}

func TestJobLogTail(t *testing.T) {
	p := newPortal(t)
	alice := p.m.AddUser("alice", false, "", "demo")
	id := p.submit(alice, jobDoc("log", projectURN("demo")))
	ctx := context.Background()
	tail := func(from string) *pageResponse {
		return p.get(alice, "/jobs/"+id+"/log", "HX-Request", "true", "Range", "bytes="+from+"-")
	}
	// Nothing yet: 204, htmx keeps the page as it is and polls again.
	tail("0").expect(http.StatusNoContent)

	if err := p.m.Store.AppendJobLog(ctx, id, 0, []byte("line 1\nw\xc3")); err != nil { // "w" and half an "ö"
		t.Fatal(err)
	}
	r := tail("0").expect(http.StatusOK)
	spans := r.find("class", "log-chunk")
	if len(spans) != 1 || textOf(spans[0]) != "line 1\nw" {
		t.Fatalf("chunk %q", r.body())
	}
	poller := r.one("id", "job-log-poller")
	if attrOf(poller, "hx-swap-oob") != "true" || attrOf(poller, "data-offset") != "8" || !strings.Contains(attrOf(poller, "hx-headers"), "bytes=8-") {
		t.Errorf("next poller %v", poller.Attr)
	}
	// The half character waits for its other half.
	tail("8").expect(http.StatusNoContent)
	if err := p.m.Store.AppendJobLog(ctx, id, 1, []byte("\xb6rld\n")); err != nil {
		t.Fatal(err)
	}
	r = tail("8").expect(http.StatusOK)
	if got := textOf(r.one("class", "log-chunk")); got != "örld\n" {
		t.Errorf("continued chunk %q", got)
	}
	// Beyond the end: 416 as in the API, shown in #flash.
	r = tail("500").expect(http.StatusRequestedRangeNotSatisfiable)
	if r.header().Get("HX-Retarget") != "#flash" {
		t.Errorf("error not retargeted to #flash")
	}
	// Without htmx it is the API's raw log.
	r = p.get(alice, "/jobs/"+id+"/log").expect(http.StatusOK)
	if r.body() != "line 1\nwörld\n" || !strings.HasPrefix(r.header().Get("Content-Type"), "text/plain") {
		t.Errorf("raw log %q %q", r.body(), r.header().Get("Content-Type"))
	}
}

func TestJobActions(t *testing.T) {
	p := newPortal(t)
	alice := p.m.AddUser("alice", false, "", "demo")
	bob := p.m.AddUser("bob", false, "", "demo")
	id := p.submit(alice, jobDoc("act", projectURN("demo")))

	// A plain form: the API's transition, then back to `next`.
	r := p.post(alice, "/jobs/"+id+"/hold", url.Values{"next": {"/jobs?scope=projects"}}).expect(http.StatusSeeOther)
	if r.header().Get("Location") != "/jobs?scope=projects" || p.status(id) != job.StatusOnHold {
		t.Errorf("hold: location %q, status %s", r.header().Get("Location"), p.status(id))
	}
	// `next` never leaves the site.
	r = p.post(alice, "/jobs/"+id+"/release", url.Values{"next": {"https://evil.example/"}}).expect(http.StatusSeeOther)
	if r.header().Get("Location") != "/jobs/"+id || p.status(id) != job.StatusQueued {
		t.Errorf("release: location %q, status %s", r.header().Get("Location"), p.status(id))
	}
	// htmx from the list: the row comes back.
	r = p.post(alice, "/jobs/"+id+"/hold", nil, "HX-Request", "true", "HX-Target", "job-row-"+id).expect(http.StatusOK)
	if attrOf(r.one("data-testid", "job-row-"+id), "data-status") != "ONHOLD" {
		t.Errorf("row after hold: %s", clip(r.body()))
	}
	// htmx from the detail page: the live part comes back.
	r = p.post(alice, "/jobs/"+id+"/release", nil, "HX-Request", "true", "HX-Target", "job-live").expect(http.StatusOK)
	if attrOf(r.one("id", "job-live"), "data-testid") != "job-live" || attrOf(r.one("data-testid", "job-status"), "data-status") != "QUEUED" {
		t.Errorf("live part after release")
	}
	// What the API refuses, the page refuses, with the API's status and message.
	r = p.post(alice, "/jobs/"+id+"/halt", nil, "HX-Request", "true", "HX-Target", "job-row-"+id).expect(http.StatusConflict)
	if r.header().Get("HX-Retarget") != "#flash" || !strings.Contains(textOf(r.one("data-testid", "flash-error")), "QUEUED") {
		t.Errorf("refused halt: %s", r.body())
	}
	r = p.post(alice, "/jobs/"+id+"/delete", nil).expect(http.StatusConflict)
	if attrOf(r.one("data-testid", "error-page"), "data-status") != "409" {
		t.Errorf("refused delete")
	}
	r = p.post(bob, "/jobs/"+id+"/cancel", nil).expect(http.StatusForbidden)
	if !strings.Contains(textOf(r.one("data-testid", "error-message")), "only the owner") {
		t.Errorf("bob cancelling: %s", textOf(r.one("data-testid", "error-message")))
	}
	p.post(alice, "/jobs/"+id+"/explode", nil).expect(http.StatusNotFound)

	p.post(alice, "/jobs/"+id+"/cancel", nil).expect(http.StatusSeeOther)
	p.post(alice, "/jobs/"+id+"/delete", nil).expect(http.StatusSeeOther)
	if p.status(id) != job.StatusDeleted {
		t.Errorf("status %s after cancel and delete", p.status(id))
	}
	evs, err := p.m.Store.ListJobEvents(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, e := range evs {
		msgs = append(msgs, e.Message)
	}
	if !slices.Contains(msgs, "onhold by alice") || !slices.Contains(msgs, "deleted by alice") {
		t.Errorf("events %v", msgs)
	}
}
