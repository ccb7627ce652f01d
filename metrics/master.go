// Package metrics holds the Prometheus metrics of the master and the slave: what the code
// observes as it runs (scheduler passes, queue waits, halts, API latency, Docker and protocol
// calls) and, for the master, a collector that reads the cluster's gauges (jobs, GPUs, slaves,
// heartbeats) from the database at scrape time, cached briefly so that several scrapers cost
// one query. No metric carries a user's or project's name.
package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/opengpulab/gpulab/store"
)

// Namespace prefixes every GPULab metric.
const Namespace = "gpulab"

// GaugeCacheTTL is how long the database gauges of one scrape serve the next ones.
const GaugeCacheTTL = 5 * time.Second

// MasterOptions configure the master's metrics.
type MasterOptions struct {
	// OutboxDepth, when set, reports the mails waiting to be sent (the e-mail outbox); it is
	// read at scrape time like the other gauges. Unset: gpulab_mail_outbox_depth is absent.
	OutboxDepth func(ctx context.Context) (int, error)
	// Log receives the scrape's database errors (the gauges are then left out of that scrape).
	Log *slog.Logger
}

// Master is the master's metrics. A nil *Master observes nothing, so parts built without
// metrics (tests, the simulator) need no checks.
type Master struct {
	reg          *prometheus.Registry
	passDuration prometheus.Histogram
	placements   prometheus.Histogram
	halts        *prometheus.CounterVec
	queueWait    *prometheus.HistogramVec
	requests     *prometheus.HistogramVec
	drift        prometheus.Counter
}

// NewMaster registers the master's metrics, the database gauges of st, its connection pool's
// statistics and the Go runtime's and process's.
func NewMaster(st *store.Store, opts MasterOptions) *Master {
	reg := prometheus.NewRegistry()
	m := &Master{
		reg: reg,
		passDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "scheduler_pass_duration_seconds",
			Help:    "Duration of one scheduler pass on the leader (housekeeping, snapshot, plan and apply).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12)}),
		placements: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "scheduler_placements_per_pass",
			Help: "Jobs placed on slaves by one scheduler pass.", Buckets: []float64{0, 1, 2, 5, 10, 20, 50, 100, 200, 500}}),
		halts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "job_halts_total",
			Help: "Halts of running jobs asked for, by reason: SCORE, CLUSTER, RESERVATION (the scheduler) or USER (the owner or an admin)."},
			[]string{"reason"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "job_queue_wait_seconds",
			Help:    "Time from a job's (latest) QUEUED to RUNNING, by the cluster it runs on.",
			Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 24 * 3600, 3 * 24 * 3600, 7 * 24 * 3600}},
			[]string{"cluster"}),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "http_request_duration_seconds",
			Help:    "Latency of the master's HTTP requests by route pattern (not the path), method and status code.",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}},
			[]string{"route", "method", "code"}),
		drift: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "scheduler_memory_drift_total",
			Help: "Jobs the scheduler leader remembered differently from what its periodic full read found (a bug when above zero)."}),
	}
	reg.MustRegister(m.passDuration, m.placements, m.halts, m.queueWait, m.requests, m.drift,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if st != nil {
		reg.MustRegister(collectors.NewDBStatsCollector(st.DB(), "gpulab"), newGaugeCollector(st, opts))
		reg.MustRegister(storeCounters(st)...)
		beatBuckets := prometheus.ExponentialBuckets(0.001, 2, 14) // 1 ms … 8 s
		took := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "heartbeat_statement_duration_seconds",
			Help: "Duration of one statement recording heartbeats (the database's share of a heartbeat's latency).", Buckets: beatBuckets})
		waited := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "heartbeat_statement_wait_seconds",
			Help: "How long the oldest heartbeat of a statement waited for it to be sent (all statement slots were busy).", Buckets: beatBuckets})
		reg.MustRegister(took, waited)
		st.ObserveBeats(func(_ int, w, d time.Duration) {
			took.Observe(d.Seconds())
			waited.Observe(w.Seconds())
		})
	}
	return m
}

// storeCounters are the series read from the store when scraped: heartbeats and their
// statements, waits for a connection. (They describe themselves without a store, for the
// dashboard's test.)
func storeCounters(st *store.Store) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: Namespace, Name: "heartbeat_statements_total",
			Help: "Statements that recorded slaves' heartbeats (several heartbeats share one when they arrive together)."},
			func() float64 { n, _ := st.BeatStats(); return float64(n) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: Namespace, Name: "heartbeats_recorded_total",
			Help: "Slaves' heartbeats sent to the database; divided by gpulab_heartbeat_statements_total, the mean batch."},
			func() float64 { _, n := st.BeatStats(); return float64(n) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: Namespace, Name: "job_change_statements_total",
			Help: "Statements that made jobs' state changes (slaves' reports, ends, cancels; changes that arrive together share one)."},
			func() float64 { n, _ := st.ChangeStats(); return float64(n) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: Namespace, Name: "job_changes_total",
			Help: "Jobs' state changes sent to the database; divided by gpulab_job_change_statements_total, the mean batch."},
			func() float64 { _, n := st.ChangeStats(); return float64(n) }),
		// The requests' pool hands its connections out through the store's connQueue (slaves'
		// calls and people's in turn, each first come first served, newest first when
		// overloaded): the waits are there, not in go_sql_wait_count_total.
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: Namespace, Name: "db_connection_waits_total",
			Help: "Statements and transactions that found every connection of the master's pool taken and waited for one."},
			func() float64 { return float64(st.ConnWaits().Count) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: Namespace, Name: "db_connection_wait_seconds_total",
			Help: "Time statements and transactions waited for a connection of the master's pool, all together."},
			func() float64 { return st.ConnWaits().Total.Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "db_connection_waiting",
			Help: "Statements and transactions waiting for a connection of the master's pool now (a sustained queue: raise --db-max-conns if Postgres has cores to spare)."},
			func() float64 { return float64(st.ConnWaits().Waiting) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: Namespace, Name: "db_connection_shed_total",
			Help: shedHelp, ConstLabels: prometheus.Labels{"class": "slave"}},
			func() float64 { return float64(st.ConnWaits().ShedSlaves) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: Namespace, Name: "db_connection_shed_total",
			Help: shedHelp, ConstLabels: prometheus.Labels{"class": "people"}},
			func() float64 { return float64(st.ConnWaits().ShedPeople) }),
	}
}

// shedHelp is the help of gpulab_db_connection_shed_total, whose class is "slave" for the slave
// agents' own calls (which retry by themselves) and "people" for everyone else's requests.
const shedHelp = "Requests refused with 503 (Retry-After) because they waited 15 s for a connection of the master's pool while it was overloaded and newer requests went first; class slave: the slave agents' own calls, people: every other request."

// Handler serves the metrics in Prometheus's text format.
func (m *Master) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, ErrorHandling: promhttp.ContinueOnError})
}

// Gatherer is the registry, for tests and the dashboard check.
func (m *Master) Gatherer() prometheus.Gatherer { return m.reg }

// ObservePass records one scheduler pass and the jobs it placed.
func (m *Master) ObservePass(d time.Duration, placed int) {
	if m == nil {
		return
	}
	m.passDuration.Observe(d.Seconds())
	m.placements.Observe(float64(placed))
}

// ObserveDrift counts jobs the leader's memory had wrong, found by a full read (see
// leader.queue): it should stay zero.
func (m *Master) ObserveDrift(n int) {
	if m == nil {
		return
	}
	m.drift.Add(float64(n))
}

// ObserveHalt counts a halt asked for, by its reason.
func (m *Master) ObserveHalt(reason string) {
	if m == nil {
		return
	}
	m.halts.WithLabelValues(reason).Inc()
}

// ObserveQueueWait records how long a job that now runs waited since it was queued.
func (m *Master) ObserveQueueWait(clusterID int, wait time.Duration) {
	if m == nil || wait < 0 {
		return
	}
	m.queueWait.WithLabelValues(strconv.Itoa(clusterID)).Observe(wait.Seconds())
}

// ObserveRequest records one HTTP request; route is the mux pattern that served it
// ("unmatched" when none did), never the raw path.
func (m *Master) ObserveRequest(route, method string, code int, d time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(route, method, strconv.Itoa(code)).Observe(d.Seconds())
}

// gaugeCollector reads the database gauges at scrape time, at most once per GaugeCacheTTL.
type gaugeCollector struct {
	st   *store.Store
	opts MasterOptions

	jobs, gpusTotal, gpusUsed, slaves, heartbeat, outbox, scrapeErrors *prometheus.Desc

	mu     sync.Mutex
	cached store.Gauges
	outN   int
	outErr error
	errors int
}

func newGaugeCollector(st *store.Store, opts MasterOptions) *gaugeCollector {
	name := func(n string) string { return prometheus.BuildFQName(Namespace, "", n) }
	return &gaugeCollector{st: st, opts: opts,
		jobs:         prometheus.NewDesc(name("jobs"), "Unended jobs by state and cluster (the one they are placed on, else the one asked for; 0: any).", []string{"state", "cluster"}, nil),
		gpusTotal:    prometheus.NewDesc(name("gpus_total"), "GPUs of online slaves by cluster and model.", []string{"cluster", "model"}, nil),
		gpusUsed:     prometheus.NewDesc(name("gpus_used"), "GPUs held by jobs (placed, or ended and not yet released by their slave) by cluster and model.", []string{"cluster", "model"}, nil),
		slaves:       prometheus.NewDesc(name("slaves"), "Slaves by cluster and state: online, draining, offline, disabled.", []string{"cluster", "state"}, nil),
		heartbeat:    prometheus.NewDesc(name("slave_heartbeat_age_seconds"), "Time since each enabled slave's latest heartbeat (-1: never).", []string{"slave", "cluster"}, nil),
		outbox:       prometheus.NewDesc(name("mail_outbox_depth"), "Mails waiting in the outbox to be sent.", nil, nil),
		scrapeErrors: prometheus.NewDesc(name("metrics_database_errors_total"), "Scrapes whose database gauges could not be read.", nil, nil),
	}
}

func (c *gaugeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.jobs, c.gpusTotal, c.gpusUsed, c.slaves, c.heartbeat, c.outbox, c.scrapeErrors} {
		ch <- d
	}
}

// Collect sends the gauges, read again when the cached ones are older than GaugeCacheTTL. A
// database that does not answer leaves them out (and counts the error) rather than failing
// the scrape: the process's own metrics still arrive.
func (c *gaugeCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.cached.At) > GaugeCacheTTL {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		g, err := c.st.Gauges(ctx)
		if err == nil && c.opts.OutboxDepth != nil {
			c.outN, c.outErr = c.opts.OutboxDepth(ctx)
		}
		cancel()
		if err != nil {
			c.errors++
			c.cached = store.Gauges{}
			if c.opts.Log != nil {
				c.opts.Log.Warn("metrics: database gauges", "err", err)
			}
		} else {
			c.cached = g
		}
	}
	ch <- prometheus.MustNewConstMetric(c.scrapeErrors, prometheus.CounterValue, float64(c.errors))
	g := c.cached
	if g.At.IsZero() {
		return
	}
	for _, j := range g.Jobs {
		ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(j.Count), j.Status, strconv.Itoa(j.ClusterID))
	}
	for _, gp := range g.GPUs {
		ch <- prometheus.MustNewConstMetric(c.gpusTotal, prometheus.GaugeValue, float64(gp.Total), strconv.Itoa(gp.ClusterID), gp.Model)
		ch <- prometheus.MustNewConstMetric(c.gpusUsed, prometheus.GaugeValue, float64(gp.Used), strconv.Itoa(gp.ClusterID), gp.Model)
	}
	for _, s := range g.Slaves {
		ch <- prometheus.MustNewConstMetric(c.slaves, prometheus.GaugeValue, float64(s.Count), strconv.Itoa(s.ClusterID), s.State)
	}
	for _, h := range g.Heartbeats {
		ch <- prometheus.MustNewConstMetric(c.heartbeat, prometheus.GaugeValue, h.AgeS, h.Name, strconv.Itoa(h.ClusterID))
	}
	if c.opts.OutboxDepth != nil && c.outErr == nil {
		ch <- prometheus.MustNewConstMetric(c.outbox, prometheus.GaugeValue, float64(c.outN))
	}
}
