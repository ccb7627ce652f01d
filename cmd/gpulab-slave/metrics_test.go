package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/metrics"
	"github.com/opengpulab/gpulab/protocol"
)

// The slave's /metrics, served as --metrics-listen serves it, times real calls to the Docker
// Engine and to a real master (the heartbeat among them) and reports the log backlog.
func TestSlaveMetricsTimeRealCalls(t *testing.T) {
	testenv.Docker(t) // the engine answers (or the test is skipped / fails as services require)
	m := testmaster.Start(t, testmaster.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mets := metrics.NewSlave(func() int64 { return 4242 })
	addr, err := serveMetrics(ctx, "127.0.0.1:0", mets, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	dc, err := client.NewClientWithOpts(client.FromEnv, timeDocker(mets), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = dc.Close() }()
	if _, err := dc.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := dc.ContainerList(ctx, container.ListOptions{Limit: 1}); err != nil {
		t.Fatal(err)
	}
	cert := m.SlaveCert("metrics-slave", 1)
	caPEM, err := os.ReadFile(m.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	mc, err := protocol.NewClient(m.URL, caPEM, &cert)
	if err != nil {
		t.Fatal(err)
	}
	mc.WrapTransport(mets.MasterTransport)
	if _, err := mc.Register(ctx, protocol.Inventory{InstanceID: "i1", CPUs: 1, MemoryMiB: 1024}); err != nil {
		t.Fatal(err)
	}
	if _, err := mc.Heartbeat(ctx, protocol.Heartbeat{InstanceID: "i1", Accepting: true, Jobs: []protocol.RunningJob{}}); err != nil {
		t.Fatal(err)
	}

	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, body)
	}
	count := func(family, call, code string) uint64 {
		for _, mt := range families[family].GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["call"] == call && labels["code"] == code {
				return mt.GetHistogram().GetSampleCount()
			}
		}
		return 0
	}
	for _, c := range []struct{ family, call, code string }{
		{"gpulab_slave_docker_request_duration_seconds", "HEAD _ping", "200"}, // the client pings with HEAD
		{"gpulab_slave_docker_request_duration_seconds", "GET containers/json", "200"},
		{"gpulab_slave_master_request_duration_seconds", "heartbeat", "200"},
		{"gpulab_slave_master_request_duration_seconds", "register", "200"},
	} {
		if count(c.family, c.call, c.code) < 1 {
			t.Errorf("%s{call=%q,code=%q}: no observation in\n%s", c.family, c.call, c.code, body)
		}
	}
	var backlog *dto.Metric
	if f := families["gpulab_slave_log_backlog_bytes"]; f != nil && len(f.Metric) == 1 {
		backlog = f.Metric[0]
	}
	if backlog.GetGauge().GetValue() != 4242 {
		t.Errorf("log backlog gauge: %v, want the agent's 4242", backlog)
	}
}
