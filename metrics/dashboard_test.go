package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// exported is every metric name the master and the slave export (histograms with their
// _bucket, _sum and _count series), from the collectors' own descriptions.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	m := NewMaster(nil, MasterOptions{})
	s := NewSlave(func() int64 { return 0 })
	cs := []prometheus.Collector{m.passDuration, m.placements, m.halts, m.queueWait, m.requests,
		newGaugeCollector(nil, MasterOptions{}), collectors.NewDBStatsCollector(nil, "gpulab"), s.docker, s.master,
		s.backlog}
	cs = append(cs, storeCounters(nil)...)
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	ch := make(chan *prometheus.Desc, 100)
	for _, c := range cs {
		c.Describe(ch)
	}
	close(ch)
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
				names[m[1]+suffix] = true
			}
		}
	}
	return names
}

// contrib/grafana/gpulab.json is a dashboard Grafana imports (the shape of an exported one,
// with its Prometheus data source as an input), and every expression it plots names metrics
// GPULab really exports.
func TestGrafanaDashboardUsesRealSeries(t *testing.T) {
	data, err := os.ReadFile("../contrib/grafana/gpulab.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title, UID    string
		SchemaVersion int                               `json:"schemaVersion"`
		Inputs        []struct{ Name, PluginID string } `json:"__inputs"`
		Panels        []struct {
			Type, Title string
			GridPos     *struct{ H, W, X, Y int }      `json:"gridPos"`
			Targets     []struct{ Expr, RefID string } `json:"targets"`
		}
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if dash.Title == "" || dash.UID == "" || dash.SchemaVersion < 30 || len(dash.Inputs) != 1 || dash.Inputs[0].Name != "DS_PROMETHEUS" {
		t.Fatalf("not an importable dashboard: title %q uid %q schema %d inputs %v", dash.Title, dash.UID, dash.SchemaVersion, dash.Inputs)
	}
	names := exported(t)
	metric := regexp.MustCompile(`\b(gpulab_[a-z_]+|go_sql_[a-z_]+)\b`)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if p.GridPos == nil || p.GridPos.W <= 0 || p.GridPos.H <= 0 {
			t.Errorf("panel %q has no place", p.Title)
		}
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q plots nothing", p.Title)
		}
		for _, tg := range p.Targets {
			found := metric.FindAllString(tg.Expr, -1)
			if len(found) == 0 || tg.RefID == "" {
				t.Errorf("panel %q: expression %q names no GPULab metric", p.Title, tg.Expr)
			}
			for _, n := range found {
				if !names[n] {
					t.Errorf("panel %q: %s is not exported (expression %q)", p.Title, n, tg.Expr)
				}
				used[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")] = true
			}
		}
	}
	for _, n := range []string{"gpulab_jobs", "gpulab_job_queue_wait_seconds", "gpulab_gpus_used", "gpulab_gpus_total", "gpulab_slaves",
		"gpulab_slave_heartbeat_age_seconds", "gpulab_http_request_duration_seconds", "gpulab_scheduler_pass_duration_seconds",
		"gpulab_job_halts_total", "gpulab_slave_docker_request_duration_seconds", "gpulab_slave_log_backlog_bytes", "gpulab_mail_outbox_depth"} {
		if !used[n] {
			t.Errorf("the dashboard does not plot %s", n)
		}
	}
}
