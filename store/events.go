package store

import (
	"context"
	"database/sql"
	"time"
)

// Event kinds.
const (
	EventStatus    = "status"    // a state change
	EventInfo      = "info"      // something worth knowing
	EventWarning   = "warning"   // something that went wrong without ending the job
	EventScheduler = "scheduler" // a scheduler explanation or decision
)

// Event is one entry of a job's history, served by GET jobs/{id}/debug.
type Event struct {
	ID         int64     `db:"id" json:"id"`
	JobUUID    string    `db:"job_uuid" json:"-"`
	Time       time.Time `db:"at" json:"time"`
	Kind       string    `db:"kind" json:"type"`
	FromStatus string    `db:"from_status" json:"fromStatus,omitempty"`
	ToStatus   string    `db:"to_status" json:"status,omitempty"`
	Actor      string    `db:"actor" json:"actor,omitempty"`
	Message    string    `db:"message" json:"message"`
}

// AddJobEvent appends an event to a job's history; ErrNotFound, nothing added, when there is no
// such job (job_events has no foreign key: migration 0023).
func (s *Store) AddJobEvent(ctx context.Context, ev Event) error {
	res, err := s.q.ExecContext(ctx, `INSERT INTO job_events (job_uuid, kind, from_status, to_status, actor, message)
SELECT uuid, $2, NULLIF($3, ''), NULLIF($4, ''), $5, $6 FROM jobs WHERE uuid = $1`, ev.JobUUID, ev.Kind, ev.FromStatus, ev.ToStatus, ev.Actor, ev.Message)
	return affectedOne(res, err, "add event to job "+ev.JobUUID)
}

// ListJobEvents returns a job's events, oldest first.
func (s *Store) ListJobEvents(ctx context.Context, uuid string) ([]Event, error) {
	var rows []struct {
		ID      int64          `db:"id"`
		JobUUID string         `db:"job_uuid"`
		At      time.Time      `db:"at"`
		Kind    string         `db:"kind"`
		From    sql.NullString `db:"from_status"`
		To      sql.NullString `db:"to_status"`
		Actor   string         `db:"actor"`
		Message string         `db:"message"`
	}
	if err := s.q.SelectContext(ctx, &rows, `SELECT id, job_uuid, at, kind, from_status, to_status, actor, message
FROM job_events WHERE job_uuid = $1 ORDER BY id`, uuid); err != nil {
		return nil, mapErr(err, "list events of job "+uuid)
	}
	out := make([]Event, len(rows))
	for i, r := range rows {
		out[i] = Event{ID: r.ID, JobUUID: r.JobUUID, Time: r.At, Kind: r.Kind, FromStatus: r.From.String, ToStatus: r.To.String, Actor: r.Actor, Message: r.Message}
	}
	return out, nil
}
