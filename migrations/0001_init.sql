-- The foundation: people, projects, clusters, slaves, jobs and what happens to them.

CREATE TABLE users (
    id          BIGSERIAL PRIMARY KEY,
    urn         TEXT NOT NULL UNIQUE,
    name        TEXT NOT NULL UNIQUE,
    email       TEXT NOT NULL DEFAULT '',
    is_admin    BOOLEAN NOT NULL DEFAULT FALSE,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Project GIDs are the unix group ids of the project's shared storage; they start high to stay
-- clear of system groups.
CREATE SEQUENCE project_gid_seq START 20000;

CREATE TABLE projects (
    id          BIGSERIAL PRIMARY KEY,
    urn         TEXT NOT NULL UNIQUE,
    name        TEXT NOT NULL UNIQUE,
    gid         INTEGER NOT NULL UNIQUE DEFAULT nextval('project_gid_seq'),
    description TEXT NOT NULL DEFAULT '',
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE memberships (
    user_id     BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    project_id  BIGINT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, project_id)
);
CREATE INDEX memberships_project_idx ON memberships (project_id);

CREATE TABLE clusters (
    id              INTEGER PRIMARY KEY CHECK (id >= 1),
    name            TEXT NOT NULL DEFAULT '',
    description     TEXT NOT NULL DEFAULT '',
    is_private      BOOLEAN NOT NULL DEFAULT FALSE,
    guest_limit_s   BIGINT NOT NULL DEFAULT 3600,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Owning projects of private clusters.
CREATE TABLE cluster_projects (
    cluster_id  INTEGER NOT NULL REFERENCES clusters(id) ON DELETE CASCADE,
    project_id  BIGINT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    PRIMARY KEY (cluster_id, project_id)
);

CREATE TABLE slaves (
    id              BIGSERIAL PRIMARY KEY,
    name            TEXT NOT NULL UNIQUE,
    instance_id     TEXT NOT NULL,
    cluster_id      INTEGER NOT NULL REFERENCES clusters(id),
    host            TEXT NOT NULL DEFAULT '',
    version         TEXT NOT NULL DEFAULT '',
    inventory       JSONB NOT NULL DEFAULT '{}'::jsonb,
    usage           JSONB NOT NULL DEFAULT '{}'::jsonb,
    accepting_jobs  BOOLEAN NOT NULL DEFAULT TRUE,
    online          BOOLEAN NOT NULL DEFAULT FALSE,
    last_heartbeat  TIMESTAMPTZ,
    registered_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX slaves_cluster_idx ON slaves (cluster_id);

-- A job: the request as JSON (never changed after submit) plus the columns that lists filter
-- and sort on, and the server-owned state. status is the one source of truth for the state;
-- event_times keeps when each state was reached.
CREATE TABLE jobs (
    uuid                    UUID PRIMARY KEY,
    name                    TEXT NOT NULL,
    description             TEXT NOT NULL DEFAULT '',
    deployment_environment  TEXT NOT NULL DEFAULT '',
    request                 JSONB NOT NULL,
    user_id                 BIGINT NOT NULL REFERENCES users(id),
    user_email              TEXT NOT NULL DEFAULT '',
    project_id              BIGINT NOT NULL REFERENCES projects(id),
    status                  TEXT NOT NULL CHECK (status IN ('ONHOLD','QUEUED','ASSIGNED','STARTING','RUNNING',
                                'MUSTHALT','HALTING','HALTED','FINISHED','FAILED','CANCELLED','DELETED')),
    event_times             JSONB NOT NULL DEFAULT '{}'::jsonb,
    interactive             BOOLEAN NOT NULL DEFAULT FALSE,
    restartable             BOOLEAN NOT NULL DEFAULT FALSE,
    cluster_id              INTEGER,
    gpus                    INTEGER NOT NULL,
    cpus                    INTEGER NOT NULL,
    cpu_memory_gb           INTEGER NOT NULL,
    min_duration_s          BIGINT NOT NULL,
    max_duration_s          BIGINT NOT NULL,
    reservation_ids         TEXT[] NOT NULL DEFAULT '{}',
    restart_initial_uuid    UUID,
    restart_count           INTEGER NOT NULL DEFAULT 0,
    assigned_cluster_id     INTEGER,
    assigned_slave_name     TEXT,
    assigned_instance_id    TEXT,
    scheduling              JSONB NOT NULL DEFAULT '{}'::jsonb,
    resources               JSONB,
    final_usage             JSONB,
    created_at              TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at              TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX jobs_status_idx ON jobs (status);
CREATE INDEX jobs_user_created_idx ON jobs (user_id, created_at DESC);
CREATE INDEX jobs_project_created_idx ON jobs (project_id, created_at DESC);
CREATE INDEX jobs_created_idx ON jobs (created_at DESC);
CREATE INDEX jobs_cluster_idx ON jobs (cluster_id);
CREATE INDEX jobs_assigned_slave_idx ON jobs (assigned_slave_name) WHERE assigned_slave_name IS NOT NULL;
CREATE INDEX jobs_reservations_idx ON jobs USING GIN (reservation_ids);
-- prefix look-ups of short ids: uuid::text LIKE 'abcdef%'
CREATE INDEX jobs_uuid_text_idx ON jobs ((uuid::text) text_pattern_ops);

-- Every event in a job's life: state changes, warnings, scheduler explanations.
CREATE TABLE job_events (
    id          BIGSERIAL PRIMARY KEY,
    job_uuid    UUID NOT NULL REFERENCES jobs(uuid) ON DELETE CASCADE,
    at          TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    kind        TEXT NOT NULL,
    from_status TEXT,
    to_status   TEXT,
    actor       TEXT NOT NULL DEFAULT '',
    message     TEXT NOT NULL DEFAULT ''
);
CREATE INDEX job_events_job_idx ON job_events (job_uuid, id);

-- The container log, in chunks; start_offset is the byte offset of the chunk in the whole log,
-- so a Range request reads only the chunks it needs.
CREATE TABLE job_logs (
    job_uuid     UUID NOT NULL REFERENCES jobs(uuid) ON DELETE CASCADE,
    seq          INTEGER NOT NULL,
    start_offset BIGINT NOT NULL,
    data         BYTEA NOT NULL,
    at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (job_uuid, seq)
);
