package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/opengpulab/gpulab/job"
)

// Beat is one heartbeat of a slave's current instance, as Heartbeat records it.
type Beat struct {
	Slave, InstanceID string
	// Usage is the slave's report of its jobs, kept on the slave's row (its latest only).
	Usage json.RawMessage
	// Samples are appended to the jobs' usage series, each standing for SampleSecs.
	Samples    []UsageSample
	SampleSecs float64
	// MissingGrace is ListSlaveJobs' grace, for the jobs Heartbeat returns.
	MissingGrace time.Duration
}

// BeatView is what a heartbeat needs to reconcile: whether the slave came back online, the
// jobs the master has on it (as ListSlaveJobs) and what ended jobs still hold there (as
// ListReleases).
type BeatView struct {
	CameOnline bool
	Jobs       []SlaveJob
	Releases   []Release
}

// heartbeat records a heartbeat, appends its usage samples and reads back the slave's live
// jobs and releases, in one statement: a heartbeat of a slave in a steady state (nothing to
// reconcile) is one round trip, whatever the number of jobs it runs, and writes one row of
// slaves plus its samples, nothing per job. (It used to be six statements, one of them an
// UPDATE of every running job's row to keep a latest sample nobody read.) The samples are
// kept only when the heartbeat is the current instance's ($2): else nothing is written and no
// row comes back.
//
// Its commit does not wait for the WAL to reach the disk (synchronous_commit off for this
// transaction alone): what a heartbeat writes is soft state (the time of the last heartbeat,
// usage samples), of which a crash of Postgres may lose the last fraction of a second, and the
// slave's next heartbeat writes it again; a later synchronous commit (any state change) flushes
// it anyway. With fsync on, waiting for the flush was most of a heartbeat's time and a share of
// Postgres's CPU at 1,000 heartbeats a second (B8x).
const heartbeat = `WITH old AS (
    SELECT id, online FROM slaves WHERE name = $1 AND instance_id = $2 FOR UPDATE
), async AS (
    SELECT set_config('synchronous_commit', 'off', true) FROM old
), hb AS (
    UPDATE slaves s SET last_heartbeat = now(), online = TRUE, offline_since = NULL, usage = $3
    FROM old WHERE s.id = old.id RETURNING old.online
), samples AS (
    INSERT INTO job_usage (job_uuid, at, secs, cpu_percent, mem_mib, gpu_idx, gpu_util, gpu_mem_mib)
    SELECT u.id, now(), $5, u.cpu, u.mem, u.idx::int[], u.util::real[], u.gmem::bigint[]
    FROM unnest($6::uuid[], $7::float8[], $8::bigint[], $9::text[], $10::text[], $11::text[]) AS u(id, cpu, mem, idx, util, gmem)
    WHERE EXISTS (SELECT 1 FROM hb) AND EXISTS (SELECT 1 FROM jobs j WHERE j.uuid = u.id)
)
SELECT hb.online,
    COALESCE((SELECT json_agg(json_build_object('uuid', j.uuid::text, 'status', j.status, 'attempt', j.attempt,
            'missingSince', j.missing_since, 'missing', COALESCE(j.missing_since < now() - make_interval(secs => $4), FALSE))
        ORDER BY j.created_at, j.uuid)
        FROM jobs j WHERE j.assigned_slave_name = $1 AND j.status IN ` + liveStatuses + `), '[]') AS jobs,
    COALESCE((SELECT json_agg(json_build_object('jobUuid', r.job_uuid::text, 'attempt', r.attempt, 'slaveName', r.slave_name,
            'resources', r.resources, 'reason', r.reason, 'since', r.since) ORDER BY r.since, r.job_uuid)
        FROM job_releases r WHERE r.slave_name = $1), '[]') AS releases
FROM hb, async`

// Heartbeat records a heartbeat of the slave's current instance with its usage samples, and
// returns what reconciling it needs (see heartbeat). ErrNotFound when the slave is unknown or
// runs another instance (it must register again). Call it outside any transaction: it turns
// the synchronous commit off for the transaction it runs in.
func (s *Store) Heartbeat(ctx context.Context, b Beat) (BeatView, error) {
	var row struct {
		Online   bool   `db:"online"`
		Jobs     []byte `db:"jobs"`
		Releases []byte `db:"releases"`
	}
	args := append([]any{b.Slave, b.InstanceID, b.Usage, b.MissingGrace.Seconds(), b.SampleSecs}, usageArgs(b.Samples)...)
	if err := s.q.GetContext(ctx, &row, heartbeat, args...); err != nil {
		return BeatView{}, mapErr(err, "heartbeat of slave "+b.Slave)
	}
	view := BeatView{CameOnline: !row.Online}
	var jobs []struct {
		UUID         string     `json:"uuid"`
		Status       job.Status `json:"status"`
		Attempt      int        `json:"attempt"`
		MissingSince *time.Time `json:"missingSince"`
		Missing      bool       `json:"missing"`
	}
	if err := json.Unmarshal(row.Jobs, &jobs); err != nil {
		return BeatView{}, fmt.Errorf("decode the jobs of slave %s: %w", b.Slave, err)
	}
	for _, j := range jobs {
		sj := SlaveJob{UUID: j.UUID, Status: j.Status, Attempt: j.Attempt, Missing: j.Missing}
		if j.MissingSince != nil {
			sj.MissingSince = sql.NullTime{Time: *j.MissingSince, Valid: true}
		}
		view.Jobs = append(view.Jobs, sj)
	}
	var releases []struct {
		JobUUID   string          `json:"jobUuid"`
		Attempt   int             `json:"attempt"`
		SlaveName string          `json:"slaveName"`
		Resources json.RawMessage `json:"resources"`
		Reason    string          `json:"reason"`
		Since     time.Time       `json:"since"`
	}
	if err := json.Unmarshal(row.Releases, &releases); err != nil {
		return BeatView{}, fmt.Errorf("decode the releases on slave %s: %w", b.Slave, err)
	}
	for _, r := range releases {
		if string(r.Resources) == "null" {
			r.Resources = nil
		}
		view.Releases = append(view.Releases, Release{JobUUID: r.JobUUID, Attempt: r.Attempt, SlaveName: r.SlaveName,
			Resources: r.Resources, Reason: r.Reason, Since: r.Since})
	}
	return view, nil
}
