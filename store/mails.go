package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/lib/pq"

	"github.com/opengpulab/gpulab/job"
)

// EventReminder is the event kind added once per job when it runs past a share of its
// maxDuration (AddReminders); its owner gets a reminder mail. (The other kind besides state
// changes that causes mails is the idle-GPU detection's "idle-gpu": see
// migrations/0012_mail.sql and mail.IdleGPUEvent.)
const EventReminder = "reminder"

// MailEvent is a job event queued for mail (by the job_events trigger) with what a mail about
// it names.
type MailEvent struct {
	EventID      int64     `db:"event_id"`
	Kind         string    `db:"kind"`
	FromStatus   string    `db:"from_status"`
	ToStatus     string    `db:"to_status"`
	Message      string    `db:"message"`
	At           time.Time `db:"at"`
	JobUUID      string    `db:"job_uuid"`
	JobName      string    `db:"job_name"`
	JobStatus    string    `db:"job_status"`
	RestartCount int       `db:"restart_count"`
	Owner        string    `db:"owner"`
	OwnerEmail   string    `db:"owner_email"`
	Project      string    `db:"project"`
	ExtraJSON    []byte    `db:"extra"`
	// Extra is the job's request.extra (the emailOn* lists).
	Extra job.Extra `db:"-"`
}

// OutMail is one mail of the outbox, to one recipient.
type OutMail struct {
	ID        int64  `db:"id"`
	EventID   int64  `db:"event_id"`
	JobUUID   string `db:"job_uuid"`
	Category  string `db:"category"`
	Recipient string `db:"recipient"`
	Subject   string `db:"subject"`
	Body      string `db:"body"`
	// Attempts counts the claims so far (this one included); LastError is the last failure.
	Attempts  int        `db:"attempts"`
	LastError string     `db:"last_error"`
	CreatedAt time.Time  `db:"created_at"`
	SentAt    *time.Time `db:"sent_at"`
	FailedAt  *time.Time `db:"failed_at"`
}

const claimMailEvents = `SELECT me.event_id, e.kind, COALESCE(e.from_status, '') AS from_status, COALESCE(e.to_status, '') AS to_status,
    e.message, e.at, j.uuid::text AS job_uuid, j.name AS job_name, j.status AS job_status, j.restart_count,
    u.name AS owner, COALESCE(NULLIF(u.email, ''), j.user_email) AS owner_email, p.name AS project,
    COALESCE(j.request->'extra', '{}'::jsonb) AS extra
FROM mail_events me
JOIN job_events e ON e.id = me.event_id
JOIN jobs j ON j.uuid = e.job_uuid
JOIN users u ON u.id = j.user_id
JOIN projects p ON p.id = j.project_id
ORDER BY me.event_id LIMIT $1
FOR UPDATE OF me SKIP LOCKED`

// insertMails adds composed mails to the outbox, leaving out those to an address whose user
// turned the mail's category off; a mail already there (same event and recipient) is kept.
const insertMails = `INSERT INTO mails (event_id, job_uuid, category, recipient, subject, body)
SELECT m.event_id, m.job_uuid::uuid, m.category, m.recipient, m.subject, m.body
FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[])
    AS m(event_id, job_uuid, category, recipient, subject, body)
WHERE NOT EXISTS (SELECT 1 FROM users u WHERE lower(u.email) = lower(m.recipient) AND m.category = ANY(u.mail_off))
ON CONFLICT (event_id, recipient) DO NOTHING`

// DispatchMailEvents turns up to limit queued events into outbox mails with compose, in one
// transaction: the events leave the queue exactly when their mails enter the outbox, and two
// masters never take the same event (SKIP LOCKED). It returns the events dispatched.
func (s *Store) DispatchMailEvents(ctx context.Context, limit int, compose func([]MailEvent) []OutMail) (int, error) {
	n := 0
	err := s.WithTx(ctx, func(tx *Store) error {
		var evs []MailEvent
		if err := tx.q.SelectContext(ctx, &evs, claimMailEvents, limit); err != nil {
			return mapErr(err, "claim mail events")
		}
		if len(evs) == 0 {
			return nil
		}
		ids := make([]int64, len(evs))
		for i := range evs {
			ids[i] = evs[i].EventID
			if err := json.Unmarshal(evs[i].ExtraJSON, &evs[i].Extra); err != nil {
				return fmt.Errorf("request.extra of job %s: %w", evs[i].JobUUID, err)
			}
		}
		mails := compose(evs)
		var eventIDs []int64
		var jobs, cats, rcpts, subjects, bodies []string
		for _, m := range mails {
			eventIDs = append(eventIDs, m.EventID)
			jobs, cats, rcpts = append(jobs, m.JobUUID), append(cats, m.Category), append(rcpts, m.Recipient)
			subjects, bodies = append(subjects, m.Subject), append(bodies, m.Body)
		}
		if len(mails) > 0 {
			if _, err := tx.q.ExecContext(ctx, insertMails, pq.Array(eventIDs), pq.Array(jobs), pq.Array(cats), pq.Array(rcpts),
				pq.Array(subjects), pq.Array(bodies)); err != nil {
				return mapErr(err, "enqueue mails")
			}
		}
		if _, err := tx.q.ExecContext(ctx, `DELETE FROM mail_events WHERE event_id = ANY($1)`, pq.Array(ids)); err != nil {
			return mapErr(err, "dequeue mail events")
		}
		n = len(evs)
		return nil
	})
	return n, err
}

// AddReminders adds the long-running reminder event to every running job past share (0 to
// 1) of its maxDuration that has none yet, on the database clock; the unique index on
// reminder events lets each job have one, however many masters look. It returns how many
// were added.
func (s *Store) AddReminders(ctx context.Context, share float64) (int64, error) {
	res, err := s.q.ExecContext(ctx, `INSERT INTO job_events (job_uuid, kind, actor, message)
SELECT uuid, '`+EventReminder+`', 'master', format('running since %s, past %s %% of its maxDuration of %s: it will be stopped at %s',
        to_char(started, 'YYYY-MM-DD HH24:MI:SS TZ'), round($1::numeric * 100), justify_interval(make_interval(secs => max_duration_s)),
        to_char(started + make_interval(secs => max_duration_s), 'YYYY-MM-DD HH24:MI:SS TZ'))
FROM (SELECT uuid, max_duration_s, (event_times->>'RUNNING')::timestamptz AS started FROM jobs WHERE status = 'RUNNING') r
WHERE started + make_interval(secs => max_duration_s * $1::float8) <= now()
ON CONFLICT (job_uuid) WHERE kind = '`+EventReminder+`' DO NOTHING`, share)
	if err != nil {
		return 0, mapErr(err, "add long-running reminders")
	}
	return res.RowsAffected()
}

// ClaimMails claims up to limit due mails of the outbox for the sender holding token, for
// lease (on the database clock): due mails are those never sent, not given up, whose next
// attempt is due and that nobody holds (a claim whose lease ran out is taken over). A claim
// counts as an attempt.
func (s *Store) ClaimMails(ctx context.Context, token string, lease time.Duration, limit int) ([]OutMail, error) {
	var out []OutMail
	err := s.q.SelectContext(ctx, &out, `UPDATE mails SET claim_token = $1, lease_until = now() + make_interval(secs => $2), attempts = attempts + 1
WHERE id IN (SELECT id FROM mails WHERE sent_at IS NULL AND failed_at IS NULL AND next_attempt_at <= now()
        AND (lease_until IS NULL OR lease_until <= now())
    ORDER BY next_attempt_at, id LIMIT $3 FOR UPDATE SKIP LOCKED)
RETURNING id, COALESCE(event_id, 0) AS event_id, COALESCE(job_uuid::text, '') AS job_uuid, category, recipient, subject, body,
    attempts, last_error, created_at, sent_at, failed_at`, token, lease.Seconds(), limit)
	return out, mapErr(err, "claim mails")
}

// MarkMailSent records a mail sent by the holder of its claim; false: the claim was lost (its
// lease ran out and another sender took it).
func (s *Store) MarkMailSent(ctx context.Context, id int64, token string) (bool, error) {
	res, err := s.q.ExecContext(ctx, `UPDATE mails SET sent_at = now(), claim_token = NULL, lease_until = NULL, last_error = ''
WHERE id = $1 AND claim_token = $2 AND sent_at IS NULL`, id, token)
	if err != nil {
		return false, mapErr(err, fmt.Sprintf("mark mail %d sent", id))
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// MailRetry is the backoff of failed sends: the n-th failure waits Base·2^(n-1), at most Max;
// the mail is given up after MaxAttempts.
type MailRetry struct {
	Base, Max   time.Duration
	MaxAttempts int
}

// MarkMailFailed records a failed send by the holder of the claim and frees the mail for its
// next attempt after the backoff (on the database clock), or gives it up after the last one.
func (s *Store) MarkMailFailed(ctx context.Context, id int64, token, why string, r MailRetry) error {
	_, err := s.q.ExecContext(ctx, `UPDATE mails SET claim_token = NULL, lease_until = NULL, last_error = $3,
    next_attempt_at = now() + make_interval(secs => least($4::float8 * power(2, greatest(attempts - 1, 0)), $5::float8)),
    failed_at = CASE WHEN attempts >= $6 THEN now() END
WHERE id = $1 AND claim_token = $2 AND sent_at IS NULL`, id, token, why, r.Base.Seconds(), r.Max.Seconds(), r.MaxAttempts)
	return mapErr(err, fmt.Sprintf("mark mail %d failed", id))
}

// ListMails lists the outbox, newest first, at most limit mails (for admins and tests).
func (s *Store) ListMails(ctx context.Context, limit int) ([]OutMail, error) {
	var out []OutMail
	err := s.q.SelectContext(ctx, &out, `SELECT id, COALESCE(event_id, 0) AS event_id, COALESCE(job_uuid::text, '') AS job_uuid, category,
    recipient, subject, body, attempts, last_error, created_at, sent_at, failed_at
FROM mails ORDER BY id DESC LIMIT $1`, limit)
	return out, mapErr(err, "list mails")
}

// CountPendingMails counts the mails not sent and not given up (the outbox depth).
func (s *Store) CountPendingMails(ctx context.Context) (int, error) {
	var n int
	err := s.q.GetContext(ctx, &n, `SELECT count(*) FROM mails WHERE sent_at IS NULL AND failed_at IS NULL`)
	return n, mapErr(err, "count pending mails")
}

// GetMailOff returns the mail categories a user turned off.
func (s *Store) GetMailOff(ctx context.Context, userID int64) ([]string, error) {
	var off pq.StringArray
	err := s.q.GetContext(ctx, &off, `SELECT mail_off FROM users WHERE id = $1`, userID)
	return []string(off), mapErr(err, fmt.Sprintf("mail settings of user %d", userID))
}

// SetMailOff sets the mail categories a user turned off.
func (s *Store) SetMailOff(ctx context.Context, userID int64, off []string) error {
	if off == nil {
		off = []string{}
	}
	res, err := s.q.ExecContext(ctx, `UPDATE users SET mail_off = $2 WHERE id = $1`, userID, pq.Array(off))
	if err != nil {
		return mapErr(err, fmt.Sprintf("set mail settings of user %d", userID))
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("set mail settings of user %d: %w", userID, ErrNotFound)
	}
	return nil
}

// DeleteOldMails deletes up to limit mails sent or given up before keep ago (database clock),
// so the outbox does not grow for ever; it returns how many it deleted.
func (s *Store) DeleteOldMails(ctx context.Context, keep time.Duration, limit int) (int64, error) {
	res, err := s.q.ExecContext(ctx, `DELETE FROM mails WHERE id IN (SELECT id FROM mails
WHERE COALESCE(sent_at, failed_at) < now() - make_interval(secs => $1) ORDER BY id LIMIT $2)`, keep.Seconds(), limit)
	if err != nil {
		return 0, mapErr(err, "delete old mails")
	}
	return res.RowsAffected()
}
