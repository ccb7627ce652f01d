package store

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"time"
)

// User is a person known to the master.
type User struct {
	ID        int64     `db:"id" json:"id"`
	URN       string    `db:"urn" json:"urn"`
	Name      string    `db:"name" json:"name"`
	Email     string    `db:"email" json:"email"`
	IsAdmin   bool      `db:"is_admin" json:"isAdmin"`
	CreatedAt time.Time `db:"created_at" json:"createdAt"`
	// Issuer and Subject are the OpenID provider's identity of the user ("" until his first
	// portal login, or until an admin links one): the key of a login, never the name.
	Issuer  string `db:"issuer" json:"issuer,omitempty"`
	Subject string `db:"subject" json:"subject,omitempty"`
	// EmailVerified says the provider vouched for Email (admins are matched by it).
	EmailVerified bool `db:"email_verified" json:"emailVerified"`
	// Disabled users are refused (401) on every request, whatever their credentials.
	Disabled bool `db:"disabled" json:"disabled"`
}

const userColumns = `id, urn, name, email, is_admin, created_at, COALESCE(issuer, '') AS issuer, COALESCE(subject, '') AS subject,
email_verified, disabled`

const upsertUser = `INSERT INTO users (urn, name, email, is_admin) VALUES ($1, $2, $3, $4)
ON CONFLICT (urn) DO UPDATE SET email = CASE WHEN EXCLUDED.email <> '' THEN EXCLUDED.email ELSE users.email END,
    is_admin = users.is_admin OR EXCLUDED.is_admin
RETURNING ` + userColumns

// UpsertUser creates the user or, if the URN exists, updates the e-mail (when given) and
// grants admin when asked (it never revokes: use SetAdmin).
func (s *Store) UpsertUser(ctx context.Context, urn, name, email string, admin bool) (User, error) {
	var u User
	err := s.q.GetContext(ctx, &u, upsertUser, urn, name, email, admin)
	return u, mapErr(err, "upsert user "+urn)
}

// GetUserByURN finds a user by URN.
func (s *Store) GetUserByURN(ctx context.Context, urn string) (User, error) {
	var u User
	err := s.q.GetContext(ctx, &u, `SELECT `+userColumns+` FROM users WHERE urn = $1`, urn)
	return u, mapErr(err, "get user "+urn)
}

// GetUserByName finds a user by short name.
func (s *Store) GetUserByName(ctx context.Context, name string) (User, error) {
	var u User
	err := s.q.GetContext(ctx, &u, `SELECT `+userColumns+` FROM users WHERE name = $1`, name)
	return u, mapErr(err, "get user "+name)
}

// ListUsers lists every user by name.
func (s *Store) ListUsers(ctx context.Context) ([]User, error) {
	var us []User
	err := s.q.SelectContext(ctx, &us, `SELECT `+userColumns+` FROM users ORDER BY name`)
	return us, mapErr(err, "list users")
}

// SetAdmin grants or revokes admin rights.
func (s *Store) SetAdmin(ctx context.Context, userID int64, admin bool) error {
	res, err := s.q.ExecContext(ctx, `UPDATE users SET is_admin = $2 WHERE id = $1`, userID, admin)
	return affectedOne(res, err, "set admin")
}

// GetUserWithProjects finds a user by URN with the ids of his projects (by project name), in
// one query: it is what authenticating every API call needs, and two queries per request were
// a quarter of the master's CPU when serving reads (bench/, B4).
func (s *Store) GetUserWithProjects(ctx context.Context, urn string) (User, []int64, error) {
	u, ids, _, err := s.GetUserWithProjectsAndCert(ctx, urn, "")
	return u, ids, err
}

// GetUserWithProjectsAndCert is GetUserWithProjects that also reads, in the same query, the
// state of the certificate with the given serial ("valid", "revoked" or "expired"; "" when the
// master has no record of it), so a certificate call still costs one round trip. The identity
// read at the same generation before is not read again (identitycache.go).
func (s *Store) GetUserWithProjectsAndCert(ctx context.Context, urn, serial string) (User, []int64, string, error) {
	k := identityKey{urn: urn, serial: serial}
	kept := s.keptIdentity(k)
	var row identityRow
	if err := s.q.(*prepared).scanRow(ctx, identitySelect, []any{urn, serial, kept.gen}, row.fields()...); err != nil {
		return User{}, nil, "", mapErr(err, "get user "+urn)
	}
	id, err := s.identityOf(k, kept, &row)
	if err != nil {
		return User{}, nil, "", mapErr(err, "get user "+urn)
	}
	return id.user, id.projects, id.certState(row.Now), nil
}

// userProjectIDs and certState are GetUserWithProjectsAndCert's expressions: the ids of user
// u's projects by name, and the state of certificate $2 (NULL when it is not recorded).
const (
	userProjectIDs = `ARRAY(SELECT m.project_id FROM memberships m JOIN projects p ON p.id = m.project_id WHERE m.user_id = u.id ORDER BY p.name)`
	certState      = `(SELECT CASE WHEN c.revoked_at IS NOT NULL THEN 'revoked' WHEN c.not_after <= now() THEN 'expired' ELSE 'valid' END
     FROM certificates c WHERE c.serial = $2)`
)

// certStateOf is certState of the certificate whose serial is the statement's parameter param
// ("$3"): for the statements of the slaves' calls that read their caller's certificate.
func certStateOf(param string) string { return strings.Replace(certState, "$2", param, 1) }

// certRefused is the *CertificateRefusedError of a certificate whose state (certState) is
// revoked or expired, nil for any other state or none (a certificate the master has no record
// of is left to the TLS stack's checks).
func certRefused(serial string, state sql.NullString) error {
	if state.String == "revoked" || state.String == "expired" {
		return &CertificateRefusedError{Serial: serial, State: state.String}
	}
	return nil
}

// GetUserAndJob is GetUserWithProjectsAndCert and GetJob(jobUUID) in one statement: GET
// jobs/{id}, the API's most frequent read, in one round trip instead of two (bench/ B4; the
// two statements' round trips were most of its cost, on Postgres's side as on the master's).
// The job is read whoever may see it: the caller decides. ErrNotFound when the user or the job
// does not exist; the caller then reads them apart, for the answer each gives. When the caller
// and the job's owner and project were read at the identity generation the job is read at,
// they are not read again: the statement reads the job's row alone (identitycache.go). The
// record shares memory with the store's caches (sharedRecord): it is only to be read.
func (s *Store) GetUserAndJob(ctx context.Context, urn, serial, jobUUID string) (User, []int64, string, *JobRecord, error) {
	k := identityKey{urn: urn, serial: serial}
	kept := s.keptIdentity(k)
	if kept.gen != -1 {
		// The caller was read before: the job alone, if nothing changed since.
		var row struct {
			Gen int64
			Now time.Time
			jobRow
		}
		if err := s.q.(*prepared).scanRow(ctx, jobAtGenerationSelect, []any{jobUUID}, append([]any{&row.Gen, &row.Now}, row.alone()...)...); err != nil {
			return User{}, nil, "", nil, mapErr(err, "get job "+jobUUID)
		}
		if row.Gen == kept.gen && s.names.fill(row.Gen, &row.jobRow) {
			s.identities.hits.Add(1)
			s.names.fast.Add(1)
			rec, err := s.sharedRecord(&row.jobRow)
			if err != nil {
				return User{}, nil, "", nil, err
			}
			return kept.user, slices.Clone(kept.projects), kept.certState(row.Now), rec, nil
		}
	}
	var row struct {
		identityRow
		jobRow
	}
	if err := s.q.GetContext(ctx, &row, userAndJobSelect, urn, serial, kept.gen, jobUUID); err != nil {
		return User{}, nil, "", nil, mapErr(err, "get user "+urn+" and job "+jobUUID)
	}
	id, err := s.identityOf(k, kept, &row.identityRow)
	if err != nil {
		return User{}, nil, "", nil, mapErr(err, "get user "+urn+" and job "+jobUUID)
	}
	if s.tx == nil && row.Gen > 0 {
		s.names.put(row.Gen, &row.jobRow)
	}
	rec, err := s.sharedRecord(&row.jobRow)
	if err != nil {
		return User{}, nil, "", nil, err
	}
	return id.user, id.projects, id.certState(row.Now), rec, nil
}

// userAndJobSelect is identitySelect with job $4 (no row when it does not exist).
const userAndJobSelect = `SELECT id.*, jr.* FROM (` + identitySelect + `) id
CROSS JOIN (` + jobSelect + ` WHERE j.uuid = $4) jr`
