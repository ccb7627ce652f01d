package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Identities, disabling and revocation (issue 10). A login is keyed by the provider's issuer
// and subject, never by a name: a name is what anybody can choose at some other provider.
// Users and slaves can be disabled, and every certificate the master issues is recorded so
// that it can be listed and revoked by serial. Each request reads the database (at least the
// identity generation, identitycache.go), so a change made on one master holds at once on
// every master.

// ErrLoginTaken is returned when linking a login (issuer, subject) that another user has.
var ErrLoginTaken = errors.New("login already linked to another user")

// LoginUser is what a portal login knows of the person: the provider's identity and claims.
type LoginUser struct {
	Issuer, Subject string
	// Name is the user name derived from the claims (preferred_username or the e-mail's local
	// part); it names a new account, never finds an existing one.
	Name          string
	Email         string
	EmailVerified bool
}

// GetUserByLogin finds the user linked to a provider identity. ErrNotFound when none is.
func (s *Store) GetUserByLogin(ctx context.Context, issuer, subject string) (User, error) {
	var u User
	err := s.q.GetContext(ctx, &u, `SELECT `+userColumns+` FROM users WHERE issuer = $1 AND subject = $2`, issuer, subject)
	return u, mapErr(err, "get user of login "+issuer+"#"+subject)
}

// LoginOutcome says what a login did with its identity.
type LoginOutcome int

// Outcomes of ResolveLogin.
const (
	// LoginKnown: the identity was linked already.
	LoginKnown LoginOutcome = iota
	// LoginCreated: a new account, under a free name.
	LoginCreated
	// LoginLinkedByEmail: an account without a login and with the same verified e-mail took it.
	LoginLinkedByEmail
	// LoginNameTaken: the name belongs to another account; an admin must link (nothing written).
	LoginNameTaken
)

// ResolveLogin finds or makes the account of a portal login, in one transaction:
//   - an identity linked already is that user (his e-mail updated when given);
//   - else an account named l.Name that has no login yet and the same e-mail, verified by the
//     provider, takes the identity (the person a certificate was made for by hand, logging in
//     for the first time);
//   - else a free name makes a new account with urn;
//   - else the name is another person's: LoginNameTaken, and the returned user is that account
//     (for the refusal page). Accounts never merge silently.
func (s *Store) ResolveLogin(ctx context.Context, l LoginUser, urn string) (User, LoginOutcome, error) {
	var u User
	outcome := LoginKnown
	err := s.WithTx(ctx, func(tx *Store) error {
		// Serialise first logins of the same name, so two cannot both take it.
		if _, err := tx.q.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('login:' || $1))`, l.Name); err != nil {
			return mapErr(err, "lock login "+l.Name)
		}
		err := tx.q.GetContext(ctx, &u, `UPDATE users SET email = CASE WHEN $3 <> '' THEN $3 ELSE email END,
    email_verified = CASE WHEN $3 <> '' THEN $4 ELSE email_verified END
WHERE issuer = $1 AND subject = $2 RETURNING `+userColumns, l.Issuer, l.Subject, l.Email, l.EmailVerified)
		if err == nil {
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return mapErr(err, "find login")
		}
		var existing User
		err = tx.q.GetContext(ctx, &existing, `SELECT `+userColumns+` FROM users WHERE name = $1`, l.Name)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			outcome = LoginCreated
			err = tx.q.GetContext(ctx, &u, `INSERT INTO users (urn, name, email, email_verified, issuer, subject)
VALUES ($1, $2, $3, $4, $5, $6) RETURNING `+userColumns, urn, l.Name, l.Email, l.EmailVerified, l.Issuer, l.Subject)
			return mapErr(err, "create user "+l.Name)
		case err != nil:
			return mapErr(err, "get user "+l.Name)
		}
		if existing.Subject == "" && l.EmailVerified && l.Email != "" && strings.EqualFold(existing.Email, l.Email) {
			outcome = LoginLinkedByEmail
			err = tx.q.GetContext(ctx, &u, `UPDATE users SET issuer = $2, subject = $3, email_verified = TRUE WHERE id = $1 AND issuer IS NULL
RETURNING `+userColumns, existing.ID, l.Issuer, l.Subject)
			return mapErr(err, "link user "+l.Name)
		}
		outcome, u = LoginNameTaken, existing
		return nil
	})
	return u, outcome, err
}

// LinkLogin links a provider identity to a user (an admin's decision): the user's next login
// with that identity is his. An identity linked to another user gives ErrLoginTaken.
func (s *Store) LinkLogin(ctx context.Context, name, issuer, subject string) error {
	if issuer == "" || subject == "" {
		return fmt.Errorf("link login of %s: issuer and subject are required", name)
	}
	res, err := s.q.ExecContext(ctx, `UPDATE users SET issuer = $2, subject = $3 WHERE name = $1`, name, issuer, subject)
	if errors.Is(mapErr(err, ""), ErrConflict) {
		return fmt.Errorf("link login %s#%s to %s: %w", issuer, subject, name, ErrLoginTaken)
	}
	return affectedOne(res, err, "link login of user "+name)
}

// SetUserDisabled disables (refused on every request) or enables a user.
func (s *Store) SetUserDisabled(ctx context.Context, name string, disabled bool) error {
	res, err := s.q.ExecContext(ctx, `UPDATE users SET disabled = $2 WHERE name = $1`, name, disabled)
	return affectedOne(res, err, "set user "+name+" disabled")
}

// SetSlaveDisabled disables or enables a slave. A disabled slave gets no jobs and no job
// secrets; the jobs assigned to it that it has not taken yet are queued again at once (in the
// same transaction), each with an event. It returns the requeued jobs.
func (s *Store) SetSlaveDisabled(ctx context.Context, name string, disabled bool) ([]string, error) {
	var requeued []string
	err := s.WithTx(ctx, func(tx *Store) error {
		res, err := tx.q.ExecContext(ctx, `UPDATE slaves SET disabled = $2 WHERE name = $1`, name, disabled)
		if err := affectedOne(res, err, "set slave "+name+" disabled"); err != nil || !disabled {
			return err
		}
		err = tx.q.SelectContext(ctx, &requeued, `WITH moved AS (
    UPDATE jobs SET status = 'QUEUED', event_times = event_times || jsonb_build_object('QUEUED', now()), updated_at = now(),
        lease_expires_at = NULL, missing_since = NULL, assigned_slave_name = NULL, assigned_instance_id = NULL,
        assigned_cluster_id = NULL, resources = NULL
    WHERE assigned_slave_name = $1 AND status = 'ASSIGNED' RETURNING uuid)
INSERT INTO job_events (job_uuid, kind, from_status, to_status, actor, message)
SELECT uuid, 'status', 'ASSIGNED', 'QUEUED', 'admin', 'slave ' || $1 || ' was disabled before it took the job' FROM moved
RETURNING job_uuid::text`, name)
		return mapErr(err, "requeue jobs of disabled slave "+name)
	})
	return requeued, err
}

// Certificate kinds, as the certificates table names them.
const (
	CertUser  = "user"
	CertSlave = "slave"
)

// Certificate is a client certificate the master issued.
type Certificate struct {
	Serial    string       `db:"serial" json:"serial"`
	Kind      string       `db:"kind" json:"kind"`
	Owner     string       `db:"owner" json:"owner"`
	NotAfter  time.Time    `db:"not_after" json:"notAfter"`
	RevokedAt sql.NullTime `db:"revoked_at" json:"-"`
	CreatedAt time.Time    `db:"created_at" json:"createdAt"`
}

// State is "revoked", "expired" or "valid" at now.
func (c Certificate) State(now time.Time) string {
	switch {
	case c.RevokedAt.Valid:
		return "revoked"
	case !now.Before(c.NotAfter):
		return "expired"
	}
	return "valid"
}

const certColumns = `serial, kind, owner, not_after, revoked_at, created_at`

// RecordCertificate records an issued certificate (serial in decimal) with the SSH
// fingerprint of its key (pki.SSHFingerprint; "" for none), which opens SSH into the owner's
// jobs while the certificate is valid.
func (s *Store) RecordCertificate(ctx context.Context, serial, kind, owner string, notAfter time.Time, sshFingerprint string) error {
	_, err := s.q.ExecContext(ctx, `INSERT INTO certificates (serial, kind, owner, not_after, ssh_fingerprint)
VALUES ($1, $2, $3, $4, NULLIF($5, ''))`, serial, kind, owner, notAfter, sshFingerprint)
	return mapErr(err, "record certificate "+serial)
}

// HasValidCertificateKey reports whether a user holds a valid (not revoked, not expired, on
// the database's clock) login certificate whose key has this SSH fingerprint.
func (s *Store) HasValidCertificateKey(ctx context.Context, owner, sshFingerprint string) (bool, error) {
	var ok bool
	err := s.q.GetContext(ctx, &ok, `SELECT EXISTS (SELECT 1 FROM certificates WHERE kind = 'user' AND owner = $1
AND ssh_fingerprint = $2 AND revoked_at IS NULL AND not_after > now())`, owner, sshFingerprint)
	return ok, mapErr(err, "look up certificate key of "+owner)
}

// GetCertificate reads a certificate by serial. ErrNotFound when the master has no record.
func (s *Store) GetCertificate(ctx context.Context, serial string) (Certificate, error) {
	var c Certificate
	err := s.q.GetContext(ctx, &c, `SELECT `+certColumns+` FROM certificates WHERE serial = $1`, serial)
	return c, mapErr(err, "get certificate "+serial)
}

// ListCertificates lists certificates, newest first: of one owner of a kind, or all when kind
// is "".
func (s *Store) ListCertificates(ctx context.Context, kind, owner string) ([]Certificate, error) {
	out := []Certificate{}
	err := s.q.SelectContext(ctx, &out, `SELECT `+certColumns+` FROM certificates
WHERE ($1 = '' OR (kind = $1 AND owner = $2)) ORDER BY created_at DESC, serial LIMIT 10000`, kind, owner)
	return out, mapErr(err, "list certificates")
}

// RevokeCertificate revokes a certificate (revoking twice keeps the first time). ErrNotFound
// when there is no such certificate.
func (s *Store) RevokeCertificate(ctx context.Context, serial string) (Certificate, error) {
	var c Certificate
	err := s.q.GetContext(ctx, &c, `UPDATE certificates SET revoked_at = COALESCE(revoked_at, now()) WHERE serial = $1
RETURNING `+certColumns, serial)
	return c, mapErr(err, "revoke certificate "+serial)
}

// RevokeCertificatesOf revokes every certificate of an owner and returns their serials.
func (s *Store) RevokeCertificatesOf(ctx context.Context, kind, owner string) ([]string, error) {
	var serials []string
	err := s.q.SelectContext(ctx, &serials, `UPDATE certificates SET revoked_at = now() WHERE kind = $1 AND owner = $2 AND revoked_at IS NULL
RETURNING serial`, kind, owner)
	return serials, mapErr(err, "revoke certificates of "+owner)
}
