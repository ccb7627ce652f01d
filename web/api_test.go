package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/store"
)

const v31 = "/api/gpulab/v3.1"

const helloWorld = `{
    "name": "HelloWorld",
    "description": "Hello world!",
    "request": {
        "resources": {"clusterId": 1, "gpus": 1, "cpus": 2, "cpuMemoryGb": 1},
        "docker": {"image": "debian:stable", "command": "echo 'Hello World!'", "environment": {}, "storage": [], "portMappings": []},
        "scheduling": {"interactive": true}
    }
}`

type errBody struct {
	Error   string        `json:"error"`
	Details []job.Problem `json:"details"`
}

func decode[T any](t *testing.T, data []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("decode %q: %v", data, err)
	}
	return v
}

// world is a master with users in two projects:
// alice and carol in "vision", bob in "audio", dave an admin, eve in no project.
type world struct {
	m                            *testmaster.Master
	alice, bob, carol, dave, eve *testmaster.User
}

func newWorld(t *testing.T) *world { return newWorldWith(t, testmaster.Options{}) }

func newWorldWith(t *testing.T, opts testmaster.Options) *world {
	m := testmaster.Start(t, opts)
	return &world{
		m:     m,
		alice: m.AddUser("alice", false, "", "vision"),
		carol: m.AddUser("carol", false, "", "vision"),
		bob:   m.AddUser("bob", false, "", "audio"),
		dave:  m.AddUser("dave", true, "", "admins"),
		eve:   m.AddUser("eve", false, ""),
	}
}

func (w *world) submit(t *testing.T, u *testmaster.User, body string, query string) string {
	t.Helper()
	status, data, _ := w.m.Do(u, "POST", v31+"/jobs"+query, strings.NewReader(body))
	if status != http.StatusCreated {
		t.Fatalf("submit: %d %s", status, data)
	}
	id := strings.TrimSpace(string(data))
	if len(id) != 36 {
		t.Fatalf("submit answered %q, want a UUID", data)
	}
	return id
}

func (w *world) get(t *testing.T, u *testmaster.User, id string) (int, map[string]any) {
	t.Helper()
	status, data, _ := w.m.Do(u, "GET", v31+"/jobs/"+id, nil)
	var m map[string]any
	_ = json.Unmarshal(data, &m)
	return status, m
}

func (w *world) jobCount(t *testing.T) int {
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

func TestNoCredentialsIs401JSON(t *testing.T) {
	w := newWorld(t)
	for _, c := range []struct{ method, path string }{
		{"GET", v31 + "/jobs"}, {"POST", v31 + "/jobs"}, {"GET", v31 + "/jobs/abcdef12"},
		{"PUT", v31 + "/jobs/abcdef12/state/status"}, {"DELETE", v31 + "/jobs/abcdef12"},
		{"GET", "/api/gpulab/v4.0/jobs"}, {"GET", "/api/gpulab/v3.0/jobs/abcdef12/debug"},
	} {
		status, data, hdr := w.m.Do(nil, c.method, c.path, strings.NewReader(helloWorld))
		if status != http.StatusUnauthorized || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
			t.Errorf("%s %s without credentials: %d %s %q", c.method, c.path, status, hdr.Get("Content-Type"), data)
			continue
		}
		if e := decode[errBody](t, data); !strings.Contains(e.Error, "certificate") {
			t.Errorf("401 body does not say what to do: %q", e.Error)
		}
	}
	for _, path := range []string{v31 + "/version", v31 + "/clusters", v31 + "/slaves", "/api/gpulab/openapi.json"} {
		if status, data, _ := w.m.Do(nil, "GET", path, nil); status != http.StatusOK {
			t.Errorf("public %s: %d %s", path, status, data)
		}
	}
	if w.jobCount(t) != 0 {
		t.Fatal("an unauthenticated POST stored a job")
	}
}

func TestSubmitAndGetFillsDefaults(t *testing.T) {
	w := newWorld(t)
	id := w.submit(t, w.alice, helloWorld, "")
	status, j := w.get(t, w.alice, id)
	if status != http.StatusOK {
		t.Fatalf("get: %d %v", status, j)
	}
	var got job.Job
	b, _ := json.Marshal(j)
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("job JSON does not read back as a job: %v", err)
	}
	if got.UUID != id || got.Name != "HelloWorld" || got.State.Status != job.StatusQueued {
		t.Fatalf("job = %+v", got)
	}
	if got.Owner.UserURN != pki.UserURN(testmaster.Authority, "alice") || got.Owner.ProjectURN != pki.ProjectURN(testmaster.Authority, "vision") {
		t.Fatalf("owner = %+v (the user comes from the certificate, the project is alice's only one)", got.Owner)
	}
	sched := j["request"].(map[string]any)["scheduling"].(map[string]any)
	if sched["minDuration"] == nil || sched["maxDuration"] == nil {
		t.Fatalf("defaults not filled: %v", sched)
	}
	if got.State.EventTimes[job.StatusQueued].IsZero() {
		t.Fatalf("no QUEUED event time: %v", got.State.EventTimes)
	}
	// Accept: application/json answers with the job instead of the bare UUID.
	status, data, _ := w.m.Do(w.alice, "POST", v31+"/jobs?hold=true", strings.NewReader(helloWorld), "Accept", "application/json")
	held := decode[job.Job](t, data)
	if status != http.StatusCreated || held.State.Status != job.StatusOnHold {
		t.Fatalf("submit with hold and JSON: %d %s", status, data)
	}
}

func TestSubmitV1IsConverted(t *testing.T) {
	w := newWorld(t)
	v1 := `{"jobDefinition": {"name": "old", "description": "v1 job", "clusterId": 1, "dockerImage": "debian:stable",
	  "command": "echo hi", "resources": {"systemMemory": 2000, "cpuCores": 2, "gpus": 1},
	  "jobDataLocations": [{"mountPoint": "/project"}], "portMappings": [{"containerPort": "8888/tcp"}]}}`
	id := w.submit(t, w.alice, v1, "")
	_, j := w.get(t, w.alice, id)
	res := j["request"].(map[string]any)["resources"].(map[string]any)
	if res["cpuMemoryGb"] != 2.0 || res["cpus"] != 2.0 || res["gpus"] != 1.0 {
		t.Fatalf("v1 resources converted to %v", res)
	}
}

func TestInvalidRequestsAre400AndStoreNothing(t *testing.T) {
	w := newWorld(t)
	cases := []struct{ name, body, path string }{
		{"not JSON", `{"name": "x",`, ""},
		{"missing name", `{"request": {"resources": {"cpus": 1, "gpus": 0, "cpuMemoryGb": 1}, "docker": {"image": "debian:stable"}}}`, "name"},
		{"missing request", `{"name": "x"}`, "request"},
		{"unknown key", strings.Replace(helloWorld, `"resources"`, `"resourcs"`, 1), "request.resourcs"},
		{"cpus zero", strings.Replace(helloWorld, `"cpus": 2`, `"cpus": 0`, 1), "request.resources.cpus"},
		{"gpus negative", strings.Replace(helloWorld, `"gpus": 1`, `"gpus": -1`, 1), "request.resources.gpus"},
		{"memory not int", strings.Replace(helloWorld, `"cpuMemoryGb": 1`, `"cpuMemoryGb": 1.5`, 1), "request.resources.cpuMemoryGb"},
		{"no image", strings.Replace(helloWorld, `"image": "debian:stable", `, ``, 1), "request.docker.image"},
		{"bad duration", strings.Replace(helloWorld, `"interactive": true`, `"maxDuration": "3 fortnights"`, 1), "request.scheduling.maxDuration"},
		{"interactive with notBefore", strings.Replace(helloWorld, `"interactive": true`, `"interactive": true, "notBefore": "2030-01-01T00:00:00Z"`, 1), "request.scheduling"},
		{"uuid refused", strings.Replace(helloWorld, `"name"`, `"uuid": "x", "name"`, 1), "uuid"},
		{"state refused", strings.Replace(helloWorld, `"name"`, `"state": {}, "name"`, 1), "state"},
		{"bad env name", strings.Replace(helloWorld, `"environment": {}`, `"environment": {"1BAD": "x"}`, 1), "request.docker.environment"},
		{"unterminated quote", strings.Replace(helloWorld, `"echo 'Hello World!'"`, `"echo 'Hello"`, 1), "request.docker.command"},
		{"unknown project", strings.Replace(helloWorld, `"name"`, `"owner": {"projectUrn": "nope"}, "name"`, 1), "owner.projectUrn"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, data, _ := w.m.Do(w.alice, "POST", v31+"/jobs", strings.NewReader(c.body))
			if status != http.StatusBadRequest {
				t.Fatalf("got %d %s, want 400", status, data)
			}
			e := decode[errBody](t, data)
			if c.path == "" {
				if !strings.Contains(e.Error, "line") {
					t.Fatalf("syntax error does not name the line: %q", e.Error)
				}
				return
			}
			found := false
			for _, d := range e.Details {
				if strings.HasPrefix(d.Path, c.path) && d.Message != "" {
					found = true
				}
			}
			if !found {
				t.Fatalf("no detail for %s in %s", c.path, data)
			}
		})
	}
	if n := w.jobCount(t); n != 0 {
		t.Fatalf("%d jobs stored from invalid requests", n)
	}
}

func TestAuthorizationMatrix(t *testing.T) {
	w := newWorld(t)
	id := w.submit(t, w.alice, helloWorld, "")
	visionJob := strings.Replace(helloWorld, `"name"`, `"owner": {"projectUrn": "`+pki.ProjectURN(testmaster.Authority, "vision")+`"}, "name"`, 1)

	type check struct {
		who        *testmaster.User
		name       string
		method     string
		path, body string
		want       int
	}
	checks := []check{
		{w.alice, "owner reads", "GET", "/jobs/" + id, "", 200},
		{w.carol, "project member reads", "GET", "/jobs/" + id, "", 200},
		{w.dave, "admin reads", "GET", "/jobs/" + id, "", 200},
		{w.bob, "other project cannot read", "GET", "/jobs/" + id, "", 404},
		{w.bob, "other project cannot read events", "GET", "/jobs/" + id + "/debug", "", 404},
		{w.bob, "other project cannot read log", "GET", "/jobs/" + id + "/log", "", 404},
		{w.bob, "other project cannot cancel", "PUT", "/jobs/" + id + "/state/status", "CANCELLED", 404},
		{w.bob, "other project cannot delete", "DELETE", "/jobs/" + id + "?force=true", "", 404},
		{w.carol, "project member cannot cancel", "PUT", "/jobs/" + id + "/state/status", "CANCELLED", 403},
		{w.bob, "non-member cannot submit into vision", "POST", "/jobs", visionJob, 403},
		{w.eve, "user without project cannot submit", "POST", "/jobs", helloWorld, 403},
		{w.alice, "owner holds", "PUT", "/jobs/" + id + "/state/status", "ONHOLD", 200},
		{w.dave, "admin releases", "PUT", "/jobs/" + id + "/state/status", "QUEUED", 200},
		{w.alice, "real delete is for admins", "DELETE", "/jobs/" + id + "?force=true&real=true", "", 403},
	}
	for _, c := range checks {
		status, data, _ := w.m.Do(c.who, c.method, v31+c.path, strings.NewReader(c.body))
		if status != c.want {
			t.Errorf("%s (%s %s as %s): got %d %s, want %d", c.name, c.method, c.path, c.who.Name, status, data, c.want)
		}
	}
	if _, j := w.get(t, w.alice, id); j["state"].(map[string]any)["status"] != "QUEUED" {
		t.Fatalf("job state changed by someone not allowed: %v", j["state"])
	}
}

func TestOtherUsersRunningJobsAreSanitized(t *testing.T) {
	w := newWorld(t)
	secret := strings.Replace(helloWorld, `"debian:stable"`, `"deploy:s3cret@registry.example.org:4567/team/img:v1"`, 1)
	secret = strings.Replace(secret, `"portMappings": []`, `"portMappings": [8888]`, 1)
	id := w.submit(t, w.alice, secret, "")
	if _, err := w.m.Store.DB().Exec(`UPDATE jobs SET status = 'RUNNING' WHERE uuid = $1`, id); err != nil {
		t.Fatal(err)
	}
	// The owner sees the image without its password.
	_, data, _ := w.m.Do(w.alice, "GET", v31+"/jobs/"+id, nil)
	if strings.Contains(string(data), "s3cret") || !strings.Contains(string(data), "deploy:XXXX@registry.example.org:4567/team/img:v1") {
		t.Fatalf("owner's view of the image: %s", data)
	}
	// bob lists everybody's running jobs: alice's is there, sanitized.
	status, data, _ := w.m.Do(w.bob, "GET", v31+"/jobs?other_user_running=true", nil)
	if status != 200 {
		t.Fatalf("list: %d %s", status, data)
	}
	list := decode[[]map[string]any](t, data)
	if len(list) != 1 {
		t.Fatalf("bob sees %d running jobs, want alice's 1", len(list))
	}
	j := list[0]
	if j["name"] != "job-"+id[:6] {
		t.Errorf("name not sanitized: %v", j["name"])
	}
	owner := j["owner"].(map[string]any)
	if owner["userUrn"] != "urn:publicid:IDN+hidden+user+hidden" {
		t.Errorf("owner not sanitized: %v", owner)
	}
	docker := j["request"].(map[string]any)["docker"].(map[string]any)
	if len(docker) != 1 || docker["image"] != "hidden" {
		t.Errorf("docker not sanitized: %v", docker)
	}
	// The job's uuid (and the name made of it) may hold "8888" by chance: left out of the search.
	if shown := strings.NewReplacer(id, "", id[:6], "").Replace(string(data)); strings.Contains(shown, "s3cret") ||
		strings.Contains(shown, "8888") || strings.Contains(shown, "alice") {
		t.Errorf("sanitized job leaks: %s", data)
	}
	// carol, in alice's project, sees it in full.
	_, data, _ = w.m.Do(w.carol, "GET", v31+"/jobs?other_user_running=true", nil)
	if list := decode[[]map[string]any](t, data); len(list) != 1 || list[0]["name"] != "HelloWorld" {
		t.Errorf("project member's view: %s", data)
	}
	// imec's `jobs -u`: my jobs plus everybody's running ones.
	mine := w.submit(t, w.bob, helloWorld, "")
	_, data, _ = w.m.Do(w.bob, "GET", v31+"/jobs?user_urn="+url.QueryEscape(w.bob.URN)+"&other_user_running=true", nil)
	if list := decode[[]map[string]any](t, data); len(list) != 2 {
		t.Errorf("bob's jobs plus others' running: %d jobs, want 2 (%s queued, %s running)", len(list), mine, id)
	}
	if _, err := w.m.Store.DB().Exec(`DELETE FROM jobs WHERE uuid = $1`, mine); err != nil {
		t.Fatal(err)
	}
	// Without other_user_running, bob sees only his own (none).
	_, data, _ = w.m.Do(w.bob, "GET", v31+"/jobs", nil)
	if list := decode[[]map[string]any](t, data); len(list) != 0 {
		t.Errorf("bob's own list shows %d jobs", len(list))
	}
}

func TestIDPrefixes(t *testing.T) {
	w := newWorld(t)
	id := w.submit(t, w.alice, helloWorld, "")
	if status, _ := w.get(t, w.alice, id[:6]); status != 200 {
		t.Errorf("6-character prefix: %d", status)
	}
	if status, _ := w.get(t, w.alice, strings.ToUpper(id[:8])); status != 200 {
		t.Errorf("upper-case prefix: %d", status)
	}
	status, data, _ := w.m.Do(w.alice, "GET", v31+"/jobs/"+id[:5], nil)
	if status != 400 || !strings.Contains(string(data), "6 characters") {
		t.Errorf("5-character prefix: %d %s", status, data)
	}
	if status, _ := w.get(t, w.alice, "00000000-0000-4000-8000-000000000000"); status != 404 {
		t.Errorf("unknown id: %d", status)
	}
	// Make an ambiguous prefix by storing two jobs whose ids share one.
	j, err := job.Parse([]byte(helloWorld), job.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	p, _ := w.m.Store.GetProjectByName(context.Background(), "vision")
	for _, u := range []string{"aaaaaa01-0000-4000-8000-000000000000", "aaaaaa02-0000-4000-8000-000000000000"} {
		jj := j.Clone()
		jj.UUID, jj.State.Status = u, job.StatusQueued
		if err := w.m.Store.CreateJob(context.Background(), jj, w.alice.ID, p.ID, "test"); err != nil {
			t.Fatal(err)
		}
	}
	status, data, _ = w.m.Do(w.alice, "GET", v31+"/jobs/aaaaaa", nil)
	if status != 409 || !strings.Contains(string(data), "ambiguous") {
		t.Errorf("ambiguous prefix: %d %s", status, data)
	}
}

func TestStateChanges(t *testing.T) {
	w := newWorld(t)
	id := w.submit(t, w.alice, helloWorld, "?hold=true")
	put := func(body string) (int, string) {
		status, data, _ := w.m.Do(w.alice, "PUT", v31+"/jobs/"+id+"/state/status", strings.NewReader(body), "Content-Type", "text/plain")
		return status, string(data)
	}
	steps := []struct {
		body string
		want int
		says string
	}{
		{"QUEUED", 200, `"QUEUED"`},
		{"onhold", 200, `"ONHOLD"`}, // case-insensitive
		{"RUNNING", 400, "must be one of"},
		{"MUSTHALT", 409, "ONHOLD"}, // only a running job can be halted
		{"CANCELLED", 200, `"CANCELLED"`},
		{"CANCELLED", 409, "CANCELLED"},
		{"QUEUED", 409, "ended"},
	}
	for _, s := range steps {
		status, body := put(s.body)
		if status != s.want || !strings.Contains(body, s.says) {
			t.Errorf("PUT %s: got %d %s, want %d mentioning %s", s.body, status, body, s.want, s.says)
		}
	}
	status, data, _ := w.m.Do(w.alice, "GET", v31+"/jobs/"+id+"/debug", nil)
	evs := decode[[]store.Event](t, data)
	var trail []string
	for _, e := range evs {
		trail = append(trail, e.ToStatus)
	}
	if status != 200 || strings.Join(trail, ",") != "ONHOLD,QUEUED,ONHOLD,CANCELLED" {
		t.Errorf("debug events: %d %v", status, trail)
	}
}

func TestDelete(t *testing.T) {
	w := newWorld(t)
	id := w.submit(t, w.alice, helloWorld, "")
	del := func(u *testmaster.User, q string) (int, string) {
		status, data, _ := w.m.Do(u, "DELETE", v31+"/jobs/"+id+q, nil)
		return status, string(data)
	}
	if status, body := del(w.alice, ""); status != 409 || !strings.Contains(body, "QUEUED") {
		t.Fatalf("delete a queued job: %d %s", status, body)
	}
	if status, body := del(w.alice, "?finished=true&force=true"); status != 409 {
		t.Fatalf("finished=true never cancels: %d %s", status, body)
	}
	if status, body := del(w.alice, "?force=true"); status != 200 {
		t.Fatalf("force delete: %d %s", status, body)
	}
	if _, j := w.get(t, w.alice, id); j["state"].(map[string]any)["status"] != "DELETED" {
		t.Fatalf("after delete: %v", j["state"])
	}
	_, data, _ := w.m.Do(w.alice, "GET", v31+"/jobs", nil)
	if list := decode[[]map[string]any](t, data); len(list) != 0 {
		t.Fatalf("deleted job in the default list")
	}
	_, data, _ = w.m.Do(w.alice, "GET", v31+"/jobs?deleted=true", nil)
	if list := decode[[]map[string]any](t, data); len(list) != 1 {
		t.Fatalf("deleted=true lists %d jobs", len(list))
	}
	if status, body := del(w.dave, "?real=true"); status != 200 {
		t.Fatalf("admin real delete: %d %s", status, body)
	}
	if status, _ := w.get(t, w.alice, id); status != 404 {
		t.Fatalf("really deleted job still there: %d", status)
	}
}

func TestListParamsAndVersions(t *testing.T) {
	w := newWorld(t)
	for i := 0; i < 3; i++ {
		w.submit(t, w.alice, strings.Replace(helloWorld, "HelloWorld", fmt.Sprintf("job%d", i), 1), "")
	}
	bad := map[string]string{
		"page_size=500": "page_size", "page=0": "page", "pending=maybe": "pending",
		"sort=color": "sort", "allowed_states=SLEEPING": "allowed_states", "cluster_id=x": "cluster_id",
	}
	for q, field := range bad {
		status, data, _ := w.m.Do(w.alice, "GET", v31+"/jobs?"+q, nil)
		if status != 400 || !strings.Contains(string(data), field) {
			t.Errorf("GET jobs?%s: %d %s", q, status, data)
		}
	}
	_, data, _ := w.m.Do(w.alice, "GET", v31+"/jobs?sort=name&page_size=2&page=2", nil)
	if list := decode[[]map[string]any](t, data); len(list) != 1 || list[0]["name"] != "job2" {
		t.Errorf("page 2 of 2 sorted by name: %s", data)
	}
	_, data, _ = w.m.Do(w.alice, "GET", "/api/gpulab/v4.0/jobs?max_count=2", nil)
	v4 := decode[struct{ Items []map[string]any }](t, data)
	if len(v4.Items) != 2 {
		t.Errorf("v4.0 list: %s", data)
	}
	_, data, _ = w.m.Do(w.alice, "GET", v31+"/jobs?pending=true&project_name=vision", nil)
	if list := decode[[]map[string]any](t, data); len(list) != 3 {
		t.Errorf("pending in vision: %d", len(list))
	}
	_, data, _ = w.m.Do(w.alice, "GET", v31+"/jobs?running=true", nil)
	if list := decode[[]map[string]any](t, data); len(list) != 0 {
		t.Errorf("running: %d", len(list))
	}
	id := decode[[]map[string]any](t, mustGet(t, w, v31+"/jobs"))[0]["uuid"].(string)
	_, data, _ = w.m.Do(w.alice, "GET", "/api/gpulab/v3.0/jobs/"+id, nil)
	v30 := decode[map[string]any](t, data)
	if _, has := v30["state"].(map[string]any)["scheduling"]; has {
		t.Errorf("v3.0 job has state.scheduling: %s", data)
	}
}

func mustGet(t *testing.T, w *world, path string) []byte {
	t.Helper()
	status, data, _ := w.m.Do(w.alice, "GET", path, nil)
	if status != 200 {
		t.Fatalf("GET %s: %d %s", path, status, data)
	}
	return data
}

func TestLogRanges(t *testing.T) {
	w := newWorld(t)
	id := w.submit(t, w.alice, helloWorld, "")
	if status, _, _ := w.m.Do(w.alice, "GET", v31+"/jobs/"+id+"/log", nil); status != http.StatusNoContent {
		t.Fatalf("empty log: %d, want 204", status)
	}
	ctx := context.Background()
	for i, c := range []string{"Hello ", "World!\n"} {
		if err := w.m.Store.AppendJobLog(ctx, id, i, []byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	status, data, _ := w.m.Do(w.alice, "GET", v31+"/jobs/"+id+"/log", nil)
	if status != 200 || string(data) != "Hello World!\n" {
		t.Fatalf("log: %d %q", status, data)
	}
	status, data, hdr := w.m.Do(w.alice, "GET", v31+"/jobs/"+id+"/log", nil, "Range", "bytes=6-")
	if status != http.StatusPartialContent || string(data) != "World!\n" || hdr.Get("Content-Range") != "bytes 6-12/13" {
		t.Fatalf("range: %d %q %q", status, data, hdr.Get("Content-Range"))
	}
	if status, _, _ := w.m.Do(w.alice, "GET", v31+"/jobs/"+id+"/log", nil, "Range", "bytes=13-"); status != http.StatusNoContent {
		t.Fatalf("range at the end: %d, want 204", status)
	}
	if status, _, _ := w.m.Do(w.alice, "GET", v31+"/jobs/"+id+"/log", nil, "Range", "bytes=99-"); status != http.StatusRequestedRangeNotSatisfiable {
		t.Fatalf("range past the end: %d, want 416", status)
	}
}

func TestConvert(t *testing.T) {
	w := newWorld(t)
	v1 := `{"jobDefinition": {"name": "old", "dockerImage": "u:p@reg.example.org/x:1", "command": "python train.py",
	  "resources": {"systemMemory": 3000, "cpuCores": 4, "gpus": 2, "gpuModel": "V100"}, "clusterId": ["3", "4"],
	  "jobDataLocations": [{"mountPoint": "/project", "sharePath": "/project/data"}], "dockerUser": "alice"}}`
	status, data, _ := w.m.Do(nil, "POST", v31+"/convert", strings.NewReader(v1))
	if status != 200 {
		t.Fatalf("convert: %d %s", status, data)
	}
	var doc job.SubmissionDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	r := doc.Request
	if r.Resources.CPUs != 4 || r.Resources.GPUs != 2 || r.Resources.CPUMemoryGb != 3 || r.Resources.ClusterID != 3 ||
		len(r.Resources.GPUModel) != 1 || r.Docker.User != "alice" || len(r.Docker.Storage) != 1 ||
		r.Docker.Storage[0].ContainerPath != "/project" || r.Docker.Storage[0].HostPath != "/project/data" {
		t.Fatalf("converted: %s", data)
	}
	if strings.Contains(string(data), `"u:p@`) {
		t.Fatalf("convert shows the registry password: %s", data)
	}
	if strings.Contains(string(data), "uuid") || strings.Contains(string(data), "state") {
		t.Fatalf("convert output has server fields: %s", data)
	}
	status, data, _ = w.m.Do(nil, "POST", v31+"/convert", strings.NewReader(`{"jobDefinition": {"name": "x", "dockerImage": "a", "bogus": 1}}`))
	if status != 400 || !strings.Contains(string(data), `Invalid Key \"jobDefinition.bogus\"`) {
		t.Fatalf("v1 unknown key: %d %s", status, data)
	}
}

func TestSlaveCredentialsRefusedOnUserEndpoints(t *testing.T) {
	w := newWorld(t)
	cert, key, err := w.m.CA.IssueClient(pki.ClientSpec{Kind: pki.KindSlave, URN: "urn:publicid:IDN+test.gpulab+slave+gpu1", Name: "gpu1"})
	if err != nil {
		t.Fatal(err)
	}
	pemData, _ := pki.ClientPEM(cert, key, "")
	tlsCert, _ := pki.LoadClientPEM(pemData, "")
	slave := &testmaster.User{TLS: tlsCert}
	status, data, _ := w.m.Do(slave, "GET", v31+"/jobs", nil)
	if status != 403 || !strings.Contains(string(data), "slave credentials") {
		t.Fatalf("slave on GET jobs: %d %s", status, data)
	}
	status, _, _ = w.m.Do(slave, "POST", v31+"/jobs", strings.NewReader(helloWorld))
	if status != 403 || w.jobCount(t) != 0 {
		t.Fatalf("slave on POST jobs: %d", status)
	}
}

func TestUnknownAPIPathIsJSON404(t *testing.T) {
	w := newWorld(t)
	status, data, _ := w.m.Do(w.alice, "GET", "/api/gpulab/v9.9/jobs", nil)
	if status != 404 || !strings.Contains(string(data), `"error"`) {
		t.Fatalf("unknown version: %d %s", status, data)
	}
}

func TestUsage(t *testing.T) {
	w := newWorld(t)
	id := w.submit(t, w.alice, helloWorld, "")
	ctx := context.Background()
	if _, err := w.m.Store.DB().Exec(`INSERT INTO user_tallies (user_id, tally) VALUES ($1, 3), ($2, 12)`, w.carol.ID, w.bob.ID); err != nil {
		t.Fatal(err)
	}
	_ = ctx
	status, data, _ := w.m.Do(w.alice, "GET", v31+"/usage", nil)
	if status != 200 {
		t.Fatalf("usage: %d %s", status, data)
	}
	u := decode[struct {
		User        string
		Tally       float64
		Rank        int
		ActiveUsers int
		Queued      []struct{ UUID string }
	}](t, data)
	if u.User != "alice" || u.Rank != 1 || u.ActiveUsers != 3 || len(u.Queued) != 1 || u.Queued[0].UUID != id {
		t.Fatalf("alice's usage: %s", data)
	}
	_, data, _ = w.m.Do(w.bob, "GET", v31+"/usage", nil)
	if u := decode[struct{ Rank int }](t, data); u.Rank != 3 {
		t.Fatalf("bob (highest tally) rank: %s", data)
	}
	if status, _, _ := w.m.Do(nil, "GET", v31+"/usage", nil); status != 401 {
		t.Fatalf("usage without credentials: %d", status)
	}
}

// A submission that names an Idempotency-Key is stored once however often it is repeated (a
// client that lost the answer sends it again); keys are per user, and bounded.
func TestSubmitIdempotencyKey(t *testing.T) {
	w := newWorld(t)
	body := `{"name": "once", "request": {"resources": {"cpus": 1, "gpus": 0, "cpuMemoryGb": 1}, "docker": {"image": "debian:stable"}}}`
	post := func(u *testmaster.User, key string) (int, string) {
		status, data, _ := w.m.Do(u, "POST", v31+"/jobs", strings.NewReader(body), "Idempotency-Key", key)
		return status, strings.TrimSpace(string(data))
	}
	s1, first := post(w.alice, "submit-7f3a")
	s2, again := post(w.alice, "submit-7f3a")
	if s1 != 201 || s2 != 201 || first != again || len(first) != 36 {
		t.Fatalf("a repeated submission: %d %q, then %d %q; want 201 and the same uuid twice", s1, first, s2, again)
	}
	if _, other := post(w.carol, "submit-7f3a"); other == first {
		t.Fatalf("another user's submission with the same key got alice's job")
	}
	if _, fresh := post(w.alice, "submit-8b21"); fresh == first {
		t.Fatalf("another key got the same job")
	}
	recs, err := w.m.Store.ListJobs(context.Background(), store.JobFilter{UserIDs: []int64{w.alice.ID}})
	if err != nil || len(recs) != 2 {
		t.Fatalf("alice has %d jobs, want 2 (%v)", len(recs), err)
	}
	status, data, _ := w.m.Do(w.alice, "POST", v31+"/jobs", strings.NewReader(body), "Idempotency-Key", strings.Repeat("k", 129))
	if status != 400 || !strings.Contains(string(data), "Idempotency-Key") {
		t.Fatalf("a key of 129 characters: %d %s", status, data)
	}
}
