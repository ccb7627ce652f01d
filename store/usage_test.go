package store_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
)

// TestUsageSeriesIsDownsampledAndBounded feeds a job three days of samples at the default 5 s
// heartbeat (51,840 of them: GPU 0 idle, GPU 1 at 85 %) and checks that compaction keeps the
// series within the documented bound while every average, and the time the series stands
// for, are kept.
func TestUsageSeriesIsDownsampledAndBounded(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "usage-"+t.Name()[:8], "usageproj")
	j := createJob(t, st, u, p, job.StatusRunning)
	if _, err := st.DB().ExecContext(ctx, `UPDATE jobs SET event_times = jsonb_build_object('RUNNING', now() - interval '3 days') WHERE uuid = $1`, j.UUID); err != nil {
		t.Fatal(err)
	}
	// Two through the heartbeat's statement, the rest backdated in one go.
	for range 2 {
		if err := st.AddUsageSamples(ctx, 5, []store.UsageSample{{JobUUID: j.UUID, CPUPercent: 150, MemoryMiB: 1000,
			GPUs: []store.GPUSample{{Index: 0, UtilPercent: 0}, {Index: 1, UtilPercent: 85, MemoryUsedMiB: 27853}}}}); err != nil {
			t.Fatal(err)
		}
	}
	const n = 3 * 24 * 3600 / 5
	if _, err := st.DB().ExecContext(ctx, `INSERT INTO job_usage (job_uuid, at, secs, cpu_percent, mem_mib, gpu_idx, gpu_util, gpu_mem_mib)
SELECT $1, now() - make_interval(secs => 5 * i), 5, 150, 1000, '{0,1}', '{0,85}', '{0,27853}' FROM generate_series(1, $2 - 2) AS i`, j.UUID, n); err != nil {
		t.Fatal(err)
	}
	before, err := st.JobUsage(ctx, j.UUID)
	if err != nil || len(before) != n {
		t.Fatalf("%d points before compaction (%v), want %d", len(before), err, n)
	}
	start := time.Now()
	merged, err := st.CompactUsage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after, err := st.JobUsage(ctx, j.UUID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d samples over 3 days compacted to %d points (%d rows merged) in %s", n, len(after), merged, time.Since(start).Round(time.Millisecond))
	// The bound: an hour of raw samples (720, plus up to a minute's 12 the aligned cut keeps, plus
	// the two added through AddUsageSamples), a minute each up to a day (1,380, plus up to 10 the
	// 10-minute cut keeps), 10 minutes each for the 2 days beyond (288 and a partial bucket).
	if bound := (720 + 12 + 2) + (1380 + 10) + (288 + 1); len(after) > bound || len(after) < 2300 {
		t.Errorf("%d points after compaction, want about 2,400 and at most %d", len(after), bound)
	}
	var secs float64
	spans := map[time.Duration]int{}
	for _, pt := range after {
		secs += pt.Secs
		spans[pt.Span]++
		if len(pt.GPUs) != 2 || pt.GPUs[0].UtilPercent != 0 || math.Abs(pt.GPUs[1].UtilPercent-85) > 0.01 ||
			math.Abs(pt.CPUPercent-150) > 0.01 || pt.MemoryMiB != 1000 || pt.GPUs[1].MemoryUsedMiB != 27853 {
			t.Fatalf("point %+v lost its values", pt)
		}
	}
	if math.Abs(secs-n*5) > 0.5 {
		t.Errorf("the series stands for %.0f s, want %d", secs, n*5)
	}
	if spans[0] < 700 || spans[time.Minute] < 1370 || spans[10*time.Minute] < 280 {
		t.Errorf("points per resolution %v, want ~720 raw, ~1380 of a minute, ~288 of 10 minutes", spans)
	}
	again, err := st.CompactUsage(ctx)
	if err != nil || again > 12 {
		t.Errorf("a second compaction merged %d rows (%v), want the few that aged since", again, err)
	}

	rows, err := st.IdleGPUCandidates(ctx, time.Hour, 4*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var mine []store.IdleGPURow
	for _, r := range rows {
		if r.JobUUID == j.UUID {
			mine = append(mine, r)
		}
	}
	if len(mine) != 2 || mine[0].GPU != 0 || mine[0].Avg != 0 || math.Abs(mine[1].Avg-85) > 0.01 || mine[0].ActionAvg != 0 ||
		mine[0].Secs < 3500 || mine[0].RunningS < 3*24*3600-60 || mine[0].IsFlagged || mine[0].Restartable {
		t.Fatalf("idle candidates %+v", mine)
	}
	if err := st.SetIdleGPUs(ctx, j.UUID, []int{0}); err != nil {
		t.Fatal(err)
	}
	rec, err := st.GetJob(ctx, j.UUID)
	if err != nil || len(rec.Job.State.IdleGPUs) != 1 || rec.Job.State.IdleSince == nil {
		t.Fatalf("flagged job reads %+v (%v)", rec.Job.State, err)
	}
	hours, err := st.IdleGPUHours(ctx, 5, 7*24*time.Hour)
	if err != nil || math.Abs(hours[u.ID]-72) > 0.1 {
		t.Errorf("idle GPU-hours %v (%v), want 72 for user %d", hours, err, u.ID)
	}
	if err := st.SetIdleGPUs(ctx, j.UUID, nil); err != nil {
		t.Fatal(err)
	}
	if rec, _ := st.GetJob(ctx, j.UUID); rec.Job.State.IdleGPUs != nil || rec.Job.State.IdleSince != nil {
		t.Errorf("cleared flag still reads %v since %v", rec.Job.State.IdleGPUs, rec.Job.State.IdleSince)
	}
}

// TestUsageSamplesNeitherLockNorOutliveTheirJob: appending a job's samples does not lock the
// job's row (a state change holding it does not hold the samples up: they had a foreign key
// whose check locked it), and deleting a job deletes its samples, not another job's.
func TestUsageSamplesNeitherLockNorOutliveTheirJob(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	u, p := fixture(t, st, "usage-"+t.Name()[:8], "usageproj")
	a, b := createJob(t, st, u, p, job.StatusRunning), createJob(t, st, u, p, job.StatusRunning)
	sample := func(id string) store.UsageSample {
		return store.UsageSample{JobUUID: id, CPUPercent: 50, MemoryMiB: 10, GPUs: []store.GPUSample{{Index: 0, UtilPercent: 30}}}
	}

	tx, err := st.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SELECT 1 FROM jobs WHERE uuid = $1 FOR UPDATE`, a.UUID); err != nil {
		t.Fatal(err)
	}
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = st.AddUsageSamples(wait, 5, []store.UsageSample{sample(a.UUID), sample(b.UUID)})
	cancel()
	if err != nil {
		t.Fatalf("samples appended while a transaction holds the job's row: %v", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}

	if _, err := st.DB().ExecContext(ctx, `DELETE FROM jobs WHERE uuid = $1`, a.UUID); err != nil {
		t.Fatal(err)
	}
	var left, kept int
	if err := st.DB().QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE job_uuid = $1), count(*) FILTER (WHERE job_uuid = $2) FROM job_usage`,
		a.UUID, b.UUID).Scan(&left, &kept); err != nil {
		t.Fatal(err)
	}
	if left != 0 || kept != 1 {
		t.Errorf("after deleting job a: %d of its samples left, %d of job b's kept; want 0 and 1", left, kept)
	}
}
