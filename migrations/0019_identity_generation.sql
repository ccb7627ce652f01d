-- The generation of callers' identities (issue 16). Every user request reads who its caller is:
-- the user's row, his projects and the state of the certificate he presents. Read afresh each
-- time, that was half of Postgres's work for a GET of a job (bench/ B4). A master now keeps what
-- it read, with the generation it read it at, and reads the generation in the request's own
-- statement: the same generation means that no user, membership or user certificate changed
-- since, so what it kept is what it would read. Any change to them, whoever makes it (a master,
-- an operator's SQL), moves the generation in its own transaction, so the change and the new
-- generation become visible together.
--
-- Generations come from a sequence: a transaction that moved the generation and rolled back
-- leaves a number nobody will use again, so nothing read inside it can pass for a later state.
CREATE SEQUENCE identity_generation_seq;

CREATE TABLE identity_generation (
    one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
    gen BIGINT NOT NULL
);
INSERT INTO identity_generation (gen) VALUES (nextval('identity_generation_seq'));

CREATE FUNCTION bump_identity_generation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE identity_generation SET gen = nextval('identity_generation_seq');
    RETURN NULL;
END
$$;

-- Row triggers, so that a statement that changes nothing (an UPDATE matching no row, an upsert
-- that writes the same values) moves nothing; TRUNCATE has only statement triggers.
CREATE TRIGGER users_identity AFTER INSERT OR DELETE ON users FOR EACH ROW
    EXECUTE FUNCTION bump_identity_generation();
CREATE TRIGGER users_identity_update AFTER UPDATE ON users FOR EACH ROW
    WHEN (OLD.* IS DISTINCT FROM NEW.*) EXECUTE FUNCTION bump_identity_generation();
CREATE TRIGGER users_identity_truncate AFTER TRUNCATE ON users FOR EACH STATEMENT
    EXECUTE FUNCTION bump_identity_generation();

CREATE TRIGGER memberships_identity AFTER INSERT OR DELETE ON memberships FOR EACH ROW
    EXECUTE FUNCTION bump_identity_generation();
CREATE TRIGGER memberships_identity_update AFTER UPDATE ON memberships FOR EACH ROW
    WHEN (OLD.* IS DISTINCT FROM NEW.*) EXECUTE FUNCTION bump_identity_generation();
CREATE TRIGGER memberships_identity_truncate AFTER TRUNCATE ON memberships FOR EACH STATEMENT
    EXECUTE FUNCTION bump_identity_generation();

-- A job shows its owner's and its project's names, which a master keeps with the generation
-- too: a project's change moves it as a user's does.
CREATE TRIGGER projects_identity AFTER INSERT OR DELETE ON projects FOR EACH ROW
    EXECUTE FUNCTION bump_identity_generation();
CREATE TRIGGER projects_identity_update AFTER UPDATE ON projects FOR EACH ROW
    WHEN (OLD.* IS DISTINCT FROM NEW.*) EXECUTE FUNCTION bump_identity_generation();
CREATE TRIGGER projects_identity_truncate AFTER TRUNCATE ON projects FOR EACH STATEMENT
    EXECUTE FUNCTION bump_identity_generation();

-- Slaves' certificates are left out: a slave is never a user caller, and 5,000 slaves
-- registering at once would otherwise all wait for the generation's row, one commit at a time.
CREATE TRIGGER certificates_identity_insert AFTER INSERT ON certificates FOR EACH ROW
    WHEN (NEW.kind <> 'slave') EXECUTE FUNCTION bump_identity_generation();
CREATE TRIGGER certificates_identity_update AFTER UPDATE ON certificates FOR EACH ROW
    WHEN ((OLD.kind <> 'slave' OR NEW.kind <> 'slave') AND OLD.* IS DISTINCT FROM NEW.*)
    EXECUTE FUNCTION bump_identity_generation();
CREATE TRIGGER certificates_identity_delete AFTER DELETE ON certificates FOR EACH ROW
    WHEN (OLD.kind <> 'slave') EXECUTE FUNCTION bump_identity_generation();
CREATE TRIGGER certificates_identity_truncate AFTER TRUNCATE ON certificates FOR EACH STATEMENT
    EXECUTE FUNCTION bump_identity_generation();
