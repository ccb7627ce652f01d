package web_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/web"
)

// lockedBuffer is a log destination shared by the master's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// scrape reads the master's /metrics as Prometheus does and parses it with Prometheus's own
// text parser.
func scrape(t *testing.T, m *testmaster.Master) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	c := m.Client(nil)
	defer c.CloseIdleConnections()
	resp, err := c.Get(m.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return families, string(body)
}

// sample finds the metric of a family whose labels include want.
func sample(families map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	f := families[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.Metric {
		for k, v := range want {
			found := false
			for _, l := range m.Label {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		return m
	}
	return nil
}

func gaugeValue(m *dto.Metric) float64 {
	if m == nil {
		return -1e9
	}
	if m.Gauge != nil {
		return m.Gauge.GetValue()
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return -1e9
}

// A real master with its scheduler, a slave speaking the real protocol and a job that runs:
// /metrics then shows the jobs by state, GPUs, slaves, heartbeats, the queue wait, the passes,
// API latency by route pattern and the database pool, with sane values and no user's name; the
// request log has one JSON line per request with its id, route, caller and status.
func TestMetricsAfterRealActivity(t *testing.T) {
	logs := &lockedBuffer{}
	log := slog.New(web.WithRequestID(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	m := testmaster.Start(t, testmaster.Options{Scheduler: true, Log: log})
	alice := m.AddUser("alice", false, "", "vision")
	cert := m.SlaveCert("metrics1", 1)
	caPEM, err := os.ReadFile(m.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	sl, err := protocol.NewClient(m.URL, caPEM, &cert)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := sl.Register(ctx, protocol.Inventory{InstanceID: "i1", CPUs: 8, MemoryMiB: 16384,
		GPUs: []protocol.GPU{{Index: 0, UUID: "GPU-a", Model: "Fake V100"}, {Index: 1, UUID: "GPU-b", Model: "Fake V100"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := sl.Heartbeat(ctx, protocol.Heartbeat{InstanceID: "i1", Accepting: true, Jobs: []protocol.RunningJob{}}); err != nil {
		t.Fatal(err)
	}
	submit := func(gpus string) string {
		status, data, hdr := m.Do(alice, "POST", v31+"/jobs", strings.NewReader(`{"name": "metrics", "request": {"resources": {"cpus": 1, "gpus": `+gpus+`, "cpuMemoryGb": 1},
		  "docker": {"image": "busybox"}}}`), web.RequestIDHeader, "client-id-1")
		if status != http.StatusCreated {
			t.Fatalf("submit: %d %s", status, data)
		}
		if hdr.Get(web.RequestIDHeader) != "client-id-1" {
			t.Errorf("a sane X-Request-Id is echoed: got %q", hdr.Get(web.RequestIDHeader))
		}
		return strings.TrimSpace(string(data))
	}
	running := submit("1")
	// The scheduler places it; the slave starts it as a slave does.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		rec, err := m.Store.GetJob(ctx, running)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Job.State.Status == job.StatusAssigned {
			for _, step := range [][2]job.Status{{job.StatusAssigned, job.StatusStarting}, {job.StatusStarting, job.StatusRunning}} {
				if err := sl.Update(ctx, protocol.StateUpdate{JobUUID: running, Attempt: rec.Attempt, From: step[0], To: step[1]}); err != nil {
					t.Fatalf("%s → %s: %v", step[0], step[1], err)
				}
			}
			// The RUNNING report again (a retry after a lost reply): a success, and the job's
			// wait in the queue is not counted twice (the queue wait's one observation below).
			if err := sl.Update(ctx, protocol.StateUpdate{JobUUID: running, Attempt: rec.Attempt, From: job.StatusStarting, To: job.StatusRunning}); err != nil {
				t.Fatalf("RUNNING again: %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the scheduler did not assign the job within 2 minutes: %s", rec.Job.State.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
	queued := submit("2") // one GPU is left: it waits
	status, _, hdr := m.Do(alice, "GET", v31+"/jobs/"+running, nil, web.RequestIDHeader, "bad id with spaces")
	if status != http.StatusOK || hdr.Get(web.RequestIDHeader) == "" || strings.Contains(hdr.Get(web.RequestIDHeader), " ") {
		t.Errorf("an insane X-Request-Id is replaced by a fresh one: %d %q", status, hdr.Get(web.RequestIDHeader))
	}

	families, text := scrape(t, m)
	checks := []struct {
		name   string
		labels map[string]string
		ok     func(float64) bool
		want   string
	}{
		{"gpulab_jobs", map[string]string{"state": "RUNNING", "cluster": "1"}, func(v float64) bool { return v == 1 }, "1 running job on cluster 1"},
		{"gpulab_jobs", map[string]string{"state": "QUEUED"}, func(v float64) bool { return v == 1 }, "1 queued job"},
		{"gpulab_gpus_total", map[string]string{"cluster": "1", "model": "Fake V100"}, func(v float64) bool { return v == 2 }, "2 GPUs"},
		{"gpulab_gpus_used", map[string]string{"cluster": "1", "model": "Fake V100"}, func(v float64) bool { return v == 1 }, "1 GPU used"},
		{"gpulab_slaves", map[string]string{"cluster": "1", "state": "online"}, func(v float64) bool { return v == 1 }, "1 online slave"},
		{"gpulab_slave_heartbeat_age_seconds", map[string]string{"slave": "metrics1"}, func(v float64) bool { return v >= 0 && v < 600 }, "a recent heartbeat"},
		{"go_sql_open_connections", map[string]string{"db_name": "gpulab"}, func(v float64) bool { return v >= 1 }, "an open connection"},
		{"gpulab_metrics_database_errors_total", nil, func(v float64) bool { return v == 0 }, "no database error"},
		{"gpulab_db_connection_shed_total", map[string]string{"class": "slave"}, func(v float64) bool { return v == 0 }, "no slave call refused"},
		{"gpulab_db_connection_shed_total", map[string]string{"class": "people"}, func(v float64) bool { return v == 0 }, "no request refused"},
		// The slave's three reports (STARTING, RUNNING, RUNNING again), each made through the
		// state changes' queue in a statement it may share.
		{"gpulab_job_changes_total", nil, func(v float64) bool { return v >= 3 }, "the slave's 3 reports, at least"},
		{"gpulab_job_change_statements_total", nil, func(v float64) bool { return v >= 1 }, "at least one statement"},
	}
	for _, c := range checks {
		if v := gaugeValue(sample(families, c.name, c.labels)); !c.ok(v) {
			t.Errorf("%s%v = %v, want %s", c.name, c.labels, v, c.want)
		}
	}
	if h := sample(families, "gpulab_job_queue_wait_seconds", map[string]string{"cluster": "1"}); h == nil || h.Histogram.GetSampleCount() != 1 ||
		h.Histogram.GetSampleSum() < 0 || h.Histogram.GetSampleSum() > 600 {
		t.Errorf("queue wait: want one observation of a few seconds, got %v", h)
	}
	if h := sample(families, "gpulab_scheduler_pass_duration_seconds", nil); h == nil || h.Histogram.GetSampleCount() < 1 || h.Histogram.GetSampleSum() <= 0 {
		t.Errorf("scheduler passes: want some, got %v", h)
	}
	if h := sample(families, "gpulab_scheduler_placements_per_pass", nil); h == nil || h.Histogram.GetSampleSum() < 1 {
		t.Errorf("placements: want at least the one job, got %v", h)
	}
	for _, route := range []struct{ pattern, code string }{{"POST /api/gpulab/v3.1/jobs", "201"}, {"GET /api/gpulab/v3.1/jobs/{id}", "200"},
		{"POST /api/slave/v1/update", "200"}} {
		h := sample(families, "gpulab_http_request_duration_seconds", map[string]string{"route": route.pattern, "code": route.code})
		if h == nil || h.Histogram.GetSampleCount() < 1 {
			t.Errorf("API latency of %s (%s): none in\n%s", route.pattern, route.code, grepLines(text, "gpulab_http_request_duration_seconds_count"))
		}
	}
	for _, leak := range []string{"alice", running, queued} {
		if strings.Contains(text, leak) {
			t.Errorf("/metrics names %q: no user's data, no raw path", leak)
		}
	}

	// The owner halts his running job: a halt with reason USER.
	if status, data, _ := m.Do(alice, "PUT", v31+"/jobs/"+running+"/state/status", strings.NewReader(`"MUSTHALT"`)); status != http.StatusOK {
		t.Fatalf("halt: %d %s", status, data)
	}
	families, _ = scrape(t, m)
	if v := gaugeValue(sample(families, "gpulab_job_halts_total", map[string]string{"reason": "USER"})); v != 1 {
		t.Errorf("gpulab_job_halts_total{reason=USER} = %v, want 1", v)
	}

	// The request log: JSON lines, the caller named, the route pattern, never a query string.
	status, _, _ = m.Do(alice, "GET", v31+"/jobs?token=s3cr3t-value", nil)
	if status != http.StatusOK {
		t.Fatalf("list: %d", status)
	}
	waitFor(t, "the list's log line", func() bool { return strings.Contains(logs.String(), `"route":"GET /api/gpulab/v3.1/jobs"`) })
	var submitLine, slaveLine, listLine map[string]any
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("a log line is not JSON: %q", sc.Text())
		}
		if l["msg"] != "request" {
			continue
		}
		switch {
		case l["route"] == "POST /api/gpulab/v3.1/jobs" && l["request_id"] == "client-id-1":
			submitLine = l
		case l["route"] == "POST /api/slave/v1/update":
			slaveLine = l
		case l["route"] == "GET /api/gpulab/v3.1/jobs":
			listLine = l
		}
	}
	if submitLine == nil || submitLine["caller"] != "user:alice" || submitLine["status"] != float64(201) || submitLine["via"] != "certificate" ||
		submitLine["bytes"].(float64) < 36 || submitLine["duration_ms"] == nil {
		t.Errorf("submit's log line: %v", submitLine)
	}
	if slaveLine == nil || slaveLine["caller"] != "slave:metrics1" {
		t.Errorf("a slave's log line: %v", slaveLine)
	}
	if listLine == nil || listLine["request_id"] == "" {
		t.Errorf("list's log line: %v", listLine)
	}
	if strings.Contains(logs.String(), "s3cr3t-value") {
		t.Errorf("the log holds a query string's value")
	}
}

func grepLines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// With the database away, /metrics still answers with the process's metrics and counts the
// failed read instead of failing the scrape; the gauges come back with the database.
func TestMetricsDuringDatabaseOutage(t *testing.T) {
	m := testmaster.Start(t, testmaster.Options{})
	cert := m.SlaveCert("outage1", 1)
	caPEM, err := os.ReadFile(m.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	sl, err := protocol.NewClient(m.URL, caPEM, &cert)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sl.Register(context.Background(), protocol.Inventory{InstanceID: "i1", CPUs: 1, MemoryMiB: 1024}); err != nil {
		t.Fatal(err)
	}
	heal := m.DatabaseOutage()
	families, _ := scrape(t, m)
	if v := gaugeValue(sample(families, "gpulab_metrics_database_errors_total", nil)); v < 1 {
		t.Errorf("database errors during the outage: %v, want at least 1", v)
	}
	if families["go_goroutines"] == nil || families["gpulab_slaves"] != nil {
		t.Errorf("during the outage: want the process's metrics and no database gauge, got go_goroutines %v, gpulab_slaves %v",
			families["go_goroutines"] != nil, families["gpulab_slaves"] != nil)
	}
	heal()
	waitFor(t, "the slaves gauge after the outage", func() bool {
		time.Sleep(200 * time.Millisecond)
		families, _ := scrape(t, m)
		return gaugeValue(sample(families, "gpulab_slaves", map[string]string{"cluster": "1"})) == 1
	})
}
