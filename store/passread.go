package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// PassBasics is what a scheduler pass reads before the slaves and the jobs.
type PassBasics struct {
	// Now and Mark are ClockAndMark's: the database's clock and a change mark.
	Now  time.Time
	Mark ChangeMark
	// Started is when the database server started or last recovered from a crash: another
	// value than a pass before means it restarted meanwhile, perhaps after a crash that lost
	// what it had committed without waiting for the disk. A crash of any one server process
	// (the out-of-memory killer's) makes Postgres recover without restarting its postmaster,
	// whose start time (pg_postmaster_start_time) stays the same; the recovery discards the
	// statistics, whose reset time moves (pg_stat_bgwriter's, which only a crash, a fresh
	// cluster or an operator's pg_stat_reset_shared resets: the last costs one full read).
	Started time.Time
	// Tallies are every user's tally decayed to Now (Tallies).
	Tallies map[int64]float64
	// Reservations are those not ended at Now, by start (ListReservations).
	Reservations []Reservation
	// Clusters, by id, and each one's owning projects (ClustersWithOwners).
	Clusters []Cluster
	Owners   map[int][]int64
}

// PassFeeds says which change feeds a pass reads together with its basics (ReadPass): the
// slaves changed since SlavesFrom (SlavesChangedSince), the jobs changed since JobsFrom or named
// in Also (JobsChangedSince), each only when asked. With the jobs' feed comes what ended jobs
// still hold (Releasing), read after it as a pass must: a job that ends between the two reads is
// then counted twice, never not at all. A full read of either (the start of a term) is made apart.
type PassFeeds struct {
	Slaves, Jobs         bool
	SlavesFrom, JobsFrom ChangeMark
	Also                 []string
}

// PassRead is what ReadPass read: the basics, and the feeds asked for.
type PassRead struct {
	PassBasics
	Slaves    []SchedSlave
	Jobs      []SchedJob
	Releasing []SchedJob
}

// ReadPass reads a pass's basics (the clock and a change mark, every user's tally decayed to
// now, the reservations not ended and the clusters with their owners) and the feeds asked for, in
// one round trip: the statements (ClockAndMark, Tallies, ListReservations, ClustersWithOwners,
// then SlavesChangedSince, JobsChangedSince and Releasing) sent together as one query, each with
// its own snapshot as before, in one implicit transaction whose now() they share; the mark is
// taken first, before the feeds are read. Sent one after the other they were seven of a pass's
// round trips, and on a loaded machine each waits for both processes to be scheduled again: in
// B2x's slowest passes the first four took 40–65 ms of 110–170 (29 Nov). Several statements in
// one query go by Postgres's simple protocol, which takes no parameters: the half-life (a
// duration of ours), the marks (numbers) and the named jobs (quoted) are written into the text,
// so each is planned with its values, as lib/pq's unnamed statements were.
func (s *Store) ReadPass(ctx context.Context, halfLife time.Duration, feeds PassFeeds) (PassRead, error) {
	query := `SELECT now(), pg_current_snapshot()::text, GREATEST(pg_postmaster_start_time(), pg_stat_get_bgwriter_stat_reset_time());
SELECT user_id, tally * power(0.5, EXTRACT(EPOCH FROM (now() - updated_at)) / ` + strconv.FormatFloat(halfLife.Seconds(), 'g', -1, 64) + `::float8) FROM user_tallies;
SELECT ` + reservationColumns + ` FROM reservations WHERE ends_at > now() ORDER BY starts_at, id;
SELECT ` + clusterColumns + `,
    ARRAY(SELECT project_id FROM cluster_projects cp WHERE cp.cluster_id = clusters.id ORDER BY project_id) AS owners
FROM clusters ORDER BY id`
	if feeds.Slaves {
		query += ";\n" + schedSlaves + `WHERE ` + changedSince(feeds.SlavesFrom)
	}
	if feeds.Jobs {
		also, err := append(pq.StringArray{}, feeds.Also...).Value() // never nil: "{}" when empty
		if err != nil {
			return PassRead{}, fmt.Errorf("read a pass: the jobs named: %w", err)
		}
		query += ";\n" + schedJobs + changedSince(feeds.JobsFrom) + ` OR uuid = ANY(` + pq.QuoteLiteral(also.(string)) + `::uuid[])` +
			";\n" + releasingQuery
	}
	var b PassRead
	err := s.q.(*prepared).scanRows(ctx, query, nil, func(rows *sql.Rows) error {
		if err := scanBasics(rows, &b.PassBasics); err != nil {
			return err
		}
		if feeds.Slaves {
			if !rows.NextResultSet() {
				return errors.New("no slaves")
			}
			if err := sqlx.StructScan(rows, &b.Slaves); err != nil {
				return err
			}
		}
		if feeds.Jobs {
			if !rows.NextResultSet() {
				return errors.New("no jobs")
			}
			if err := sqlx.StructScan(rows, &b.Jobs); err != nil {
				return err
			}
			if !rows.NextResultSet() {
				return errors.New("no releases")
			}
			if err := sqlx.StructScan(rows, &b.Releasing); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	return b, mapErr(err, "read the clock, the tallies, the reservations, the clusters and the changes")
}

// scanBasics reads ReadPass's first four result sets.
func scanBasics(rows *sql.Rows, b *PassBasics) error {
	var mark string
	if !rows.Next() {
		return errors.New("no clock")
	}
	if err := rows.Scan(&b.Now, &mark, &b.Started); err != nil {
		return err
	}
	m, err := parseSnapshot(mark)
	if err != nil {
		return err
	}
	b.Mark = m
	if rows.Next() { // one row: this Next ends the result set, before the next one is read
		return errors.New("more than one clock")
	}
	if !rows.NextResultSet() {
		return errors.New("no tallies")
	}
	b.Tallies = map[int64]float64{}
	for rows.Next() {
		var user int64
		var tally float64
		if err := rows.Scan(&user, &tally); err != nil {
			return err
		}
		b.Tallies[user] = tally
	}
	if !rows.NextResultSet() {
		return errors.New("no reservations")
	}
	var reservations []reservationRow
	if err := sqlx.StructScan(rows, &reservations); err != nil {
		return err
	}
	for _, r := range reservations {
		b.Reservations = append(b.Reservations, r.value())
	}
	if !rows.NextResultSet() {
		return errors.New("no clusters")
	}
	var clusters []struct {
		Cluster
		Owners pq.Int64Array `db:"owners"`
	}
	if err := sqlx.StructScan(rows, &clusters); err != nil {
		return err
	}
	b.Owners = map[int][]int64{}
	for _, c := range clusters {
		b.Clusters = append(b.Clusters, c.Cluster)
		if len(c.Owners) > 0 {
			b.Owners[c.ID] = c.Owners
		}
	}
	return nil
}
