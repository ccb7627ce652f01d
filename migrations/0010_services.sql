-- Service identities (issue 13): a service (the JupyterHub spawner) holds a client certificate
-- of kind 'service' and acts for users by naming them in a request header. projects lists the
-- project names it may act in; empty: for any user, in his own projects. A disabled service is
-- refused on every request, at every master (revocation disables it).
ALTER TABLE certificates DROP CONSTRAINT certificates_kind_check;
ALTER TABLE certificates ADD CONSTRAINT certificates_kind_check CHECK (kind IN ('user', 'slave', 'service'));

CREATE TABLE services (
    name        TEXT PRIMARY KEY,
    projects    TEXT[] NOT NULL DEFAULT '{}',
    disabled    BOOLEAN NOT NULL DEFAULT FALSE,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
