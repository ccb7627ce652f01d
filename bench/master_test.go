package bench

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/internal/logsink"
	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/leader"
	gmetrics "github.com/opengpulab/gpulab/metrics"
	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/store"
	"github.com/opengpulab/gpulab/web"
)

// Authority is the URN authority of the benchmark's master.
const Authority = "bench.gpulab"

// roleEnv starts the test binary as the master under test (TestMain); masterEnv carries its
// configuration as JSON.
const (
	roleEnv   = "GPULAB_BENCH_ROLE"
	masterEnv = "GPULAB_BENCH_MASTER"
)

// Loop modes of the master under test.
const (
	// loopAuto runs the scheduler from the start, as `gpulab-master serve` does.
	loopAuto = "auto"
	// loopManual waits for POST /bench/start on the control port before the first pass, so a
	// burst can be queued and its slaves registered first (B1).
	loopManual = "manual"
	// loopOff runs no scheduler: an API replica that does not hold the scheduler lock (B4, B5).
	loopOff = "off"
)

// masterConfig configures the master process.
type masterConfig struct {
	DatabaseURL string `json:"databaseUrl"`
	CADir       string `json:"caDir"`
	LogFile     string `json:"logFile"`
	Loop        string `json:"loop"`
	// HeartbeatInterval is what slaves are told (serve's default: 5 s), spread by
	// HeartbeatJitter (serve's --heartbeat-jitter, 0.1 by default).
	HeartbeatInterval time.Duration `json:"heartbeatInterval"`
	HeartbeatJitter   float64       `json:"heartbeatJitter"`
	// Interval, HeartbeatGrace, JobGrace: the loop's (serve's defaults: 5 s, 30 s, 5 min).
	Interval       time.Duration `json:"interval"`
	HeartbeatGrace time.Duration `json:"heartbeatGrace"`
	JobGrace       time.Duration `json:"jobGrace"`
	// CapRunning keeps serve's default running-job caps (10 per user, 20 per project); without
	// it there are none (`--max-running-per-user 0 --max-running-per-project 0`), so that a
	// burst can fill the cluster.
	CapRunning bool `json:"capRunning"`
	// MemoryLimit, when set, is the Go runtime's soft memory limit (what GOMEMLIMIT sets; see
	// the README's "Running a large site").
	MemoryLimit int64 `json:"memoryLimit,omitempty"`
}

// masterAddrs is the line the master process prints when it serves.
type masterAddrs struct {
	URL     string `json:"url"`     // the master: API, portal, slave protocol
	Floor   string `json:"floor"`   // an empty handler behind the same TLS configuration
	Control string `json:"control"` // plain HTTP on loopback: pprof, passes, memory, start
}

// passRecord is one scheduler pass as the master process timed it.
type passRecord struct {
	Start    time.Time     `json:"start"`
	Dur      time.Duration `json:"dur"`
	Assigned int64         `json:"assigned"`
	// Committed is when the pass's assignments were committed (its "scheduler pass" line,
	// written before the waiting jobs' explanations and estimates); zero when it assigned none.
	Committed time.Time `json:"committed"`
	Err       string    `json:"err,omitempty"`
	// Phases is where the pass's time went (describePhases of the loop's LastPass), for the
	// soak's trace of its passes.
	Phases string `json:"phases,omitempty"`
}

// End is when the pass returned: its transaction was committed.
func (p passRecord) End() time.Time { return p.Start.Add(p.Dur) }

// memReport is the master process's memory.
type memReport struct {
	RSSBytes   int64  `json:"rssBytes"` // VmRSS from /proc/self/status
	HeapInuse  uint64 `json:"heapInuse"`
	HeapLive   uint64 `json:"heapLive"` // marked live by the last collection (runtime/metrics /gc/heap/live:bytes)
	StackInuse uint64 `json:"stackInuse"`
	// GCSecs and BusySecs are the Go runtime's estimates of the CPU the collector and all of
	// the process (idle time excluded) used since it started (runtime/metrics /cpu/classes/).
	GCSecs        float64 `json:"gcSecs"`
	BusySecs      float64 `json:"busySecs"`
	Sys           uint64  `json:"sys"`
	NumGoroutines int     `json:"goroutines"`
	// Sched counts, since the process started, the times goroutines waited runnable before
	// they ran, by SchedBuckets (runtime/metrics /sched/latencies:seconds): how long work
	// waits for a CPU.
	Sched        []uint64  `json:"sched"`
	SchedBuckets []float64 `json:"schedBuckets"`
	// DBWaits and DBWaitSecs count the waits for a connection of the request pool, and their
	// time, since the process started (sql.DBStats).
	DBWaits    int64   `json:"dbWaits"`
	DBWaitSecs float64 `json:"dbWaitSecs"`
	// Beats counts, since the process started, the heartbeats by the time the master's handlers
	// took for them (BeatBuckets, as Sched's; gpulab_http_request_duration_seconds of the
	// heartbeat route): set against the round trip the slaves see, it tells the master's work
	// from the wait in the connection's frames, the kernel and the slaves' own process.
	Beats       []uint64  `json:"beats"`
	BeatBuckets []float64 `json:"beatBuckets"`
}

// runMaster is the master role: the wiring of `gpulab-master serve` (cmd/gpulab-master/serve.go:
// store, handlers, web server, scheduler loop) with the configuration from masterEnv, plus a
// loopback control port. It runs until stdin closes or SIGTERM.
func runMaster() error {
	var cfg masterConfig
	if err := json.Unmarshal([]byte(os.Getenv(masterEnv)), &cfg); err != nil {
		return fmt.Errorf("%s: %w", masterEnv, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }() // the parent went away

	logOut, err := os.OpenFile(cfg.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer func() { _ = logOut.Close() }()
	var assigned assignCount
	// serve logs at info by default (every request, every pass that changed something);
	// GPULAB_BENCH_MASTER_LOG=debug adds each pass's phases (housekeeping, read, plan, apply).
	level := slog.LevelInfo
	if os.Getenv("GPULAB_BENCH_MASTER_LOG") == "debug" {
		level = slog.LevelDebug
	}
	// Batched as serve's (logsink): a write system call a line would cost the reads' scenarios
	// what a real master does not pay.
	sink := logsink.New(logOut)
	defer func() { _ = sink.Close() }()
	log := slog.New(passCounter{Handler: sink.Handler(slog.NewTextHandler(sink, &slog.HandlerOptions{Level: level})), c: &assigned})

	if cfg.MemoryLimit > 0 {
		debug.SetMemoryLimit(cfg.MemoryLimit)
	}
	// GPULAB_BENCH_DB_CONNS sizes the requests' pool as serve's --db-max-conns does.
	conns := store.DefaultConns
	if v := os.Getenv("GPULAB_BENCH_DB_CONNS"); v != "" {
		if conns, err = strconv.Atoi(v); err != nil || conns < 1 {
			return fmt.Errorf("GPULAB_BENCH_DB_CONNS %q: want a number of connections", v)
		}
	}
	st, err := store.OpenPool(ctx, cfg.DatabaseURL, conns)
	if err != nil {
		return err
	}
	defer func() { _ = st.Close() }()
	if err := st.CheckSchema(ctx); err != nil {
		return err
	}
	ca, _, err := pki.LoadOrCreateCA(cfg.CADir, "GPULab bench CA")
	if err != nil {
		return err
	}
	halfLife := 7 * 24 * time.Hour // serve's --tally-half-life default
	wake, work := scheduler.NewSignal(), scheduler.NewSignal()
	h := handlers.New(st, handlers.Config{Authority: Authority, Version: "bench", LatestClientVersion: "4.0.0",
		JobOptions: job.DefaultOptions(), CA: ca, HeartbeatInterval: cfg.HeartbeatInterval, HeartbeatJitter: cfg.HeartbeatJitter, TallyHalfLife: halfLife}, log, wake, work)
	// Every simulated slave and client connects from 127.0.0.1: B8's 500 slaves alone hold more
	// connections than the per-client cap of a real master (--max-conns-per-ip).
	// The requests' latency histograms, as serve keeps them (without the database's gauges,
	// which only a scrape reads, and leaving the heartbeat statements to d.onBeats).
	mets := gmetrics.NewMaster(nil, gmetrics.MasterOptions{Log: log})
	srv := web.New(web.Config{CA: ca, Hosts: []string{"127.0.0.1", "localhost"}, Authority: Authority,
		Limits: web.Limits{MaxConnsPerIP: 1 << 16}, Metrics: mets}, st, h, log)
	limits := &scheduler.Limits{}
	if cfg.CapRunning {
		limits = nil // scheduler.DefaultLimits, as serve's flag defaults
	}
	d := &driver{assigned: &assigned, log: log, db: st.DB(), st: st, mets: mets}
	st.ObserveBeats(d.onBeats)
	// As serve does: the scheduler on a pool of its own (store.LeaderConns).
	lst, err := store.OpenPool(ctx, cfg.DatabaseURL, store.LeaderConns)
	if err != nil {
		return err
	}
	defer func() { _ = lst.Close() }()
	d.loop = leader.NewLoop(lst, leader.Config{Interval: cfg.Interval, HeartbeatGrace: cfg.HeartbeatGrace,
		JobGrace: cfg.JobGrace, Limits: limits, TallyHalfLife: halfLife, ForecastEvery: leader.DefaultForecastEvery, MaxBusy: leader.DefaultMaxBusy, OnPass: d.onPass}, log, wake, work)

	listen := func() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
	ml, err := listen()
	if err != nil {
		return err
	}
	fl, err := listen()
	if err != nil {
		return err
	}
	cl, err := listen()
	if err != nil {
		return err
	}
	tlsCfg, err := srv.TLSConfig()
	if err != nil {
		return err
	}
	floor := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	}), TLSConfig: tlsCfg, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = floor.Serve(tls.NewListener(fl, tlsCfg)) }()
	control := &http.Server{Handler: d.controlMux(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = control.Serve(cl) }()

	var wg sync.WaitGroup
	if cfg.Loop == loopAuto {
		d.startOnce()
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ctx, ml) }()
	addrs := masterAddrs{URL: "https://" + ml.Addr().String(), Floor: "https://" + fl.Addr().String(), Control: "http://" + cl.Addr().String()}
	if err := json.NewEncoder(os.Stdout).Encode(addrs); err != nil {
		return err
	}
	err = <-serveErr
	cancel()
	_ = floor.Close()
	_ = control.Close()
	d.wait()
	wg.Wait()
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// passCounter counts the assignments the loop reports in its "scheduler pass" log line, and
// keeps when the last was written, so that the driver can tell which pass assigned what and
// when it committed it.
type passCounter struct {
	slog.Handler
	c *assignCount
}

// assignCount is what passCounter saw: assignments in all, and the time (Unix ns) of the last
// line that reported some.
type assignCount struct{ n, at atomic.Int64 }

func (h passCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "scheduler pass" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "assigned" && a.Value.Int64() > 0 {
				h.c.at.Store(r.Time.UnixNano())
				h.c.n.Add(a.Value.Int64())
			}
			return true
		})
	}
	return h.Handler.Handle(ctx, r)
}

func (h passCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return passCounter{Handler: h.Handler.WithAttrs(as), c: h.c}
}

func (h passCounter) WithGroup(name string) slog.Handler {
	return passCounter{Handler: h.Handler.WithGroup(name), c: h.c}
}

// driver runs the real scheduler loop (leader.Loop.Run) once started, and records every
// pass through the loop's OnPass hook: when it started, how long it took, what it assigned.
type driver struct {
	db       *sql.DB      // the request pool, for its waits
	st       *store.Store // its queue's waits (store.ConnWaits)
	mets     *gmetrics.Master
	loop     *leader.Loop
	assigned *assignCount
	log      *slog.Logger

	once   sync.Once
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	passes []passRecord
	before int64 // assigned when the pass being recorded began
	// stmts are the heartbeat statements since the last GET /bench/beatstmts (which takes
	// them), so that a 30-minute soak's hundreds of thousands do not pile up in the master.
	stmts []beatStmt
}

// beatStmt is one heartbeat statement (store.BeatObserver): when it ended, how many heartbeats
// it carried, how long its oldest one waited for it, how long it took.
type beatStmt struct {
	End    time.Time     `json:"end"`
	Size   int           `json:"size"`
	Waited time.Duration `json:"waited"`
	Took   time.Duration `json:"took"`
}

func (d *driver) onBeats(size int, waited, took time.Duration) {
	d.mu.Lock()
	d.stmts = append(d.stmts, beatStmt{End: time.Now(), Size: size, Waited: waited, Took: took})
	d.mu.Unlock()
}

func (d *driver) startOnce() {
	d.once.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		d.cancel, d.done = cancel, make(chan struct{})
		go func() {
			defer close(d.done)
			if err := d.loop.Run(ctx); err != nil {
				d.log.Error("scheduler stopped", "err", err)
			}
		}()
	})
}

func (d *driver) wait() {
	if d.cancel != nil {
		d.cancel()
		<-d.done
	}
}

// onPass records a pass (the loop's OnPass hook).
func (d *driver) onPass(start time.Time, took time.Duration, err error) {
	now := d.assigned.n.Load()
	d.mu.Lock()
	defer d.mu.Unlock()
	// OnPass runs on the loop's goroutine, after the pass: LastPass may be read.
	rec := passRecord{Start: start, Dur: took, Assigned: now - d.before, Phases: describePhases(took, d.loop.LastPass())}
	if rec.Assigned > 0 {
		rec.Committed = time.Unix(0, d.assigned.at.Load())
	}
	d.before = now
	if err != nil {
		rec.Err = err.Error()
	}
	d.passes = append(d.passes, rec)
}

// controlMux serves the control port: pprof, the passes so far, memory, and the start of a
// manual loop.
func (d *driver) controlMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("POST /bench/start", func(w http.ResponseWriter, r *http.Request) {
		d.startOnce()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /bench/passes", func(w http.ResponseWriter, r *http.Request) {
		from, _ := strconv.Atoi(r.URL.Query().Get("from"))
		d.mu.Lock()
		out := append([]passRecord{}, d.passes[min(max(from, 0), len(d.passes)):]...)
		d.mu.Unlock()
		_ = json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("GET /bench/beatstmts", func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		out := d.stmts
		d.stmts = nil
		d.mu.Unlock()
		_ = json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("GET /bench/mem", func(w http.ResponseWriter, r *http.Request) {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/cpu/classes/gc/total:cpu-seconds"},
			{Name: "/cpu/classes/total:cpu-seconds"}, {Name: "/cpu/classes/idle:cpu-seconds"}, {Name: "/sched/latencies:seconds"}}
		metrics.Read(live)
		sched := live[4].Value.Float64Histogram()
		// Waits for a connection: in the store's queue, and any in the pool itself.
		dbs, queued := d.db.Stats(), d.st.ConnWaits()
		dbs.WaitCount += queued.Count
		dbs.WaitDuration += queued.Total
		beats, beatBuckets := d.beatHandlerTimes()
		_ = json.NewEncoder(w).Encode(memReport{RSSBytes: selfRSS(), HeapInuse: ms.HeapInuse, HeapLive: live[0].Value.Uint64(), StackInuse: ms.StackInuse,
			GCSecs: live[1].Value.Float64(), BusySecs: live[2].Value.Float64() - live[3].Value.Float64(), Sys: ms.Sys, NumGoroutines: runtime.NumGoroutine(),
			Sched: sched.Counts, SchedBuckets: finite(sched.Buckets), DBWaits: dbs.WaitCount, DBWaitSecs: dbs.WaitDuration.Seconds(),
			Beats: beats, BeatBuckets: beatBuckets})
	})
	return mux
}

// beatHandlerTimes reads the master's histogram of its handlers' time for heartbeats (every
// status), as memReport.Beats and BeatBuckets: counts per bucket between the bounds, the first
// from 0, the last open.
func (d *driver) beatHandlerTimes() ([]uint64, []float64) {
	fams, err := d.mets.Gatherer().Gather()
	if err != nil {
		return nil, nil
	}
	var cum []uint64
	var bounds []float64
	var total uint64
	for _, f := range fams {
		if f.GetName() != "gpulab_http_request_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			route := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "route" {
					route = l.GetValue()
				}
			}
			if !strings.HasSuffix(route, "/heartbeat") {
				continue
			}
			h := m.GetHistogram()
			if cum == nil {
				cum, bounds = make([]uint64, len(h.GetBucket())), make([]float64, len(h.GetBucket()))
			}
			for i, b := range h.GetBucket() {
				cum[i] += b.GetCumulativeCount()
				bounds[i] = b.GetUpperBound()
			}
			total += h.GetSampleCount()
		}
	}
	if cum == nil {
		return nil, nil
	}
	counts := make([]uint64, len(cum)+1)
	var below uint64
	for i, c := range cum {
		counts[i], below = c-below, c
	}
	counts[len(cum)] = total - below
	return counts, append(append([]float64{0}, bounds...), math.MaxFloat64)
}

// finite replaces the infinite ends of histogram buckets (which JSON cannot carry) with the
// largest and smallest finite numbers.
func finite(b []float64) []float64 {
	out := slices.Clone(b)
	for i, v := range out {
		switch {
		case math.IsInf(v, 1):
			out[i] = math.MaxFloat64
		case math.IsInf(v, -1):
			out[i] = -math.MaxFloat64
		}
	}
	return out
}

// schedQuantile is the q-quantile of the goroutines' waits for a CPU between two memReports
// (the upper end of its bucket), zero when none were counted.
func schedQuantile(from, to memReport, q float64) time.Duration {
	return histQuantile(from.Sched, to.Sched, to.SchedBuckets, q)
}

// beatQuantile is the q-quantile of the master's handler time for heartbeats between two
// memReports, as schedQuantile.
func beatQuantile(from, to memReport, q float64) time.Duration {
	return histQuantile(from.Beats, to.Beats, to.BeatBuckets, q)
}

// histQuantile is the q-quantile of what a histogram counted between two readings (counts per
// bucket, bucket i between bounds i and i+1): the upper end of its bucket, an hour at most,
// zero when nothing was counted. A histogram that began between the two counts from zero.
func histQuantile(from, to []uint64, bounds []float64, q float64) time.Duration {
	if len(from) != len(to) {
		from = make([]uint64, len(to))
	}
	var total uint64
	for i := range to {
		total += to[i] - from[i]
	}
	if total == 0 || len(bounds) != len(to)+1 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i := range to {
		if seen += to[i] - from[i]; seen >= want {
			return time.Duration(min(bounds[i+1], 3600) * float64(time.Second))
		}
	}
	return 0
}

// selfRSS is this process's resident set (VmRSS), in bytes.
func selfRSS() int64 { return rssOf("self") }

// rssOf reads VmRSS of a process (a pid or "self") from /proc.
func rssOf(pid string) int64 {
	data, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return -1
}

// master is a master process under test, seen from the benchmark.
type master struct {
	t testing.TB
	masterAddrs
	CA    *pki.CA
	Store *store.Store // the benchmark's own connection, for set-up and checks
	DBURL string
	PID   int
	Log   string
	ctl   *http.Client
}

// masterOptions choose the master's loop and timings; zero values take serve's defaults.
type masterOptions struct {
	Loop              string
	HeartbeatInterval time.Duration
	Interval          time.Duration
	CapRunning        bool
	MemoryLimit       int64
}

// startMaster makes a fresh database (migrated), a CA, and starts the master process on them;
// everything goes away when the test ends.
func startMaster(t testing.TB, o masterOptions) *master {
	t.Helper()
	ctx := context.Background()
	began := time.Now()
	url := testenv.PostgresURL(t)
	st, err := store.Open(ctx, url)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	// Whatever the previous scenario left dirty (its database was just dropped) is written now,
	// not during this one's measurements. Only a superuser may; elsewhere it is skipped.
	_, _ = st.DB().ExecContext(ctx, `CHECKPOINT`)
	caDir := filepath.Join(t.TempDir(), "ca")
	ca, _, err := pki.LoadOrCreateCA(caDir, "GPULab bench CA")
	if err != nil {
		t.Fatalf("make CA: %v", err)
	}
	logFile := filepath.Join(outDir(t), safeName(t.Name())+"-master.log")
	_ = os.Remove(logFile)
	if o.Loop == "" {
		o.Loop = loopAuto
	}
	masterURL := url
	if d := os.Getenv("GPULAB_BENCH_SLOW_STATEMENTS"); d != "" {
		// Diagnostics: Postgres logs the master's statements slower than d (superuser only).
		masterURL += "&log_min_duration_statement=" + d
	}
	cfg := masterConfig{DatabaseURL: masterURL, CADir: caDir, LogFile: logFile, Loop: o.Loop, HeartbeatInterval: o.HeartbeatInterval,
		Interval: o.Interval, CapRunning: o.CapRunning, MemoryLimit: o.MemoryLimit}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = 5 * time.Second
	}
	cfg.HeartbeatJitter = handlers.DefaultHeartbeatJitter
	if v := os.Getenv("GPULAB_BENCH_HEARTBEAT_JITTER"); v != "" {
		// Diagnostics: another spread (0: none), to see what the spread does.
		if cfg.HeartbeatJitter, err = strconv.ParseFloat(v, 64); err != nil || !(cfg.HeartbeatJitter >= 0 && cfg.HeartbeatJitter <= 0.5) {
			t.Fatalf("GPULAB_BENCH_HEARTBEAT_JITTER=%q: want a fraction from 0 to 0.5", v)
		}
	}
	if cfg.Interval == 0 {
		cfg.Interval = 5 * time.Second
	}
	cfgJSON, _ := json.Marshal(cfg)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=master", masterEnv+"="+string(cfgJSON))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errFile, err := os.Create(logFile + ".stderr")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = errFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start master: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited); _ = errFile.Close() }()
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("master process did not stop within a minute")
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	m := &master{t: t, CA: ca, Store: st, DBURL: url, PID: cmd.Process.Pid, Log: logFile, ctl: &http.Client{Timeout: 5 * time.Minute}}
	select {
	case line, ok := <-lines:
		if !ok || json.Unmarshal([]byte(line), &m.masterAddrs) != nil {
			stderr, _ := os.ReadFile(logFile + ".stderr")
			t.Fatalf("master process did not start: %q\n%s", line, stderr)
		}
	case <-time.After(2 * time.Minute): // generous: `make test` may share the machine
		t.Fatalf("master process did not answer within 2 minutes (log %s)", logFile)
	}
	t.Logf("master process %d serves %s (database and start: %s)", m.PID, m.URL, time.Since(began).Round(time.Millisecond))
	return m
}

// startLoop starts a manual loop (loopManual).
func (m *master) startLoop() {
	m.t.Helper()
	resp, err := m.ctl.Post(m.Control+"/bench/start", "", nil)
	if err != nil {
		m.t.Fatalf("start loop: %v", err)
	}
	_ = resp.Body.Close()
}

// beatStmts takes the heartbeat statements the master recorded since the last call.
func (m *master) beatStmts() []beatStmt {
	var out []beatStmt
	m.getJSON("/bench/beatstmts", &out)
	return out
}

// passes returns the passes from index `from` on.
func (m *master) passes(from int) []passRecord {
	m.t.Helper()
	var out []passRecord
	m.getJSON(fmt.Sprintf("/bench/passes?from=%d", from), &out)
	return out
}

// mem returns the master's memory: RSS read by the benchmark from /proc/PID, the Go figures
// from the process itself.
func (m *master) mem() memReport {
	m.t.Helper()
	var r memReport
	m.getJSON("/bench/mem", &r)
	if rss := rssOf(strconv.Itoa(m.PID)); rss > 0 {
		r.RSSBytes = rss
	}
	return r
}

func (m *master) getJSON(path string, v any) {
	m.t.Helper()
	resp, err := m.ctl.Get(m.Control + path)
	if err != nil {
		m.t.Fatalf("control %s: %v", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		m.t.Fatalf("control %s: %v", path, err)
	}
}

// profile takes a CPU profile of the master for d (in the background) when GPULAB_BENCH_PROFILE
// names a folder, and a heap profile at its end; the returned function waits for them and
// reports the CPU profile's file.
func (m *master) profile(name string, d time.Duration) func() string {
	dir := os.Getenv("GPULAB_BENCH_PROFILE")
	if dir == "" {
		return func() string { return "" }
	}
	return m.profileIn(dir, name, d, true)
}

// profileIn is profile into dir, whatever GPULAB_BENCH_PROFILE says; without keep (a folder of
// the test's) it takes no heap profile and names no file.
func (m *master) profileIn(dir, name string, d time.Duration, keep bool) func() string {
	secs := max(int(d.Round(time.Second)/time.Second), 1)
	file := filepath.Join(dir, name+".cpu.pprof")
	done := make(chan error, 1)
	traced := make(chan error, 1)
	go func() {
		// GPULAB_BENCH_TRACE=N: an execution trace of the window's first N seconds beside the
		// profiles (where a request waited: go tool trace -pprof=sched, sync, net).
		n, _ := strconv.Atoi(os.Getenv("GPULAB_BENCH_TRACE"))
		if n <= 0 || !keep {
			traced <- nil
			return
		}
		traced <- m.fetch(fmt.Sprintf("/debug/pprof/trace?seconds=%d", min(n, secs)), dir, filepath.Join(dir, name+".trace"))
	}()
	go func() {
		err := m.fetch(fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), dir, file)
		if err == nil && keep {
			err = m.fetch("/debug/pprof/heap", dir, filepath.Join(dir, name+".heap.pprof"))
		}
		done <- cmp.Or(err, <-traced)
	}()
	return func() string {
		if err := <-done; err != nil {
			m.t.Logf("profile %s: %v", name, err)
			return ""
		}
		if keep {
			m.t.Logf("CPU and heap profiles of the master: %s, .heap.pprof", file)
		}
		return file
	}
}

// fetch writes what the control port answers at path to file (in dir).
func (m *master) fetch(path, dir, file string) error {
	resp, err := m.ctl.Get(m.Control + path)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// user is a user of the master with his certificate.
type user struct {
	store.User
	Projects []int64
	TLS      tls.Certificate
}

// addUser creates a user, makes him a member of projects (created when new) and issues his
// client certificate.
func (m *master) addUser(name string, projects ...string) *user {
	m.t.Helper()
	ctx := context.Background()
	urn := pki.UserURN(Authority, name)
	u, err := m.Store.UpsertUser(ctx, urn, name, name+"@example.org", false)
	if err != nil {
		m.t.Fatalf("add user %s: %v", name, err)
	}
	out := &user{User: u}
	for _, pn := range projects {
		p, err := m.Store.GetProjectByName(ctx, pn)
		if errors.Is(err, store.ErrNotFound) {
			p, err = m.Store.CreateProject(ctx, pki.ProjectURN(Authority, pn), pn, "", 0)
		}
		if err != nil {
			m.t.Fatalf("project %s: %v", pn, err)
		}
		if err := m.Store.AddMember(ctx, p.ID, u.ID); err != nil {
			m.t.Fatalf("add %s to %s: %v", name, pn, err)
		}
		out.Projects = append(out.Projects, p.ID)
	}
	cert, key, err := m.CA.IssueClient(pki.ClientSpec{Kind: pki.KindUser, URN: urn, Email: u.Email, Name: name})
	if err != nil {
		m.t.Fatalf("issue certificate: %v", err)
	}
	out.TLS = tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
	return out
}

// slaveCert makes a slave in cluster (created when new) as if it had joined, and returns its
// client certificate.
func (m *master) slaveCert(name string, cluster int) tls.Certificate {
	m.t.Helper()
	ctx := context.Background()
	if _, err := m.Store.CreateCluster(ctx, store.Cluster{ID: cluster, Name: fmt.Sprintf("cluster%d", cluster)}); err != nil && !errors.Is(err, store.ErrConflict) {
		m.t.Fatalf("create cluster %d: %v", cluster, err)
	}
	if err := m.Store.JoinSlave(ctx, name, cluster); err != nil {
		m.t.Fatalf("join slave %s: %v", name, err)
	}
	cert, key, err := m.CA.IssueClient(pki.ClientSpec{Kind: pki.KindSlave, URN: pki.URN{Authority: Authority, Type: "slave", Name: name}.String(), Name: name})
	if err != nil {
		m.t.Fatalf("issue slave certificate: %v", err)
	}
	return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
}

// transport is one keep-alive HTTPS connection's worth of client, trusting the master's CA and
// presenting cert, as gpulab-cli and scripts do (HTTP/1.1).
func (m *master) transport(cert *tls.Certificate, conns int) *http.Transport {
	cfg := &tls.Config{RootCAs: m.CA.Pool(), MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Transport{TLSClientConfig: cfg, MaxIdleConns: conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns,
		IdleConnTimeout: 5 * time.Minute}
}

// client is an HTTP client of the master with up to conns connections.
func (m *master) client(cert *tls.Certificate, conns int) *http.Client {
	return &http.Client{Transport: m.transport(cert, conns), Timeout: 2 * time.Minute}
}

// outDir is where logs and profiles go: GPULAB_BENCH_OUT, else .tmp/bench at the module root.
func outDir(t testing.TB) string {
	dir := os.Getenv("GPULAB_BENCH_OUT")
	if dir == "" {
		dir = filepath.Join(moduleRoot(), ".tmp", "bench")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("output folder: %v", err)
	}
	return dir
}

// moduleRoot is the folder holding go.mod (tests run in their package's folder).
func moduleRoot() string {
	wd, _ := os.Getwd()
	for d := wd; d != "/"; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
	}
	return wd
}

func safeName(s string) string { return strings.NewReplacer("/", "_", " ", "_").Replace(s) }
