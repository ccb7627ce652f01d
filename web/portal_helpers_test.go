package web_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/store"
	"github.com/opengpulab/gpulab/web"
)

// portal runs the portal's route table over a real master's store (Postgres) and CA. Requests
// carry a caller and a CSRF token in their context, as web's session middleware sets them.
type portal struct {
	t   *testing.T
	m   *testmaster.Master
	h   *handlers.Handlers
	mux *http.ServeMux
}

const portalCSRF = "test-csrf-token"

func newPortal(t *testing.T) *portal {
	t.Helper()
	m := testmaster.Start(t, testmaster.Options{})
	h := handlers.New(m.Store, handlers.Config{Authority: testmaster.Authority, Version: "test", JobOptions: job.DefaultOptions(), CA: m.CA},
		slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil)
	mux := http.NewServeMux()
	for _, rt := range web.PortalRoutes(h) {
		mux.Handle(rt.Method+" "+rt.Path, h.Wrap(rt.Handler))
	}
	return &portal{t: t, m: m, h: h, mux: mux}
}

// caller is a user as the session middleware makes him: user and project ids from the store.
func (p *portal) caller(u *testmaster.User) *handlers.Caller {
	p.t.Helper()
	ctx := context.Background()
	fresh, err := p.m.Store.GetUserByURN(ctx, u.URN)
	if err != nil {
		p.t.Fatal(err)
	}
	ps, err := p.m.Store.ListUserProjects(ctx, fresh.ID)
	if err != nil {
		p.t.Fatal(err)
	}
	c := &handlers.Caller{User: fresh, Kind: pki.KindUser, Via: "session"}
	for _, pr := range ps {
		c.ProjectIDs = append(c.ProjectIDs, pr.ID)
	}
	return c
}

// req sends a request as u (nil: nobody). form, when not nil, is posted; header pairs follow.
func (p *portal) req(u *testmaster.User, method, target string, form url.Values, header ...string) *pageResponse {
	p.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	r := httptest.NewRequest(method, target, body)
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	ctx := handlers.WithCSRFToken(r.Context(), portalCSRF)
	if u != nil {
		ctx = handlers.WithCaller(ctx, p.caller(u))
	}
	w := httptest.NewRecorder()
	p.mux.ServeHTTP(w, r.WithContext(ctx))
	return &pageResponse{t: p.t, rec: w}
}

func (p *portal) get(u *testmaster.User, target string, header ...string) *pageResponse {
	p.t.Helper()
	return p.req(u, http.MethodGet, target, nil, header...)
}

func (p *portal) post(u *testmaster.User, target string, form url.Values, header ...string) *pageResponse {
	p.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	form.Set(handlers.CSRFFieldName, portalCSRF)
	return p.req(u, http.MethodPost, target, form, header...)
}

// submit stores a job for u through the API (the real master, his certificate) and returns
// its UUID.
func (p *portal) submit(u *testmaster.User, doc string) string {
	p.t.Helper()
	status, body, _ := p.m.Do(u, "POST", "/api/gpulab/v3.1/jobs", strings.NewReader(doc))
	if status != http.StatusCreated {
		p.t.Fatalf("submit: %d %s", status, body)
	}
	return strings.TrimSpace(string(body))
}

// jobDoc is a small valid job in a project.
func jobDoc(name, project string) string {
	return `{"name": "` + name + `", "owner": {"projectUrn": "` + project + `"}, "request": {"resources": {"cpus": 1, "gpus": 0, "cpuMemoryGb": 1},
	"docker": {"image": "debian:stable", "command": "echo hi"}}}`
}

// setStatus forces a job's state (as scheduler and slave would move it).
func (p *portal) setStatus(id string, from, to job.Status) {
	p.t.Helper()
	if _, err := p.m.Store.TransitionJob(context.Background(), id, []job.Status{from}, to, store.Event{Actor: "test", Message: "test"}); err != nil {
		p.t.Fatal(err)
	}
}

func (p *portal) status(id string) job.Status {
	p.t.Helper()
	rec, err := p.m.Store.GetJob(context.Background(), id)
	if err != nil {
		p.t.Fatal(err)
	}
	return rec.Job.State.Status
}

// pageResponse is a recorded answer with its HTML parsed on demand.
type pageResponse struct {
	t    *testing.T
	rec  *httptest.ResponseRecorder
	root *html.Node
}

func (r *pageResponse) body() string        { return r.rec.Body.String() }
func (r *pageResponse) header() http.Header { return r.rec.Header() }

func (r *pageResponse) expect(status int) *pageResponse {
	r.t.Helper()
	if r.rec.Code != status {
		r.t.Fatalf("status %d, want %d: %s", r.rec.Code, status, clip(r.rec.Body.String()))
	}
	return r
}

func clip(s string) string {
	if len(s) > 3000 {
		return s[:3000] + "…"
	}
	return s
}

func (r *pageResponse) doc() *html.Node {
	r.t.Helper()
	if r.root != nil {
		return r.root
	}
	body := r.rec.Body.String()
	if strings.HasPrefix(strings.TrimSpace(body), "<tr") {
		// A row, as htmx swaps it into a table: parse it in a table body.
		tbody := &html.Node{Type: html.ElementNode, Data: "tbody", DataAtom: atom.Tbody}
		nodes, err := html.ParseFragment(strings.NewReader(body), tbody)
		if err != nil {
			r.t.Fatal(err)
		}
		for _, n := range nodes {
			tbody.AppendChild(n)
		}
		r.root = tbody
		return r.root
	}
	n, err := html.Parse(strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	r.root = n
	return r.root
}

// find is every element with attribute name=val.
func (r *pageResponse) find(name, val string) []*html.Node {
	r.t.Helper()
	return findAll(r.doc(), name, val)
}

func (r *pageResponse) one(name, val string) *html.Node {
	r.t.Helper()
	ns := r.find(name, val)
	if len(ns) != 1 {
		r.t.Fatalf("want one element with %s=%q, found %d in %s", name, val, len(ns), clip(r.body()))
	}
	return ns[0]
}

func (r *pageResponse) has(name, val string) bool { r.t.Helper(); return len(r.find(name, val)) > 0 }

func findAll(n *html.Node, name, val string) []*html.Node {
	var out []*html.Node
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			for _, a := range n.Attr {
				if a.Key == name && (val == "" || a.Val == val) {
					out = append(out, n)
					break
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return out
}

func attrOf(n *html.Node, name string) string {
	for _, a := range n.Attr {
		if a.Key == name {
			return a.Val
		}
	}
	return ""
}

func textOf(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

// fieldValue is the value of a form control by id (input value, textarea text, selected option).
func (r *pageResponse) fieldValue(id string) string {
	r.t.Helper()
	n := r.one("id", id)
	switch n.Data {
	case "textarea":
		return textOf(n)
	case "select":
		for _, o := range findAll(n, "value", "") {
			for _, a := range o.Attr {
				if a.Key == "selected" {
					return attrOf(o, "value")
				}
			}
		}
		return ""
	}
	return attrOf(n, "value")
}
