-- Slaves join with one-time tokens and report an inventory; the scheduler places jobs on them.

-- One-time join tokens. Only a hash is kept: a leaked database does not let anyone join.
CREATE TABLE slave_tokens (
    token_hash  TEXT PRIMARY KEY,
    slave_name  TEXT NOT NULL,
    cluster_id  INTEGER NOT NULL REFERENCES clusters(id),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at  TIMESTAMPTZ NOT NULL,
    used_at     TIMESTAMPTZ
);

ALTER TABLE slaves ADD COLUMN dns_name TEXT NOT NULL DEFAULT '';
ALTER TABLE slaves ADD COLUMN offline_since TIMESTAMPTZ;

-- Per-job usage samples reported by heartbeats (the latest one is kept on the job; the final
-- statistics are written at the end).
ALTER TABLE jobs ADD COLUMN usage JSONB;
-- Jobs whose slave went silent, waiting for the job grace before they fail with `worker lost`.
CREATE INDEX jobs_running_status_idx ON jobs (assigned_slave_name, status)
    WHERE status IN ('ASSIGNED','STARTING','RUNNING','MUSTHALT','HALTING');
-- The scheduler reads the queue in submission order.
CREATE INDEX jobs_queued_idx ON jobs (created_at) WHERE status = 'QUEUED';
