-- SSH public keys users keep on their profile, to log in to their interactive jobs.

CREATE TABLE ssh_keys (
    id          BIGSERIAL PRIMARY KEY,
    user_id     BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    name        TEXT NOT NULL DEFAULT '',
    public_key  TEXT NOT NULL,
    -- SHA256:<base64>, as `ssh-keygen -l` prints it; one key once per user.
    fingerprint TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (user_id, fingerprint)
);
