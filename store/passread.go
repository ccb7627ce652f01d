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
	// Tallies are every user's tally decayed to Now (Tallies).
	Tallies map[int64]float64
	// Reservations are those not ended at Now, by start (ListReservations).
	Reservations []Reservation
	// Clusters, by id, and each one's owning projects (ClustersWithOwners).
	Clusters []Cluster
	Owners   map[int][]int64
}

// ReadPassBasics reads a pass's basics in one round trip: the four statements (ClockAndMark,
// Tallies, ListReservations, ClustersWithOwners) sent together as one query, each with its own
// snapshot as before, in one implicit transaction whose now() they share. Sent one after the
// other they were four of a pass's dozen round trips, and on a loaded machine each waits for
// both processes to be scheduled again: in B2x's slowest passes these four took 40–65 ms of
// 110–170 (29 Nov). Several statements in one query go by Postgres's simple protocol, which
// takes no parameters: the half-life, a duration of ours, is written into the text.
func (s *Store) ReadPassBasics(ctx context.Context, halfLife time.Duration) (PassBasics, error) {
	query := `SELECT now(), pg_snapshot_xmin(pg_current_snapshot())::text;
SELECT user_id, tally * power(0.5, EXTRACT(EPOCH FROM (now() - updated_at)) / ` + strconv.FormatFloat(halfLife.Seconds(), 'g', -1, 64) + `::float8) FROM user_tallies;
SELECT ` + reservationColumns + ` FROM reservations WHERE ends_at > now() ORDER BY starts_at, id;
SELECT ` + clusterColumns + `,
    ARRAY(SELECT project_id FROM cluster_projects cp WHERE cp.cluster_id = clusters.id ORDER BY project_id) AS owners
FROM clusters ORDER BY id`
	var b PassBasics
	err := s.q.(*prepared).scanRows(ctx, query, nil, func(rows *sql.Rows) error {
		var mark string
		if !rows.Next() {
			return errors.New("no clock")
		}
		if err := rows.Scan(&b.Now, &mark); err != nil {
			return err
		}
		m, err := strconv.ParseUint(mark, 10, 64)
		if err != nil {
			return fmt.Errorf("parse change mark %q: %w", mark, err)
		}
		b.Mark = ChangeMark(m)
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
		return rows.Err()
	})
	return b, mapErr(err, "read the clock, the tallies, the reservations and the clusters")
}
