package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/lib/pq"

	"github.com/opengpulab/gpulab/job"
)

// ErrNotLeader means this master does not (or no longer) hold the scheduler lease: what it was
// about to write as the leader was not written.
var ErrNotLeader = errors.New("not the scheduler leader")

// Leadership is a held scheduler lease (table scheduler_leader). Several masters may share
// one database; one at a time leads. A lease rather than a session advisory lock: a lock lives
// as long as its connection, and a leader that is frozen (SIGSTOP, a VM paused) or cut off
// keeps its connection, and so the lock, for as long as the kernel keeps the socket. A lease
// on the database's clock simply runs out, and the epoch fences the old leader's writes.
type Leadership struct {
	Epoch  int64     `db:"epoch"`
	Holder string    `db:"holder"`
	Since  time.Time `db:"since"` // database clock
}

// AcquireLeadership takes the scheduler lease for ttl if no master holds an unexpired one, and
// returns it with a new epoch; ok is false when another master leads.
func (s *Store) AcquireLeadership(ctx context.Context, holder string, ttl time.Duration) (Leadership, bool, error) {
	var l Leadership
	err := s.q.GetContext(ctx, &l, `UPDATE scheduler_leader SET epoch = epoch + 1, holder = $1, since = now(),
    expires_at = now() + make_interval(secs => $2)
WHERE id = 1 AND expires_at <= now() RETURNING epoch, holder, since`, holder, ttl.Seconds())
	if errors.Is(err, sql.ErrNoRows) {
		return l, false, nil
	}
	return l, err == nil, mapErr(err, "acquire the scheduler lease")
}

// RenewLeadership extends a held lease by ttl from now; ErrNotLeader when it expired or was
// taken meanwhile.
func (s *Store) RenewLeadership(ctx context.Context, l Leadership, ttl time.Duration) error {
	res, err := s.q.ExecContext(ctx, `UPDATE scheduler_leader SET expires_at = now() + make_interval(secs => $2)
WHERE id = 1 AND epoch = $1 AND expires_at > now()`, l.Epoch, ttl.Seconds())
	if err != nil {
		return mapErr(err, "renew the scheduler lease")
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("renew the scheduler lease (epoch %d): %w", l.Epoch, ErrNotLeader)
	}
	return nil
}

// ResignLeadership ends a held lease at once, so another master takes over without waiting.
func (s *Store) ResignLeadership(ctx context.Context, l Leadership) error {
	_, err := s.q.ExecContext(ctx, `UPDATE scheduler_leader SET expires_at = '-infinity' WHERE id = 1 AND epoch = $1`, l.Epoch)
	return mapErr(err, "resign the scheduler lease")
}

// AsLeader runs fn in one transaction that first proves the leadership: it reads the lease row
// FOR KEY SHARE, so no other master can take the lease before this transaction ends (a takeover
// changes the epoch, a key: migration 0014), while the leader's own renewals, which change only
// expires_at, go on during a long pass; it refuses (ErrNotLeader, nothing written) when the
// lease expired or another epoch holds it.
func (s *Store) AsLeader(ctx context.Context, l Leadership, fn func(tx *Store) error) error {
	return s.WithTx(ctx, func(tx *Store) error {
		var ok bool
		err := tx.q.GetContext(ctx, &ok, leaseHeld+`$1 FOR KEY SHARE`, l.Epoch)
		if errors.Is(err, sql.ErrNoRows) {
			return notLeader(l)
		}
		if err != nil {
			return mapErr(err, "prove the scheduler lease")
		}
		return fn(tx)
	})
}

// leaseHeld selects the scheduler lease's row while the epoch that follows it holds it:
// AsLeader's proof, and leadProof's in the statements that prove it themselves.
const leaseHeld = `SELECT TRUE FROM scheduler_leader WHERE id = 1 AND expires_at > now() AND epoch = `

// notLeader is the error of a write refused because l no longer holds the lease.
func notLeader(l Leadership) error {
	return fmt.Errorf("act as scheduler (epoch %d): %w", l.Epoch, ErrNotLeader)
}

// Now is the database's clock, the one every timeout is measured on.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := s.q.GetContext(ctx, &now, `SELECT now()`)
	return now, mapErr(err, "read the database clock")
}

// LiveJob is a job on a slave, with what the lifecycle needs to decide about it.
type LiveJob struct {
	UUID      string     `db:"uuid"`
	Status    job.Status `db:"status"`
	Attempt   int        `db:"attempt"`
	SlaveName string     `db:"assigned_slave_name"`
	// HandedOver: an ASSIGNED job was handed to its slave (ListExpiredLeases reads it).
	HandedOver bool `db:"handed_over"`
}

// lostSlaves names the slaves offline for longer than $1 seconds, by the index of the offline
// slaves (migration 0026), not by reading every slave's row.
const lostSlaves = `SELECT name FROM slaves WHERE NOT online AND offline_since < now() - make_interval(secs => $1)`

// ListLostJobs lists the jobs on slaves that have been offline longer than `after`: their
// slaves stopped them by then (self-fencing), so they may run elsewhere.
func (s *Store) ListLostJobs(ctx context.Context, after time.Duration) ([]LiveJob, error) {
	var out []LiveJob
	// From the offline slaves (few, usually none) to their jobs: in one statement Postgres
	// joined the other way, reading every live job's row at every pass (6,000: 22 ms).
	var lost []string
	if err := s.q.SelectContext(ctx, &lost, lostSlaves, after.Seconds()); err != nil || len(lost) == 0 {
		return nil, mapErr(err, "list lost slaves")
	}
	err := s.q.SelectContext(ctx, &out, `SELECT uuid::text AS uuid, status, attempt, assigned_slave_name FROM jobs
WHERE assigned_slave_name = ANY($1) AND status IN `+liveStatuses+`
ORDER BY created_at`, pq.Array(lost))
	return out, mapErr(err, "list lost jobs")
}

// ListExpiredLeases lists the jobs whose lease ran out, at most limit of them (≤ 0: all), the
// longest expired first: ASSIGNED ones wherever they are, the others on slaves that are online
// (a silent slave's jobs are left to ListLostJobs, which waits until the slave has stopped
// them). The leader gives each its outcome in its pass's transaction, one statement each, and
// holds each one's row until it commits: the limit bounds that transaction (B8x's fill, before
// the hand-over lease: 17,000 assignments expired at once, and the slaves' updates of those
// jobs waited for the pass, holding the master's connections).
func (s *Store) ListExpiredLeases(ctx context.Context, limit int) ([]LiveJob, error) {
	var out []LiveJob
	err := s.q.SelectContext(ctx, &out, `SELECT j.uuid::text AS uuid, j.status, j.attempt, j.assigned_slave_name,
    j.handed_over_at IS NOT NULL AS handed_over FROM jobs j
JOIN slaves s ON s.name = j.assigned_slave_name
WHERE j.lease_expires_at < now() AND j.status IN `+liveStatuses+` AND (j.status = 'ASSIGNED' OR s.online)
ORDER BY j.lease_expires_at LIMIT NULLIF($1, 0)`, max(limit, 0))
	return out, mapErr(err, "list expired leases")
}

// ExpiredJob is a running job past its maxDuration.
type ExpiredJob struct {
	UUID      string `db:"uuid"`
	Status    string `db:"status"`
	Attempt   int    `db:"attempt"`
	SlaveName string `db:"assigned_slave_name"`
	MaxS      int64  `db:"max_duration_s"`
}

// ListExpiredJobs lists jobs that have run (since RUNNING) longer than their maxDuration: all of
// them (among nil), or those among the named ones (the leader names the few its memory says
// are due, so that a pass does not read every running job's row for none).
func (s *Store) ListExpiredJobs(ctx context.Context, among []string) ([]ExpiredJob, error) {
	if among != nil && len(among) == 0 {
		return nil, nil
	}
	var out []ExpiredJob
	var err error
	if among == nil {
		err = s.q.SelectContext(ctx, &out, expiredJobs+` WHERE `+expiredJob)
	} else {
		// Found by their ids alone (see handedOver): one statement for both, with
		// "$1 IS NULL OR uuid = ANY($1)", read every running job at each pass.
		err = s.q.SelectContext(ctx, &out, expiredJobs+` WHERE uuid = ANY($1::uuid[]) AND (`+expiredJob+`) IS TRUE`, pq.Array(among))
	}
	return out, mapErr(err, "list expired jobs")
}

// expiredJobs and expiredJob are ListExpiredJobs's statement and the condition it selects by.
const (
	expiredJobs = `SELECT uuid::text AS uuid, status, attempt, COALESCE(assigned_slave_name, '') AS assigned_slave_name, max_duration_s FROM jobs`
	expiredJob  = `status IN ('RUNNING', 'MUSTHALT', 'HALTING') AND event_times ? 'RUNNING'
AND (event_times->>'RUNNING')::timestamptz + make_interval(secs => max_duration_s) < now()`
)
