package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testmaster"
)

// realMasterEnv runs the CLI in-process against a real master (real Postgres, TLS, client
// certificates). It skips without Postgres, and fails then under GPULAB_REQUIRE_SERVICES=1.
func realMasterEnv(t *testing.T) (run func(stdin string, args ...string) result, vars map[string]string, m *testmaster.Master) {
	t.Helper()
	m = testmaster.Start(t, testmaster.Options{})
	u := m.AddUser("alice", false, "", "demo")
	vars = map[string]string{
		"GPULAB_CERT": u.CertFile, "GPULAB_API_BASE": m.APIBase, "GPULAB_SERVER_CERT": m.CAFile, "TZ": "UTC",
	}
	run = func(stdin string, args ...string) result {
		t.Helper()
		var out, errOut strings.Builder
		a := newApp(t.Context(), func(k string) string { return vars[k] }, strings.NewReader(stdin), &out, &errOut)
		a.waitPoll, a.logPoll = 10*time.Millisecond, 10*time.Millisecond
		r := result{code: a.main(args), stdout: out.String(), stderr: errOut.String()}
		t.Logf("$ gpulab-cli %s\n%s", strings.Join(args, " "), r)
		return r
	}
	return run, vars, m
}

func TestAgainstRealMaster(t *testing.T) {
	run, vars, m := realMasterEnv(t)
	hello, err := os.ReadFile("../../examples/helloworld.json")
	if err != nil {
		t.Fatal(err)
	}
	r := run(string(hello), "submit", "--project", "demo", "--email-run", "--ssh-pub-key", "ssh-ed25519 AAAA alice")
	id := strings.TrimSpace(r.stdout)
	if r.code != exitOK || len(id) != 36 {
		t.Fatalf("submit: %s", r)
	}
	if r := run("", "jobs"); r.code != exitOK || !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "QUEUED") {
		t.Errorf("jobs: %s", r)
	}
	if r := run("", "jobs", id[:8]); r.code != exitOK || !strings.Contains(r.stdout, "Job ID: "+id) {
		t.Errorf("jobs ID: %s", r)
	}
	if r := run("", "jobs", id, "-d"); r.code != exitOK || !strings.Contains(r.stdout, `"emailOnRun"`) {
		t.Errorf("jobs -d: %s", r)
	}
	for _, args := range [][]string{{"hold", id}, {"release", id}, {"hold", "--all"}, {"release", "-a"}} {
		if r := run("", args...); r.code != exitOK || strings.TrimSpace(r.stdout) != id {
			t.Errorf("%v: %s", args, r)
		}
	}
	if r := run("", "debug", id); r.code != exitOK || !strings.Contains(r.stdout, "STATE CHANGED -> ONHOLD") {
		t.Errorf("debug: %s", r)
	}
	if r := run("", "clusters", "--short"); r.code != exitOK || !strings.Contains(r.stdout, "| Cluster | Version |") {
		t.Errorf("clusters --short: %s", r)
	}
	if r := run("", "version"); r.code != exitOK || !strings.Contains(r.stdout, "Master version: test") {
		t.Errorf("version: %s", r)
	}
	v1 := `{"jobDefinition": {"name": "v1", "dockerImage": "debian:stable", "command": "echo hi",
	  "resources": {"systemMemory": 3000, "cpuCores": 2, "gpus": 0}}}`
	if r := run(v1, "convert"); r.code != exitOK || !strings.Contains(r.stdout, `"cpuMemoryGb": 3`) {
		t.Errorf("convert: %s", r)
	}
	r = run(v1, "submit", "--project", "demo")
	v1ID := strings.TrimSpace(r.stdout)
	if r.code != exitOK || len(v1ID) != 36 {
		t.Errorf("submit v1: %s", r)
	}
	if r := run(`{"name": "bad", "request": {"resourcs": {}}}`, "submit", "--project", "demo"); r.code != exitError ||
		!strings.Contains(r.stderr, `  request.resourcs: Invalid key "request.resourcs"`) {
		t.Errorf("submit of a bad job: %s", r)
	}
	if r := run("", "cancel", id); r.code != exitOK {
		t.Errorf("cancel: %s", r)
	}
	if r := run("", "wait", id, "--wait-done"); r.code != exitError || !strings.Contains(r.stderr, "ended CANCELLED") {
		t.Errorf("wait --wait-done on a cancelled job: %s", r)
	}
	if r := run("", "rm", id); r.code != exitOK {
		t.Errorf("rm: %s", r)
	}
	if r := run("", "jobs", "--deleted", "-q"); r.code != exitOK || strings.TrimSpace(r.stdout) != id {
		t.Errorf("jobs --deleted -q: %s", r)
	}

	bob := m.AddUser("bob", false, "s3cret", "demo")
	vars["GPULAB_CERT"] = bob.CertFile
	if r := run("", "jobs"); r.code != exitError || !strings.Contains(r.stderr, "-p/--password") {
		t.Errorf("encrypted certificate without password: %s", r)
	}
	if r := run("", "-p", "s3cret", "jobs"); r.code != exitOK {
		t.Errorf("encrypted certificate with password: %s", r)
	}
	// imec's `jobs -u`: my jobs plus everybody's running ones (alice's v1 job, made RUNNING here).
	if _, err := m.Store.DB().Exec(`UPDATE jobs SET status = 'RUNNING' WHERE uuid = $1`, v1ID); err != nil {
		t.Fatal(err)
	}
	r = run(string(hello), "-p", "s3cret", "submit", "--project", "demo")
	bobID := strings.TrimSpace(r.stdout)
	if r := run("", "-p", "s3cret", "jobs", "-u", "-q"); r.code != exitOK || !strings.Contains(r.stdout, v1ID) || !strings.Contains(r.stdout, bobID) {
		t.Errorf("jobs -u (mine %s plus others' running %s): %s", bobID, v1ID, r)
	}
	if r := run("", "-p", "s3cret", "jobs", "-q"); r.code != exitOK || strings.Contains(r.stdout, v1ID) || !strings.Contains(r.stdout, bobID) {
		t.Errorf("jobs (only mine %s): %s", bobID, r)
	}
	delete(vars, "GPULAB_SERVER_CERT")
	if r := run("", "-p", "s3cret", "jobs"); r.code != exitError || !strings.Contains(r.stderr, "--servercert") {
		t.Errorf("master CA not trusted: %s", r)
	}
}
