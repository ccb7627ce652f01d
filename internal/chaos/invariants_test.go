package chaos

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/faults"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
)

// result is what a scenario measured: the figures of the suite's table.
type result struct {
	scenario string
	jobs     int // jobs in the end, restart jobs included
	faults   string
	lost     int // accepted and missing, or never ended
	dupes    int // a job (lineage) live in two containers at once, or RUNNING twice
	gpuOver  int // a GPU held by two live containers at once
	overdue  int // most in-between states seen past their lease at once
	leftover int // containers left behind
	recovery string
	notes    []string
}

// check waits for the scenario to settle and checks the invariants, failing the test on each
// violation, and returns the figures. allowLineageOverlap names the known limit of a frozen
// slave (see protocol/README.md): its overlaps are counted, not failed.
func (c *cluster) check(r *result, allowLineageOverlap bool) {
	t := c.t
	t.Helper()
	ctx := context.Background()
	// Every job ends.
	deadline := time.Now().Add(3 * time.Minute)
	var open []string
	for {
		open = open[:0]
		for id, rec := range c.jobs() {
			if !rec.Job.State.Status.Ended() {
				open = append(open, id+" "+string(rec.Job.State.Status))
			}
		}
		if len(open) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	all := c.jobs()
	r.jobs = len(all)
	for _, o := range open {
		t.Errorf("job never ended: %s", o)
	}
	r.lost += len(open)
	// Every accepted submission exists.
	c.mu.Lock()
	accepted := slices.Clone(c.accepted)
	r.overdue = c.overdue
	c.mu.Unlock()
	for _, id := range accepted {
		if _, ok := all[id]; !ok {
			t.Errorf("accepted job %s does not exist", id)
			r.lost++
		}
	}
	if r.overdue > 0 {
		t.Errorf("%d jobs seen in an in-between state more than %s past their lease", r.overdue, leaseSlack)
	}
	// Exactly one end, at most one run, per job.
	for id := range all {
		evs, err := c.st.ListJobEvents(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		ends, runs := 0, 0
		for _, e := range evs {
			if e.Kind != store.EventStatus {
				continue
			}
			st := job.Status(e.ToStatus)
			if st.Ended() && st != job.StatusDeleted {
				ends++
			}
			if st == job.StatusRunning {
				runs++
			}
		}
		if ends != 1 && all[id].Job.State.Status.Ended() {
			t.Errorf("job %s ended %d times", id, ends)
			r.lost++
		}
		if runs > 1 {
			t.Errorf("job %s reached RUNNING %d times", id, runs)
			r.dupes++
		}
	}
	// No container is left behind, and nothing stays held.
	deadline = time.Now().Add(90 * time.Second)
	var left []string
	for {
		var err error
		if left, err = c.tl.Leftovers(ctx); err != nil {
			t.Fatal(err)
		}
		held, err := c.st.ListHeld(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if (len(left) == 0 && len(held) == 0) || time.Now().After(deadline) {
			for _, h := range held {
				t.Errorf("resources still held after every job ended: job %s on %s (%v GPUs)", h.UUID, h.SlaveName, h.GPUIDs)
			}
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	r.leftover = len(left)
	for _, l := range left {
		t.Errorf("container left behind: %s", l)
	}
	// GPUs and lineages: never two live containers at once.
	for _, o := range c.tl.OverlapsByGPU() {
		t.Errorf("GPU held twice: %s", o)
		r.gpuOver++
	}
	byLineage := func(ct faults.Container) string {
		if rec := all[ct.Job]; rec != nil {
			return "job " + lineage(rec)
		}
		return "job " + ct.Job
	}
	for _, o := range c.tl.OverlapsBy(byLineage) {
		r.dupes++
		if allowLineageOverlap {
			r.notes = append(r.notes, "known limit (a frozen slave cannot stop its containers): "+o)
			continue
		}
		t.Errorf("a job ran twice at once: %s", o)
	}
	if err := c.tl.Err(); err != nil {
		t.Errorf("container timeline: %v", err)
	}
}

// results gathers the figures of every scenario of a run, printed and written at its end.
type results struct {
	mu   sync.Mutex
	rows []result
}

func (rs *results) add(r result) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.rows = append(rs.rows, r)
}

func (rs *results) table(size string) string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	slices.SortFunc(rs.rows, func(a, b result) int { return strings.Compare(a.scenario, b.scenario) })
	var b strings.Builder
	fmt.Fprintf(&b, "## %s, size %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), size)
	b.WriteString("| scenario | jobs | faults injected | lost | duplicated | GPU overlaps | past lease | containers left | recovery |\n")
	b.WriteString("|---|---:|---|---:|---:|---:|---:|---:|---|\n")
	for _, r := range rs.rows {
		fmt.Fprintf(&b, "| %s | %d | %s | %d | %d | %d | %d | %d | %s |\n", r.scenario, r.jobs, r.faults, r.lost, r.dupes, r.gpuOver, r.overdue, r.leftover, r.recovery)
	}
	for _, r := range rs.rows {
		for _, n := range r.notes {
			fmt.Fprintf(&b, "\n- %s: %s", r.scenario, n)
		}
	}
	b.WriteString("\n")
	return b.String()
}

// write appends the table to .tmp/chaos/results.md of the module.
func (rs *results) write(t *testing.T, size string) {
	root, err := moduleRoot()
	if err != nil {
		return
	}
	dir := filepath.Join(root, ".tmp", "chaos")
	_ = os.MkdirAll(dir, 0o755)
	f, err := os.OpenFile(filepath.Join(dir, "results.md"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer func() { _ = f.Close() }()
	tbl := rs.table(size)
	_, _ = f.WriteString(tbl + "\n")
	t.Log("\n" + tbl)
}

// insecureTLS is for the readiness probe only, before the master's CA exists on disk.
func insecureTLS() *tls.Config { return &tls.Config{InsecureSkipVerify: true} } //nolint:gosec // readiness probe of a local test master

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
