package bench

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opengpulab/gpulab/store"
)

// result is one row of the results table.
type result struct {
	Scenario string
	Measure  string
	Value    string
	Goal     string // "" when the row has no goal
	Met      string // "yes", "no" or ""
	Floor    string // the floor compared with, and its value
	Ratio    string // value / floor
}

// report gathers the rows and notes of one run.
type report struct {
	mu    sync.Mutex
	rows  []result
	notes []string
	// refs are figures a later scenario compares with (Slurm's S1 with B1's burst), by name.
	refs map[string]time.Duration
}

// setRef keeps a figure for a later scenario of the same run to compare with.
func (r *report) setRef(name string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refs == nil {
		r.refs = map[string]time.Duration{}
	}
	r.refs[name] = d
}

// ref is a figure an earlier scenario of the same run kept (setRef).
func (r *report) ref(name string) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d, ok := r.refs[name]
	return d, ok
}

func (r *report) add(res result) {
	r.mu.Lock()
	r.rows = append(r.rows, res)
	r.mu.Unlock()
}

func (r *report) note(scenario, format string, args ...any) {
	r.mu.Lock()
	r.notes = append(r.notes, scenario+": "+fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// met says whether a goal holds.
func met(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

// table renders the rows as a markdown table.
func (r *report) table() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	b.WriteString("| scenario | measure | value | goal | met | floor (same run) | vs floor |\n")
	b.WriteString("|---|---|---:|---|---|---|---:|\n")
	for _, x := range r.rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", x.Scenario, x.Measure, x.Value, dash(x.Goal), dash(x.Met), dash(x.Floor), dash(x.Ratio))
	}
	if len(r.notes) > 0 {
		b.WriteString("\n")
		for _, n := range r.notes {
			b.WriteString("- " + n + "\n")
		}
	}
	return b.String()
}

func dash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// machine describes where the run happened: date, commit and the machine's facts.
type machine struct {
	Date, Commit, CPU, Kernel, Go, Postgres, Fsync, SyncCommit, Docker, Load string
	SharedBuffers, MaxWALSize                                                string
	Cores                                                                    int
	MemGiB                                                                   float64
	// DBConns is the master's requests' pool (GPULAB_BENCH_DB_CONNS, serve's --db-max-conns).
	DBConns string
}

func describeMachine(dbURL string) machine {
	m := machine{Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), Cores: runtime.NumCPU(), Go: runtime.Version(),
		DBConns: cmp.Or(os.Getenv("GPULAB_BENCH_DB_CONNS"), strconv.Itoa(store.DefaultConns))}
	root := moduleRoot()
	m.Commit = strings.TrimSpace(run(root, "git", "rev-parse", "--short", "HEAD"))
	if strings.TrimSpace(run(root, "git", "--no-optional-locks", "status", "--porcelain")) != "" {
		m.Commit += " + uncommitted changes"
	}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		for _, line := range strings.Split(string(data), "\n") {
			if _, err := fmt.Sscanf(line, "MemTotal: %f kB", &kb); err == nil {
				m.MemGiB = kb / (1 << 20)
				break
			}
		}
	}
	m.Kernel = strings.TrimSpace(run(root, "uname", "-r"))
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(data)); len(f) >= 3 {
			m.Load = strings.Join(f[:3], " ")
		}
	}
	m.Docker = strings.TrimSpace(run(root, "docker", "version", "--format", "{{.Server.Version}}"))
	if db, err := sql.Open("postgres", dbURL); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = db.QueryRowContext(ctx, `SHOW server_version`).Scan(&m.Postgres)
		_ = db.QueryRowContext(ctx, `SHOW fsync`).Scan(&m.Fsync)
		_ = db.QueryRowContext(ctx, `SHOW synchronous_commit`).Scan(&m.SyncCommit)
		_ = db.QueryRowContext(ctx, `SHOW shared_buffers`).Scan(&m.SharedBuffers)
		_ = db.QueryRowContext(ctx, `SHOW max_wal_size`).Scan(&m.MaxWALSize)
		cancel()
		_ = db.Close()
	}
	return m
}

func (m machine) String() string {
	return fmt.Sprintf("%s, %d cores, %.1f GiB RAM, Linux %s (load average %s at the start); %s; PostgreSQL %s (fsync %s, synchronous_commit %s, shared_buffers %s, max_wal_size %s) on loopback, the master's requests' pool %s connections; Docker %s",
		dash(m.CPU), m.Cores, m.MemGiB, dash(m.Kernel), dash(m.Load), m.Go, dash(m.Postgres), dash(m.Fsync), dash(m.SyncCommit), dash(m.SharedBuffers), dash(m.MaxWALSize), m.DBConns, dash(m.Docker))
}

func run(dir, name string, args ...string) string {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return string(out)
}

// record prints the run's table and appends it, with its header, to RESULTS.md.
func record(w io.Writer, file string, m machine, scenarios []string, label string, rep *report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## %s · %s · %s\n\n", m.Date, m.Commit, strings.Join(scenarios, " "))
	if label != "" {
		fmt.Fprintf(&b, "%s\n\n", label)
	}
	cmd := os.Getenv("GPULAB_BENCH_COMMAND")
	if cmd == "" {
		cmd = "GPULAB_BENCH=" + os.Getenv("GPULAB_BENCH") + " go test ./bench -run TestScenarios"
	}
	fmt.Fprintf(&b, "Machine: %s.  \nCommand: `%s`\n\n", m, cmd)
	b.WriteString(rep.table())
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if file == "" {
		return nil
	}
	if _, err := os.Stat(file); os.IsNotExist(err) {
		if err := os.WriteFile(file, []byte(resultsHeader), 0o644); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(filepath.Clean(file), os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(f, b.String()); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

const resultsHeader = `# Benchmark results

Every section below was appended by ` + "`make bench`" + ` (bench/, see the README's "Benchmarks"): one
run, its date, commit and machine, each scenario beside the floor measured in the same run. Do
not edit the figures by hand.
`
