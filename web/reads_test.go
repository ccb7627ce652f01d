package web_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/web"
)

// readsMaster is a master whose request log the test reads: the statements each request sent
// to the database (db_statements) are on its line.
type readsMaster struct {
	*testmaster.Master
	t    *testing.T
	logs *lockedBuffer
	n    int
}

func startReadsMaster(t *testing.T) *readsMaster {
	logs := &lockedBuffer{}
	log := slog.New(web.WithRequestID(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	return &readsMaster{Master: testmaster.Start(t, testmaster.Options{Log: log}), t: t, logs: logs}
}

// get sends a GET as u and returns the status, the body and the statements the request sent.
func (m *readsMaster) get(u *testmaster.User, path string, header ...string) (int, string, int) {
	m.t.Helper()
	m.n++
	id := fmt.Sprintf("reads-%d", m.n)
	status, body, _ := m.Do(u, "GET", path, nil, append(header, web.RequestIDHeader, id)...)
	// The request's line is written after its answer: wait for it.
	deadline := time.Now().Add(time.Minute)
	for {
		sc := bufio.NewScanner(strings.NewReader(m.logs.String()))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var line struct {
				Msg          string `json:"msg"`
				RequestID    string `json:"request_id"`
				DBStatements *int   `json:"db_statements"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "request" && line.RequestID == id {
				if line.DBStatements == nil {
					m.t.Fatalf("the request line of %s has no db_statements: %s", path, sc.Text())
				}
				return status, string(body), *line.DBStatements
			}
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("no request line for %s (request id %s) within a minute", path, id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (m *readsMaster) submitN(u *testmaster.User, n int) []string {
	m.t.Helper()
	var ids []string
	for i := 0; i < n; i++ {
		status, body, _ := m.Do(u, "POST", v31+"/jobs", strings.NewReader(jobDoc(fmt.Sprintf("reads-%d", i), "vision")))
		if status != http.StatusCreated {
			m.t.Fatalf("submit: %d %s", status, body)
		}
		ids = append(ids, strings.TrimSpace(string(body)))
	}
	return ids
}

// The API answers machine clients compact JSON (indenting was half the CPU of a list), and
// indented JSON to a person: with ?pretty=1, or to a browser (Accept: text/html). Both are the
// same document.
func TestAPIJSONCompactUnlessAsked(t *testing.T) {
	m := startReadsMaster(t)
	alice := m.AddUser("alice", false, "", "vision")
	id := m.submitN(alice, 1)[0]
	indented := func(body string) bool { return strings.Contains(body, "\n  ") }
	var docs []map[string]any
	for _, c := range []struct {
		name   string
		path   string
		header []string
		pretty bool
	}{
		{"plain", v31 + "/jobs/" + id, nil, false},
		{"json client", v31 + "/jobs/" + id, []string{"Accept", "application/json"}, false},
		{"pretty=1", v31 + "/jobs/" + id + "?pretty=1", nil, true},
		{"pretty=true", v40 + "/jobs/" + id + "?pretty=true", nil, true},
		{"pretty=0 from a browser", v31 + "/jobs/" + id + "?pretty=0", []string{"Accept", "text/html"}, false},
		{"browser", v31 + "/jobs/" + id, []string{"Accept", "text/html,application/xhtml+xml"}, true},
		{"list", v31 + "/jobs", nil, false},
		{"list pretty", v31 + "/jobs?pretty=1", nil, true},
	} {
		status, body, _ := m.get(alice, c.path, c.header...)
		if status != http.StatusOK {
			t.Fatalf("%s: %d %s", c.name, status, body)
		}
		if indented(body) != c.pretty {
			t.Errorf("%s: indented %v, want %v: %.200s", c.name, indented(body), c.pretty, body)
		}
		if !strings.HasSuffix(body, "}\n") && !strings.HasSuffix(body, "]\n") {
			t.Errorf("%s: the body ends with one newline after the document: %q", c.name, body[max(0, len(body)-10):])
		}
		if strings.Contains(c.path, v31+"/jobs/") {
			var doc map[string]any
			if err := json.Unmarshal([]byte(body), &doc); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			docs = append(docs, doc)
		}
	}
	for i := 1; i < len(docs); i++ {
		a, _ := json.Marshal(docs[0])
		b, _ := json.Marshal(docs[i])
		if string(a) != string(b) {
			t.Errorf("compact and indented answers differ:\n%s\n%s", a, b)
		}
	}
	// Errors too.
	status, body, _ := m.get(alice, v31+"/jobs?page_size=abc")
	if status != http.StatusBadRequest || indented(body) || !strings.Contains(body, "page_size") {
		t.Errorf("a bad query: %d %s, want a compact 400 naming page_size", status, body)
	}
}

// Reads send a fixed number of statements, whatever the rows: GET jobs/{id} one (the caller
// and the job), a list and the portal's Jobs page the same for 2 jobs as for 30, no query per row
// (nor a read of the whole slave table to show SSH endpoints); a list whose rows were all read
// before reads only their versions (store.listByVersion).
func TestReadsStatementsDoNotGrowWithRows(t *testing.T) {
	m := startReadsMaster(t)
	alice := m.AddUser("alice", false, "", "vision")
	ids := m.submitN(alice, 2)
	counts := func() (list, page, portalList int) {
		var status int
		var body string
		status, body, list = m.get(alice, v31+"/jobs?page_size=50")
		if status != http.StatusOK {
			t.Fatalf("list: %d %s", status, body)
		}
		status, body, page = m.get(alice, "/jobs", "Accept", "text/html")
		if status != http.StatusOK || !strings.Contains(body, "<table") {
			t.Fatalf("portal /jobs: %d %.300s", status, body)
		}
		status, body, portalList = m.get(alice, "/jobs?scope=projects", "Accept", "text/html", "HX-Request", "true")
		if status != http.StatusOK {
			t.Fatalf("portal /jobs list: %d %.300s", status, body)
		}
		return list, page, portalList
	}
	l1, p1, h1 := counts()
	status, body, one := m.get(alice, v31+"/jobs/"+ids[0])
	if status != http.StatusOK {
		t.Fatalf("get: %d %s", status, body)
	}
	if one != 1 {
		t.Errorf("GET jobs/{id} sent %d statements, want 1 (the caller and the job together)", one)
	}
	m.submitN(alice, 28)
	for _, id := range ids {
		m.ForceJobStatus(id, "FINISHED")
	}
	l2, p2, h2 := counts()
	t.Logf("statements: GET jobs/{id} %d; list %d → %d, portal page %d → %d, portal list %d → %d (2 → 30 jobs)", one, l1, l2, p1, p2, h1, h2)
	// (Fewer is fine: the portal page's cluster choices may come from the list kept by the
	// first read, store.RecentClusters.)
	if l2 > l1 || p2 > p1 || h2 > h1 {
		t.Errorf("statements grew with the rows: list %d → %d, portal page %d → %d, portal list %d → %d", l1, l2, p1, p2, h1, h2)
	}
	if l1 > 3 {
		t.Errorf("a list of jobs sent %d statements, want at most 3 (the caller, the page's row versions, the rows not read before)", l1)
	}
	// Read again with nothing changed, the page's rows are those read before.
	if l3, _, _ := counts(); l3 != 2 {
		t.Errorf("the same list again sent %d statements, want 2 (the caller, the page's row versions)", l3)
	}
}

// The JSON of ended jobs is kept between reads, but only for a read of the very same row: a
// change that leaves updated_at alone (final usage statistics) shows at the next read, and
// what the owner reads in full never reaches a viewer who sees the job sanitized.
func TestShownJobsFollowTheRow(t *testing.T) {
	m := startReadsMaster(t)
	alice := m.AddUser("alice", false, "", "vision")
	admin := m.AddUser("root", true, "", "ops")
	doc := `{"name": "secretive", "owner": {"projectUrn": "vision"}, "request": {"resources": {"cpus": 1, "gpus": 0, "cpuMemoryGb": 1},
	"docker": {"image": "debian:stable", "command": "echo hi", "environment": {"DB_PASSWORD": "hunter2"}}}}`
	status, body, _ := m.Do(alice, "POST", v31+"/jobs", strings.NewReader(doc))
	if status != http.StatusCreated {
		t.Fatalf("submit: %d %s", status, body)
	}
	id := strings.TrimSpace(string(body))
	m.ForceJobStatus(id, "FINISHED")
	read := func(u *testmaster.User, path string) string {
		t.Helper()
		status, body, _ := m.get(u, path)
		if status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, status, body)
		}
		if strings.Contains(body, "hunter2") {
			t.Fatalf("GET %s shows a secret: %s", path, body)
		}
		return body
	}
	for range 2 {
		if b := read(alice, v31+"/jobs/"+id); !strings.Contains(b, `"FINISHED"`) || !strings.Contains(b, `"secretive"`) {
			t.Fatalf("alice's job: %s", b)
		}
	}
	if _, err := m.Store.DB().ExecContext(context.Background(), `UPDATE jobs SET final_usage = '{"marker": 4242}' WHERE uuid = $1`, id); err != nil {
		t.Fatal(err)
	}
	if b := read(alice, v31+"/jobs/"+id); !strings.Contains(b, "4242") {
		t.Errorf("final usage set after a read does not show: %s", b)
	}
	if b := read(alice, v31+"/jobs?page_size=50"); !strings.Contains(b, "4242") || !strings.Contains(b, id) {
		t.Errorf("the list does not show the job as it is now: %s", b)
	}
	m.ForceJobStatus(id, "FAILED")
	if b := read(alice, v31+"/jobs/"+id); !strings.Contains(b, `"FAILED"`) {
		t.Errorf("a change of state does not show: %s", b)
	}
	if b := read(admin, v31+"/jobs/"+id); !strings.Contains(b, `"secretive"`) {
		t.Errorf("the admin sees the job in full: %s", b)
	}
	if b := read(alice, "/api/gpulab/v3.0/jobs/"+id); strings.Contains(b, "restartInfo") {
		t.Errorf("v3.0 got v3.1's JSON: %s", b)
	}
	if b := read(alice, v31+"/jobs/"+id+"?pretty=1"); !strings.Contains(b, "\n  ") {
		t.Errorf("?pretty=1 after compact reads is not indented: %.200s", b)
	}
	// Another user: no access at all, whatever was kept.
	bob := m.AddUser("bob", false, "", "nlp")
	if status, body, _ := m.get(bob, v31+"/jobs/"+id); status != http.StatusNotFound {
		t.Errorf("bob reads alice's job: %d %s", status, body)
	}
}

// GET jobs/{id} reads the caller and the job in one statement, and answers as before: the
// owner and his project's members see the job (any API version, the UUID in capitals too), a
// prefix still works (read apart), anybody else and a job that does not exist get the same
// 404, a revoked certificate and a disabled user 401.
func TestGetJobReadsCallerAndJobTogether(t *testing.T) {
	m := startReadsMaster(t)
	alice := m.AddUser("alice", false, "", "vision")
	carol := m.AddUser("carol", false, "", "vision")
	bob := m.AddUser("bob", false, "", "nlp")
	id := m.submitN(alice, 1)[0]
	for _, c := range []struct {
		who        *testmaster.User
		path       string
		status     int
		statements int // 0: not checked
		body       string
	}{
		{alice, "/api/gpulab/v3.0/jobs/" + id, 200, 1, id},
		{alice, v31 + "/jobs/" + id, 200, 1, id},
		{alice, "/api/gpulab/v4.0/jobs/" + id, 200, 1, id},
		{alice, v31 + "/jobs/" + strings.ToUpper(id), 200, 1, id},
		{alice, v31 + "/jobs/" + id[:8], 200, 0, id},
		{carol, v31 + "/jobs/" + id, 200, 1, id},
		{bob, v31 + "/jobs/" + id, 404, 0, "no job " + id},
		{alice, v31 + "/jobs/00000000-0000-4000-8000-000000000000", 404, 0, "no job 00000000-0000-4000-8000-000000000000"},
	} {
		status, body, n := m.get(c.who, c.path)
		if status != c.status || !strings.Contains(body, c.body) || (c.statements > 0 && n != c.statements) {
			t.Errorf("%s GET %s: %d, %d statements, %.200s; want %d, %d statements, %q", c.who.Name, c.path, status, n, body, c.status, c.statements, c.body)
		}
	}
	ctx := context.Background()
	if _, err := m.Store.RevokeCertificate(ctx, carol.Serial); err != nil {
		t.Fatal(err)
	}
	if status, body, _ := m.get(carol, v31+"/jobs/"+id); status != 401 || !strings.Contains(body, "revoked") {
		t.Errorf("a revoked certificate: %d %.200s", status, body)
	}
	if err := m.Store.SetUserDisabled(ctx, "alice", true); err != nil {
		t.Fatal(err)
	}
	if status, body, _ := m.get(alice, v31+"/jobs/"+id); status != 401 || !strings.Contains(body, "disabled") {
		t.Errorf("a disabled user: %d %.200s", status, body)
	}
}
