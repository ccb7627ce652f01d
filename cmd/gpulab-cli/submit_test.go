package main

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/job"
)

// helloJob is imec's hello-world job with the project written in, and a trailing comma as
// imec's documentation prints them.
const helloJob = `{
    "name": "HelloWorld",
    "description": "Hello world!",
    "owner": {"projectUrn": "urn:publicid:IDN+gpulab.example.org+project+demo"},
    "request": {
        "resources": {"clusterId": 1, "gpus": 1, "cpus": 2, "cpuMemoryGb": 1},
        "docker": {"image": "debian:stable", "command": "echo 'Hello World!' && true"},
        "scheduling": {"interactive": true,}
    }
}
`

const helloJobNoProject = `{
    "name": "HelloWorld",
    "request": {
        "resources": {"gpus": 0, "cpus": 1, "cpuMemoryGb": 1},
        "docker": {"image": "debian:stable"}
    },
    "extra": {"emailOnEnd": ["team@example.org"]}
}`

const helloV1 = `{"jobDefinition": {
    "name": "HelloV1", "description": "v1", "clusterId": 1,
    "dockerImage": "debian:stable", "command": "echo hi",
    "resources": {"systemMemory": 2000, "cpuCores": 2, "gpus": 1},
    "jobDataLocations": [{"mountPoint": "/project"}],
    "portMappings": ["8888/tcp"]
}}`

func TestSubmitSendsFileUnchanged(t *testing.T) {
	e := newTestEnv(t)
	file := e.writeFile("hello.json", helloJob)
	e.vars["GPULAB_PROJECT"] = "other" // the file's own project wins over the environment
	r := e.run("submit", file)
	if r.code != exitOK {
		t.Fatalf("submit:\n%s", r)
	}
	id := strings.TrimSpace(r.stdout)
	if strings.Count(r.stdout, "\n") != 1 || e.m.job(t, id) == nil {
		t.Errorf("stdout must be the job's UUID alone: %q", r.stdout)
	}
	if got := string(e.m.lastSubmit(t)); got != helloJob {
		t.Errorf("the file was changed on its way:\n%s", got)
	}
	if st := e.m.job(t, id).State.Status; st != job.StatusQueued {
		t.Errorf("status = %s, want QUEUED", st)
	}
}

func TestSubmitFromStdinOnHold(t *testing.T) {
	e := newTestEnv(t)
	r := e.runWith(helloJob, nil, "sub", "--hold", "-")
	if r.code != exitOK {
		t.Fatalf("submit --hold -:\n%s", r)
	}
	if st := e.m.job(t, strings.TrimSpace(r.stdout)).State.Status; st != job.StatusOnHold {
		t.Errorf("status = %s, want ONHOLD", st)
	}
	r = e.runWith(helloJob, nil, "submit") // no file at all: stdin too
	if r.code != exitOK {
		t.Errorf("submit from stdin without -:\n%s", r)
	}
	r = e.runWith("", nil, "submit")
	if r.code != exitUsage || !strings.Contains(r.stderr, "no job on stdin") {
		t.Errorf("submit with empty stdin:\n%s", r)
	}
}

func TestSubmitProject(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		env     string
		args    []string
		wantURN string
	}{
		{name: "flag", file: helloJobNoProject, args: []string{"--project", "demo"}, wantURN: demoURN},
		{name: "environment", file: helloJobNoProject, env: "demo", wantURN: demoURN},
		{name: "flag as URN", file: helloJobNoProject, args: []string{"--project", demoURN}, wantURN: demoURN},
		{name: "flag beats file", file: strings.Replace(helloJob, "+project+demo", "+project+old", 1), args: []string{"--project", "demo"}, wantURN: demoURN},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEnv(t)
			if tt.env != "" {
				e.vars["GPULAB_PROJECT"] = tt.env
			}
			file := e.writeFile("job.json", tt.file)
			r := e.run(append(append([]string{"submit"}, tt.args...), file)...)
			if r.code != exitOK {
				t.Fatalf("submit:\n%s", r)
			}
			doc := decodeSubmitted(t, e)
			owner, _ := doc["owner"].(map[string]any)
			if owner["projectUrn"] != tt.wantURN {
				t.Errorf("owner = %v, want projectUrn %s", owner, tt.wantURN)
			}
		})
	}
}

func decodeSubmitted(t *testing.T, e *testEnv) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(e.m.lastSubmit(t), &doc); err != nil {
		t.Fatalf("submitted body is not JSON: %v", err)
	}
	return doc
}

func TestSubmitWithoutProjectShowsAPIDetails(t *testing.T) {
	e := newTestEnv(t)
	file := e.writeFile("job.json", helloJobNoProject)
	r := e.run("submit", file)
	if r.code != exitError || !strings.Contains(r.stderr, "Error: submit job: invalid job request\n  owner.projectUrn: is required\n") {
		t.Errorf("submit without project:\n%s", r)
	}
	r = e.run("submit", "--project", "notmine", file)
	if r.code != exitError || !strings.Contains(r.stderr, "not a member") || !strings.Contains(r.stderr, "Hint: check the project") {
		t.Errorf("submit in a foreign project:\n%s", r)
	}
}

func TestSubmitValidationErrorsListEveryField(t *testing.T) {
	e := newTestEnv(t)
	bad := `{"name": "x", "owner": {"projectUrn": "` + demoURN + `"},
	  "request": {"resourcs": {}, "docker": {"image": "debian:stable"}}}`
	r := e.run("submit", e.writeFile("bad.json", bad))
	if r.code != exitError {
		t.Fatalf("submit of a bad job:\n%s", r)
	}
	for _, w := range []string{"Error: submit job: invalid job request\n", "  request.resourcs: ", "  request.resources: "} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
		}
	}
}

func TestSubmitBrokenJSONWithProject(t *testing.T) {
	e := newTestEnv(t)
	file := e.writeFile("broken.json", "{\n  \"name\": \"x\"\n  \"request\": {}\n}")
	r := e.run("submit", "--project", "demo", file)
	if r.code != exitError || !strings.Contains(r.stderr, "broken.json: invalid JSON at line 3") {
		t.Errorf("broken JSON:\n%s", r)
	}
	if len(e.m.reqs("POST", "jobs")) != 0 {
		t.Error("a broken file was sent to the master")
	}
}

func TestSubmitV1WithProject(t *testing.T) {
	e := newTestEnv(t)
	r := e.run("submit", "--project", "demo", e.writeFile("v1.json", helloV1))
	if r.code != exitOK {
		t.Fatalf("submit v1:\n%s", r)
	}
	doc := decodeSubmitted(t, e)
	if _, ok := doc["jobDefinition"]; ok {
		t.Fatalf("version 1 sent as is although the project had to be added: %v", doc)
	}
	req := doc["request"].(map[string]any)
	if _, ok := req["scheduling"]; ok {
		t.Errorf("converted job carries this client's scheduling defaults: %v", req["scheduling"])
	}
	j := e.m.job(t, strings.TrimSpace(r.stdout))
	if j.Name != "HelloV1" || j.Request.Resources.CPUMemoryGb != 2 || j.Request.Resources.CPUs != 2 || j.Owner.ProjectURN != demoURN {
		t.Errorf("stored job = %+v", j)
	}
}

func TestSubmitEmailsAndKeys(t *testing.T) {
	e := newTestEnv(t)
	keyFile := e.writeFile("id.pub", "ssh-ed25519 AAAAfile alice@laptop\n")
	r := e.run("submit", "--project", "demo", "--email-run", "--email-done=bob@example.org",
		"--email-queued", "--email-halt=a@example.org", "--email-halt=b@example.org",
		"--ssh-pub-key", "ssh-rsa AAAAinline", "--ssh-pub-key", keyFile,
		e.writeFile("job.json", helloJobNoProject))
	if r.code != exitOK {
		t.Fatalf("submit with e-mails:\n%s", r)
	}
	extra := decodeSubmitted(t, e)["request"].(map[string]any)["extra"].(map[string]any)
	want := map[string]any{
		"emailOnRun":   []any{aliceEmail},
		"emailOnEnd":   []any{"team@example.org", "bob@example.org"},
		"emailOnQueue": []any{aliceEmail},
		"emailOnHalt":  []any{"a@example.org", "b@example.org"},
		"sshPubKeys":   []any{"ssh-rsa AAAAinline", "ssh-ed25519 AAAAfile alice@laptop"},
	}
	if !reflect.DeepEqual(extra, want) {
		t.Errorf("request.extra = %v\nwant %v", extra, want)
	}
}

func TestSubmitAndWait(t *testing.T) {
	tests := []struct {
		name     string
		flag     string
		script   []job.Status
		wantCode int
		want     []string
	}{
		{
			name: "wait-run", flag: "--wait-run",
			script:   []job.Status{job.StatusQueued, job.StatusAssigned, job.StatusRunning},
			wantCode: exitOK, want: []string{"to run (QUEUED)", "is ASSIGNED", "is RUNNING"},
		},
		{
			name: "wait-done finished", flag: "--wait-done",
			script:   []job.Status{job.StatusQueued, job.StatusRunning, job.StatusRunning, job.StatusFinished},
			wantCode: exitOK, want: []string{"to end (QUEUED)", "is RUNNING", "is FINISHED"},
		},
		{
			name: "wait-done failed", flag: "--wait-done",
			script:   []job.Status{job.StatusQueued, job.StatusRunning, job.StatusFailed},
			wantCode: exitError, want: []string{"is FAILED", "ended FAILED", "gpulab-cli debug"},
		},
		{
			name: "wait-run cancelled", flag: "--wait-run",
			script:   []job.Status{job.StatusQueued, job.StatusCancelled},
			wantCode: exitError, want: []string{"ended CANCELLED"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEnv(t)
			// The job's UUID is known only after submission: script the next one.
			next := e.m.nextUUID()
			e.m.set(func(m *fakeMaster) { m.script[next] = tt.script })
			r := e.run("submit", tt.flag, e.writeFile("job.json", helloJob))
			if r.code != tt.wantCode {
				t.Fatalf("exit %d, want %d:\n%s", r.code, tt.wantCode, r)
			}
			if strings.Count(r.stdout, "\n") != 1 {
				t.Errorf("stdout must hold only the UUID; progress goes to stderr:\n%s", r)
			}
			for _, w := range tt.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
		})
	}
}

func TestWaitCommandShowsExplanations(t *testing.T) {
	e := newTestEnv(t)
	e.m.add(queuedJob(queuedID, aliceURN))
	e.m.set(func(m *fakeMaster) {
		m.script[queuedID] = []job.Status{job.StatusQueued, job.StatusQueued, job.StatusRunning}
	})
	r := e.run("wait", queuedID[:8], "--wait-run")
	if r.code != exitOK {
		t.Fatalf("wait:\n%s", r)
	}
	if strings.Count(r.stderr, "needs 8 GPUs") != 1 {
		t.Errorf("the queue explanation must be shown once:\n%s", r.stderr)
	}
}

func TestConvert(t *testing.T) {
	e := newTestEnv(t)
	delete(e.vars, "GPULAB_CERT")
	r := e.runWith(helloV1, nil, "convert")
	if r.code != exitOK {
		t.Fatalf("local convert:\n%s", r)
	}
	var doc job.SubmissionDoc
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("convert output is not JSON: %v\n%s", err, r.stdout)
	}
	if doc.Name != "HelloV1" || doc.Request.Resources.CPUMemoryGb != 2 || len(doc.Request.Docker.PortMappings) != 1 {
		t.Errorf("converted = %+v", doc)
	}
	if len(e.m.reqs("POST", "convert")) != 0 {
		t.Error("convert without a certificate called the master")
	}
	// The local conversion leaves to the master what its operator may allow (host ports
	// outside the default range).
	r = e.runWith(`{"jobDefinition": {"name": "p", "dockerImage": "debian", "portMappings": [{"containerPort": 80, "hostPort": 8080}]}}`, nil, "convert")
	if r.code != exitOK || !strings.Contains(r.stdout, `"hostPort": 8080`) {
		t.Errorf("local convert with host port 8080:\n%s", r)
	}

	e.vars["GPULAB_CERT"] = e.certFile
	r = e.runWith(helloV1, nil, "conv", "-")
	if r.code != exitOK || !strings.Contains(r.stdout, "converted by the master") {
		t.Errorf("remote convert:\n%s", r)
	}

	e.vars["GPULAB_API_BASE"] = "https://127.0.0.1:1"
	r = e.runWith(helloV1, nil, "convert")
	if r.code != exitOK || !strings.Contains(r.stderr, "Converting locally instead") || !strings.Contains(r.stdout, `"HelloV1"`) {
		t.Errorf("convert with the master unreachable:\n%s", r)
	}

	delete(e.vars, "GPULAB_CERT")
	r = e.runWith(`{"jobDefinition": {"name": "x", "dockerImage": "debian", "bogus": 1}}`, nil, "convert")
	if r.code != exitError || !strings.Contains(r.stderr, "stdin is not a valid job:\n  jobDefinition.bogus: ") {
		t.Errorf("convert of a bad job:\n%s", r)
	}
}

// imec's v1 file as its old client wrote it: when the client must change it (here an SSH key),
// the file's project stays the project and `email_run: true` becomes the user's address.
func TestSubmitImecV1File(t *testing.T) {
	e := newTestEnv(t)
	data, err := os.ReadFile("../../job/testdata/v1/imec_batch.json")
	if err != nil {
		t.Fatal(err)
	}
	file := e.writeFile("imec_v1.json", strings.Replace(string(data), `"project": "vision"`, `"project": "demo"`, 1))
	r := e.run("submit", "--ssh-pub-key", "ssh-rsa AAAAinline", file)
	if r.code != exitOK {
		t.Fatalf("submit imec v1 file:\n%s", r)
	}
	doc := decodeSubmitted(t, e)
	if owner, _ := doc["owner"].(map[string]any); owner["projectUrn"] != demoURN {
		t.Errorf("owner = %v, want the file's project demo", doc["owner"])
	}
	extra := doc["request"].(map[string]any)["extra"].(map[string]any)
	for _, k := range []string{"emailOnRun", "emailOnEnd"} {
		if got, _ := extra[k].([]any); len(got) != 1 || got[0] != aliceEmail {
			t.Errorf("%s = %v, want [%s]", k, extra[k], aliceEmail)
		}
	}
}
