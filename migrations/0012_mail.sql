-- E-mail (issue 14). Mails are enqueued from job events, never from the code paths that add
-- them: a trigger queues every event that may cause a mail in mail_events, in the transaction
-- that adds the event, so a committed event is never without its mails, whichever of the many
-- statements that write job_events added it. A master with SMTP configured then claims queued
-- events (FOR UPDATE SKIP LOCKED), composes the mails and moves them to the outbox (mails) in
-- one transaction, and sends the outbox under a lease on the database clock.

-- Categories a user turned off on his Profile ('queue', 'run', 'end', 'halt', 'restart',
-- 'reminder', 'idle'); a mail to his address in such a category is not sent.
ALTER TABLE users ADD COLUMN mail_off TEXT[] NOT NULL DEFAULT '{}';

-- Events waiting to become mails. Only events of jobs that can have a recipient are queued:
-- the state changes that the request.extra emailOn* lists name (when the job has one of
-- them), the idle-GPU warning and the long-running reminder (to the owner).
CREATE TABLE mail_events (
    event_id    BIGINT PRIMARY KEY REFERENCES job_events(id) ON DELETE CASCADE,
    queued_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE FUNCTION queue_mail_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.kind IN ('idle-gpu', 'reminder') OR EXISTS (SELECT 1 FROM jobs WHERE uuid = NEW.job_uuid
            AND request->'extra' ?| ARRAY['emailOnQueue', 'emailOnRun', 'emailOnEnd', 'emailOnHalt', 'emailOnRestart']) THEN
        INSERT INTO mail_events (event_id) VALUES (NEW.id);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER job_events_mail AFTER INSERT ON job_events FOR EACH ROW
    WHEN (NEW.kind IN ('idle-gpu', 'reminder')
        OR (NEW.kind = 'status' AND NEW.to_status IN ('QUEUED', 'RUNNING', 'HALTED', 'FINISHED', 'FAILED', 'CANCELLED')))
    EXECUTE FUNCTION queue_mail_event();

-- The long-running reminder is sent once per job: every master looks for jobs past the share
-- of their maxDuration, and this index lets only one reminder event in.
CREATE UNIQUE INDEX job_events_reminder_once ON job_events (job_uuid) WHERE kind = 'reminder';

-- The outbox: one row per mail and recipient. A sender claims due rows by setting claim_token
-- and lease_until (now() + lease); only the holder of the token may mark the mail sent or
-- failed; a claim whose lease ran out (its master died) is claimed again. Failed sends are
-- retried at next_attempt_at with a growing backoff; after the last attempt failed_at is set.
-- attempts and last_error show what went wrong.
CREATE TABLE mails (
    id              BIGSERIAL PRIMARY KEY,
    event_id        BIGINT,     -- no reference: a mail outlives the retention of its event
    job_uuid        UUID,
    category        TEXT NOT NULL,
    recipient       TEXT NOT NULL,
    subject         TEXT NOT NULL,
    body            TEXT NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    attempts        INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT NOT NULL DEFAULT '',
    claim_token     UUID,
    lease_until     TIMESTAMPTZ,
    sent_at         TIMESTAMPTZ,
    failed_at       TIMESTAMPTZ,
    UNIQUE (event_id, recipient)
);
CREATE INDEX mails_due_idx ON mails (next_attempt_at, id) WHERE sent_at IS NULL AND failed_at IS NULL;
