-- The fair-share tally of every user (SPEC 7.2): what his running jobs held, weighted (GPUs
-- weigh most) and decayed with a half-life. The scheduler's leader updates it every pass.
CREATE TABLE user_tallies (
    user_id    BIGINT PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
    tally      DOUBLE PRECISION NOT NULL DEFAULT 0,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
