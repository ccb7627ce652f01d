package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testmaster"
)

// Retries are tested against a real master (real Postgres, TLS, client certificates) behind a
// small HTTPS front that the test controls: it answers 502/503/504 when told, forwards the
// request and then drops the answer (a connection lost after the master acted), or forwards
// it untouched.

// frontAction is what the front does with one request.
type frontAction struct {
	status     int    // answer this status without forwarding; 0: forward
	retryAfter string // with this Retry-After
	drop       bool   // forward, then close the connection instead of answering
}

var pass = frontAction{}

// front is an HTTPS proxy before a test master. Clients trust it through the master's CA; it
// calls the master with the user's certificate (a TLS-terminating proxy cannot pass the
// client's on).
type front struct {
	t       *testing.T
	apiBase string
	mu      sync.Mutex
	seen    map[string]int // "METHOD /path" → requests so far
	rule    func(r *http.Request, n int) frontAction
}

// startFront serves the front on l (nil: a new loopback port).
func startFront(t *testing.T, m *testmaster.Master, u *testmaster.User, l net.Listener) *front {
	t.Helper()
	target, err := url.Parse(m.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: m.CA.Pool(), Certificates: []tls.Certificate{u.TLS}, MinVersion: tls.VersionTLS12,
		}},
		ErrorLog: log.New(io.Discard, "", 0),
	}
	f := &front{t: t, seen: map[string]int{}, rule: func(*http.Request, int) frontAction { return pass }}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		key := r.Method + " " + r.URL.Path
		f.seen[key]++
		act := f.rule(r, f.seen[key])
		f.mu.Unlock()
		switch {
		case act.status != 0:
			if act.retryAfter != "" {
				w.Header().Set("Retry-After", act.retryAfter)
			}
			http.Error(w, `{"error": "the front says no"}`, act.status)
		case act.drop:
			proxy.ServeHTTP(httptest.NewRecorder(), r) // the master acts on it...
			panic(http.ErrAbortHandler)                // ...and its answer is lost
		default:
			proxy.ServeHTTP(w, r)
		}
	}))
	if l != nil {
		_ = srv.Listener.Close()
		srv.Listener = l
	}
	cert, err := m.CA.ServerCert([]string{"127.0.0.1", "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	f.apiBase = srv.URL + "/api/gpulab/v3.1"
	return f
}

// set replaces the front's rule and forgets what it saw.
func (f *front) set(rule func(r *http.Request, n int) frontAction) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rule, f.seen = rule, map[string]int{}
}

// count is how many requests the front saw for method and a path ending in suffix.
func (f *front) count(method, suffix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for k, v := range f.seen {
		if strings.HasPrefix(k, method+" ") && strings.HasSuffix(k, suffix) {
			n += v
		}
	}
	return n
}

// retryWorld is a real master with alice in project demo, and her client configuration.
type retryWorld struct {
	m     *testmaster.Master
	alice *testmaster.User
}

func newRetryWorld(t *testing.T) *retryWorld {
	t.Helper()
	m := testmaster.Start(t, testmaster.Options{})
	return &retryWorld{m: m, alice: m.AddUser("alice", false, "", "demo")}
}

func (w *retryWorld) client(t *testing.T, baseURL string, retryMax time.Duration, debug io.Writer) *Client {
	t.Helper()
	return newTestClient(t, Config{
		BaseURL: baseURL, CertPEM: w.alice.CertPEM, ServerCA: w.m.CA.CertPEM,
		Timeout: 10 * time.Second, RetryMaxTime: retryMax, Debug: debug,
	})
}

// jobs is how many jobs the master holds.
func (w *retryWorld) jobs(t *testing.T) int {
	t.Helper()
	counts, err := w.m.Store.CountJobs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

const demoJob = `{"name": "retry", "owner": {"projectUrn": "urn:publicid:IDN+test.gpulab+project+demo"},
 "request": {"resources": {"cpus": 1, "gpus": 0, "cpuMemoryGb": 1}, "docker": {"image": "debian:stable", "command": "true"}}}`

func TestRetriesThroughAFront(t *testing.T) {
	w := newRetryWorld(t)
	f := startFront(t, w.m, w.alice, nil)
	ctx := context.Background()
	c := w.client(t, f.apiBase, 10*time.Second, nil)
	id, err := c.SubmitJob(ctx, []byte(demoJob), false)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	failFirst := func(method string, times int, act frontAction) func(*http.Request, int) frontAction {
		return func(r *http.Request, n int) frontAction {
			if r.Method == method && n <= times {
				return act
			}
			return pass
		}
	}

	t.Run("GET after 502, 503 and 504", func(t *testing.T) {
		statuses := []int{http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout}
		f.set(func(r *http.Request, n int) frontAction {
			if n <= len(statuses) {
				return frontAction{status: statuses[n-1]}
			}
			return pass
		})
		j, err := c.GetJob(ctx, id)
		if err != nil || j.UUID != id {
			t.Fatalf("GetJob: %v", err)
		}
		if n := f.count("GET", "/jobs/"+id); n != 4 {
			t.Errorf("the front saw %d GETs, want 4 (3 failures, then through)", n)
		}
	})
	t.Run("Retry-After is honoured", func(t *testing.T) {
		f.set(failFirst("GET", 1, frontAction{status: http.StatusServiceUnavailable, retryAfter: "1"}))
		start := time.Now()
		if _, err := c.ListJobs(ctx, ListOptions{}); err != nil {
			t.Fatalf("ListJobs: %v", err)
		}
		if d := time.Since(start); d < time.Second {
			t.Errorf("retried after %s, before the Retry-After of 1 s", d)
		}
	})
	t.Run("PUT and DELETE after 503s", func(t *testing.T) {
		f.set(func(r *http.Request, n int) frontAction {
			if r.Method != http.MethodGet && n <= 2 {
				return frontAction{status: http.StatusServiceUnavailable}
			}
			return pass
		})
		if err := c.SetStatus(ctx, id, "ONHOLD"); err != nil {
			t.Errorf("SetStatus: %v", err)
		}
		if j, err := c.GetJob(ctx, id); err != nil || j.State.Status != "ONHOLD" {
			t.Errorf("after hold: %v %v", j, err)
		}
		if err := c.DeleteJob(ctx, id, DeleteOptions{Force: true}); err != nil {
			t.Errorf("DeleteJob: %v", err)
		}
		if p, d := f.count("PUT", "/state/status"), f.count("DELETE", "/jobs/"+id); p != 3 || d != 3 {
			t.Errorf("the front saw %d PUT and %d DELETE, want 3 of each", p, d)
		}
	})
	t.Run("a state change repeated after its answer was lost", func(t *testing.T) {
		id, err := c.SubmitJob(ctx, []byte(demoJob), false)
		if err != nil {
			t.Fatal(err)
		}
		f.set(failFirst("PUT", 1, frontAction{drop: true}))
		// The first PUT holds the job; the second meets a job already ONHOLD (409), which
		// is the first one's doing.
		if err := c.SetStatus(ctx, id, "ONHOLD"); err != nil {
			t.Errorf("SetStatus with its first answer lost: %v", err)
		}
		if n := f.count("PUT", "/state/status"); n != 2 {
			t.Errorf("the front saw %d PUTs, want 2", n)
		}
		f.set(func(*http.Request, int) frontAction { return pass })
		if err := c.SetStatus(ctx, id, "ONHOLD"); StatusCode(err) != http.StatusConflict {
			t.Errorf("holding a held job without any retry: err = %v, want the 409", err)
		}
	})
	t.Run("submit after 503s is stored once", func(t *testing.T) {
		f.set(failFirst("POST", 2, frontAction{status: http.StatusServiceUnavailable}))
		before := w.jobs(t)
		if _, err := c.SubmitJob(ctx, []byte(demoJob), false); err != nil {
			t.Fatalf("submit after two 503s: %v", err)
		}
		if n := f.count("POST", "/jobs"); n != 3 {
			t.Errorf("the front saw %d POSTs, want 3", n)
		}
		if n := w.jobs(t); n != before+1 {
			t.Errorf("%d jobs stored, want 1", n-before)
		}
	})
	t.Run("submit whose answer is lost is repeated with its key and stored once", func(t *testing.T) {
		f.set(failFirst("POST", 1, frontAction{drop: true}))
		before := w.jobs(t)
		id, err := c.SubmitJob(ctx, []byte(demoJob), false)
		if err != nil {
			t.Fatalf("submit with its first answer lost: %v", err)
		}
		if n := f.count("POST", "/jobs"); n != 2 {
			t.Errorf("the front saw %d POSTs, want 2 (the first, whose answer was lost, and its repeat)", n)
		}
		if n := w.jobs(t); n != before+1 {
			t.Errorf("the master stored %d jobs, want 1: the repeat made a second", n-before)
		}
		if _, err := c.GetJob(ctx, id); err != nil {
			t.Errorf("the uuid answered to the repeat: %v", err)
		}
	})
	t.Run("submit after a 502 is repeated and stored once", func(t *testing.T) {
		f.set(failFirst("POST", 1, frontAction{status: http.StatusBadGateway}))
		before := w.jobs(t)
		if _, err := c.SubmitJob(ctx, []byte(demoJob), false); err != nil {
			t.Errorf("submit after a 502: %v", err)
		}
		if n := f.count("POST", "/jobs"); n != 2 {
			t.Errorf("the front saw %d POSTs, want 2", n)
		}
		if n := w.jobs(t); n != before+1 {
			t.Errorf("the master stored %d jobs, want 1", n-before)
		}
	})
	t.Run("GET whose answer is lost is repeated", func(t *testing.T) {
		f.set(failFirst("GET", 1, frontAction{drop: true}))
		if _, err := c.ListJobs(ctx, ListOptions{}); err != nil {
			t.Errorf("ListJobs: %v", err)
		}
		if n := f.count("GET", "/jobs"); n != 2 {
			t.Errorf("the front saw %d GETs, want 2", n)
		}
	})
	t.Run("gives up after RetryMaxTime", func(t *testing.T) {
		f.set(func(*http.Request, int) frontAction {
			return frontAction{status: http.StatusServiceUnavailable, retryAfter: "3600"}
		})
		var debug strings.Builder
		const budget = 2 * time.Second
		quick := w.client(t, f.apiBase, budget, &debug)
		start := time.Now()
		_, err := quick.ListJobs(ctx, ListOptions{})
		if StatusCode(err) != http.StatusServiceUnavailable || !Temporary(err) {
			t.Errorf("err = %v, want the 503", err)
		}
		if d := time.Since(start); d < budget || d > budget+5*time.Second {
			t.Errorf("gave up after %s, want about %s (a Retry-After of an hour is capped)", d, budget)
		}
		if n := f.count("GET", "/jobs"); n < 2 {
			t.Errorf("the front saw %d GETs, want at least 2", n)
		}
		if !strings.Contains(debug.String(), "retrying in") || !strings.Contains(debug.String(), "giving up") {
			t.Errorf("the debug output does not show the retries:\n%s", debug.String())
		}
	})
	t.Run("no retries when turned off", func(t *testing.T) {
		f.set(func(*http.Request, int) frontAction { return frontAction{status: http.StatusServiceUnavailable} })
		off := w.client(t, f.apiBase, -1, nil)
		if _, err := off.ListJobs(ctx, ListOptions{}); StatusCode(err) != http.StatusServiceUnavailable {
			t.Errorf("err = %v, want the 503", err)
		}
		if n := f.count("GET", "/jobs"); n != 1 {
			t.Errorf("the front saw %d GETs, want 1", n)
		}
	})
}

// closedPort returns a loopback address where nothing listens: connections are refused.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// With two masters of which the first refuses connections, requests reach the second, and
// later calls go to the second at once.
func TestSecondMasterWhenTheFirstRefuses(t *testing.T) {
	w := newRetryWorld(t)
	ctx := context.Background()
	down := "https://" + closedPort(t) + "/api/gpulab/v3.1"
	var debug strings.Builder
	c := w.client(t, down+", "+w.m.APIBase, 10*time.Second, &debug)
	if got := c.BaseURLs(); len(got) != 2 || got[0] != down+"/" {
		t.Fatalf("BaseURLs = %v", got)
	}
	before := w.jobs(t)
	id, err := c.SubmitJob(ctx, []byte(demoJob), false) // certainly not sent to the first: safe to send to the second
	if err != nil {
		t.Fatalf("submit: %v\n%s", err, debug.String())
	}
	if n := w.jobs(t); n != before+1 {
		t.Errorf("%d jobs stored, want 1", n-before)
	}
	if c.BaseURL() != w.m.APIBase+"/" {
		t.Errorf("BaseURL after the failover = %s, want the second master", c.BaseURL())
	}
	if !strings.Contains(debug.String(), "trying "+w.m.APIBase) {
		t.Errorf("the debug output does not show the move to the second master:\n%s", debug.String())
	}
	debug.Reset()
	if _, err := c.GetJob(ctx, id); err != nil {
		t.Fatalf("GetJob: %v", err)
	}
	if strings.Contains(debug.String(), down) {
		t.Errorf("the next call tried the master that refused again:\n%s", debug.String())
	}
	// Moving on to another master is no retry: it happens with retries off too.
	noRetry := w.client(t, down+", "+w.m.APIBase, -1, nil)
	if _, err := noRetry.GetJob(ctx, id); err != nil {
		t.Errorf("GetJob with retries off: %v", err)
	}
}

// A master that refuses connections for a while (restarting) is waited for: GETs and a submit
// (which certainly did not reach it) succeed once it listens again, and the job is stored once.
func TestRetriesWhileTheMasterRefuses(t *testing.T) {
	w := newRetryWorld(t)
	addr := closedPort(t)
	ctx := context.Background()
	c := w.client(t, "https://"+addr+"/api/gpulab/v3.1", 20*time.Second, nil)
	ready := make(chan *front, 1)
	go func() {
		time.Sleep(500 * time.Millisecond)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("listen again on %s: %v", addr, err)
			close(ready)
			return
		}
		ready <- startFront(t, w.m, w.alice, l)
	}()
	before := w.jobs(t)
	errc := make(chan error, 2)
	go func() { _, err := c.SubmitJob(ctx, []byte(demoJob), false); errc <- err }()
	go func() { _, err := c.ListJobs(ctx, ListOptions{}); errc <- err }()
	for range 2 {
		if err := <-errc; err != nil {
			t.Errorf("call while the master was away: %v", err)
		}
	}
	f := <-ready
	if f == nil {
		return
	}
	if n := f.count("POST", "/jobs"); n != 1 {
		t.Errorf("the master saw %d POSTs, want 1", n)
	}
	if n := w.jobs(t); n != before+1 {
		t.Errorf("%d jobs stored, want 1", n-before)
	}
}

// The client rides out a database outage of the real master: the master answers 503 with
// Retry-After while Postgres is unreachable, and the calls made meanwhile succeed once it is
// back, the submit stored once.
func TestRidesOutADatabaseOutage(t *testing.T) {
	w := newRetryWorld(t)
	ctx := context.Background()
	var debug syncBuilder
	c := w.client(t, w.m.APIBase, 30*time.Second, &debug)
	id, err := c.SubmitJob(ctx, []byte(demoJob), false)
	if err != nil {
		t.Fatal(err)
	}
	heal := w.m.DatabaseOutage()
	time.AfterFunc(time.Second, heal)
	errc := make(chan error, 2)
	var newID string
	go func() { _, err := c.GetJob(ctx, id); errc <- err }()
	go func() { var err error; newID, err = c.SubmitJob(ctx, []byte(demoJob), false); errc <- err }()
	for range 2 {
		if err := <-errc; err != nil {
			t.Errorf("call during the outage: %v\n%s", err, debug.String())
		}
	}
	if !strings.Contains(debug.String(), "503") {
		t.Errorf("the calls never met the outage:\n%s", debug.String())
	}
	if n := w.jobs(t); n != 2 || newID == "" {
		t.Errorf("%d jobs stored (new one %q), want 2", n, newID)
	}
}

// syncBuilder is a strings.Builder for concurrent writers (the debug output of calls made in
// parallel).
type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	tests := map[string]time.Duration{
		"":                              0,
		"5":                             5 * time.Second,
		" 2 ":                           2 * time.Second,
		"-3":                            0,
		"soon":                          0,
		"Wed, 01 May 2024 12:00:10 GMT": 10 * time.Second,
		"Wed, 01 May 2024 11:00:00 GMT": 0,
	}
	for in, want := range tests {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestParseBaseURLs(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", DefaultBaseURL},
		{"https://a:8443", "https://a:8443/api/gpulab/v3.1/"},
		{"https://a:8443/api, https://b:8443/api/gpulab/v4.0,", "https://a:8443/api/gpulab/v3.1/ https://b:8443/api/gpulab/v3.1/"},
		{"https://a, https://a/api", "https://a/api/gpulab/v3.1/"},
	}
	for _, tt := range tests {
		us, err := ParseBaseURLs(tt.in)
		if err != nil {
			t.Errorf("ParseBaseURLs(%q): %v", tt.in, err)
			continue
		}
		var got []string
		for _, u := range us {
			got = append(got, u.String())
		}
		if strings.Join(got, " ") != tt.want {
			t.Errorf("ParseBaseURLs(%q) = %v, want %s", tt.in, got, tt.want)
		}
	}
	if _, err := ParseBaseURLs("https://a, ftp://b"); err == nil {
		t.Error("a bad URL in the list was accepted")
	}
}

// Temporary says which failures pass by themselves.
func TestTemporary(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{&APIError{Status: 503}, true},
		{fmt.Errorf("x: %w", &APIError{Status: 502}), true},
		{&APIError{Status: 504}, true},
		{&APIError{Status: 500}, false},
		{&APIError{Status: 404}, false},
		{fmt.Errorf("x: %w: refused", ErrUnreachable), true},
		{fmt.Errorf("x: %w: reset", ErrConnectionLost), true},
		{fmt.Errorf("x: %w: %w", ErrUnreachable, errNotTLS), false},
		{fmt.Errorf("x: %w", ErrServerNotTrusted), false},
		{context.Canceled, false},
	}
	for _, tt := range tests {
		if got := Temporary(tt.err); got != tt.want {
			t.Errorf("Temporary(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
