package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/opengpulab/gpulab/job"
)

// JobEnd describes how a job ends.
type JobEnd struct {
	From     []job.Status
	To       job.Status // FINISHED, FAILED, HALTED or CANCELLED
	Event    Event
	ExitCode *int
	Usage    json.RawMessage
	// Restart asks for the restart job of a restartable job (after a halt, or a lost worker).
	Restart bool
}

// EndJob ends a job conditionally, records its exit code and usage, and, when asked and the
// job is restartable, creates its restart job (SPEC 4), all in one transaction. It returns
// the restart job's UUID ("" when none).
func (s *Store) EndJob(ctx context.Context, id string, e JobEnd) (string, error) {
	var restartID string
	err := s.WithTx(ctx, func(tx *Store) error {
		if _, err := tx.TransitionJob(ctx, id, e.From, e.To, e.Event); err != nil {
			return err
		}
		if e.ExitCode != nil {
			if _, err := tx.q.ExecContext(ctx, `UPDATE jobs SET resources = jsonb_set(COALESCE(resources, '{}'::jsonb), '{exitCode}', to_jsonb($2::int))
WHERE uuid = $1`, id, *e.ExitCode); err != nil {
				return mapErr(err, "set exit code of job "+id)
			}
		}
		if len(e.Usage) > 0 {
			if err := tx.SetFinalUsage(ctx, id, e.Usage); err != nil {
				return err
			}
		}
		if !e.Restart {
			return nil
		}
		rec, err := tx.GetJob(ctx, id)
		if err != nil {
			return err
		}
		if !rec.Job.Request.Scheduling.Restartable {
			return nil
		}
		ran := time.Duration(0)
		if started, ok := rec.Job.State.EventTimes[job.StatusRunning]; ok {
			ran = rec.Job.State.EventTimes[e.To].Sub(started)
		}
		next, err := job.RestartOf(rec.Job, uuid.NewString(), ran)
		if err != nil {
			return tx.AddJobEvent(ctx, Event{JobUUID: id, Kind: EventInfo, Actor: "master", Message: "not restarted: " + err.Error()})
		}
		if err := tx.CreateJob(ctx, next, rec.UserID, rec.ProjectID,
			fmt.Sprintf("restart %d of job %s (after %s)", next.RestartInfo.RestartCount, id, e.To)); err != nil {
			return err
		}
		restartID = next.UUID
		return tx.AddJobEvent(ctx, Event{JobUUID: id, Kind: EventInfo, Actor: "master", Message: "restarted as job " + next.UUID})
	})
	return restartID, err
}
