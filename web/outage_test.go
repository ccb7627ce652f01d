package web_test

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
)

// outageCall is one request of TestDatabaseOutageAnswers503: sent once during the outage and
// once after it.
type outageCall struct {
	name         string
	cert         *tls.Certificate // nil: anonymous
	method, path string
	body         string
	header       []string
	// page: the answer is HTML (the portal), else the API's JSON.
	page bool
	// after is the status wanted once the database is back.
	after int
}

func (c outageCall) do(t *testing.T, w *world) (int, http.Header, []byte) {
	t.Helper()
	var body io.Reader
	if c.body != "" {
		body = strings.NewReader(c.body)
	}
	req, err := http.NewRequest(c.method, w.m.URL+c.path, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(c.header); i += 2 {
		req.Header.Set(c.header[i], c.header[i+1])
	}
	resp, err := w.m.Client(c.cert).Do(req)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: read body: %v", c.name, err)
	}
	return resp.StatusCode, resp.Header, data
}

// While the master's database is unreachable, every request that needs it gets 503 with
// Retry-After (the API's JSON error, or the portal's error page for a browser), never 500:
// users' calls (whose authentication reads the user), anonymous ones, the slave protocol, a
// page. /healthz stays 200 and /readyz says 503. Once the database is back, the same requests
// succeed on the same master, and the submit made during the outage stored nothing.
func TestDatabaseOutageAnswers503(t *testing.T) {
	w := newWorld(t)
	id := w.submit(t, w.alice, helloWorld, "")
	alice := &w.alice.TLS
	slave := w.m.SlaveCert("gpu1", 1)
	const instance = `{"instanceId": "outage-test-1"}`
	calls := []outageCall{
		{name: "GET jobs", cert: alice, method: "GET", path: v31 + "/jobs", after: http.StatusOK},
		{name: "GET jobs/{id}", cert: alice, method: "GET", path: v31 + "/jobs/" + id, after: http.StatusOK},
		{name: "POST jobs", cert: alice, method: "POST", path: v31 + "/jobs", body: helloWorld, after: http.StatusCreated},
		{name: "PUT state", cert: alice, method: "PUT", path: v31 + "/jobs/" + id + "/state/status", body: "ONHOLD", after: http.StatusOK},
		{name: "GET clusters (anonymous)", method: "GET", path: v31 + "/clusters", after: http.StatusOK},
		{name: "slave register", cert: &slave, method: "POST", path: protocol.RegisterPath, body: instance, after: http.StatusOK},
		{name: "slave heartbeat", cert: &slave, method: "POST", path: protocol.HeartbeatPath, body: instance, after: http.StatusOK},
		{name: "slave next", cert: &slave, method: "POST", path: protocol.NextPath, body: `{}`, after: http.StatusOK},
		{name: "portal page", cert: alice, method: "GET", path: "/jobs", header: []string{"Accept", "text/html"}, page: true, after: http.StatusOK},
	}
	jobsBefore := w.jobCount(t)

	heal := w.m.DatabaseOutage()
	for _, c := range calls {
		status, hdr, data := c.do(t, w)
		if status != http.StatusServiceUnavailable || hdr.Get("Retry-After") != "5" {
			t.Errorf("%s during the outage: %d, Retry-After %q, want 503 with Retry-After 5: %s", c.name, status, hdr.Get("Retry-After"), clip(string(data)))
			continue
		}
		if c.page {
			if !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") || !strings.Contains(string(data), `data-testid="error-page"`) ||
				!strings.Contains(string(data), handlers.MsgUnavailable) {
				t.Errorf("%s during the outage: want the portal's error page saying %q, got %s", c.name, handlers.MsgUnavailable, clip(string(data)))
			}
			continue
		}
		var body errBody
		if err := json.Unmarshal(data, &body); err != nil || body.Error != handlers.MsgUnavailable {
			t.Errorf("%s during the outage: body %s, want {\"error\": %q}", c.name, data, handlers.MsgUnavailable)
		}
	}
	for path, want := range map[string]int{"/healthz": http.StatusOK, "/readyz": http.StatusServiceUnavailable} {
		if status, _, _ := w.m.Do(nil, "GET", path, nil); status != want {
			t.Errorf("GET %s during the outage: %d, want %d", path, status, want)
		}
	}

	heal()
	for _, c := range calls {
		if status, _, data := c.do(t, w); status != c.after {
			t.Errorf("%s after the outage: %d, want %d: %s", c.name, status, c.after, clip(string(data)))
		}
	}
	if status, _, _ := w.m.Do(nil, "GET", "/readyz", nil); status != http.StatusOK {
		t.Errorf("GET /readyz after the outage: %d, want 200", status)
	}
	if n := w.jobCount(t); n != jobsBefore+1 {
		t.Errorf("%d jobs after one submit during and one after the outage, want %d: the refused submit stored something", n, jobsBefore+1)
	}
}

// The portal's pages, once the caller is known, map an outage as the API does: the error page
// with 503 and Retry-After for a browser, the message in #flash for htmx, the API's JSON for
// `Accept: application/json`; a form post too. After the outage the page works again.
func TestPortalPagesDuringOutage(t *testing.T) {
	p := newPortal(t)
	alice := p.m.AddUser("alice", false, "", "vision")
	id := p.submit(alice, jobDoc("outage", "vision"))
	caller := p.caller(alice) // read before the outage: the session middleware is not under test here
	send := func(method, target string, form url.Values, header ...string) *pageResponse {
		t.Helper()
		var body io.Reader
		if form != nil {
			form.Set(handlers.CSRFFieldName, portalCSRF)
			body = strings.NewReader(form.Encode())
		}
		r := httptest.NewRequest(method, target, body)
		if form != nil {
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		ctx := handlers.WithCaller(handlers.WithCSRFToken(r.Context(), portalCSRF), caller)
		rec := httptest.NewRecorder()
		p.mux.ServeHTTP(rec, r.WithContext(ctx))
		return &pageResponse{t: t, rec: rec}
	}

	heal := p.m.DatabaseOutage()
	full := send("GET", "/jobs", nil).expect(http.StatusServiceUnavailable)
	if full.header().Get("Retry-After") != "5" || full.one("data-testid", "error-page") == nil ||
		!strings.Contains(textOf(full.one("data-testid", "error-message")), handlers.MsgUnavailable) {
		t.Errorf("full page: Retry-After %q, want the error page saying %q: %s", full.header().Get("Retry-After"), handlers.MsgUnavailable, clip(full.body()))
	}
	hx := send("GET", "/jobs", nil, "HX-Request", "true").expect(http.StatusServiceUnavailable)
	if hx.header().Get("HX-Retarget") != "#flash" || hx.header().Get("Retry-After") != "5" || hx.one("data-testid", "flash-error") == nil {
		t.Errorf("htmx: want the message in #flash with Retry-After: %v %s", hx.header(), clip(hx.body()))
	}
	js := send("GET", "/jobs", nil, "Accept", "application/json").expect(http.StatusServiceUnavailable)
	if !strings.Contains(js.body(), handlers.MsgUnavailable) || js.header().Get("Retry-After") != "5" {
		t.Errorf("JSON: %v %s", js.header(), js.body())
	}
	post := send("POST", "/jobs/"+id+"/cancel", url.Values{}).expect(http.StatusServiceUnavailable)
	if post.header().Get("Retry-After") != "5" {
		t.Errorf("form post: Retry-After %q", post.header().Get("Retry-After"))
	}

	heal()
	send("GET", "/jobs", nil).expect(http.StatusOK)
	if st := p.status(id); st != job.StatusQueued {
		t.Errorf("the job is %s after a cancel refused during the outage, want QUEUED", st)
	}
}
