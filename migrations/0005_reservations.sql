-- Reservations (SPEC 7.3): GPUs (or whole slaves) of a cluster, or of named slaves, booked from
-- a start to an end for users and/or projects. Jobs name them in request.scheduling.reservationIds.
CREATE TABLE reservations (
    id          UUID PRIMARY KEY,
    name        TEXT NOT NULL DEFAULT '',
    cluster_id  INTEGER REFERENCES clusters(id),
    slave_names TEXT[] NOT NULL DEFAULT '{}',
    gpus        INTEGER NOT NULL DEFAULT 0 CHECK (gpus >= 0), -- 0: the whole slaves
    starts_at   TIMESTAMPTZ NOT NULL,
    ends_at     TIMESTAMPTZ NOT NULL CHECK (ends_at > starts_at),
    user_ids    BIGINT[] NOT NULL DEFAULT '{}',
    project_ids BIGINT[] NOT NULL DEFAULT '{}',
    created_by  BIGINT NOT NULL REFERENCES users(id),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK (cluster_id IS NOT NULL OR cardinality(slave_names) > 0)
);
CREATE INDEX reservations_window_idx ON reservations (ends_at, starts_at);
