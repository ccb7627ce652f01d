package metrics

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Slave is a slave's metrics: its calls to the Docker Engine and to the master (the heartbeat
// among them), and its log shipping backlog.
type Slave struct {
	reg     *prometheus.Registry
	docker  *prometheus.HistogramVec
	master  *prometheus.HistogramVec
	backlog prometheus.GaugeFunc
}

// NewSlave registers the slave's metrics; logBacklog reports the bytes of job output read and
// not yet taken by the master (slave.Agent.LogBacklog), read at scrape time.
func NewSlave(logBacklog func() int64) *Slave {
	reg := prometheus.NewRegistry()
	s := &Slave{
		reg: reg,
		docker: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: "slave", Name: "docker_request_duration_seconds",
			Help:    "Latency of the slave's calls to the Docker Engine API by call (path with ids replaced) and status code (\"error\": no answer).",
			Buckets: []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}},
			[]string{"call", "code"}),
		master: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: "slave", Name: "master_request_duration_seconds",
			Help:    "Latency of the slave's calls to the master by call (heartbeat, next (a long poll), update, log, ...) and status code.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}},
			[]string{"call", "code"}),
	}
	reg.MustRegister(s.docker, s.master, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if logBacklog == nil {
		logBacklog = func() int64 { return 0 }
	}
	s.backlog = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: "slave", Name: "log_backlog_bytes",
		Help: "Bytes of job output read from containers and not yet taken by the master."},
		func() float64 { return float64(logBacklog()) })
	reg.MustRegister(s.backlog)
	return s
}

// Handler serves the slave's metrics.
func (s *Slave) Handler() http.Handler {
	return promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg})
}

// Gatherer is the registry, for tests and the dashboard check.
func (s *Slave) Gatherer() prometheus.Gatherer { return s.reg }

// DockerTransport times the Docker Engine calls made through next.
func (s *Slave) DockerTransport(next http.RoundTripper) http.RoundTripper {
	return timed(next, s.docker, DockerCall)
}

// MasterTransport times the calls to the master made through next.
func (s *Slave) MasterTransport(next http.RoundTripper) http.RoundTripper {
	return timed(next, s.master, MasterCall)
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// timed observes each round trip's time to the response headers (a streamed body, such as
// logs or events, is not waited for).
func timed(next http.RoundTripper, h *prometheus.HistogramVec, call func(method, path string) string) http.RoundTripper {
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		start := time.Now()
		resp, err := next.RoundTrip(r)
		code := "error"
		if err == nil {
			code = strconv.Itoa(resp.StatusCode)
		}
		h.WithLabelValues(call(r.Method, r.URL.Path), code).Observe(time.Since(start).Seconds())
		return resp, err
	})
}

// dockerVerbs are second path segments of the Docker API that are actions, not ids.
var dockerVerbs = map[string]bool{"create": true, "json": true, "prune": true, "load": true, "search": true, "get": true}

// DockerCall names a Docker API call by its method and path without version and ids, so its
// label stays bounded: "POST containers/{id}/start", "GET containers/json",
// "POST images/create", "GET images/{name}/json".
func DockerCall(method, path string) string {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	if len(segs) > 0 && strings.HasPrefix(segs[0], "v1.") {
		segs = segs[1:]
	}
	switch {
	case len(segs) == 0 || segs[0] == "":
		return method + " /"
	case len(segs) == 1:
		return method + " " + segs[0]
	case len(segs) == 2 && dockerVerbs[segs[1]]:
		return method + " " + segs[0] + "/" + segs[1]
	case len(segs) == 2:
		return method + " " + segs[0] + "/{id}"
	case segs[0] == "images":
		// Image names hold slashes: images/<name...>/json.
		return method + " images/{name}/" + segs[len(segs)-1]
	default:
		return method + " " + segs[0] + "/{id}/" + segs[len(segs)-1]
	}
}

// MasterCall names a call of the slave protocol by its last path segment ("heartbeat").
func MasterCall(_, path string) string {
	path = strings.TrimRight(path, "/")
	return path[strings.LastIndex(path, "/")+1:]
}
