package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	gojson "github.com/goccy/go-json"
	"github.com/lib/pq"

	"github.com/opengpulab/gpulab/job"
)

// Beat is one heartbeat of a slave's current instance, as Heartbeat records it.
type Beat struct {
	Slave, InstanceID string
	// CertSerial, when set, is the serial of the certificate the heartbeat came with, whose
	// state the statement reads: a certificate recorded as revoked or expired gets a
	// *CertificateRefusedError and nothing is written for it. "": checked by the caller.
	CertSerial string
	// Usage is the slave's report of its jobs, kept on the slave's row (its latest only).
	Usage json.RawMessage
	// Samples go to the jobs' usage series (through the master's buffer, see usageBuffer),
	// each standing for SampleSecs; only those of jobs the master has on the slave are kept.
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

// heartbeats records heartbeats of several slaves and reads back each slave's live jobs and
// releases, in one statement: a heartbeat of a slave in a steady state (nothing to reconcile)
// is one row of a statement shared with the other heartbeats that arrived meanwhile (see
// beatQueue), whatever the number of jobs it runs, and writes one row of slaves, nothing per
// job: the jobs' usage samples are summed in the master and written apart (usageBuffer). (It
// used to be six statements per heartbeat, one of them an UPDATE of every running job's row to
// keep a latest sample nobody read, then one statement that appended a usage row per running
// job, and the certificate was read in a statement of its own.) A heartbeat that names its
// certificate (Beat.CertSerial) recorded as revoked or expired writes nothing and comes back
// with the certificate's state, so a revocation holds at the next heartbeat. A heartbeat's
// writes are made only when it is its slave's current instance's ($2): else nothing is written
// for it and no row comes back for it. The slaves' rows are locked in id order, so two batches
// (or a batch and any other statement locking several slaves in that order) cannot deadlock.
//
// Its commit does not wait for the WAL to reach the disk (synchronous_commit off for this
// transaction alone): what a heartbeat writes is soft state (the time of the last heartbeat),
// of which a crash of Postgres may lose the last fraction of a second, and the slave's next
// heartbeat writes it again; a later synchronous commit (any state change) flushes it anyway.
// With fsync on, waiting for the flush was most of a heartbeat's time and a share of
// Postgres's CPU at 1,000 heartbeats a second (B8x).
var heartbeats = `WITH b AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::float8[], $5::text[])
        WITH ORDINALITY AS b(name, instance_id, usage, grace, serial, i)
), refused AS (
    SELECT b.i, CASE WHEN c.revoked_at IS NOT NULL THEN 'revoked' ELSE 'expired' END AS state
    FROM b JOIN certificates c ON c.serial = b.serial
    WHERE b.serial <> '' AND (c.revoked_at IS NOT NULL OR c.not_after <= now())
), old AS (
    SELECT s.id, s.online, b.usage, b.i FROM slaves s JOIN b ON s.name = b.name AND s.instance_id = b.instance_id
    WHERE b.i NOT IN (SELECT i FROM refused)
    ORDER BY s.id FOR UPDATE OF s
), async AS (
    SELECT set_config('synchronous_commit', 'off', true) WHERE EXISTS (SELECT 1 FROM old)
), hb AS (
    UPDATE slaves s SET last_heartbeat = now(), online = TRUE, offline_since = NULL, usage = old.usage::jsonb
    FROM old WHERE s.id = old.id RETURNING old.i, s.name, old.online
)
SELECT hb.i, hb.online, ` + slaveJobsJSON("hb.name", "b.grace", "$6", "$7") + ` AS jobs,
    COALESCE((SELECT json_agg(json_build_object('jobUuid', r.job_uuid::text, 'attempt', r.attempt, 'slaveName', r.slave_name,
            'resources', r.resources, 'reason', r.reason, 'since', r.since) ORDER BY r.since, r.job_uuid)
        FROM job_releases r WHERE r.slave_name = hb.name), '[]') AS releases, '' AS refused
FROM hb JOIN b ON b.i = hb.i, async
UNION ALL
SELECT i, TRUE, '[]'::json, '[]'::json, state FROM refused`

// slaveJobsJSON is an expression for the live jobs on slave (an SQL expression), oldest first,
// as a JSON array that decodeSlaveJobs reads: ListSlaveJobs's rows, for statements that read
// them beside other things in one round trip. grace is the missing grace in seconds; renewA
// and renewS are the times left (seconds) below which an ASSIGNED or a STARTING job's lease is
// due for renewal (SlaveJob.Renew).
func slaveJobsJSON(slave, grace, renewA, renewS string) string {
	return `COALESCE((SELECT json_agg(json_build_object('uuid', j.uuid::text, 'status', j.status, 'attempt', j.attempt,
            'missingSince', j.missing_since, 'missing', COALESCE(j.missing_since < now() - make_interval(secs => ` + grace + `), FALSE),
            'renew', ` + renewDue("j", renewA, renewS) + `)
        ORDER BY j.created_at, j.uuid)
        FROM jobs j WHERE j.assigned_slave_name = ` + slave + ` AND j.status IN ` + liveStatuses + `), '[]')`
}

// decodeSlaveJobs reads slaveJobsJSON's array, written by Postgres: with goccy/go-json, as the
// handlers read the slaves' messages, since every heartbeat decodes one (encoding/json here
// was 4 % of the master's CPU in B8x, 35 µs a heartbeat on the bench's machine).
func decodeSlaveJobs(slave string, b []byte) ([]SlaveJob, error) {
	var jobs []struct {
		UUID         string     `json:"uuid"`
		Status       job.Status `json:"status"`
		Attempt      int        `json:"attempt"`
		MissingSince *time.Time `json:"missingSince"`
		Missing      bool       `json:"missing"`
		Renew        bool       `json:"renew"`
	}
	if err := gojson.Unmarshal(b, &jobs); err != nil {
		return nil, fmt.Errorf("decode the jobs of slave %s: %w", slave, err)
	}
	out := make([]SlaveJob, 0, len(jobs))
	for _, j := range jobs {
		sj := SlaveJob{UUID: j.UUID, Status: j.Status, Attempt: j.Attempt, Missing: j.Missing, Renew: j.Renew}
		if j.MissingSince != nil {
			sj.MissingSince = sql.NullTime{Time: *j.MissingSince, Valid: true}
		}
		out = append(out, sj)
	}
	return out, nil
}

// heartbeatArgs are the heartbeats statement's arguments for beats, under leases l.
func heartbeatArgs(beats []Beat, l Leases) []any {
	names, instances, serials := make([]string, len(beats)), make([]string, len(beats)), make([]string, len(beats))
	usage := make([]json.RawMessage, len(beats))
	grace := make([]float64, len(beats))
	for i, b := range beats {
		names[i], instances[i], grace[i], serials[i] = b.Slave, b.InstanceID, b.MissingGrace.Seconds(), b.CertSerial
		usage[i] = b.Usage
		if len(b.Usage) == 0 {
			usage[i] = nullJSON
		}
	}
	return []any{texts[string](names), texts[string](instances), texts[json.RawMessage](usage), pq.Array(grace), texts[string](serials),
		l.Assigned.Seconds() / 2, l.Starting.Seconds() / 2}
}

// nullJSON is JSON's null, for a heartbeat without a usage report (read only).
var nullJSON = json.RawMessage("null")

// beatRow is a row of the heartbeats statement, in its columns' order. Jobs and Releases are
// the driver's bytes, valid until the next row.
type beatRow struct {
	I        int
	Online   bool
	Jobs     sql.RawBytes
	Releases sql.RawBytes
	Refused  string // the certificate's state when it is refused, else ""
}

// CertificateRefusedError is a heartbeat's answer when its certificate (Beat.CertSerial) is
// recorded as revoked or expired (State).
type CertificateRefusedError struct{ Serial, State string }

func (e *CertificateRefusedError) Error() string {
	return "certificate " + e.Serial + " is " + e.State
}

// recordBeats runs the heartbeats statement for beats and returns each one's view, in order;
// a beat of an unknown slave or of another instance gets ErrNotFound.
func (s *Store) recordBeats(ctx context.Context, beats []Beat) ([]BeatView, []error, error) {
	args := heartbeatArgs(beats, s.leases)
	views, errs, err := s.scanBeats(ctx, beats, args)
	var pe *pq.Error
	if errors.As(err, &pe) && pe.Code == "40P01" && s.tx == nil {
		// A deadlock with a statement that locked some of these slaves in another order: it
		// was rolled back whole, and what it carried is tried once more rather than failed.
		views, errs, err = s.scanBeats(ctx, beats, args)
	}
	if err != nil {
		return nil, nil, mapErr(err, fmt.Sprintf("heartbeats of %d slaves", len(beats)))
	}
	return views, errs, nil
}

// scanBeats runs the heartbeats statement once and decodes each row as it comes, from the
// driver's buffer (a row's jobs and releases are read by decodeBeat and not kept): scanned by
// sqlx into a slice of rows, the columns' bytes were copied and the slice grown by reflection
// for every statement (~3 % of what B8x's master allocated).
func (s *Store) scanBeats(ctx context.Context, beats []Beat, args []any) ([]BeatView, []error, error) {
	views, errs := make([]BeatView, len(beats)), make([]error, len(beats))
	for i, b := range beats {
		errs[i] = fmt.Errorf("heartbeat of slave %s: %w", b.Slave, ErrNotFound)
	}
	err := s.q.(*prepared).scanRows(ctx, heartbeats, args, func(rows *sql.Rows) error {
		var r beatRow
		for rows.Next() {
			if err := rows.Scan(&r.I, &r.Online, &r.Jobs, &r.Releases, &r.Refused); err != nil {
				return err
			}
			i := r.I - 1
			if i < 0 || i >= len(beats) {
				return fmt.Errorf("heartbeats: row %d of %d", r.I, len(beats))
			}
			if r.Refused != "" {
				views[i], errs[i] = BeatView{}, &CertificateRefusedError{Serial: beats[i].CertSerial, State: r.Refused}
				continue
			}
			views[i], errs[i] = decodeBeat(beats[i].Slave, r)
		}
		return rows.Err()
	})
	return views, errs, err
}

// Heartbeat records a heartbeat of the slave's current instance, adds the samples of the jobs
// the master has on the slave to the usage buffer (usageBuffer), and returns what reconciling
// it needs (see heartbeats). ErrNotFound when the slave is unknown or
// runs another instance (it must register again). Outside a transaction the heartbeat joins
// the others waiting for the database in one statement (beatQueue); inside one it runs alone,
// in it, and turns the synchronous commit off for that transaction.
func (s *Store) Heartbeat(ctx context.Context, b Beat) (BeatView, error) {
	var view BeatView
	var err error
	if s.tx == nil && s.beats != nil {
		view, err = s.beats.record(ctx, b)
	} else {
		views, errs, rerr := s.recordBeats(ctx, []Beat{b})
		if rerr != nil {
			return BeatView{}, rerr
		}
		view, err = views[0], errs[0]
	}
	if err == nil && s.usage != nil {
		s.usage.add(time.Now(), b.SampleSecs, ownSamples(b.Samples, view.Jobs))
	}
	return view, err
}

// ownSamples are the samples of the jobs the master has on the slave (jobs): a slave cannot
// write the usage of another's jobs. They are most often all of them: the slave's list is then
// returned as it is, not copied (a heartbeat a millisecond in B8x). It is never written to.
func ownSamples(samples []UsageSample, jobs []SlaveJob) []UsageSample {
	isOwn := func(u UsageSample) bool {
		return slices.ContainsFunc(jobs, func(j SlaveJob) bool { return j.UUID == u.JobUUID })
	}
	i := 0
	for i < len(samples) && isOwn(samples[i]) {
		i++
	}
	if i == len(samples) {
		return samples
	}
	own := slices.Clone(samples[:i])
	for _, u := range samples[i+1:] {
		if isOwn(u) {
			own = append(own, u)
		}
	}
	return own
}

// decodeBeat reads a row of the heartbeats statement.
func decodeBeat(slave string, row beatRow) (BeatView, error) {
	view := BeatView{CameOnline: !row.Online}
	jobs, err := decodeSlaveJobs(slave, row.Jobs)
	if err != nil {
		return BeatView{}, err
	}
	if len(jobs) > 0 {
		view.Jobs = jobs
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
		return BeatView{}, fmt.Errorf("decode the releases on slave %s: %w", slave, err)
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

// slaveWorkQuery is SlaveWork's statement, made once: a long poll runs it at every look. It
// asks for no lease's renewal (a poll renews nothing; its jobs' Renew are left unread).
var slaveWorkQuery = `SELECT COALESCE((SELECT disabled FROM slaves WHERE name = $1), FALSE) AS disabled, ` +
	slaveJobsJSON("$1", "$2", "0", "0") + ` AS jobs, ` + certStateOf("$3") + ` AS cert_state`

// SlaveWork reads, in one round trip, what a slave's long poll looks at each time it wakes:
// whether the slave is disabled (an unknown slave is not) and the jobs the master has on it
// (as ListSlaveJobs). With certSerial set it reads the state of the slave's certificate too, as
// JobPlace does: one recorded as revoked or expired gets a *CertificateRefusedError. "":
// checked by the caller (or, in a long poll, already at its first look).
func (s *Store) SlaveWork(ctx context.Context, slave string, missingGrace time.Duration, certSerial string) (disabled bool, jobs []SlaveJob, err error) {
	var row struct {
		Disabled  bool           `db:"disabled"`
		Jobs      []byte         `db:"jobs"`
		CertState sql.NullString `db:"cert_state"`
	}
	if err := s.q.GetContext(ctx, &row, slaveWorkQuery, slave, missingGrace.Seconds(), certSerial); err != nil {
		return false, nil, mapErr(err, "list jobs of slave "+slave)
	}
	if err := certRefused(certSerial, row.CertState); err != nil {
		return false, nil, err
	}
	jobs, err = decodeSlaveJobs(slave, row.Jobs)
	return row.Disabled, jobs, err
}

// renewDue is an expression for whether job j's lease (ASSIGNED or STARTING) has less than
// renewA or renewS seconds left (SQL expressions): a heartbeat that lists such a job renews it
// (RenewLeases), and only then, so that a slave pulling an image for minutes does not cost a
// statement at every heartbeat.
func renewDue(j, renewA, renewS string) string {
	return `COALESCE(CASE ` + j + `.status WHEN 'ASSIGNED' THEN ` + j + `.lease_expires_at < now() + make_interval(secs => ` + renewA + `)
        WHEN 'STARTING' THEN ` + j + `.lease_expires_at < now() + make_interval(secs => ` + renewS + `) END, FALSE)`
}
