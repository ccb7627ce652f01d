package store

import (
	"context"
	"fmt"
	"time"

	"github.com/lib/pq"
)

// UsageSample is one heartbeat's sample of a running job, as the master stores it.
type UsageSample struct {
	JobUUID    string
	CPUPercent float64
	MemoryMiB  int64
	GPUs       []GPUSample
}

// GPUSample is one GPU's part of a sample or of a point of the series.
type GPUSample struct {
	Index         int     `json:"index"`
	UtilPercent   float64 `json:"utilPercent"`
	MemoryUsedMiB int64   `json:"memoryUsedMiB"`
}

// UsagePoint is one point of a job's usage series: a raw sample (Span 0) or the average of
// the samples of a bucket of Span (a minute, 10 minutes, an hour) starting at Time.
type UsagePoint struct {
	Time       time.Time     `json:"time"`
	Span       time.Duration `json:"-"`
	Secs       float64       `json:"seconds"` // the time the point stands for: its weight in averages
	CPUPercent float64       `json:"cpuPercent"`
	MemoryMiB  int64         `json:"memoryMiB"`
	GPUs       []GPUSample   `json:"gpus,omitempty"`
}

// UsageTier says that points older than Age are merged into buckets of Span.
type UsageTier struct {
	Age  time.Duration
	Span time.Duration
}

// UsageTiers is how a job's series is downsampled as it ages: full resolution (a point per
// usage flush, see usageBuffer) for the last hour, a point a minute up to a day, one per 10
// minutes up to a week, one an hour beyond. With the default 30 s flush a job keeps at most
// 120 + 1,380 + 864 points for its first week and 24 a day after that (a 30-day job: under
// 3,000 points, about 250 kB).
var UsageTiers = []UsageTier{
	{Age: time.Hour, Span: time.Minute},
	{Age: 24 * time.Hour, Span: 10 * time.Minute},
	{Age: 7 * 24 * time.Hour, Span: time.Hour},
}

// AddUsageSamples appends one sample per job to the jobs' series at once, all in one statement.
// secs is the time each sample stands for. (Heartbeats' samples go through the master's buffer
// instead, see usageBuffer.)
func (s *Store) AddUsageSamples(ctx context.Context, secs float64, samples []UsageSample) error {
	each := make([]float64, len(samples))
	for i := range each {
		each[i] = secs
	}
	return s.appendUsage(ctx, each, samples)
}

// appendUsage appends samples[i], standing for secs[i] seconds, to the jobs' series, stamped
// now (database clock); a sample of a job deleted meanwhile is dropped.
func (s *Store) appendUsage(ctx context.Context, secs []float64, samples []UsageSample) error {
	if len(samples) == 0 {
		return nil
	}
	_, err := s.q.ExecContext(ctx, `INSERT INTO job_usage (job_uuid, at, secs, cpu_percent, mem_mib, gpu_idx, gpu_util, gpu_mem_mib)
SELECT u.id, now(), u.secs, u.cpu, u.mem, u.idx::int[], u.util::real[], u.gmem::bigint[]
FROM unnest($1::float8[], $2::uuid[], $3::float8[], $4::bigint[], $5::text[], $6::text[], $7::text[]) AS u(secs, id, cpu, mem, idx, util, gmem)
WHERE EXISTS (SELECT 1 FROM jobs j WHERE j.uuid = u.id)`, append([]any{pq.Array(secs)}, usageArgs(samples)...)...)
	return mapErr(err, fmt.Sprintf("add usage samples of %d jobs", len(samples)))
}

// SetUsageFlush sets how long heartbeats' samples of a job are summed before they are written
// as one row of its series (DefaultUsageFlush unless set; see usageBuffer).
func (s *Store) SetUsageFlush(d time.Duration) {
	if d > 0 && s.usage != nil {
		s.usage.setEvery(d)
	}
}

// FlushUsage writes every job's heartbeat samples summed so far, whether due or not.
func (s *Store) FlushUsage(ctx context.Context) error {
	if s.usage == nil {
		return nil
	}
	return s.usage.flush(ctx, time.Now(), true)
}

// usageArgs are samples as the six arrays the statements appending them unnest: job ids, CPU,
// memory, and the GPU lists as text literals (arrays of arrays must be rectangular in
// Postgres).
func usageArgs(samples []UsageSample) []any {
	ids := make([]string, len(samples))
	cpu := make([]float64, len(samples))
	mem := make([]int64, len(samples))
	idx, util, gmem := make([]string, len(samples)), make([]string, len(samples)), make([]string, len(samples))
	for i, u := range samples {
		ids[i], cpu[i], mem[i] = u.JobUUID, u.CPUPercent, u.MemoryMiB
		var a, b, c []string
		for _, g := range u.GPUs {
			a = append(a, fmt.Sprint(g.Index))
			b = append(b, fmt.Sprintf("%.2f", g.UtilPercent))
			c = append(c, fmt.Sprint(g.MemoryUsedMiB))
		}
		idx[i], util[i], gmem[i] = pgArray(a), pgArray(b), pgArray(c)
	}
	return []any{pq.Array(ids), pq.Array(cpu), pq.Array(mem), pq.Array(idx), pq.Array(util), pq.Array(gmem)}
}

func pgArray(elems []string) string {
	out := "{"
	for i, e := range elems {
		if i > 0 {
			out += ","
		}
		out += e
	}
	return out + "}"
}

type usageRow struct {
	At     time.Time       `db:"at"`
	SpanS  int             `db:"span_s"`
	Secs   float64         `db:"secs"`
	CPU    float64         `db:"cpu_percent"`
	Mem    int64           `db:"mem_mib"`
	Idx    pq.Int64Array   `db:"gpu_idx"`
	Util   pq.Float64Array `db:"gpu_util"`
	GPUMem pq.Int64Array   `db:"gpu_mem_mib"`
}

// JobUsage returns a job's usage series, oldest first. Its last point is what this master has
// summed of the job's latest samples and not yet written, when it has any (stamped with the
// master's clock): the series is current on the master that receives the job's heartbeats, and
// at most a flush interval behind on another.
func (s *Store) JobUsage(ctx context.Context, uuid string) ([]UsagePoint, error) {
	var rows []usageRow
	if err := s.q.SelectContext(ctx, &rows, `SELECT at, span_s, secs, cpu_percent, mem_mib, gpu_idx, gpu_util, gpu_mem_mib
FROM job_usage WHERE job_uuid = $1 ORDER BY at`, uuid); err != nil {
		return nil, mapErr(err, "read usage of job "+uuid)
	}
	out := make([]UsagePoint, len(rows))
	for i, r := range rows {
		p := UsagePoint{Time: r.At, Span: time.Duration(r.SpanS) * time.Second, Secs: r.Secs, CPUPercent: r.CPU, MemoryMiB: r.Mem}
		for k := range r.Idx {
			g := GPUSample{Index: int(r.Idx[k])}
			if k < len(r.Util) {
				g.UtilPercent = r.Util[k]
			}
			if k < len(r.GPUMem) {
				g.MemoryUsedMiB = r.GPUMem[k]
			}
			p.GPUs = append(p.GPUs, g)
		}
		out[i] = p
	}
	if s.usage != nil {
		if p, ok := s.usage.pending(uuid, time.Now()); ok {
			if len(out) > 0 && p.Time.Before(out[len(out)-1].Time) {
				p.Time = out[len(out)-1].Time // the two clocks differ: the pending sum is the latest
			}
			out = append(out, p)
		}
	}
	return out, nil
}

// compactTier merges the rows finer than span that are older than age (whole buckets only:
// the cut is aligned on the bucket) into one row per bucket and GPU, averages weighted by secs.
const compactTier = `WITH old AS (
    DELETE FROM job_usage WHERE span_s < $1
      AND at < date_bin(make_interval(secs => $1), now() - make_interval(secs => $2), timestamptz 'epoch')
    RETURNING *
), r AS (
    SELECT *, date_bin(make_interval(secs => $1), at, timestamptz 'epoch') AS b FROM old
), base AS (
    SELECT job_uuid, b, sum(secs) AS secs,
        coalesce(sum(cpu_percent * secs) / nullif(sum(secs), 0), 0) AS cpu,
        coalesce(round(sum(mem_mib * secs) / nullif(sum(secs), 0)), max(mem_mib))::bigint AS mem
    FROM r GROUP BY job_uuid, b
), g AS (
    SELECT r.job_uuid, r.b, x.idx,
        coalesce(sum(x.util * r.secs) / nullif(sum(r.secs), 0), 0) AS util,
        coalesce(round(sum(x.mem * r.secs) / nullif(sum(r.secs), 0)), max(x.mem))::bigint AS mem
    FROM r CROSS JOIN LATERAL unnest(r.gpu_idx, r.gpu_util, r.gpu_mem_mib) AS x(idx, util, mem)
    GROUP BY r.job_uuid, r.b, x.idx
), ga AS (
    SELECT job_uuid, b, array_agg(idx ORDER BY idx) AS idx, array_agg(util ORDER BY idx) AS util, array_agg(mem ORDER BY idx) AS mem
    FROM g GROUP BY job_uuid, b
)
INSERT INTO job_usage (job_uuid, at, span_s, secs, cpu_percent, mem_mib, gpu_idx, gpu_util, gpu_mem_mib)
SELECT base.job_uuid, base.b, $1, base.secs, base.cpu, base.mem,
    coalesce(ga.idx, '{}'), coalesce(ga.util, '{}'), coalesce(ga.mem, '{}')
FROM base LEFT JOIN ga ON ga.job_uuid = base.job_uuid AND ga.b = base.b`

// CompactUsage downsamples every job's series by UsageTiers (database clock) and returns how
// many merged rows it wrote. Each tier is one statement; two masters running it at once merge each
// row once (the second waits on the first's deletes and finds the rows gone).
func (s *Store) CompactUsage(ctx context.Context) (int64, error) {
	var merged int64
	for _, t := range UsageTiers {
		res, err := s.q.ExecContext(ctx, compactTier, int(t.Span.Seconds()), t.Age.Seconds())
		if err != nil {
			return merged, mapErr(err, "compact usage older than "+t.Age.String())
		}
		n, _ := res.RowsAffected()
		merged += n
	}
	return merged, nil
}

// IdleGPURow is one GPU of a running job with its average utilisation over the idle window
// and the action window (-1 when no sample falls in it), for the idle-GPU check.
type IdleGPURow struct {
	JobUUID     string        `db:"uuid"`
	Attempt     int           `db:"attempt"`
	SlaveName   string        `db:"slave"`
	Restartable bool          `db:"restartable"`
	Flagged     pq.Int64Array `db:"idle_gpus"` // the GPUs flagged now; NULL: not flagged
	IsFlagged   bool          `db:"is_flagged"`
	RunningS    float64       `db:"running_s"` // how long the job has been RUNNING
	GPU         int           `db:"idx"`
	Avg         float64       `db:"avg"`        // over the idle window
	Secs        float64       `db:"secs"`       // what the samples of the idle window stand for
	ActionAvg   float64       `db:"action_avg"` // over the action window
}

// IdleGPUCandidates returns, per GPU of every RUNNING job, its average utilisation over the
// last window and the last actionWindow (database clock), from the job's usage series.
func (s *Store) IdleGPUCandidates(ctx context.Context, window, actionWindow time.Duration) ([]IdleGPURow, error) {
	var rows []IdleGPURow
	err := s.q.SelectContext(ctx, &rows, `SELECT j.uuid, j.attempt, coalesce(j.assigned_slave_name, '') AS slave,
    coalesce((j.request->'scheduling'->>'restartable')::boolean, false) AS restartable,
    j.idle_gpus, j.idle_since IS NOT NULL AS is_flagged,
    EXTRACT(EPOCH FROM now() - (j.event_times->>'RUNNING')::timestamptz)::float8 AS running_s,
    x.idx,
    coalesce(sum(x.util * u.secs) FILTER (WHERE u.at >= now() - make_interval(secs => $1::float8))
        / nullif(sum(u.secs) FILTER (WHERE u.at >= now() - make_interval(secs => $1::float8)), 0), -1)::float8 AS avg,
    coalesce(sum(u.secs) FILTER (WHERE u.at >= now() - make_interval(secs => $1::float8)), 0)::float8 AS secs,
    coalesce(sum(x.util * u.secs) FILTER (WHERE u.at >= now() - make_interval(secs => $2::float8))
        / nullif(sum(u.secs) FILTER (WHERE u.at >= now() - make_interval(secs => $2::float8)), 0), -1)::float8 AS action_avg
FROM jobs j
JOIN job_usage u ON u.job_uuid = j.uuid AND u.at >= now() - make_interval(secs => greatest($1::float8, $2::float8))
CROSS JOIN LATERAL unnest(u.gpu_idx, u.gpu_util) AS x(idx, util)
WHERE j.status = 'RUNNING' AND j.event_times ? 'RUNNING'
GROUP BY j.uuid, x.idx
ORDER BY j.uuid, x.idx`, window.Seconds(), actionWindow.Seconds())
	return rows, mapErr(err, "read idle GPU candidates")
}

// SetIdleGPUs flags a job's idle GPUs (from now, database clock) or, with none, clears the flag.
func (s *Store) SetIdleGPUs(ctx context.Context, uuid string, gpus []int) error {
	if len(gpus) == 0 {
		_, err := s.q.ExecContext(ctx, `UPDATE jobs SET idle_gpus = NULL, idle_since = NULL WHERE uuid = $1`, uuid)
		return mapErr(err, "clear the idle flag of job "+uuid)
	}
	idx := make([]int64, len(gpus))
	for i, g := range gpus {
		idx[i] = int64(g)
	}
	_, err := s.q.ExecContext(ctx, `UPDATE jobs SET idle_gpus = $2, idle_since = coalesce(idle_since, now()) WHERE uuid = $1`, uuid, pq.Array(idx))
	return mapErr(err, "flag idle GPUs of job "+uuid)
}

// IdleGPUHours returns per user id the GPU-hours of the last `since` during which a GPU of one
// of his jobs was under threshold percent (from the usage series, so bounded by its resolution).
func (s *Store) IdleGPUHours(ctx context.Context, threshold float64, since time.Duration) (map[int64]float64, error) {
	var rows []struct {
		UserID int64   `db:"user_id"`
		Hours  float64 `db:"hours"`
	}
	if err := s.q.SelectContext(ctx, &rows, `SELECT j.user_id, (sum(u.secs) / 3600.0)::float8 AS hours
FROM job_usage u JOIN jobs j ON j.uuid = u.job_uuid CROSS JOIN LATERAL unnest(u.gpu_util) AS x(util)
WHERE u.at >= now() - make_interval(secs => $2) AND x.util < $1
GROUP BY j.user_id`, threshold, since.Seconds()); err != nil {
		return nil, mapErr(err, "read idle GPU-hours")
	}
	out := make(map[int64]float64, len(rows))
	for _, r := range rows {
		out[r.UserID] = r.Hours
	}
	return out, nil
}
