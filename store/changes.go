package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lib/pq"
)

// The leader's change feed (migration 0015). Every row of jobs and slaves carries sched_xid, the
// id of the transaction that last changed what the scheduler reads of it. A reader takes a
// ChangeMark before it reads: the transactions its read could not see, those that had not
// committed when the mark was taken. At its next read it asks for the rows stamped by one of
// them, and misses no change: a transaction that commits after the mark was either running
// then (its id among the mark's Running) or had no id yet (its id at least the mark's Next).
// A transaction whose changes the read saw is not among them, so its rows are not read again.
//
// The mark used to be the oldest transaction still running (the snapshot's xmin), and a read
// asked for every row stamped at or after it: every change committed since the oldest write
// still running began came again at each pass. Writes are short, and in bench B8x that cost
// little; but one transaction left open with an id (an operator's session idle in a
// transaction, a long batch) made every pass read every job changed since it began, each
// queued job's request sent, read and compared again: with one open from B8x's fill, 65,000
// rows a pass and passes of 4.8 s (3 Dec).

// ChangeMark says which transactions a read made after it could not have seen: every one from
// Next on, and those in Running (each below Next) that were still running when it was taken.
// It is a Postgres snapshot's xmax and xip list (pg_current_snapshot), of 64-bit ids (xid8,
// which do not wrap around).
type ChangeMark struct {
	Next    uint64
	Running []uint64
}

// Union is the mark of what a read after either mark could not have seen: a feed read from it
// gives every row either would give. (Either may be the older: a check's mark, taken before
// its full read, and the memory's, taken at its last pass.)
func (m ChangeMark) Union(o ChangeMark) ChangeMark {
	u := ChangeMark{Next: min(m.Next, o.Next)}
	// A running id at or past the lower Next is already in the range from it: only those below
	// it go in the list.
	for _, r := range [][]uint64{m.Running, o.Running} {
		for _, x := range r {
			if x < u.Next && !slices.Contains(u.Running, x) {
				u.Running = append(u.Running, x)
			}
		}
	}
	slices.Sort(u.Running)
	return u
}

// Before says whether m was taken before o on the same server, as far as Next tells (Next
// never goes back while the server runs: see the leader's wentBack).
func (m ChangeMark) Before(o ChangeMark) bool { return m.Next < o.Next }

// String writes the mark as Postgres writes a snapshot, without its xmin: "next:running,…".
func (m ChangeMark) String() string {
	var b strings.Builder
	b.WriteString(strconv.FormatUint(m.Next, 10))
	b.WriteByte(':')
	writeIDs(&b, m.Running)
	return b.String()
}

// writeIDs writes ids separated by commas.
func writeIDs(b *strings.Builder, ids []uint64) {
	for i, x := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(x, 10))
	}
}

// parseSnapshot reads a mark from a snapshot as Postgres writes it (pg_snapshot's text,
// "xmin:xmax:xip,…").
func parseSnapshot(text string) (ChangeMark, error) {
	parts := strings.Split(text, ":")
	if len(parts) != 3 {
		return ChangeMark{}, fmt.Errorf("parse snapshot %q: want xmin:xmax:running", text)
	}
	oldest, err1 := strconv.ParseUint(parts[0], 10, 64)
	next, err2 := strconv.ParseUint(parts[1], 10, 64)
	if err := cmp.Or(err1, err2); err != nil {
		return ChangeMark{}, fmt.Errorf("parse snapshot %q: %w", text, err)
	}
	if oldest > next {
		return ChangeMark{}, fmt.Errorf("parse snapshot %q: want xmin ≤ xmax", text)
	}
	m := ChangeMark{Next: next}
	if parts[2] == "" {
		return m, nil
	}
	for _, f := range strings.Split(parts[2], ",") {
		x, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return ChangeMark{}, fmt.Errorf("parse snapshot %q: a running id: %w", text, err)
		}
		if x < oldest || x >= next {
			return ChangeMark{}, fmt.Errorf("parse snapshot %q: want running ids from xmin to xmax", text)
		}
		m.Running = append(m.Running, x)
	}
	return m, nil
}

// changedSinceArgs is the condition on sched_xid of the rows a read from a mark must give, with
// its ids as the parameters $next and $running (changedArgs).
func changedSinceArgs(next, running int) string {
	return fmt.Sprintf("(sched_xid >= $%d::text::xid8 OR sched_xid = ANY($%d::text[]::xid8[]))", next, running)
}

// changedArgs are m's ids as changedSinceArgs's parameters.
func changedArgs(m ChangeMark) (next string, running pq.StringArray) {
	running = make(pq.StringArray, len(m.Running))
	for i, x := range m.Running {
		running[i] = strconv.FormatUint(x, 10)
	}
	return strconv.FormatUint(m.Next, 10), running
}

// changedSince is changedSinceArgs written with m's ids as literals, for ReadPass's statements,
// which take no parameters (the ids are numbers).
func changedSince(m ChangeMark) string {
	var b strings.Builder
	b.WriteString("(sched_xid >= '")
	b.WriteString(strconv.FormatUint(m.Next, 10))
	b.WriteString("'::xid8")
	if len(m.Running) > 0 {
		b.WriteString(" OR sched_xid = ANY('{")
		writeIDs(&b, m.Running)
		b.WriteString("}'::xid8[])")
	}
	b.WriteByte(')')
	return b.String()
}

// TakeChangeMark returns the mark to read changes from next time; take it before the read it
// goes with.
func (s *Store) TakeChangeMark(ctx context.Context) (ChangeMark, error) {
	var text string
	if err := s.q.GetContext(ctx, &text, `SELECT pg_current_snapshot()::text`); err != nil {
		return ChangeMark{}, mapErr(err, "take a change mark")
	}
	return parseSnapshot(text)
}

// ClockAndMark returns the database's clock and a change mark (TakeChangeMark) in one
// statement: a scheduler pass reads both before the rest of its reads.
func (s *Store) ClockAndMark(ctx context.Context) (time.Time, ChangeMark, error) {
	var row struct {
		Now  time.Time `db:"now"`
		Mark string    `db:"mark"`
	}
	if err := s.q.GetContext(ctx, &row, `SELECT now() AS now, pg_current_snapshot()::text AS mark`); err != nil {
		return time.Time{}, ChangeMark{}, mapErr(err, "read the database clock and a change mark")
	}
	m, err := parseSnapshot(row.Mark)
	return row.Now, m, err
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

// JobsChangedSince reads the jobs whose scheduling columns changed since mark (whatever
// their state now: a job that ended is read so that it can be forgotten), and the jobs named in
// also whatever their stamp (those a pass found changed behind its back). A named job that no
// longer exists is not returned.
func (s *Store) JobsChangedSince(ctx context.Context, mark ChangeMark, also []string) ([]SchedJob, error) {
	var out []SchedJob
	next, running := changedArgs(mark)
	err := s.q.SelectContext(ctx, &out, schedJobs+changedSinceArgs(1, 2)+` OR uuid = ANY($3::uuid[])`, next, running, pq.Array(also))
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

// SlavesChangedSince lists the slaves whose scheduling columns changed since mark (see
// JobsChangedSince): a pass's read of the slaves, by the index on the stamp.
func (s *Store) SlavesChangedSince(ctx context.Context, mark ChangeMark) ([]SchedSlave, error) {
	var out []SchedSlave
	next, running := changedArgs(mark)
	err := s.q.SelectContext(ctx, &out, schedSlaves+`WHERE `+changedSinceArgs(1, 2), next, running)
	return out, mapErr(err, "read the slaves changed since the last pass")
}
