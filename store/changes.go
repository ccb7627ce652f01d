package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/lib/pq"
)

// The leader's change feed (migration 0015). Every row of jobs and slaves carries sched_xid, the
// id of the transaction that last changed what the scheduler reads of it. A reader that takes a
// ChangeMark before it reads, and at its next read asks for the rows stamped at or after that
// mark, misses no change: a transaction that had not committed when the mark was taken was
// still running then, so its id is at least the mark (the oldest id still running), whether
// it had an id yet or not. Rows changed by transactions that were running at the mark are read
// again, which costs a little and changes nothing.

// ChangeMark is the oldest transaction id still running when it was taken (a 64-bit xid8,
// which does not wrap around).
type ChangeMark uint64

// TakeChangeMark returns the mark to read changes from next time; take it before the read it
// goes with.
func (s *Store) TakeChangeMark(ctx context.Context) (ChangeMark, error) {
	var text string
	if err := s.q.GetContext(ctx, &text, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text`); err != nil {
		return 0, mapErr(err, "take a change mark")
	}
	m, err := strconv.ParseUint(text, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse change mark %q: %w", text, err)
	}
	return ChangeMark(m), nil
}

// ClockAndMark returns the database's clock and a change mark (TakeChangeMark) in one
// statement: a scheduler pass reads both before the rest of its reads.
func (s *Store) ClockAndMark(ctx context.Context) (time.Time, ChangeMark, error) {
	var row struct {
		Now  time.Time `db:"now"`
		Mark string    `db:"mark"`
	}
	if err := s.q.GetContext(ctx, &row, `SELECT now() AS now, pg_snapshot_xmin(pg_current_snapshot())::text AS mark`); err != nil {
		return time.Time{}, 0, mapErr(err, "read the database clock and a change mark")
	}
	m, err := strconv.ParseUint(row.Mark, 10, 64)
	if err != nil {
		return time.Time{}, 0, fmt.Errorf("parse change mark %q: %w", row.Mark, err)
	}
	return row.Now, ChangeMark(m), nil
}

// SchedJob is what the scheduler reads of a job: its key and, while it is queued, its request;
// while it holds resources on a slave (ASSIGNED … HALTING), what it holds.
type SchedJob struct {
	Held
	Created time.Time `db:"created_at"`
	// Holds: the job is live and has its resources (Held describes them).
	Holds bool `db:"holds"`
	// Request is the job's request document, read only while the job is queued.
	Request []byte `db:"request"`
}

// Queued says whether the job is waiting in the queue.
func (j SchedJob) Queued() bool { return j.Status == "QUEUED" }

const schedJobs = `SELECT ` + heldJobColumns + `,
	(status IN ` + liveStatuses + ` AND resources IS NOT NULL) AS holds,
	CASE WHEN status = 'QUEUED' THEN request END AS request
FROM jobs, LATERAL (SELECT resources AS r) x WHERE `

// SchedulerJobs reads every job the scheduler keeps in memory: the queued ones and those that
// hold resources on a slave. The full read, at the start of a term and as a periodic check;
// hint is how many there were at the last (0: unknown), to size the answer.
func (s *Store) SchedulerJobs(ctx context.Context, hint int) ([]SchedJob, error) {
	out, err := selectMany[SchedJob](ctx, s.q.(*prepared), hint+hint/8,
		schedJobs+`status = 'QUEUED' OR (status IN `+liveStatuses+` AND resources IS NOT NULL)`)
	return out, mapErr(err, "read the scheduler's jobs")
}

// JobsChangedSince reads the jobs whose scheduling columns changed at or after mark (whatever
// their state now: a job that ended is read so that it can be forgotten), and the jobs named in
// also whatever their stamp (those a pass found changed behind its back). A named job that no
// longer exists is not returned.
func (s *Store) JobsChangedSince(ctx context.Context, mark ChangeMark, also []string) ([]SchedJob, error) {
	var out []SchedJob
	err := s.q.SelectContext(ctx, &out, schedJobs+`sched_xid >= $1::text::xid8 OR uuid = ANY($2::uuid[])`,
		strconv.FormatUint(uint64(mark), 10), pq.Array(also))
	return out, mapErr(err, "read the jobs changed since the last pass")
}

// Releasing lists what ended (or requeued) jobs still hold until their slaves confirm their
// containers gone (job_releases), with when that began. A short list, read whole.
func (s *Store) Releasing(ctx context.Context) ([]SchedJob, error) {
	var out []SchedJob
	err := s.q.SelectContext(ctx, &out, releasingQuery)
	return out, mapErr(err, "list resources being released")
}

const releasingQuery = `SELECT ` + releasingColumns + `, TRUE AS holds, NULL AS request ` + releasingFrom

// SchedSlave is what the scheduler reads of a slave. Every column of it stamps the slave's row
// when it changes (migration 0016), so that a pass reads only the slaves changed since its last
// read: a slave's row is rewritten by each heartbeat, and a read of every slave at every pass
// scanned the dead versions those leave (12 MB for 1,000 slaves in B2x).
type SchedSlave struct {
	Name          string `db:"name"`
	InstanceID    string `db:"instance_id"`
	ClusterID     int    `db:"cluster_id"`
	Host          string `db:"host"`
	DNSName       string `db:"dns_name"`
	AcceptingJobs bool   `db:"accepting_jobs"`
	Online        bool   `db:"online"`
	Disabled      bool   `db:"disabled"`
	Inventory     []byte `db:"inventory"`
	CapacityGPUs  []byte `db:"capacity_gpus"`
}

const schedSlaves = `SELECT name, instance_id, cluster_id, host, dns_name, accepting_jobs, online, disabled, inventory, capacity_gpus
FROM slaves `

// SchedulerSlaves lists every slave by cluster and name.
func (s *Store) SchedulerSlaves(ctx context.Context) ([]SchedSlave, error) {
	var out []SchedSlave
	err := s.q.SelectContext(ctx, &out, schedSlaves+`ORDER BY cluster_id, name`)
	return out, mapErr(err, "list slaves for the scheduler")
}

// SlavesChangedSince lists the slaves whose scheduling columns changed at or after mark (see
// JobsChangedSince): a pass's read of the slaves, by the index on the stamp.
func (s *Store) SlavesChangedSince(ctx context.Context, mark ChangeMark) ([]SchedSlave, error) {
	var out []SchedSlave
	err := s.q.SelectContext(ctx, &out, schedSlaves+`WHERE sched_xid >= $1::text::xid8`, strconv.FormatUint(uint64(mark), 10))
	return out, mapErr(err, "read the slaves changed since the last pass")
}
