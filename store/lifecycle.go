package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/opengpulab/gpulab/job"
)

// Leases bound the in-between states of a job (SPEC 13): when one passes (database clock), the
// scheduler's housekeeping gives the job its defined outcome (see Expired and the protocol
// package's timeline). A lease is set when the job enters the state and cleared when it leaves.
type Leases struct {
	// Assigned: a slave takes the job (ASSIGNED → STARTING) within this of being handed it
	// (its long poll returned the job, HandedOver); else it is queued again. HandOver bounds the
	// time before the hand-over: a slave that heartbeats but does not ask for work. Only a
	// hand-over shortens the lease: a master too loaded to answer the polls must not queue
	// again, and assign again, jobs no slave was given (B8x's fill). A heartbeat that lists the
	// job renews it (RenewLeases), up to HandOver after the assignment: the slave has the job
	// and its STARTING update may wait long for an overloaded master.
	Assigned time.Duration
	HandOver time.Duration
	// Starting is renewed by every heartbeat that lists the job as starting (an image pull
	// may take long while it makes progress), up to StartDeadline after STARTING.
	Starting      time.Duration
	StartDeadline time.Duration
	// MustHalt: the slave begins the halt (MUSTHALT → HALTING).
	MustHalt time.Duration
	// Halting: the halt ends (SIGUSR1, 15 s for exit 123, else a kill, then the report).
	Halting time.Duration
}

// DefaultLeases are generous against a loaded slave and short against a lost one.
var DefaultLeases = Leases{Assigned: 2 * time.Minute, HandOver: 15 * time.Minute, Starting: 3 * time.Minute, StartDeadline: time.Hour,
	MustHalt: 2 * time.Minute, Halting: 2 * time.Minute}

// BeforeHandOver is the lease of an assigned job not handed to its slave yet: HandOver, never
// shorter than Assigned (leases set without it keep the assigned lease from the assignment).
func (l Leases) BeforeHandOver() time.Duration { return max(l.HandOver, l.Assigned) }

// SetLeases sets the leases of state changes made through this store (DefaultLeases unless
// set). Call it before the store is shared.
func (s *Store) SetLeases(l Leases) {
	s.leases = l
	if s.beats != nil {
		s.beats.s.leases = l // the heartbeats' statement reads which leases are due for renewal
	}
	if s.changes != nil {
		s.changes.s.leases = l
	}
}

// Leases are the leases of this store's state changes.
func (s *Store) Leases() Leases { return s.leases }

// liveStatuses are the states in which a job is on a slave (job.RunningStatuses), as SQL text:
// queries meant to use jobs_slave_live_idx must name them literally, as its predicate does.
const liveStatuses = `('ASSIGNED', 'STARTING', 'RUNNING', 'MUSTHALT', 'HALTING')`

// Change is a conditional state change of a job, with what goes with it.
type Change struct {
	// From are the states the job may be in; To the state it moves to.
	From  []job.Status
	To    job.Status
	Event Event
	// Attempt, when set, makes the change apply only to that attempt of the job (the one a
	// slave was given): a slave that lost track can never move a job placed again since.
	Attempt *int
	// Released says the slave confirms that the job's container no longer runs (it exited or
	// was never made). Otherwise a job leaving a slave's STARTING … HALTING for an end or the
	// queue keeps what it holds there (job_releases) until the slave confirms it.
	Released bool
	// Resources, when set, replace the job's state.resources (the ports a container really got).
	Resources *job.StateResources
	// ExitCode and Usage are recorded with an end.
	ExitCode *int
	Usage    json.RawMessage
	// Restart asks for the restart job of a restartable job that ends (SPEC 4).
	Restart bool
	// WakeScheduler has the scheduler leader woken (Store.WakeScheduler) once the change is
	// made: a job's end frees what a pass can place. Not sent by the change's own statement,
	// nor by one the request waits for: see wakeSender.
	WakeScheduler bool
	// Slave, when set, is the slave asking for the change (its update and done calls): the job
	// moves only if it is assigned to that slave and, while ASSIGNED, the slave is not disabled;
	// CertSerial, when set, is that slave's certificate, whose state the same statement reads
	// (revoked or expired: no change). See SlaveChangeJob.
	Slave      string
	CertSerial string
}

// Attempt is a helper for Change.Attempt.
func Attempt(n int) *int { return &n }

// changeJobs is conditional state changes of jobs with everything that goes with each, in one
// statement for any number of jobs (each named once): each job's row (with, when given, the
// resources the slave reports, the exit code and the final usage), its status event, what the
// job keeps holding on its slave and, when it leaves the queue, what it was told while waiting
// (job_waits; left when the forecaster is writing it, as an assignment leaves it, for the
// retention sweep: see assignClear). A change used to be a transaction of three to five
// statements (the change, the event, then the resources, exit code and usage each updating the
// row again); the slaves' job updates are a large share of a busy master's writes (B1x: 44,000
// in a burst, two a job placed, besides its end). It returns one row for each change whatever
// happened: where the job was found (its state, its slave and that slave's disabled flag, as
// JobPlace reads them), the caller's certificate's state and whether the change was made, so
// that neither a conflict nor a slave's checks (Change.Slave) cost a statement of their own.
// The changes that arrive together go in one statement (changeQueue); the jobs' rows are locked
// in uuid order, so two such statements cannot deadlock on each other.
//
// Its rows: $1 the jobs, $2 the states they move to, $3 the states each may leave (joined by
// commas), $4 the attempts (-1: any), $5 released, $6 the events' messages, $7 their actors, $8
// the resources reported (NULL: kept), $9 the exit codes, $10 the final usage, $11 the slaves
// asking (empty: the master's), $12 their certificates (empty: not checked); $13–$16 the leases.
//
// changeJob is the same statement for one change, with the same parameters as scalars: a
// statement whose parameters are arrays is planned again at every execution (Postgres's plan
// for any length, reused, is estimated dearer than one for the length given), which for one
// change cost Postgres three times the statement's execution (0.5 ms of planning against
// 0.15 ms); with scalars the plan is made once per connection.
var (
	changeJobs = changeStatement(`SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::int[], $5::bool[], $6::text[], $7::text[], $8::jsonb[],
            $9::int[], $10::jsonb[], $11::text[], $12::text[])
        WITH ORDINALITY AS t(uuid, status_to, status_from, attempt, released, message, actor, resources, exit_code, usage, slave, serial, i)`)
	changeJob = changeStatement(`SELECT $1::uuid AS uuid, $2::text AS status_to, $3::text AS status_from, $4::int AS attempt, $5::bool AS released,
        $6::text AS message, $7::text AS actor, $8::jsonb AS resources, $9::int AS exit_code, $10::jsonb AS usage, $11::text AS slave,
        $12::text AS serial, 1::bigint AS i`)
)

// changeStatement is changeJobs with the changes' rows read by input.
func changeStatement(input string) string {
	return `WITH input AS (
    ` + input + `
), ` + slavePlace("ORDER BY j.uuid FOR UPDATE OF j") + `, upd AS (
    UPDATE jobs j SET status = i.status_to, event_times = j.event_times || jsonb_build_object(i.status_to, now()), updated_at = now(),
        lease_expires_at = CASE i.status_to
            WHEN 'ASSIGNED' THEN now() + make_interval(secs => $13)
            WHEN 'STARTING' THEN now() + make_interval(secs => $14)
            WHEN 'MUSTHALT' THEN now() + make_interval(secs => $15)
            WHEN 'HALTING' THEN now() + make_interval(secs => $16) END,
        missing_since = NULL,
        assigned_slave_name = CASE WHEN i.status_to = 'QUEUED' THEN NULL ELSE j.assigned_slave_name END,
        assigned_instance_id = CASE WHEN i.status_to = 'QUEUED' THEN NULL ELSE j.assigned_instance_id END,
        assigned_cluster_id = CASE WHEN i.status_to = 'QUEUED' THEN NULL ELSE j.assigned_cluster_id END,
        resources = CASE WHEN i.exit_code IS NULL THEN r.resources
            ELSE jsonb_set(COALESCE(r.resources, '{}'::jsonb), '{exitCode}', to_jsonb(i.exit_code)) END,
        final_usage = COALESCE(i.usage, j.final_usage)
    FROM input i JOIN old ON old.i = i.i JOIN may ON may.i = i.i,
        LATERAL (SELECT CASE WHEN i.resources IS NOT NULL THEN i.resources
            WHEN i.status_to = 'QUEUED' THEN NULL ELSE old.resources END AS resources) r
    WHERE j.uuid = old.uuid AND old.status = ANY(string_to_array(i.status_from, ',')) AND (i.attempt < 0 OR old.attempt = i.attempt)
      AND may.ok
    RETURNING i.i, j.uuid, old.status, old.attempt, old.assigned_slave_name, old.resources, i.status_to, i.released, i.message, i.actor
), held AS (
    INSERT INTO job_releases (job_uuid, attempt, slave_name, resources, reason)
    SELECT uuid, attempt, assigned_slave_name, resources, message FROM upd
    WHERE NOT released AND status IN ('STARTING', 'RUNNING', 'MUSTHALT', 'HALTING')
      AND status_to NOT IN ('STARTING', 'RUNNING', 'MUSTHALT', 'HALTING')
      AND assigned_slave_name IS NOT NULL AND resources IS NOT NULL
    ON CONFLICT DO NOTHING
), ev AS (
    INSERT INTO job_events (job_uuid, kind, from_status, to_status, actor, message)
    SELECT uuid, '` + EventStatus + `', status, status_to, actor, message FROM upd ORDER BY i
), waited AS (
    SELECT x.job_uuid FROM upd JOIN job_waits x ON x.job_uuid = upd.uuid
    WHERE upd.status = 'QUEUED' AND upd.status_to <> 'QUEUED' FOR UPDATE OF x SKIP LOCKED
), unwaited AS (
    DELETE FROM job_waits w USING waited x WHERE w.job_uuid = x.job_uuid
)
SELECT c.i, c.state AS cert_state, o.status, o.attempt, COALESCE(o.assigned_slave_name, '') AS slave, o.slave_disabled,
    o.queued_at, o.cluster_id, EXISTS (SELECT FROM upd WHERE upd.i = c.i) AS changed
FROM cert c LEFT JOIN old o ON o.i = c.i ORDER BY c.i`
}

// ChangeJob makes a conditional state change: the job moves only if it is in one of c.From (and
// in c.Attempt, when given); the change, its event, the exit code and usage, what the job keeps
// holding on its slave and, when asked, the restart job are written in one transaction. A job
// in another state gives a *StateConflict (errors.Is ErrStateConflict) naming the state found.
// It returns the state left and the restart job's uuid ("" when none). With c.Slave set, see
// SlaveChangeJob for what else it may return.
func (s *Store) ChangeJob(ctx context.Context, id string, c Change) (old job.Status, restartID string, err error) {
	place, restartID, err := s.SlaveChangeJob(ctx, id, c)
	return place.Status, restartID, err
}

// SlaveChangeJob is ChangeJob returning where the job was before the change (the state it
// left, its slave: JobPlace). With c.Slave set, the change is a slave's, checked in the same
// statement as JobPlace and the handlers checked it before in one of its own: a job that does
// not exist, is not on c.Slave, or is ASSIGNED to it while it is disabled gives a
// *WrongSlaveError with what was found; with c.CertSerial set, a certificate recorded as
// revoked or expired gives a *CertificateRefusedError, whether the job exists or not, before
// any other outcome. Neither changes anything.
//
// Outside a transaction, a change that asks for no restart job goes in one statement with the
// others that arrive while earlier ones are written (changeQueue): alone on a quiet master.
func (s *Store) SlaveChangeJob(ctx context.Context, id string, c Change) (JobPlace, string, error) {
	if c.Restart && c.To.Ended() {
		var place JobPlace
		var restartID string
		err := s.WithTx(ctx, func(tx *Store) error {
			var err error
			if place, err = tx.changeOne(ctx, id, c); err != nil {
				return err
			}
			restartID, err = tx.restart(ctx, id, c.To)
			return err
		})
		return place, restartID, err
	}
	if s.tx == nil && s.changes != nil {
		place, err := s.changes.change(ctx, id, c)
		return place, "", err
	}
	place, err := s.changeOne(ctx, id, c)
	return place, "", err
}

// changeOne makes change c of job id in a statement of its own.
func (s *Store) changeOne(ctx context.Context, id string, c Change) (JobPlace, error) {
	outcomes, err := s.makeChanges(ctx, []string{id}, []Change{c})
	if err != nil {
		return JobPlace{}, mapErr(err, "change job "+id)
	}
	return outcomes[0].place, outcomes[0].err
}

// changeOutcome is what one change of a makeChanges statement came to.
type changeOutcome struct {
	place JobPlace
	err   error
}

// makeChanges makes the changes cs of the jobs ids (each named once) in one statement and
// returns each one's outcome, in order; the error is the statement's (nothing was changed). It
// wakes the scheduler, once, when a change that asks for it was made.
func (s *Store) makeChanges(ctx context.Context, ids []string, cs []Change) ([]changeOutcome, error) {
	statement, args, err := changeArgs(ids, cs, s.leases)
	if err != nil {
		return nil, err
	}
	var rows []changedRow
	if err := s.q.SelectContext(ctx, &rows, statement, args...); err != nil {
		return nil, err
	}
	if len(rows) != len(cs) {
		return nil, fmt.Errorf("change %d jobs: %d rows came back", len(cs), len(rows))
	}
	out, wake := make([]changeOutcome, len(cs)), false
	for _, row := range rows {
		i := row.I - 1
		if i < 0 || i >= len(cs) {
			return nil, fmt.Errorf("change %d jobs: row %d", len(cs), row.I)
		}
		out[i].place, out[i].err = row.outcome(ids[i], cs[i])
		wake = wake || (out[i].err == nil && cs[i].WakeScheduler)
	}
	if wake {
		s.WakeScheduler()
	}
	return out, nil
}

// changeValues are one change's values, as changeStatement's input reads them.
type changeValues struct {
	id, to, from, message, actor, slave, serial string
	attempt                                     int64
	released                                    bool
	resources, usage                            sql.NullString
	exitCode                                    sql.NullInt64
}

func valuesOf(id string, c Change) (changeValues, error) {
	v := changeValues{id: id, to: string(c.To), from: strings.Join(statusStrings(c.From), ","), message: c.Event.Message,
		actor: c.Event.Actor, slave: c.Slave, serial: c.CertSerial, attempt: -1, released: c.Released}
	if c.Attempt != nil {
		v.attempt = int64(*c.Attempt)
	}
	if c.Resources != nil {
		data, err := json.Marshal(c.Resources)
		if err != nil {
			return v, fmt.Errorf("encode resources of job %s: %w", id, err)
		}
		v.resources = sql.NullString{String: string(data), Valid: true}
	}
	if len(c.Usage) > 0 {
		v.usage = sql.NullString{String: string(c.Usage), Valid: true}
	}
	if c.ExitCode != nil {
		v.exitCode = sql.NullInt64{Int64: int64(*c.ExitCode), Valid: true}
	}
	return v, nil
}

// changeArgs are the parameters for the changes cs of the jobs ids: changeJob's for one,
// changeJobs's (arrays) for more.
func changeArgs(ids []string, cs []Change, l Leases) (string, []any, error) {
	leases := []any{l.Assigned.Seconds(), l.Starting.Seconds(), l.MustHalt.Seconds(), l.Halting.Seconds()}
	if len(cs) == 1 {
		v, err := valuesOf(ids[0], cs[0])
		return changeJob, append([]any{v.id, v.to, v.from, v.attempt, v.released, v.message, v.actor, v.resources, v.exitCode,
			v.usage, v.slave, v.serial}, leases...), err
	}
	n := len(cs)
	to, from, messages, actors, slaves, serials := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	attempts, released := make([]int64, n), make([]bool, n)
	resources, usage := make([]sql.NullString, n), make([]sql.NullString, n)
	exitCodes := make([]sql.NullInt64, n)
	for i, c := range cs {
		v, err := valuesOf(ids[i], c)
		if err != nil {
			return "", nil, err
		}
		to[i], from[i], messages[i], actors[i], slaves[i], serials[i] = v.to, v.from, v.message, v.actor, v.slave, v.serial
		attempts[i], released[i], resources[i], usage[i], exitCodes[i] = v.attempt, v.released, v.resources, v.usage, v.exitCode
	}
	return changeJobs, append([]any{texts[string](ids), texts[string](to), texts[string](from), pq.Array(attempts), pq.Array(released), texts[string](messages),
		texts[string](actors), pq.Array(resources), pq.Array(exitCodes), pq.Array(usage), texts[string](slaves), texts[string](serials)}, leases...), nil
}

// changedRow is changeJob's row: the job as found and the caller's certificate (slaveRow), with
// the columns a state change also gives and whether it was made.
type changedRow struct {
	I int `db:"i"`
	slaveRow
	QueuedAt  sql.NullTime  `db:"queued_at"`
	ClusterID sql.NullInt64 `db:"cluster_id"`
	Changed   bool          `db:"changed"`
}

// outcome is what a change of job id asked as c came to, from its statement's row: the place
// the job left, or why it did not move (in the order SlaveChangeJob gives).
func (r changedRow) outcome(id string, c Change) (JobPlace, error) {
	p, found, err := r.check(id, c.Slave, c.CertSerial)
	if err != nil {
		return JobPlace{}, err
	}
	if !found {
		return JobPlace{}, fmt.Errorf("change job %s: %w", id, ErrNotFound)
	}
	if !r.Changed {
		return JobPlace{}, &StateConflict{JobUUID: id, Current: p.Status, Attempt: p.Attempt, Wanted: c.To}
	}
	p.QueuedAt, p.ClusterID = r.QueuedAt, int(r.ClusterID.Int64)
	return p, nil
}

// slavePlace is the part of the statements of changes and slaves' calls about jobs that reads
// each job's place and checks, in the statement that acts on the job, that the caller may act
// on it (changeJobs, appendLog). It follows a CTE input with a row for each call: the job
// (uuid), the slave asking (slave; empty when not a slave's call), its certificate (serial; empty:
// not checked) and the call's number (i). It gives old, each job's row (taken with lock: the
// changes lock them in uuid order) with its slave's disabled flag; cert, for each call the state of its certificate (NULL when
// not checked); and may, for each call whether the caller may act on its job: its certificate
// is not refused and SlaveMayAct's rule holds. The statement's rows read old and cert back
// (slaveRow), and SlaveMayAct says why not.
func slavePlace(lock string) string {
	return `old AS (
    SELECT i.i, j.uuid, j.status, j.attempt, j.assigned_slave_name, j.resources,
        COALESCE((SELECT s.disabled FROM slaves s WHERE s.name = j.assigned_slave_name), false) AS slave_disabled,
        (j.event_times->>'QUEUED')::timestamptz AS queued_at, COALESCE((j.resources->>'clusterId')::int, 0) AS cluster_id
    FROM input i JOIN jobs j ON j.uuid = i.uuid ` + lock + `
), cert AS (
    SELECT i.i, CASE WHEN i.serial = '' THEN NULL ELSE ` + certStateOf("i.serial") + ` END AS state FROM input i
), may AS (
    SELECT c.i, c.state IS DISTINCT FROM 'revoked' AND c.state IS DISTINCT FROM 'expired'
        AND (i.slave = '' OR EXISTS (SELECT FROM old WHERE old.i = c.i AND old.assigned_slave_name = i.slave
            AND NOT (old.status = 'ASSIGNED' AND old.slave_disabled))) AS ok
    FROM cert c JOIN input i ON i.i = c.i
)`
}

// slaveRow is what a statement starting with slavePlace reads back: the certificate's state and
// the job as found (all NULL when there is none).
type slaveRow struct {
	CertState     sql.NullString `db:"cert_state"`
	Status        sql.NullString `db:"status"`
	Attempt       sql.NullInt64  `db:"attempt"`
	Slave         sql.NullString `db:"slave"`
	SlaveDisabled sql.NullBool   `db:"slave_disabled"`
}

// check is the place of job id as read, whether it exists, and the refusal of a slave's call
// (slave "": none) before anything else: a certificate recorded as revoked or expired
// (certSerial "": not checked), then a job that does not exist, is not on the slave, or is
// ASSIGNED to it while it is disabled (*WrongSlaveError).
func (r slaveRow) check(id, slave, certSerial string) (JobPlace, bool, error) {
	if err := certRefused(certSerial, r.CertState); err != nil {
		return JobPlace{}, false, err
	}
	found := r.Status.Valid
	p := JobPlace{Status: job.Status(r.Status.String), Attempt: int(r.Attempt.Int64), Slave: r.Slave.String, SlaveDisabled: r.SlaveDisabled.Bool}
	if slave != "" {
		if err := SlaveMayAct(slave, id, p, found); err != nil {
			return JobPlace{}, found, err
		}
	}
	return p, found, nil
}

// SlaveMayAct is nil when slave may act on job id found at p (found false: there is no such
// job), else the *WrongSlaveError that says why not: the job is on another slave or none, or
// ASSIGNED to the slave while the slave is disabled. The one rule of every slave call about a
// job, whether its statement read the place (SlaveChangeJob, AppendLog) or JobPlace did.
func SlaveMayAct(slave, id string, p JobPlace, found bool) error {
	if !found || p.Slave != slave || (p.Status == job.StatusAssigned && p.SlaveDisabled) {
		return &WrongSlaveError{JobUUID: id, Slave: slave, Found: found, Place: p}
	}
	return nil
}

// WrongSlaveError is a slave's call about a job refused before anything else about the job
// (SlaveMayAct): the job does not exist (Found false), is on another slave or none
// (Place.Slave), or is ASSIGNED to the slave while it is disabled (Disabled).
type WrongSlaveError struct {
	JobUUID, Slave string
	Found          bool
	Place          JobPlace
}

// Disabled says the job is the slave's, ASSIGNED to it while it is disabled: a disabled slave
// takes no job.
func (e *WrongSlaveError) Disabled() bool { return e.Found && e.Place.Slave == e.Slave }

func (e *WrongSlaveError) Error() string {
	if e.Disabled() {
		return fmt.Sprintf("slave %s is disabled: it takes no job", e.Slave)
	}
	return fmt.Sprintf("job %s is not on slave %s", e.JobUUID, e.Slave)
}

// TransitionJob is ChangeJob for a plain state change: the job moves to `to` if, and only if,
// it is now in one of `from`. It returns the state left.
func (s *Store) TransitionJob(ctx context.Context, uuid string, from []job.Status, to job.Status, ev Event) (job.Status, error) {
	old, _, err := s.ChangeJob(ctx, uuid, Change{From: from, To: to, Event: ev})
	return old, err
}

// restart creates the restart job of a restartable job that ended (SPEC 4): same request,
// maxDuration reduced by the time it ran, restartInfo counting up.
func (s *Store) restart(ctx context.Context, id string, ended job.Status) (string, error) {
	rec, err := s.GetJob(ctx, id)
	if err != nil {
		return "", err
	}
	if !rec.Job.Request.Scheduling.Restartable {
		return "", nil
	}
	ran := time.Duration(0)
	if started, ok := rec.Job.State.EventTimes[job.StatusRunning]; ok {
		ran = rec.Job.State.EventTimes[ended].Sub(started)
	}
	next, err := job.RestartOf(rec.Job, uuid.NewString(), ran)
	if err != nil {
		return "", s.AddJobEvent(ctx, Event{JobUUID: id, Kind: EventInfo, Actor: "master", Message: "not restarted: " + err.Error()})
	}
	if err := s.CreateJob(ctx, next, rec.UserID, rec.ProjectID,
		fmt.Sprintf("restart %d of job %s (after %s)", next.RestartInfo.RestartCount, id, ended)); err != nil {
		return "", err
	}
	return next.UUID, s.AddJobEvent(ctx, Event{JobUUID: id, Kind: EventInfo, Actor: "master", Message: "restarted as job " + next.UUID})
}

// StateConflict is the error of a conditional state change that found the job in another state,
// or given to another attempt.
type StateConflict struct {
	JobUUID string
	Current job.Status
	// Attempt is the job's current attempt: a slave acting for another one lost the job.
	Attempt int
	Wanted  job.Status
}

func (e *StateConflict) Error() string {
	return fmt.Sprintf("job %s is %s, cannot become %s", e.JobUUID, e.Current, e.Wanted)
}

// Unwrap makes errors.Is(err, ErrStateConflict) true.
func (e *StateConflict) Unwrap() error { return ErrStateConflict }

// Release is what an ended job still holds on a slave until the slave confirms its container
// gone.
type Release struct {
	JobUUID   string          `db:"job_uuid"`
	Attempt   int             `db:"attempt"`
	SlaveName string          `db:"slave_name"`
	Resources json.RawMessage `db:"resources"`
	Reason    string          `db:"reason"`
	Since     time.Time       `db:"since"`
}

// ListReleases lists what ended jobs still hold, on one slave ("" for all), oldest first.
func (s *Store) ListReleases(ctx context.Context, slave string) ([]Release, error) {
	var out []Release
	err := s.q.SelectContext(ctx, &out, `SELECT job_uuid::text AS job_uuid, attempt, slave_name, resources, reason, since FROM job_releases
WHERE $1 = '' OR slave_name = $1 ORDER BY since, job_uuid`, slave)
	return out, mapErr(err, "list releases")
}

// ConfirmReleases frees what the given jobs held on a slave, which confirmed their containers
// gone, with an event on each job; it returns the jobs freed.
func (s *Store) ConfirmReleases(ctx context.Context, slave string, jobUUIDs []string, why string) ([]string, error) {
	if len(jobUUIDs) == 0 {
		return nil, nil
	}
	var freed []string
	err := s.q.SelectContext(ctx, &freed, `WITH gone AS (
    DELETE FROM job_releases WHERE slave_name = $1 AND job_uuid::text = ANY($2) RETURNING job_uuid
), ev AS (
    INSERT INTO job_events (job_uuid, kind, actor, message) SELECT DISTINCT job_uuid, 'info', 'slave ' || $1, $3 FROM gone
)
SELECT DISTINCT job_uuid::text FROM gone`, slave, pq.Array(jobUUIDs), why)
	return freed, mapErr(err, "confirm releases on slave "+slave)
}

// Requeue is an assignment the housekeeping takes back (RequeueAssigned).
type Requeue struct {
	UUID    string
	Attempt int
	// Expired: taken back because its lease ran out, which it must still have when the
	// statement runs (a heartbeat may have renewed it since it was listed); otherwise because
	// its slave was lost.
	Expired bool
	// Message is the event's text.
	Message string
}

// requeueAssigned is RequeueAssigned's statement: the same row and event as changeJob's
// ASSIGNED → QUEUED with Released (an assignment never taken holds nothing on its slave), for
// many jobs at once. Only the join with the ids leads to the rows: the other conditions are
// wrapped so that no plan reads every ASSIGNED job through jobs_status_idx (see handedOver).
const requeueAssigned = `WITH x AS (
    SELECT * FROM unnest($1::uuid[], $2::int[], $3::bool[], $4::text[]) AS x(uuid, attempt, expired, message)
), upd AS (
    UPDATE jobs j SET status = 'QUEUED', event_times = j.event_times || jsonb_build_object('QUEUED', now()), updated_at = now(),
        lease_expires_at = NULL, missing_since = NULL, assigned_slave_name = NULL, assigned_instance_id = NULL,
        assigned_cluster_id = NULL, resources = NULL
    FROM x WHERE j.uuid = x.uuid
      AND (j.status = 'ASSIGNED' AND j.attempt = x.attempt AND (NOT x.expired OR j.lease_expires_at < now())) IS TRUE
    RETURNING j.uuid, x.message
), ev AS (
    INSERT INTO job_events (job_uuid, kind, from_status, to_status, actor, message)
    SELECT uuid, '` + EventStatus + `', 'ASSIGNED', 'QUEUED', $5, message FROM upd
)
SELECT uuid::text FROM upd`

// RequeueAssigned queues again, in one statement, the assignments the housekeeping takes back
// (their slave was lost, or did not ask for or take the job in time) that are still ASSIGNED in
// the attempt named (and, when Expired, still past their lease); it returns the jobs queued
// again. One ChangeJob per job, in the leader's transaction, held each row from its statement
// to the commit through up to 500 round trips, while the slaves' updates of those jobs waited
// for them (B8x's fill, 29 Nov); a job not in that state any more is left as it is, as a
// conflict of ChangeJob was.
func (s *Store) RequeueAssigned(ctx context.Context, actor string, rs []Requeue) ([]string, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	ids, attempts, expired, messages := make([]string, len(rs)), make([]int64, len(rs)), make([]bool, len(rs)), make([]string, len(rs))
	for i, r := range rs {
		ids[i], attempts[i], expired[i], messages[i] = r.UUID, int64(r.Attempt), r.Expired, r.Message
	}
	var out []string
	err := s.q.SelectContext(ctx, &out, requeueAssigned, pq.Array(ids), pq.Array(attempts), pq.Array(expired), pq.Array(messages), actor)
	return out, mapErr(err, "queue again assignments not taken")
}
