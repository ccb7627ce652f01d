package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/lib/pq"
)

// Service identities (issue 13): a service such as the JupyterHub spawner holds a client
// certificate of kind 'service' and acts for users, naming them in a request header. Its row
// says in which projects it may act (none: for any user) and whether it is disabled. Nothing
// of it is kept: every request reads the row, so revoking a service holds at once on every
// master (a user's identity is kept, but checked in each request's statement against the
// identity generation, identitycache.go).

// CertService is the certificates table's kind of a service certificate.
const CertService = "service"

// Service is a service identity.
type Service struct {
	Name string `db:"name" json:"name"`
	// Projects are the names of the projects the service may act in; empty: any user's.
	Projects  pq.StringArray `db:"projects" json:"projects"`
	Disabled  bool           `db:"disabled" json:"disabled"`
	CreatedAt time.Time      `db:"created_at" json:"createdAt"`
	// Certificates counts the service's certificates (all, revoked included) and LastIssued is
	// when the newest was issued (ListServices only).
	Certificates int          `db:"certificates" json:"certificates"`
	LastIssued   sql.NullTime `db:"last_issued" json:"-"`
}

// ServiceAccess is what a request by a service certificate needs: the service, the IDs of the
// projects it may act in (when Projects is not empty; a listed project that no longer exists
// has none) and the state of the certificate presented.
type ServiceAccess struct {
	Service
	ProjectIDs pq.Int64Array `db:"project_ids"`
	// CertState is "valid", "revoked", "expired", or "" when the master has no record of the
	// certificate.
	CertState sql.NullString `db:"cert_state"`
}

const serviceColumns = `s.name, s.projects, s.disabled, s.created_at`

// GetServiceAccess reads a service with its projects' IDs and the state of the certificate
// with the given serial, in one round trip. ErrNotFound when there is no such service.
func (s *Store) GetServiceAccess(ctx context.Context, name, serial string) (ServiceAccess, error) {
	var a ServiceAccess
	err := s.q.GetContext(ctx, &a, `SELECT `+serviceColumns+`,
    ARRAY(SELECT p.id FROM projects p WHERE p.name = ANY(s.projects) ORDER BY p.id) AS project_ids,
    (SELECT CASE WHEN c.revoked_at IS NOT NULL THEN 'revoked' WHEN c.not_after <= now() THEN 'expired' ELSE 'valid' END
     FROM certificates c WHERE c.serial = $2 AND c.kind = 'service' AND c.owner = s.name) AS cert_state
FROM services s WHERE s.name = $1`, name, serial)
	return a, mapErr(err, "get service "+name)
}

// IssueServiceCertificate creates the service, or updates its project list and enables it
// again, and records its new certificate, in one transaction. Every project must exist
// (ErrNotFound naming it otherwise).
func (s *Store) IssueServiceCertificate(ctx context.Context, name string, projects []string, serial string, notAfter time.Time) (Service, error) {
	if projects == nil {
		projects = []string{}
	}
	var svc Service
	err := s.WithTx(ctx, func(tx *Store) error {
		for _, p := range projects {
			if _, err := tx.GetProjectByName(ctx, p); err != nil {
				return fmt.Errorf("project %s: %w", p, err)
			}
		}
		err := tx.q.GetContext(ctx, &svc, `INSERT INTO services AS s (name, projects) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET projects = EXCLUDED.projects, disabled = FALSE
RETURNING `+serviceColumns, name, pq.StringArray(projects))
		if err != nil {
			return mapErr(err, "save service "+name)
		}
		return tx.RecordCertificate(ctx, serial, CertService, name, notAfter, "")
	})
	return svc, err
}

// ListServices lists the services by name, each with its certificates' count and newest issue.
func (s *Store) ListServices(ctx context.Context) ([]Service, error) {
	out := []Service{}
	err := s.q.SelectContext(ctx, &out, `SELECT `+serviceColumns+`,
    (SELECT count(*) FROM certificates c WHERE c.kind = 'service' AND c.owner = s.name) AS certificates,
    (SELECT max(c.created_at) FROM certificates c WHERE c.kind = 'service' AND c.owner = s.name) AS last_issued
FROM services s ORDER BY s.name`)
	return out, mapErr(err, "list services")
}

// RevokeService disables a service and revokes all its certificates, in one transaction; it
// returns the serials revoked now. ErrNotFound when there is no such service.
func (s *Store) RevokeService(ctx context.Context, name string) ([]string, error) {
	var serials []string
	err := s.WithTx(ctx, func(tx *Store) error {
		res, err := tx.q.ExecContext(ctx, `UPDATE services SET disabled = TRUE WHERE name = $1`, name)
		if err := affectedOne(res, err, "disable service "+name); err != nil {
			return err
		}
		serials, err = tx.RevokeCertificatesOf(ctx, CertService, name)
		return err
	})
	return serials, err
}
