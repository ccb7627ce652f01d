package main

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/client"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/pki"
)

func TestLog(t *testing.T) {
	e := newTestEnv(t)
	e.m.add(queuedJob(queuedID, aliceURN))
	r := e.run("log", queuedID)
	if r.code != exitOK || r.stdout != "" || !strings.Contains(r.stderr, "No log output (yet?)") {
		t.Errorf("log of a job without output:\n%s", r)
	}
	e.m.set(func(m *fakeMaster) { m.logs[queuedID] = "line 1\nline 2\n" })
	r = e.run("logs", queuedID)
	if r.code != exitOK || r.stdout != "line 1\nline 2\n" {
		t.Errorf("log:\n%s", r)
	}
}

func TestLogFollow(t *testing.T) {
	e := newTestEnv(t)
	e.m.add(queuedJob(queuedID, aliceURN))
	// Each GET of the job (one per idle poll) advances the log and the state.
	e.m.set(func(m *fakeMaster) { m.logs[queuedID] = "a\n" })
	e.m.set(func(m *fakeMaster) { m.logScript[queuedID] = []string{"a\nb\n", "a\nb\nc\n", "a\nb\nc\nd\n"} })
	e.m.set(func(m *fakeMaster) {
		m.script[queuedID] = []job.Status{job.StatusRunning, job.StatusRunning, job.StatusFinished}
	})
	r := e.run("log", "-f", queuedID)
	if r.code != exitOK {
		t.Fatalf("log -f:\n%s", r)
	}
	if r.stdout != "a\nb\nc\nd\n" {
		t.Errorf("followed log = %q, want every line exactly once", r.stdout)
	}
	var ranges []string
	for _, req := range e.m.reqs("GET", "jobs/"+queuedID+"/log") {
		ranges = append(ranges, req.Range)
	}
	if ranges[0] != "" || ranges[1] != "bytes=2-" {
		t.Errorf("Range headers = %q: the first read must be whole, the next from byte 2", ranges)
	}
}

func TestDebug(t *testing.T) {
	e := newTestEnv(t)
	e.m.add(queuedJob(queuedID, aliceURN))
	e.m.set(func(m *fakeMaster) {
		m.events[queuedID] = `[
	  {"time": "2024-05-01T10:00:00Z", "type": "STATUS_CHANGE", "status": "QUEUED"},
	  {"time": "2024-05-01T10:00:05Z", "type": "SCHEDULER", "message": "needs 8 GPUs"},
	  {"time": "2024-05-01T10:01:00Z", "type": "STATUS_CHANGE", "status": "FAILED", "message": "image not found"}
	]`
	})
	r := e.run("debug", queuedID)
	want := "2024-05-01T10:00:00+00:00 STATE CHANGED -> QUEUED\n" +
		"2024-05-01T10:00:05+00:00 LOG SCHEDULER: needs 8 GPUs\n" +
		"2024-05-01T10:01:00+00:00 STATE CHANGED -> FAILED: image not found\n"
	if r.code != exitOK || r.stdout != want {
		t.Errorf("debug:\n%s\nwant:\n%s", r, want)
	}
	r = e.runWith("", nil, "--debug", "debug", "-r", queuedID)
	if r.code != exitOK || !strings.Contains(r.stdout, `"type": "SCHEDULER"`) {
		t.Errorf("debug -r:\n%s", r)
	}
	if !strings.Contains(r.stderr, "--> GET ") || !strings.Contains(r.stderr, "<-- 200 OK") {
		t.Errorf("--debug shows no request lines:\n%s", r.stderr)
	}
	r = e.run("debug", queuedID, "--cert", e.certFile) // a global flag after the command
	if r.code != exitOK {
		t.Errorf("global flag after the command:\n%s", r)
	}
}

func TestVersion(t *testing.T) {
	e := newTestEnv(t)
	delete(e.vars, "GPULAB_CERT")
	r := e.run("version")
	want := "Client version: " + clientVersion() + "\nMaster version: 9.9.9 (" + e.m.apiURL() + "/)\nLatest client version: 9.9.0\n"
	if r.code != exitOK || r.stdout != want {
		t.Errorf("version:\n%s\nwant:\n%s", r, want)
	}
}

func TestMasterURLForms(t *testing.T) {
	e := newTestEnv(t)
	for _, u := range []string{e.m.srv.URL, e.m.srv.URL + "/", e.m.srv.URL + "/api", e.m.apiURL() + "/"} {
		delete(e.vars, "GPULAB_API_BASE")
		r := e.run("--custom-master-url", u, "version")
		if r.code != exitOK {
			t.Errorf("--custom-master-url %s:\n%s", u, r)
		}
	}
	delete(e.vars, "GPULAB_API_BASE")
	e.vars["GPULAB_CUSTOM_MASTER_URL"] = e.m.srv.URL + "/api/" // imec's variable and form
	if r := e.run("version"); r.code != exitOK {
		t.Errorf("GPULAB_CUSTOM_MASTER_URL:\n%s", r)
	}
	// GPULAB_API_BASE as imec's client needs it (up to /api/), and in the older full form.
	delete(e.vars, "GPULAB_CUSTOM_MASTER_URL")
	for _, u := range []string{e.m.srv.URL + "/api/", e.m.apiURL()} {
		e.vars["GPULAB_API_BASE"] = u
		if r := e.run("jobs"); r.code != exitOK {
			t.Errorf("GPULAB_API_BASE=%s:\n%s", u, r)
		}
	}
}

func TestConnectionErrorsGiveHints(t *testing.T) {
	t.Run("server CA unknown", func(t *testing.T) {
		e := newTestEnv(t)
		delete(e.vars, "GPULAB_SERVER_CERT")
		r := e.run("jobs")
		if r.code != exitError || !strings.Contains(r.stderr, "not trusted") || !strings.Contains(r.stderr, "--servercert") {
			t.Errorf("unknown server CA:\n%s", r)
		}
	})
	t.Run("certificate of another CA", func(t *testing.T) {
		e := newTestEnv(t)
		other, err := pki.NewCA("other CA")
		if err != nil {
			t.Fatal(err)
		}
		e.vars["GPULAB_CERT"] = e.writeCert("mallory.pem", other, aliceURN, aliceEmail, "")
		r := e.run("jobs")
		if r.code != exitError || !strings.Contains(r.stderr, "rejected the client certificate") {
			t.Errorf("foreign certificate:\n%s", r)
		}
	})
	t.Run("master down", func(t *testing.T) {
		e := newTestEnv(t)
		e.vars["GPULAB_API_BASE"] = "https://127.0.0.1:1"
		e.vars["GPULAB_RETRY_MAX_TIME"] = "300ms"
		start := time.Now()
		r := e.run("jobs")
		if r.code != exitError || !strings.Contains(r.stderr, "cannot reach the master") || !strings.Contains(r.stderr, "--custom-master-url") {
			t.Errorf("master down:\n%s", r)
		}
		if d := time.Since(start); d < 300*time.Millisecond || d > 5*time.Second {
			t.Errorf("gave up after %s, want after --retry-max-time (300ms)", d)
		}
	})
	t.Run("no such certificate file", func(t *testing.T) {
		e := newTestEnv(t)
		e.vars["GPULAB_CERT"] = e.dir + "/missing.pem"
		r := e.run("jobs")
		if r.code != exitError || !strings.Contains(r.stderr, "read certificate") {
			t.Errorf("missing PEM:\n%s", r)
		}
	})
	t.Run("401", func(t *testing.T) {
		a := newApp(t.Context(), func(string) string { return "" }, strings.NewReader(""), io.Discard, io.Discard)
		if h := a.hint(fmt.Errorf("list jobs: %w", &client.APIError{Status: 401})); !strings.Contains(h, "--cert") {
			t.Errorf("hint for 401 = %q", h)
		}
	})
}

func TestEncryptedCertificate(t *testing.T) {
	e := newTestEnv(t)
	e.vars["GPULAB_CERT"] = e.writeCert("locked.pem", e.m.ca, aliceURN, aliceEmail, "s3cret")
	e.m.add(queuedJob(queuedID, aliceURN))

	r := e.run("jobs", queuedID)
	if r.code != exitError || !strings.Contains(r.stderr, "password") || !strings.Contains(r.stderr, "-p/--password") {
		t.Errorf("encrypted PEM without password:\n%s", r)
	}
	// Commands that need no certificate go on without one, as imec's CLI does.
	r = e.run("clusters", "--short")
	if r.code != exitOK || !strings.Contains(r.stderr, "Continuing without the certificate") {
		t.Errorf("clusters with an unusable certificate:\n%s", r)
	}
	r = e.run("-p", "wrong", "jobs", queuedID)
	if r.code != exitError || !strings.Contains(r.stderr, "wrong password for certificate "+e.vars["GPULAB_CERT"]) {
		t.Errorf("wrong password:\n%s", r)
	}
	r = e.run("--password", "s3cret", "jobs", queuedID)
	if r.code != exitOK {
		t.Errorf("right password:\n%s", r)
	}
	e.vars["GPULAB_PASSWORD"] = "s3cret"
	if r := e.run("jobs", queuedID); r.code != exitOK {
		t.Errorf("GPULAB_PASSWORD:\n%s", r)
	}
	delete(e.vars, "GPULAB_PASSWORD")
	prompted := ""
	r = e.runWith("", func(a *app) {
		a.readPassword = func(prompt string) (string, error) { prompted = prompt; return "s3cret", nil }
	}, "jobs", queuedID)
	if r.code != exitOK || !strings.Contains(prompted, "locked.pem") {
		t.Errorf("password prompt (asked %q):\n%s", prompted, r)
	}
}
