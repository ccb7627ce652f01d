// Package sim replays workload traces through the scheduler's own Plan in simulated time
// (SPEC 7.5): a model of slaves, a virtual clock and the trace's real run times, with no
// database and no containers. Because Plan is pure, what the simulator measures is what the
// master would decide on the same queue, policy for policy.
package sim

import (
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// TraceJob is one job of a workload trace: all the simulator needs to replay it.
type TraceJob struct {
	// Submit is when the job entered the queue (UTC).
	Submit time.Time
	// Duration is the job's real run time; the policies see it only through Scheduling.MaxDuration
	// (an estimate, see Estimate), except sjf-oracle, which is the unreachable ideal.
	Duration time.Duration
	// GPUs is how many GPUs the job held, all on one slave (SPEC 7.1).
	GPUs int
	// User is who the job belongs to for fairness; for the Philly trace the virtual cluster id,
	// the closest thing to a tenant the trace has.
	User string

	// The job's scheduling settings. Traces do not record them, so Assign fills them by seeded
	// rules (assign.go); Run takes a zero MaxDuration as Estimate(Duration).
	MaxDuration, MinDuration time.Duration
	Restartable, Interactive bool

	// NotBefore and NotAfter (zero: none) and Reservation (the id of a reservation the job
	// names, "" for none) come from a scenario (scenario.go).
	NotBefore, NotAfter time.Time
	Reservation         string
}

// TraceOptions narrows a trace, so that a quick run or a test can take part of a long trace.
type TraceOptions struct {
	// Limit keeps the first Limit jobs in submission order; 0 keeps all.
	Limit int
	// From and To keep jobs submitted in [From, To); zero values do not bound.
	From, To time.Time
}

// TraceStats says what reading kept and what it had to skip, so that a malformed row is
// reported instead of silently changing the workload.
type TraceStats struct {
	Rows      int // data rows read
	Malformed int // rows skipped because a field did not parse
	Kept      int // jobs returned after the options
}

// traceTime is the Philly trace's timestamp layout, in UTC.
const traceTime = "2006-01-02 15:04:05"

// ReadTraceFile reads a trace CSV from a file; see ReadTrace.
func ReadTraceFile(path string, opt TraceOptions) ([]TraceJob, TraceStats, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, TraceStats{}, err
	}
	defer func() { _ = f.Close() }()
	return ReadTrace(f, opt)
}

// ReadTrace reads a trace in the Philly CSV format (header timestamp,duration,num_gpus,gpu_time,
// cluster; columns found by name) and returns its jobs sorted by submission time (ties keep
// file order), narrowed by opt. Rows that do not parse (bad time, negative or non-numeric
// duration, GPUs < 1, empty user) are skipped and counted: a trace of 82k rows should not be
// refused for one bad line, but the count must be visible.
func ReadTrace(r io.Reader, opt TraceOptions) ([]TraceJob, TraceStats, error) {
	var st TraceStats
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	head, err := cr.Read()
	if err != nil {
		return nil, st, fmt.Errorf("read trace header: %w", err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[strings.TrimSpace(strings.ToLower(h))] = i
	}
	idx := make([]int, 4)
	for k, name := range []string{"timestamp", "duration", "num_gpus", "cluster"} {
		i, ok := col[name]
		if !ok {
			return nil, st, fmt.Errorf("trace header lacks column %q", name)
		}
		idx[k] = i
	}
	var jobs []TraceJob
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				st.Rows++
				st.Malformed++
				continue
			}
			return nil, st, err
		}
		st.Rows++
		j, ok := parseRow(rec, idx)
		if !ok {
			st.Malformed++
			continue
		}
		jobs = append(jobs, j)
	}
	slices.SortStableFunc(jobs, func(a, b TraceJob) int { return a.Submit.Compare(b.Submit) })
	out := jobs[:0]
	for _, j := range jobs {
		if (!opt.From.IsZero() && j.Submit.Before(opt.From)) || (!opt.To.IsZero() && !j.Submit.Before(opt.To)) {
			continue
		}
		if opt.Limit > 0 && len(out) >= opt.Limit {
			break
		}
		out = append(out, j)
	}
	st.Kept = len(out)
	return out, st, nil
}

func parseRow(rec []string, idx []int) (TraceJob, bool) {
	for _, i := range idx {
		if i >= len(rec) {
			return TraceJob{}, false
		}
	}
	t, err := time.ParseInLocation(traceTime, strings.TrimSpace(rec[idx[0]]), time.UTC)
	if err != nil {
		return TraceJob{}, false
	}
	secs, err := strconv.ParseFloat(strings.TrimSpace(rec[idx[1]]), 64)
	if err != nil || secs < 0 || secs > 1e9 || secs != secs {
		return TraceJob{}, false
	}
	g, err := strconv.Atoi(strings.TrimSpace(rec[idx[2]]))
	if err != nil || g < 1 {
		return TraceJob{}, false
	}
	u := strings.TrimSpace(rec[idx[3]])
	if u == "" {
		return TraceJob{}, false
	}
	return TraceJob{Submit: t, Duration: time.Duration(secs * float64(time.Second)).Round(time.Millisecond), GPUs: g, User: u}, true
}

// estimateSteps are the maxDuration values a user picks from (see Estimate).
var estimateSteps = []time.Duration{
	time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour,
	24 * time.Hour, 48 * time.Hour, 7 * 24 * time.Hour, 14 * 24 * time.Hour,
}

// Estimate is the maxDuration a simulated user writes for a job that really runs d: d rounded
// up to the next of 1h, 2h, 4h, 8h, 1 day, 2 days, 1 week, 2 weeks (beyond that, whole weeks).
// It models a user who knows roughly how long his job runs and leaves a safe margin, so the
// fair policy's maxDuration tiebreak and backfill see coarse, pessimistic estimates, never the
// real run time.
func Estimate(d time.Duration) time.Duration {
	for _, s := range estimateSteps {
		if d <= s {
			return s
		}
	}
	week := 7 * 24 * time.Hour
	return (d + week - 1) / week * week
}

// users maps user names to the int64 ids the scheduler wants, in sorted name order so that ids
// do not depend on trace order.
func users(jobs []TraceJob) (ids map[string]int64, names []string) {
	ids = map[string]int64{}
	for _, j := range jobs {
		if _, ok := ids[j.User]; !ok {
			ids[j.User] = 0
			names = append(names, j.User)
		}
	}
	slices.SortFunc(names, cmp.Compare)
	for i, n := range names {
		ids[n] = int64(i + 1)
	}
	return ids, names
}
