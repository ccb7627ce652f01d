package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
)

func TestNormalizeBaseURL(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"", DefaultBaseURL},
		{"https://gpulab.example.org/api/gpulab/v3.1", "https://gpulab.example.org/api/gpulab/v3.1/"},
		{"https://gpulab.example.org/api/gpulab/v3.1/", "https://gpulab.example.org/api/gpulab/v3.1/"},
		{"https://gpulab.example.org/api/gpulab/v4.0", "https://gpulab.example.org/api/gpulab/v3.1/"},
		{"https://gpulab.example.org/api/gpulab/v4.0/", "https://gpulab.example.org/api/gpulab/v3.1/"},
		{"https://gpulab.example.org/api/gpulab/v3.0", "https://gpulab.example.org/api/gpulab/v3.0/"},
		{"https://host:8443", "https://host:8443/api/gpulab/v3.1/"},
		{"https://host:8443/", "https://host:8443/api/gpulab/v3.1/"},
		{"https://host:8443/api", "https://host:8443/api/gpulab/v3.1/"},
		{"https://host:8443/api/", "https://host:8443/api/gpulab/v3.1/"},
		{"https://host/prefix", "https://host/prefix/api/gpulab/v3.1/"},
		{"host:8443", "https://host:8443/api/gpulab/v3.1/"},
		{"  https://host:8443?x=1  ", "https://host:8443/api/gpulab/v3.1/"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			u, err := NormalizeBaseURL(tt.in)
			if err != nil {
				t.Fatalf("NormalizeBaseURL(%q): %v", tt.in, err)
			}
			if got := u.String(); got != tt.want {
				t.Errorf("NormalizeBaseURL(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
	for _, bad := range []string{"ftp://host/", "https://", "https://ho st/"} {
		if _, err := NormalizeBaseURL(bad); err == nil {
			t.Errorf("NormalizeBaseURL(%q) succeeded, want an error", bad)
		}
	}
}

// seen is what the test server observed of one request.
type seen struct {
	method, path, rawQuery string
	query                  url.Values
	header                 http.Header
	body                   string
	clientURN              string
}

// recorder answers every request with the canned status and body and records what it saw.
type recorder struct {
	mu     sync.Mutex
	reqs   []seen
	status int
	body   string
	header http.Header
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	s := seen{
		method: req.Method, path: req.URL.Path, rawQuery: req.URL.RawQuery, query: req.URL.Query(),
		header: req.Header.Clone(), body: string(body),
	}
	if req.TLS != nil && len(req.TLS.PeerCertificates) > 0 && len(req.TLS.PeerCertificates[0].URIs) > 0 {
		s.clientURN = req.TLS.PeerCertificates[0].URIs[0].String()
	}
	r.mu.Lock()
	r.reqs = append(r.reqs, s)
	status, respBody, hdr := r.status, r.body, r.header
	r.mu.Unlock()
	for k, vs := range hdr {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, respBody)
}

func (r *recorder) last(t *testing.T) seen {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.reqs) == 0 {
		t.Fatal("the server saw no request")
	}
	return r.reqs[len(r.reqs)-1]
}

const sampleJob = `{
  "uuid": "0b4c3a8e-1111-2222-3333-444455556666",
  "name": "hello",
  "request": {
    "resources": {"cpus": 1, "gpus": 1, "cpuMemoryGb": 2, "clusterId": 1},
    "docker": {"image": "debian:stable", "command": "echo hi"},
    "scheduling": {},
    "extra": {}
  },
  "owner": {"userUrn": "urn:publicid:IDN+gpulab.example.org+user+alice", "projectUrn": "urn:publicid:IDN+gpulab.example.org+project+demo"},
  "state": {"status": "RUNNING", "eventTimes": {"QUEUED": "2024-05-01T10:00:00Z", "RUNNING": "2024-05-01T10:01:00Z"},
            "scheduling": {}, "unknownField": 3},
  "someFutureField": {"x": 1}
}`

func TestRequests(t *testing.T) {
	p := newTestPKI(t, "")
	const id = "0b4c3a8e-1111-2222-3333-444455556666"
	tests := []struct {
		name       string
		status     int
		respBody   string
		call       func(ctx context.Context, c *Client) (any, error)
		wantMethod string
		wantPath   string
		wantQuery  url.Values
		wantBody   string
		wantCType  string
		want       any
	}{
		{
			name: "version", respBody: `{"version": "1.2.3", "latest_client_version": "1.2.0"}`,
			call:       func(ctx context.Context, c *Client) (any, error) { return c.Version(ctx) },
			wantMethod: "GET", wantPath: "/api/gpulab/v3.1/version",
			want: &VersionInfo{Version: "1.2.3", LatestClientVersion: "1.2.0"},
		},
		{
			name: "submit", status: http.StatusCreated, respBody: id + "\n",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.SubmitJob(ctx, []byte(`{"name":"x"}`), false)
			},
			wantMethod: "POST", wantPath: "/api/gpulab/v3.1/jobs", wantBody: `{"name":"x"}`,
			wantCType: "application/json", want: id,
		},
		{
			name: "submit on hold, JSON answer", status: http.StatusCreated, respBody: `{"uuid": "` + id + `"}`,
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.SubmitJob(ctx, []byte(`{"name":"x"}`), true)
			},
			wantMethod: "POST", wantPath: "/api/gpulab/v3.1/jobs", wantQuery: url.Values{"hold": {"true"}},
			wantBody: `{"name":"x"}`, want: id,
		},
		{
			name: "list jobs", respBody: "[" + sampleJob + "]",
			call: func(ctx context.Context, c *Client) (any, error) {
				jobs, err := c.ListJobs(ctx, ListOptions{
					Pending: true, Running: true, UserURN: testUserURN, ClusterID: 3,
					MaxHours: 12, MaxCount: 10, Sort: "-created", OtherUserRunning: true,
				})
				if err != nil {
					return nil, err
				}
				return []string{jobs[0].UUID, string(jobs[0].State.Status)}, nil
			},
			wantMethod: "GET", wantPath: "/api/gpulab/v3.1/jobs",
			wantQuery: url.Values{
				"pending": {"true"}, "running": {"true"}, "user_urn": {testUserURN}, "cluster_id": {"3"},
				"max_hours": {"12"}, "max_count": {"10"}, "sort": {"-created"}, "other_user_running": {"true"},
			},
			want: []string{id, "RUNNING"},
		},
		{
			name: "list jobs, v4 items", respBody: `{"items": [` + sampleJob + `]}`,
			call: func(ctx context.Context, c *Client) (any, error) {
				jobs, err := c.ListJobs(ctx, ListOptions{})
				return len(jobs), err
			},
			wantMethod: "GET", wantPath: "/api/gpulab/v3.1/jobs", want: 1,
		},
		{
			name: "list jobs, empty", respBody: `[]`,
			call: func(ctx context.Context, c *Client) (any, error) {
				jobs, err := c.ListJobs(ctx, ListOptions{})
				return len(jobs), err
			},
			wantMethod: "GET", wantPath: "/api/gpulab/v3.1/jobs", want: 0,
		},
		{
			name: "get job", respBody: sampleJob,
			call: func(ctx context.Context, c *Client) (any, error) {
				j, err := c.GetJob(ctx, "0b4c3a")
				if err != nil {
					return nil, err
				}
				return []any{j.Name, j.Request.Resources.GPUs, j.Owner.ProjectURN}, nil
			},
			wantMethod: "GET", wantPath: "/api/gpulab/v3.1/jobs/0b4c3a",
			want: []any{"hello", 1, "urn:publicid:IDN+gpulab.example.org+project+demo"},
		},
		{
			name: "cancel", status: http.StatusNoContent,
			call: func(ctx context.Context, c *Client) (any, error) {
				return nil, c.SetStatus(ctx, id, job.StatusCancelled)
			},
			wantMethod: "PUT", wantPath: "/api/gpulab/v3.1/jobs/" + id + "/state/status",
			wantBody: "CANCELLED", wantCType: "text/plain",
		},
		{
			name: "delete", status: http.StatusNoContent,
			call: func(ctx context.Context, c *Client) (any, error) {
				return nil, c.DeleteJob(ctx, id, DeleteOptions{Finished: true, Real: true, Force: true})
			},
			wantMethod: "DELETE", wantPath: "/api/gpulab/v3.1/jobs/" + id,
			wantQuery: url.Values{"finished": {"true"}, "real": {"true"}, "force": {"true"}},
		},
		{
			name: "debug events",
			respBody: `[{"time": "2024-05-01T10:00:00Z", "type": "STATUS_CHANGE", "status": "QUEUED", "message": "submitted"},
			            {"time": "garbage", "type": "WARNING", "msg": "imec name"}]`,
			call:       func(ctx context.Context, c *Client) (any, error) { return c.Debug(ctx, id) },
			wantMethod: "GET", wantPath: "/api/gpulab/v3.1/jobs/" + id + "/debug",
			want: []Event{
				{Time: time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC), Type: "STATUS_CHANGE", Status: "QUEUED", Message: "submitted"},
				{Type: "WARNING", Message: "imec name"},
			},
		},
		{
			name: "convert", respBody: `{"name": "x", "request": {}}`,
			call: func(ctx context.Context, c *Client) (any, error) {
				out, err := c.Convert(ctx, []byte(`{"jobDefinition": {}}`))
				return string(out), err
			},
			wantMethod: "POST", wantPath: "/api/gpulab/v3.1/convert", wantBody: `{"jobDefinition": {}}`,
			wantCType: "application/json", want: `{"name": "x", "request": {}}`,
		},
		{
			name: "clusters",
			respBody: `[{"id": 1, "name": "main", "private": false, "extraField": true, "slaves": [
			  {"name": "gpu1", "host": "gpu1.example.org", "clusterId": 1, "version": 7, "fake": true,
			   "workers": {"free": 2, "total": 2}, "gpus": {"free": 1, "total": 2}, "cpus": {"free": 16, "total": 16},
			   "memoryGb": {"free": 31.18, "total": 31.18}, "gpuModels": ["V100"], "cudaVersion": 12.2}]}]`,
			call:       func(ctx context.Context, c *Client) (any, error) { return c.Clusters(ctx) },
			wantMethod: "GET", wantPath: "/api/gpulab/v3.1/clusters",
			want: []Cluster{{ID: 1, Name: "main", Slaves: []Slave{{
				Name: "gpu1", Host: "gpu1.example.org", ClusterID: 1, Version: "7", Fake: true,
				Workers: Amount{2, 2}, GPUs: Amount{1, 2}, CPUs: Amount{16, 16}, MemoryGb: Amount{31.18, 31.18},
				GPUModels: []string{"V100"}, CudaVersion: "12.2",
			}}}},
		},
		{
			name: "slaves, null", respBody: `null`,
			call:       func(ctx context.Context, c *Client) (any, error) { return c.Slaves(ctx) },
			wantMethod: "GET", wantPath: "/api/gpulab/v3.1/slaves", want: []Slave{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{status: tt.status, body: tt.respBody}
			srv := p.startTLS(t, rec)
			c := newTestClient(t, p.config(srv))
			got, err := tt.call(context.Background(), c)
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			s := rec.last(t)
			if s.method != tt.wantMethod || s.path != tt.wantPath {
				t.Errorf("request = %s %s, want %s %s", s.method, s.path, tt.wantMethod, tt.wantPath)
			}
			wantQuery := tt.wantQuery
			if wantQuery == nil {
				wantQuery = url.Values{}
			}
			if !reflect.DeepEqual(s.query, wantQuery) {
				t.Errorf("query = %v, want %v", s.query, wantQuery)
			}
			if s.body != tt.wantBody {
				t.Errorf("body = %q, want %q", s.body, tt.wantBody)
			}
			if tt.wantCType != "" && s.header.Get("Content-Type") != tt.wantCType {
				t.Errorf("Content-Type = %q, want %q", s.header.Get("Content-Type"), tt.wantCType)
			}
			if s.clientURN != testUserURN {
				t.Errorf("client certificate URN seen by the server = %q, want %q", s.clientURN, testUserURN)
			}
			if tt.want != nil && !reflect.DeepEqual(derefIfPtr(got), derefIfPtr(tt.want)) {
				t.Errorf("result = %#v, want %#v", got, tt.want)
			}
		})
	}
}

func derefIfPtr(v any) any {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer && !rv.IsNil() {
		return rv.Elem().Interface()
	}
	return v
}

func TestAPIErrors(t *testing.T) {
	p := newTestPKI(t, "")
	tests := []struct {
		name        string
		status      int
		body        string
		wantMessage string
		wantDetails []Detail
		wantText    string
	}{
		{
			name: "validation", status: 400,
			body:        `{"error": "invalid job request", "details": [{"path": "request.resourcs", "message": "Invalid key \"request.resourcs\""}, {"path": "name", "message": "required"}]}`,
			wantMessage: "invalid job request",
			wantDetails: []Detail{{Path: "request.resourcs", Message: `Invalid key "request.resourcs"`}, {Path: "name", Message: "required"}},
			wantText:    "invalid job request\n  request.resourcs: Invalid key \"request.resourcs\"\n  name: required",
		},
		{
			name: "conflict without details", status: 409, body: `{"error": "job is FINISHED: an ended job cannot become CANCELLED"}`,
			wantMessage: "job is FINISHED: an ended job cannot become CANCELLED",
			wantText:    "job is FINISHED: an ended job cannot become CANCELLED",
		},
		{
			name: "details as strings", status: 400, body: `{"error": "bad", "details": ["one", "two"]}`,
			wantMessage: "bad", wantDetails: []Detail{{Message: "one"}, {Message: "two"}},
			wantText: "bad\n  one\n  two",
		},
		{
			name: "detail repeating the message", status: 400,
			body:        `{"error": "owner.projectUrn: no project", "details": [{"path": "owner.projectUrn", "message": "no project"}]}`,
			wantMessage: "owner.projectUrn: no project",
			wantDetails: []Detail{{Path: "owner.projectUrn", Message: "no project"}},
			wantText:    "owner.projectUrn: no project",
		},
		{
			name: "plain text", status: 404, body: "no such job\n",
			wantMessage: "no such job", wantText: "no such job",
		},
		{
			name: "empty body", status: 403, body: "",
			wantMessage: "", wantText: "403 Forbidden",
		},
		{
			name: "other JSON shape", status: 401, body: `{"message": "login required"}`,
			wantMessage: "login required", wantText: "login required",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := p.startTLS(t, &recorder{status: tt.status, body: tt.body})
			c := newTestClient(t, p.config(srv))
			_, err := c.GetJob(context.Background(), "abcdef")
			var ae *APIError
			if !errors.As(err, &ae) {
				t.Fatalf("error = %v (%T), want an *APIError", err, err)
			}
			if ae.Status != tt.status || ae.Message != tt.wantMessage || !reflect.DeepEqual(ae.Details, tt.wantDetails) {
				t.Errorf("APIError = %+v, want status %d message %q details %+v", ae, tt.status, tt.wantMessage, tt.wantDetails)
			}
			if ae.Error() != tt.wantText {
				t.Errorf("Error() = %q, want %q", ae.Error(), tt.wantText)
			}
			if StatusCode(err) != tt.status {
				t.Errorf("StatusCode = %d, want %d", StatusCode(err), tt.status)
			}
			if !strings.Contains(err.Error(), "get job abcdef") {
				t.Errorf("error %q does not say which call failed", err)
			}
		})
	}
}

func TestLog(t *testing.T) {
	p := newTestPKI(t, "")
	const id = "abcdef123"
	tests := []struct {
		name       string
		offset     int64
		status     int
		body       string
		header     http.Header
		wantRange  string
		wantData   string
		wantOffset int64
	}{
		{name: "whole log", status: 200, body: "hello\n", wantData: "hello\n", wantOffset: 6},
		{name: "no log yet", status: 204, wantOffset: 0},
		{
			name: "partial", offset: 6, status: 206, body: "world\n",
			header:    http.Header{"Content-Range": {"bytes 6-11/12"}},
			wantRange: "bytes=6-", wantData: "world\n", wantOffset: 12,
		},
		{
			name: "partial without Content-Range", offset: 6, status: 206, body: "abc",
			wantRange: "bytes=6-", wantData: "abc", wantOffset: 9,
		},
		{
			name: "server ignores the range", offset: 6, status: 200, body: "hello\nworld\n",
			wantRange: "bytes=6-", wantData: "world\n", wantOffset: 12,
		},
		{name: "nothing new (416)", offset: 12, status: 416, wantRange: "bytes=12-", wantOffset: 12},
		{name: "nothing new (204)", offset: 12, status: 204, wantRange: "bytes=12-", wantOffset: 12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{status: tt.status, body: tt.body, header: tt.header}
			srv := p.startTLS(t, rec)
			c := newTestClient(t, p.config(srv))
			data, off, err := c.Log(context.Background(), id, tt.offset)
			if err != nil {
				t.Fatalf("Log: %v", err)
			}
			if string(data) != tt.wantData || off != tt.wantOffset {
				t.Errorf("Log = %q, %d; want %q, %d", data, off, tt.wantData, tt.wantOffset)
			}
			s := rec.last(t)
			if s.path != "/api/gpulab/v3.1/jobs/"+id+"/log" {
				t.Errorf("path = %q", s.path)
			}
			if got := s.header.Get("Range"); got != tt.wantRange {
				t.Errorf("Range = %q, want %q", got, tt.wantRange)
			}
		})
	}
}

// Idempotent requests are retried on 502, 503 and 504; a submit only on 503 (the master
// stored nothing), never on a proxy's 502 or 504 (it may have reached a master).
func TestRetriesByMethodAndStatus(t *testing.T) {
	p := newTestPKI(t, "")
	var mu sync.Mutex
	calls := map[string]int{}
	var failWith int
	srv := p.startTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls[r.Method]++
		n, status := calls[r.Method], failWith
		mu.Unlock()
		if n < 3 {
			w.WriteHeader(status)
			return
		}
		if r.Method == http.MethodPost {
			_, _ = io.WriteString(w, "0b4c3a8e-1111-2222-3333-444455556666")
			return
		}
		_, _ = io.WriteString(w, `{"version": "1"}`)
	}))
	for _, status := range []int{http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout} {
		mu.Lock()
		calls, failWith = map[string]int{}, status
		mu.Unlock()
		cfg := p.config(srv)
		cfg.RetryMaxTime = 30 * time.Second // waits are 1 ms here; a loaded machine is slow to connect
		c := newTestClient(t, cfg)
		if _, err := c.Version(context.Background()); err != nil {
			t.Errorf("Version after two %ds: %v", status, err)
		}
		// A submit carries an Idempotency-Key, so it is retried like a GET.
		if _, err := c.SubmitJob(context.Background(), []byte(`{}`), false); err != nil {
			t.Errorf("SubmitJob after two %ds: %v", status, err)
		}
		mu.Lock()
		if calls["GET"] != 3 || calls["POST"] != 3 {
			t.Errorf("%d: calls = %v, want 3 GET and 3 POST", status, calls)
		}
		mu.Unlock()
	}
}

func TestAnonymousClient(t *testing.T) {
	p := newTestPKI(t, "")
	rec := &recorder{body: `[]`}
	srv := p.startTLS(t, rec)
	cfg := p.config(srv)
	cfg.CertPEM = nil
	c := newTestClient(t, cfg)
	if _, ok := c.Identity(); ok {
		t.Error("anonymous client has an identity")
	}
	if _, err := c.Clusters(context.Background()); err != nil {
		t.Fatalf("Clusters: %v", err)
	}
	if urn := rec.last(t).clientURN; urn != "" {
		t.Errorf("anonymous client presented a certificate for %q", urn)
	}
}

func TestIdentity(t *testing.T) {
	p := newTestPKI(t, "")
	c := newTestClient(t, Config{CertPEM: p.userPEM})
	id, ok := c.Identity()
	if !ok || id.UserURN != testUserURN || id.Email != testEmail || id.Authority() != "gpulab.example.org" {
		t.Errorf("Identity() = %+v, %v", id, ok)
	}
}

func TestCertificatePassword(t *testing.T) {
	p := newTestPKI(t, "s3cret")
	if _, err := New(Config{CertPEM: p.userPEM, CertName: "alice.pem"}); !errors.Is(err, ErrPasswordRequired) {
		t.Errorf("no password: error = %v, want ErrPasswordRequired", err)
	}
	_, err := New(Config{CertPEM: p.userPEM, CertName: "alice.pem", Password: "wrong"})
	if !errors.Is(err, ErrWrongPassword) || !strings.Contains(err.Error(), "wrong password for certificate alice.pem") {
		t.Errorf("wrong password: error = %v", err)
	}
	var debug bytes.Buffer
	srv := p.startTLS(t, &recorder{body: `{"version": "1"}`})
	cfg := p.config(srv)
	cfg.Password = "s3cret"
	cfg.Debug = &debug
	c := newTestClient(t, cfg)
	if _, err := c.Version(context.Background()); err != nil {
		t.Fatalf("Version with the right password: %v", err)
	}
	if !strings.Contains(debug.String(), "--> GET ") || !strings.Contains(debug.String(), "<-- 200 OK") {
		t.Errorf("debug output lacks request/response lines:\n%s", debug.String())
	}
	if strings.Contains(debug.String(), "s3cret") || strings.Contains(debug.String(), "PRIVATE KEY") {
		t.Errorf("debug output leaks secrets:\n%s", debug.String())
	}
}

func TestBadPEM(t *testing.T) {
	tests := map[string][]byte{
		"not PEM":  []byte("hello"),
		"only key": []byte("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"),
	}
	for name, data := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := New(Config{CertPEM: data, CertName: "x.pem"})
			if err == nil || !strings.Contains(err.Error(), "certificate x.pem") {
				t.Errorf("error = %v, want one naming the file", err)
			}
		})
	}
	if _, err := New(Config{ServerCA: []byte("junk"), ServerCAName: "ca.pem"}); err == nil || !strings.Contains(err.Error(), "ca.pem") {
		t.Errorf("bad server CA: error = %v", err)
	}
}

func TestExpiredCertificate(t *testing.T) {
	p := newTestPKI(t, "")
	expired := issuePEM(t, p.ca, "", -time.Minute) // NotAfter = now - 1 minute
	_, err := New(Config{CertPEM: expired, CertName: "old.pem"})
	if err == nil || !strings.Contains(err.Error(), "old.pem expired") {
		t.Errorf("error = %v, want an expiry error", err)
	}
}

func TestTLSFailures(t *testing.T) {
	p := newTestPKI(t, "")
	srv := p.startTLS(t, &recorder{body: `{"version": "1"}`})

	t.Run("server CA not given", func(t *testing.T) {
		cfg := p.config(srv)
		cfg.ServerCA = nil
		c := newTestClient(t, cfg)
		_, err := c.Version(context.Background())
		if !errors.Is(err, ErrServerNotTrusted) {
			t.Errorf("error = %v, want ErrServerNotTrusted", err)
		}
	})
	t.Run("certificate from another CA", func(t *testing.T) {
		other := newTestPKI(t, "")
		cfg := p.config(srv)
		cfg.CertPEM = other.userPEM
		c := newTestClient(t, cfg)
		_, err := c.Version(context.Background())
		if !errors.Is(err, ErrCertificateRejected) {
			t.Errorf("error = %v, want ErrCertificateRejected", err)
		}
	})
	t.Run("nobody listening", func(t *testing.T) {
		cfg := p.config(srv)
		cfg.BaseURL = "https://127.0.0.1:1"
		c := newTestClient(t, cfg)
		_, err := c.Version(context.Background())
		if !errors.Is(err, ErrUnreachable) {
			t.Errorf("error = %v, want ErrUnreachable", err)
		}
	})
}

func TestListOptionsQueryOmitsZeroValues(t *testing.T) {
	if q := (ListOptions{}).Query(); len(q) != 0 {
		t.Errorf("zero ListOptions give query %v", q)
	}
}

func TestSubmitAnswerParsing(t *testing.T) {
	tests := []struct {
		body, want string
		wantErr    bool
	}{
		{body: "abc-123\n", want: "abc-123"},
		{body: `"abc-123"`, want: "abc-123"},
		{body: `{"uuid": "abc-123", "name": "x"}`, want: "abc-123"},
		{body: ``, wantErr: true},
		{body: `{"name": "x"}`, wantErr: true},
		{body: "<html>proxy error</html> oops", wantErr: true},
	}
	for _, tt := range tests {
		got, err := uuidFromSubmitAnswer([]byte(tt.body))
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("uuidFromSubmitAnswer(%q) = %q, %v", tt.body, got, err)
		}
	}
}

func TestEventJSONRoundTrip(t *testing.T) {
	in := Event{Time: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC), Type: "STATUS_CHANGE", Status: "RUNNING"}
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out Event
	if err := json.Unmarshal(data, &out); err != nil || !reflect.DeepEqual(in, out) {
		t.Errorf("round trip = %+v, %v; want %+v", out, err, in)
	}
}
