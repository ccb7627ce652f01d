package main

import (
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
)

// failing answers 503 to the requests that match, from the first-th such request on, count
// times; it counts them under its own lock (the fake's handlers run on other goroutines).
func failing(method, path string, first, count int) func(r *http.Request) (int, bool) {
	var mu sync.Mutex
	n := 0
	return func(r *http.Request) (int, bool) {
		if r.Method != method || !strings.HasSuffix(r.URL.Path, path) {
			return 0, false
		}
		mu.Lock()
		defer mu.Unlock()
		n++
		if n >= first && n < first+count {
			return http.StatusServiceUnavailable, false
		}
		return 0, false
	}
}

// A wait goes on through an outage far longer than one call's retries (and than the few
// failed polls it tolerates of other errors), tells the user once that it lost the master
// and once that it is back, and ends as the job does.
func TestWaitKeepsGoingThroughAnOutage(t *testing.T) {
	e := newTestEnv(t)
	e.vars["GPULAB_RETRY_MAX_TIME"] = "20ms"
	e.m.add(queuedJob(queuedID, aliceURN))
	e.m.set(func(m *fakeMaster) {
		m.script[queuedID] = []job.Status{job.StatusQueued, job.StatusRunning}
		m.fault = failing("GET", "/jobs/"+queuedID, 2, 40)
	})
	r := e.run("wait", queuedID, "--wait-run")
	if r.code != exitOK {
		t.Fatalf("wait through an outage:\n%s", r)
	}
	if n := len(e.m.reqs("GET", "jobs/"+queuedID)); n < 42 {
		t.Errorf("%d GETs: the outage was not ridden out", n)
	}
	if strings.Count(r.stderr, "Lost contact with the master") != 1 || strings.Count(r.stderr, "The master answers again") != 1 ||
		!strings.Contains(r.stderr, "is RUNNING") {
		t.Errorf("want one line when the master is lost, one when it is back, then RUNNING:\n%s", r.stderr)
	}
}

// log -f too follows a job through an outage, printing every line exactly once.
func TestLogFollowKeepsGoingThroughAnOutage(t *testing.T) {
	e := newTestEnv(t)
	e.vars["GPULAB_RETRY_MAX_TIME"] = "20ms"
	e.m.add(queuedJob(queuedID, aliceURN))
	e.m.set(func(m *fakeMaster) {
		m.logs[queuedID] = "a\n"
		m.logScript[queuedID] = []string{"a\nb\n", "a\nb\nc\n"}
		m.script[queuedID] = []job.Status{job.StatusRunning, job.StatusFinished}
		logFault, jobFault := failing("GET", "/jobs/"+queuedID+"/log", 2, 15), failing("GET", "/jobs/"+queuedID, 1, 15)
		m.fault = func(r *http.Request) (int, bool) {
			if s, _ := logFault(r); s != 0 {
				return s, false
			}
			return jobFault(r)
		}
	})
	r := e.run("log", "-f", queuedID)
	if r.code != exitOK || r.stdout != "a\nb\nc\n" {
		t.Fatalf("log -f through an outage: want every line once:\n%s", r)
	}
	if !strings.Contains(r.stderr, "Lost contact with the master") {
		t.Errorf("the outage was not reported:\n%s", r.stderr)
	}
}

// A submit answered 503 (the master stored nothing) is sent again, and --debug shows the
// retries.
func TestSubmitRetriedAfter503(t *testing.T) {
	e := newTestEnv(t)
	e.m.set(func(m *fakeMaster) { m.fault = failing("POST", "/jobs", 1, 2) })
	r := e.run("--debug", "submit", e.writeFile("job.json", helloJob))
	if r.code != exitOK {
		t.Fatalf("submit after two 503s:\n%s", r)
	}
	if n := len(e.m.reqs("POST", "jobs")); n != 3 {
		t.Errorf("%d POSTs, want 3", n)
	}
	if strings.Count(r.stderr, "retrying in") != 2 {
		t.Errorf("--debug must show each retry:\n%s", r.stderr)
	}
}

// A submit whose answer was lost is sent again with the same Idempotency-Key, and the master
// answers the repeat with the job the first attempt made: one job, and the user gets its uuid.
func TestSubmitAnswerLostIsRepeatedOnce(t *testing.T) {
	e := newTestEnv(t)
	var posts atomic.Int32
	e.m.set(func(m *fakeMaster) {
		m.fault = func(r *http.Request) (int, bool) {
			return 0, r.Method == http.MethodPost && posts.Add(1) == 1 // the first POST's answer is lost
		}
	})
	r := e.run("submit", e.writeFile("job.json", helloJob))
	if r.code != exitOK {
		t.Fatalf("submit with its first answer lost:\n%s", r)
	}
	seen := e.m.reqs("POST", "jobs")
	if len(seen) != 2 {
		t.Fatalf("%d POSTs, want 2 (the first and its repeat)", len(seen))
	}
	e.m.mu.Lock()
	stored := len(e.m.jobs)
	id := ""
	if stored > 0 {
		id = e.m.jobs[0].UUID
	}
	e.m.mu.Unlock()
	if stored != 1 {
		t.Errorf("the master holds %d jobs, want 1", stored)
	}
	if strings.TrimSpace(r.stdout) != id {
		t.Errorf("submit printed %q, want the uuid %s of the job the first attempt made", r.stdout, id)
	}
}

// Several masters: in GPULAB_API_BASE or --custom-master-url, separated by commas; one that
// refuses connections is passed over.
func TestSeveralMasterURLs(t *testing.T) {
	down, down2 := "https://"+closedAddr(t), "https://"+closedAddr(t)
	e := newTestEnv(t)
	e.m.add(queuedJob(queuedID, aliceURN))
	e.vars["GPULAB_API_BASE"] = down + "/api," + e.m.apiURL()
	if r := e.run("--debug", "jobs", queuedID); r.code != exitOK || !strings.Contains(r.stdout, queuedID) ||
		!strings.Contains(r.stderr, "trying "+e.m.apiURL()) {
		t.Errorf("GPULAB_API_BASE with two masters, the first down:\n%s", r)
	}
	delete(e.vars, "GPULAB_API_BASE")
	if r := e.run("jobs", queuedID, "--custom-master-url", down+" , "+e.m.srv.URL); r.code != exitOK || !strings.Contains(r.stdout, queuedID) {
		t.Errorf("--custom-master-url with two masters, the first down:\n%s", r)
	}
	e.vars["GPULAB_RETRY_MAX_TIME"] = "0"
	e.vars["GPULAB_API_BASE"] = down + "," + down2
	if r := e.run("jobs"); r.code != exitError || !strings.Contains(r.stderr, "now "+down+"/api/gpulab/v3.1/, ") {
		t.Errorf("all masters down: the hint must name them all:\n%s", r)
	}
}

func TestRetryMaxTime(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{"", 0, false},
		{"90s", 90 * time.Second, false},
		{"5m", 5 * time.Minute, false},
		{"30", 30 * time.Second, false},
		{"1.5", 1500 * time.Millisecond, false},
		{"0", -1, false},
		{"0s", -1, false},
		{"-1s", 0, true},
		{"soon", 0, true},
	}
	for _, tt := range tests {
		got, err := parseRetryMaxTime(tt.in)
		if (err != nil) != tt.bad || (!tt.bad && got != tt.want) {
			t.Errorf("parseRetryMaxTime(%q) = %s, %v; want %s (error: %v)", tt.in, got, err, tt.want, tt.bad)
		}
	}
	e := newTestEnv(t)
	if r := e.run("jobs", "--retry-max-time", "soon"); r.code != exitUsage || !strings.Contains(r.stderr, "--retry-max-time") {
		t.Errorf("a bad --retry-max-time:\n%s", r)
	}
}

// Against the real master: `wait` keeps waiting while the master's database is down (the
// master answers 503), and sees the job run once it is back.
func TestWaitThroughRealDatabaseOutage(t *testing.T) {
	run, vars, m := realMasterEnv(t)
	hello, err := os.ReadFile("../../examples/helloworld.json")
	if err != nil {
		t.Fatal(err)
	}
	r := run(string(hello), "submit", "--project", "demo")
	id := strings.TrimSpace(r.stdout)
	if r.code != exitOK || len(id) != 36 {
		t.Fatalf("submit: %s", r)
	}
	vars["GPULAB_RETRY_MAX_TIME"] = "500ms" // each poll gives up fast; the wait must not
	done := make(chan result, 1)
	go func() { done <- run("", "wait", id, "--wait-run") }()
	time.Sleep(500 * time.Millisecond) // the wait has (most likely) seen the job QUEUED
	heal := m.DatabaseOutage()
	time.Sleep(2 * time.Second)
	heal()
	m.ForceJobStatus(id, job.StatusRunning)
	r = <-done
	if r.code != exitOK || !strings.Contains(r.stderr, "Lost contact with the master") ||
		!strings.Contains(r.stderr, "The master answers again") || !strings.Contains(r.stderr, "RUNNING") {
		t.Errorf("wait through a database outage:\n%s", r)
	}
}

// closedAddr returns a loopback address where nothing listens: connections are refused.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}
