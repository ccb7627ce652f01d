-- Real identities and revocation (issue 10): users are keyed by their OpenID provider's issuer
-- and subject, not by a name anyone can pick at another provider; users and slaves can be
-- disabled; every certificate the master issues is recorded so it can be listed and revoked.

ALTER TABLE users
    ADD COLUMN issuer         TEXT,
    ADD COLUMN subject        TEXT,
    ADD COLUMN email_verified BOOLEAN NOT NULL DEFAULT FALSE,
    ADD COLUMN disabled       BOOLEAN NOT NULL DEFAULT FALSE,
    ADD CONSTRAINT users_login_pair CHECK ((issuer IS NULL) = (subject IS NULL));
CREATE UNIQUE INDEX users_login_idx ON users (issuer, subject) WHERE issuer IS NOT NULL;
CREATE INDEX users_email_idx ON users (lower(email)) WHERE email <> '';

ALTER TABLE slaves ADD COLUMN disabled BOOLEAN NOT NULL DEFAULT FALSE;

-- serial is the certificate's serial number in decimal (as crypto/x509 prints it). owner is
-- the user or slave name, kind says which.
CREATE TABLE certificates (
    serial      TEXT PRIMARY KEY,
    kind        TEXT NOT NULL CHECK (kind IN ('user', 'slave')),
    owner       TEXT NOT NULL,
    not_after   TIMESTAMPTZ NOT NULL,
    revoked_at  TIMESTAMPTZ,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX certificates_owner_idx ON certificates (kind, owner, created_at DESC);
