package store

import (
	"context"
	"database/sql"
	"time"

	"github.com/lib/pq"
)

// Reservation books resources for users or projects during a window (SPEC 7.3).
type Reservation struct {
	ID         string        `db:"id" json:"id"`
	Name       string        `db:"name" json:"name"`
	ClusterID  sql.NullInt64 `db:"cluster_id" json:"-"`
	SlaveNames []string      `db:"-" json:"slaveNames"`
	GPUs       int           `db:"gpus" json:"gpus"`
	Start      time.Time     `db:"starts_at" json:"start"`
	End        time.Time     `db:"ends_at" json:"end"`
	UserIDs    []int64       `db:"-" json:"-"`
	ProjectIDs []int64       `db:"-" json:"-"`
	CreatedBy  int64         `db:"created_by" json:"-"`
	CreatedAt  time.Time     `db:"created_at" json:"created"`
}

type reservationRow struct {
	Reservation
	Slaves   pq.StringArray `db:"slave_names"`
	Users    pq.Int64Array  `db:"user_ids"`
	Projects pq.Int64Array  `db:"project_ids"`
}

func (r reservationRow) value() Reservation {
	out := r.Reservation
	out.SlaveNames, out.UserIDs, out.ProjectIDs = []string(r.Slaves), []int64(r.Users), []int64(r.Projects)
	if out.SlaveNames == nil {
		out.SlaveNames = []string{}
	}
	return out
}

const reservationColumns = `id, name, cluster_id, slave_names, gpus, starts_at, ends_at, user_ids, project_ids, created_by, created_at`

// CreateReservation stores a reservation (its ID chosen by the caller).
func (s *Store) CreateReservation(ctx context.Context, r Reservation) (Reservation, error) {
	var row reservationRow
	slaves := r.SlaveNames
	if slaves == nil {
		slaves = []string{}
	}
	err := s.q.GetContext(ctx, &row, `INSERT INTO reservations (id, name, cluster_id, slave_names, gpus, starts_at, ends_at, user_ids, project_ids, created_by)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING `+reservationColumns,
		r.ID, r.Name, r.ClusterID, pq.Array(slaves), r.GPUs, r.Start, r.End, pq.Array(nonNil(r.UserIDs)), pq.Array(nonNil(r.ProjectIDs)), r.CreatedBy)
	return row.value(), mapErr(err, "create reservation")
}

// ListReservations lists the reservations that have not ended before `after`, by start.
func (s *Store) ListReservations(ctx context.Context, after time.Time) ([]Reservation, error) {
	var rows []reservationRow
	if err := s.q.SelectContext(ctx, &rows, `SELECT `+reservationColumns+` FROM reservations WHERE ends_at > $1 ORDER BY starts_at, id`, after); err != nil {
		return nil, mapErr(err, "list reservations")
	}
	out := make([]Reservation, len(rows))
	for i, r := range rows {
		out[i] = r.value()
	}
	return out, nil
}

// GetReservation reads one reservation.
func (s *Store) GetReservation(ctx context.Context, id string) (Reservation, error) {
	var row reservationRow
	err := s.q.GetContext(ctx, &row, `SELECT `+reservationColumns+` FROM reservations WHERE id = $1`, id)
	return row.value(), mapErr(err, "get reservation "+id)
}

// DeleteReservation removes a reservation.
func (s *Store) DeleteReservation(ctx context.Context, id string) error {
	res, err := s.q.ExecContext(ctx, `DELETE FROM reservations WHERE id = $1`, id)
	return affectedOne(res, err, "delete reservation "+id)
}

func nonNil(ids []int64) []int64 {
	if ids == nil {
		return []int64{}
	}
	return ids
}
