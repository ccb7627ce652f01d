package main

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/pki"
)

const (
	aliceURN   = "urn:publicid:IDN+gpulab.example.org+user+alice"
	aliceEmail = "alice@example.org"
	bobURN     = "urn:publicid:IDN+gpulab.example.org+user+bob"
	demoURN    = "urn:publicid:IDN+gpulab.example.org+project+demo"
)

// fakeMaster mimics the master's API closely enough to drive every command: jobs kept in
// memory, validation by the real job package, state changes checked against the real
// transition table, logs with Range support. It records each request so tests can check what
// the CLI sent.
type fakeMaster struct {
	t   *testing.T
	srv *httptest.Server
	ca  *pki.CA

	mu       sync.Mutex
	jobs     []*job.Job // in submission order
	logs     map[string]string
	events   map[string]string // raw JSON arrays
	requests []recordedRequest
	submits  [][]byte
	clusters string // raw JSON answer of GET clusters
	slaves   string // raw JSON answer of GET slaves
	// script, when set for a job, gives the statuses its next GETs return, one per GET, so
	// that wait and log -f can be tested; the last one sticks.
	script map[string][]job.Status
	// logScript gives the log text as it grows: one entry per GET of the job.
	logScript map[string][]string
	nextID    int
	// fault, when set, sees each request first (after it is recorded): a status to answer
	// instead of serving it (503: the master's database is down), or drop to serve it and
	// then lose the answer (the connection breaks).
	fault func(r *http.Request) (status int, drop bool)
	// keys maps the Idempotency-Key of each submission to its job.
	keys map[string]string
}

type recordedRequest struct {
	Method, Path string
	Query        map[string][]string
	Body         string
	UserURN      string
	Range        string
}

func newFakeMaster(t *testing.T, ca *pki.CA) *fakeMaster {
	t.Helper()
	m := &fakeMaster{
		t: t, ca: ca,
		logs: map[string]string{}, events: map[string]string{},
		script: map[string][]job.Status{}, logScript: map[string][]string{},
		clusters: `[]`, slaves: `[]`,
	}
	mux := http.NewServeMux()
	const base = "/api/gpulab/v3.1/"
	mux.HandleFunc("GET "+base+"version", m.version)
	mux.HandleFunc("POST "+base+"jobs", m.submit)
	mux.HandleFunc("GET "+base+"jobs", m.list)
	mux.HandleFunc("GET "+base+"jobs/{id}", m.get)
	mux.HandleFunc("PUT "+base+"jobs/{id}/state/status", m.setStatus)
	mux.HandleFunc("DELETE "+base+"jobs/{id}", m.delete)
	mux.HandleFunc("GET "+base+"jobs/{id}/log", m.log)
	mux.HandleFunc("GET "+base+"jobs/{id}/debug", m.debug)
	mux.HandleFunc("POST "+base+"convert", m.convert)
	mux.HandleFunc("GET "+base+"clusters", func(w http.ResponseWriter, r *http.Request) { m.raw(w, m.locked(&m.clusters)) })
	mux.HandleFunc("GET "+base+"slaves", func(w http.ResponseWriter, r *http.Request) { m.raw(w, m.locked(&m.slaves)) })
	mux.HandleFunc("GET "+base+"ssh/known_hosts", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, fakeKnownHosts) })

	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		m.mu.Lock()
		m.requests = append(m.requests, recordedRequest{
			Method: r.Method, Path: strings.TrimPrefix(r.URL.Path, base), Query: r.URL.Query(),
			Body: string(body), UserURN: userOf(r), Range: r.Header.Get("Range"),
		})
		fault := m.fault
		m.mu.Unlock()
		if fault != nil {
			switch status, drop := fault(r); {
			case status != 0:
				w.Header().Set("Retry-After", "0")
				m.apiError(w, status, "database unavailable, retry later")
				return
			case drop:
				mux.ServeHTTP(httptest.NewRecorder(), r)
				panic(http.ErrAbortHandler)
			}
		}
		mux.ServeHTTP(w, r)
	}))
	serverCert, err := ca.ServerCert([]string{"127.0.0.1"})
	if err != nil {
		t.Fatalf("server certificate: %v", err)
	}
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{serverCert},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    ca.Pool(),
	}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	m.srv = srv
	return m
}

func userOf(r *http.Request) string {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 || len(r.TLS.PeerCertificates[0].URIs) == 0 {
		return ""
	}
	return r.TLS.PeerCertificates[0].URIs[0].String()
}

// locked reads a string field under the lock.
func (m *fakeMaster) locked(p *string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return *p
}

// set changes the fake's data under its lock; the handlers run on other goroutines.
func (m *fakeMaster) set(fn func(m *fakeMaster)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	fn(m)
}

// apiURL is the value for --custom-master-url.
func (m *fakeMaster) apiURL() string { return m.srv.URL + "/api/gpulab/v3.1" }

func (m *fakeMaster) apiError(w http.ResponseWriter, status int, msg string, details ...job.Problem) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if details == nil {
		details = []job.Problem{}
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"error": msg, "details": details})
}

func (m *fakeMaster) writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (m *fakeMaster) raw(w http.ResponseWriter, s string) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, s)
}

func (m *fakeMaster) version(w http.ResponseWriter, r *http.Request) {
	m.writeJSON(w, map[string]string{"version": "9.9.9", "latest_client_version": "9.9.0"})
}

func (m *fakeMaster) requireUser(w http.ResponseWriter, r *http.Request) (string, bool) {
	u := userOf(r)
	if u == "" {
		m.apiError(w, http.StatusUnauthorized, "authentication required: present your client certificate")
		return "", false
	}
	return u, true
}

func (m *fakeMaster) submit(w http.ResponseWriter, r *http.Request) {
	user, ok := m.requireUser(w, r)
	if !ok {
		return
	}
	body, _ := io.ReadAll(r.Body)
	j, err := job.Parse(body, job.DefaultOptions())
	if err != nil {
		var ve *job.ValidationError
		var se *job.SyntaxError
		switch {
		case errors.As(err, &ve):
			m.apiError(w, http.StatusBadRequest, "invalid job request", ve.Problems...)
		case errors.As(err, &se):
			m.apiError(w, http.StatusBadRequest, se.Error())
		default:
			m.apiError(w, http.StatusBadRequest, err.Error())
		}
		return
	}
	if j.Owner.ProjectURN == "" {
		m.apiError(w, http.StatusBadRequest, "invalid job request", job.Problem{Path: "owner.projectUrn", Message: "is required"})
		return
	}
	if j.Owner.ProjectURN != demoURN {
		m.apiError(w, http.StatusForbidden, "you are not a member of project "+j.Owner.ProjectURN)
		return
	}
	m.mu.Lock()
	// As the real master: a repeat of a submission (its Idempotency-Key) gets the first's job.
	key := r.Header.Get("Idempotency-Key")
	if id, ok := m.keys[key]; ok && key != "" {
		m.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, id)
		return
	}
	j.UUID = m.nextUUIDLocked()
	m.nextID++
	if m.keys == nil {
		m.keys = map[string]string{}
	}
	m.keys[key] = j.UUID
	j.Owner.UserURN = user
	j.State.Status = job.StatusQueued
	if r.URL.Query().Get("hold") == "true" {
		j.State.Status = job.StatusOnHold
	}
	j.State.EventTimes = map[job.Status]time.Time{j.State.Status: time.Now().UTC()}
	m.jobs = append(m.jobs, j)
	m.submits = append(m.submits, body)
	m.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, j.UUID)
}

// nextUUID is the UUID the next submitted job will get, so tests can script it beforehand.
func (m *fakeMaster) nextUUID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.nextUUIDLocked()
}

func (m *fakeMaster) nextUUIDLocked() string {
	n := m.nextID + 1
	return fmt.Sprintf("%08x-0000-4000-8000-%012d", n, n)
}

// add stores a job as if it had been submitted earlier.
func (m *fakeMaster) add(j *job.Job) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.jobs = append(m.jobs, j)
}

// find resolves an ID or unique prefix (at least 6 characters), as the master does.
func (m *fakeMaster) find(w http.ResponseWriter, id string) *job.Job {
	var found []*job.Job
	for _, j := range m.jobs {
		if j.UUID == id || (len(id) >= 6 && strings.HasPrefix(j.UUID, id)) {
			found = append(found, j)
		}
	}
	switch len(found) {
	case 0:
		m.apiError(w, http.StatusNotFound, "no job "+id)
		return nil
	case 1:
		return found[0]
	}
	m.apiError(w, http.StatusConflict, "job id prefix "+id+" is ambiguous")
	return nil
}

func (m *fakeMaster) list(w http.ResponseWriter, r *http.Request) {
	if _, ok := m.requireUser(w, r); !ok {
		return
	}
	q := r.URL.Query()
	groups := map[string][]job.Status{
		"pending": job.PendingStatuses, "running": job.RunningStatuses,
		"finished": job.FinishedStatuses, "deleted": job.DeletedStatuses,
	}
	allowed := map[job.Status]bool{}
	for name, sts := range groups {
		if q.Get(name) == "true" {
			for _, s := range sts {
				allowed[s] = true
			}
		}
	}
	page, _ := strconv.Atoi(q.Get("page"))
	size, _ := strconv.Atoi(q.Get("page_size"))
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []*job.Job{}
	for i := len(m.jobs) - 1; i >= 0; i-- { // newest first
		j := m.jobs[i]
		if len(allowed) > 0 && !allowed[j.State.Status] {
			continue
		}
		othersRunning := q.Get("other_user_running") == "true" && j.State.Status == job.StatusRunning
		if u := q.Get("user_urn"); u != "" && j.Owner.UserURN != u && !othersRunning {
			continue
		}
		out = append(out, j)
	}
	if size > 0 {
		if page < 1 {
			page = 1
		}
		start := min((page-1)*size, len(out))
		out = out[start:min(start+size, len(out))]
	}
	if n, _ := strconv.Atoi(q.Get("max_count")); n > 0 && len(out) > n {
		out = out[:n]
	}
	m.writeJSON(w, out)
}

func (m *fakeMaster) get(w http.ResponseWriter, r *http.Request) {
	if _, ok := m.requireUser(w, r); !ok {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	j := m.find(w, r.PathValue("id"))
	if j == nil {
		return
	}
	if steps := m.script[j.UUID]; len(steps) > 0 {
		m.moveTo(j, steps[0])
		if len(steps) > 1 {
			m.script[j.UUID] = steps[1:]
		}
	}
	if steps := m.logScript[j.UUID]; len(steps) > 0 {
		m.logs[j.UUID] = steps[0]
		if len(steps) > 1 {
			m.logScript[j.UUID] = steps[1:]
		}
	}
	m.writeJSON(w, j)
}

func (m *fakeMaster) moveTo(j *job.Job, st job.Status) {
	if j.State.Status == st {
		return
	}
	j.State.Status = st
	if j.State.EventTimes == nil {
		j.State.EventTimes = map[job.Status]time.Time{}
	}
	j.State.EventTimes[st] = time.Now().UTC()
}

func (m *fakeMaster) setStatus(w http.ResponseWriter, r *http.Request) {
	user, ok := m.requireUser(w, r)
	if !ok {
		return
	}
	body, _ := io.ReadAll(r.Body)
	to, err := job.ParseStatus(string(body))
	if err != nil {
		m.apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	j := m.find(w, r.PathValue("id"))
	if j == nil {
		return
	}
	if j.Owner.UserURN != user {
		m.apiError(w, http.StatusForbidden, "not your job")
		return
	}
	if ok, why := job.CanTransition(j.State.Status, to, job.ActorOwner); !ok {
		m.apiError(w, http.StatusConflict, why)
		return
	}
	m.moveTo(j, to)
	w.WriteHeader(http.StatusNoContent)
}

func (m *fakeMaster) delete(w http.ResponseWriter, r *http.Request) {
	user, ok := m.requireUser(w, r)
	if !ok {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	j := m.find(w, r.PathValue("id"))
	if j == nil {
		return
	}
	if j.Owner.UserURN != user {
		m.apiError(w, http.StatusForbidden, "not your job")
		return
	}
	if !j.State.Status.Ended() {
		m.apiError(w, http.StatusConflict, fmt.Sprintf("job is %s: cancel it first", j.State.Status))
		return
	}
	m.moveTo(j, job.StatusDeleted)
	w.WriteHeader(http.StatusNoContent)
}

func (m *fakeMaster) log(w http.ResponseWriter, r *http.Request) {
	if _, ok := m.requireUser(w, r); !ok {
		return
	}
	m.mu.Lock()
	j := m.find(w, r.PathValue("id"))
	var text string
	if j != nil {
		text = m.logs[j.UUID]
	}
	m.mu.Unlock()
	if j == nil {
		return
	}
	if text == "" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	if rng := r.Header.Get("Range"); rng != "" {
		start, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(rng, "bytes="), "-"))
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if start >= len(text) {
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, len(text)-1, len(text)))
		w.WriteHeader(http.StatusPartialContent)
		_, _ = io.WriteString(w, text[start:])
		return
	}
	_, _ = io.WriteString(w, text)
}

func (m *fakeMaster) debug(w http.ResponseWriter, r *http.Request) {
	if _, ok := m.requireUser(w, r); !ok {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	j := m.find(w, r.PathValue("id"))
	if j == nil {
		return
	}
	m.raw(w, firstNonEmpty(m.events[j.UUID], "[]"))
}

func (m *fakeMaster) convert(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	j, err := job.Parse(body, job.DefaultOptions())
	if err != nil {
		m.apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	sub := job.Submission(j)
	sub.Description = "converted by the master"
	m.writeJSON(w, sub)
}

// reqs returns the recorded requests with the given method and path.
func (m *fakeMaster) reqs(method, path string) []recordedRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []recordedRequest
	for _, r := range m.requests {
		if r.Method == method && r.Path == path {
			out = append(out, r)
		}
	}
	return out
}

func (m *fakeMaster) lastSubmit(t *testing.T) []byte {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.submits) == 0 {
		t.Fatal("nothing was submitted")
	}
	return m.submits[len(m.submits)-1]
}

func (m *fakeMaster) job(t *testing.T, id string) *job.Job {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, j := range m.jobs {
		if j.UUID == id {
			return j
		}
	}
	t.Fatalf("no job %s on the fake master", id)
	return nil
}

// testEnv is a user's environment: a master, a login PEM and the CA file for --servercert.
type testEnv struct {
	t        *testing.T
	m        *fakeMaster
	dir      string
	certFile string
	caFile   string
	vars     map[string]string
}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	ca, err := pki.NewCA("test CA")
	if err != nil {
		t.Fatalf("new CA: %v", err)
	}
	dir := t.TempDir()
	e := &testEnv{t: t, m: newFakeMaster(t, ca), dir: dir}
	e.certFile = e.writeCert("alice.pem", ca, aliceURN, aliceEmail, "")
	e.caFile = filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(e.caFile, ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	e.vars = map[string]string{
		"GPULAB_CERT":        e.certFile,
		"GPULAB_API_BASE":    e.m.apiURL(),
		"GPULAB_SERVER_CERT": e.caFile,
		"TZ":                 "UTC",
	}
	return e
}

func (e *testEnv) writeCert(name string, ca *pki.CA, urn, email, password string) string {
	e.t.Helper()
	cert, key, err := ca.IssueClient(pki.ClientSpec{Kind: pki.KindUser, URN: urn, Email: email, Name: name})
	if err != nil {
		e.t.Fatalf("issue certificate: %v", err)
	}
	data, err := pki.ClientPEM(cert, key, password)
	if err != nil {
		e.t.Fatalf("client PEM: %v", err)
	}
	path := filepath.Join(e.dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		e.t.Fatal(err)
	}
	return path
}

func (e *testEnv) writeFile(name, content string) string {
	e.t.Helper()
	path := filepath.Join(e.dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		e.t.Fatal(err)
	}
	return path
}

// result is what one invocation printed and returned.
type result struct {
	code           int
	stdout, stderr string
}

// run runs the CLI in-process with this environment and fast polling.
func (e *testEnv) run(args ...string) result {
	e.t.Helper()
	return e.runWith("", nil, args...)
}

// runWith runs the CLI with stdin text and a hook to adjust the app before it runs.
func (e *testEnv) runWith(stdin string, adjust func(*app), args ...string) result {
	e.t.Helper()
	var out, errOut strings.Builder
	env := func(k string) string { return e.vars[k] }
	a := newApp(e.t.Context(), env, strings.NewReader(stdin), &out, &errOut)
	a.waitPoll, a.logPoll = time.Millisecond, time.Millisecond
	a.now = func() time.Time { return testNow }
	if adjust != nil {
		adjust(a)
	}
	code := a.main(args)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// testNow is the clock of in-process runs, so that "ago" texts are stable.
var testNow = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s--- stderr:\n%s", r.code, r.stdout, r.stderr)
}
