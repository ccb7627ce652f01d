package store

import (
	"database/sql"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lib/pq"
)

// The callers' identities, kept between requests and checked against the database's identity
// generation (migration 0019) in each request's own statement. The users' rows, their projects
// and the state of the certificate presented were read afresh by every request: in a GET of a
// job, whose statement read them with the job, they were half of what Postgres did (bench/ B4).
// Now the statement reads the generation and, only when it is not the one the master read the
// caller's identity at, the identity too. Nothing is trusted that the statement did not check:
// a change to a user, a membership, a project or a user's certificate moves the generation in
// its own transaction, so a statement that sees the change sees the new generation and reads
// the identity again, on every master at once, as before. A certificate's expiry depends on no
// row: the state is judged at each request by the database's clock, from the expiry kept.
// (A database restored from a backup under running masters may bring generations back that
// they read before, as it brings xmins back for the listed jobs' versions: restart the
// masters after a restore.)

// maxIdentities bounds the identities an identityCache keeps (a few hundred bytes each).
const maxIdentities = 10000

// identityCache keeps the identities read lately by (user URN, certificate serial). Only
// statements outside transactions fill it or are served from it: inside one, the
// transaction's own changes are seen with a generation that a rollback may undo.
type identityCache struct {
	mu sync.Mutex
	m  map[identityKey]identity

	hits, misses atomic.Int64 // for tests
}

type identityKey struct{ urn, serial string }

// identity is what a statement read of a caller, at generation gen.
type identity struct {
	gen      int64
	user     User
	projects []int64
	// cert* tell the certificate's state: certKnown false when the master has no record of
	// the serial ("" for sessions).
	certKnown, certRevoked bool
	certNotAfter           time.Time
}

func newIdentityCache() *identityCache { return &identityCache{m: map[identityKey]identity{}} }

// lookup returns the identity kept for k, or one of generation -1 (matching none) when none is.
func (c *identityCache) lookup(k identityKey) identity {
	c.mu.Lock()
	defer c.mu.Unlock()
	if id, ok := c.m[k]; ok {
		return id
	}
	return identity{gen: -1}
}

// put keeps id for k.
func (c *identityCache) put(k identityKey, id identity) {
	id.projects = slices.Clone(id.projects)
	c.mu.Lock()
	defer c.mu.Unlock()
	makeRoom(c.m, maxIdentities)
	c.m[k] = id
}

// certState is the certificate's state at the database's time now, as certState's SQL judges
// it: "revoked", "expired", "valid", or "" when the master has no record of it.
func (id identity) certState(now time.Time) string {
	switch {
	case !id.certKnown:
		return ""
	case id.certRevoked:
		return "revoked"
	case !id.certNotAfter.After(now):
		return "expired"
	}
	return "valid"
}

// identitySelect reads the identity generation, the database's time and, unless the
// generation is $3 (the one the identity kept was read at, -1 for none), the identity of user
// $1 presenting certificate $2, with his projects' names for ownerNames: its columns are NULL
// when the generation matched, and when the user does not exist. The generation is read in an
// InitPlan, so that Postgres skips the identity's reads when it matches (a one-time filter),
// and twice: one snapshot gives both. A generation of -2 says that its row is missing (an
// operator's doing): then the identity is read and nothing is kept.
const identitySelect = `SELECT COALESCE((SELECT gen FROM identity_generation), -2) AS identity_gen, now() AS identity_now, c.*
FROM (SELECT 1) one LEFT JOIN LATERAL (
    SELECT u.id AS caller_id, u.urn AS caller_urn, u.name AS caller_name, u.email AS caller_email,
        u.is_admin AS caller_is_admin, u.created_at AS caller_created_at, COALESCE(u.issuer, '') AS caller_issuer,
        COALESCE(u.subject, '') AS caller_subject, u.email_verified AS caller_email_verified, u.disabled AS caller_disabled,
        COALESCE(mp.ids, '{}') AS caller_project_ids, mp.urns AS caller_project_urns, mp.names AS caller_project_names,
        mp.gids AS caller_project_gids,
        cert.serial IS NOT NULL AS caller_cert_known, cert.revoked_at IS NOT NULL AS caller_cert_revoked,
        cert.not_after AS caller_cert_not_after
    FROM users u LEFT JOIN certificates cert ON cert.serial = $2
    LEFT JOIN LATERAL (SELECT array_agg(p.id ORDER BY p.name) AS ids, array_agg(p.urn ORDER BY p.name) AS urns,
            array_agg(p.name ORDER BY p.name) AS names, array_agg(p.gid ORDER BY p.name) AS gids
        FROM memberships m JOIN projects p ON p.id = m.project_id WHERE m.user_id = u.id) mp ON true
    WHERE u.urn = $1 AND COALESCE((SELECT gen FROM identity_generation), -2) <> $3) c ON true`

// identityRow is a row of identitySelect.
type identityRow struct {
	Gen           int64          `db:"identity_gen"`
	Now           time.Time      `db:"identity_now"`
	ID            sql.NullInt64  `db:"caller_id"`
	URN           sql.NullString `db:"caller_urn"`
	Name          sql.NullString `db:"caller_name"`
	Email         sql.NullString `db:"caller_email"`
	IsAdmin       sql.NullBool   `db:"caller_is_admin"`
	CreatedAt     sql.NullTime   `db:"caller_created_at"`
	Issuer        sql.NullString `db:"caller_issuer"`
	Subject       sql.NullString `db:"caller_subject"`
	EmailVerified sql.NullBool   `db:"caller_email_verified"`
	Disabled      sql.NullBool   `db:"caller_disabled"`
	Projects      pq.Int64Array  `db:"caller_project_ids"`
	ProjectURNs   pq.StringArray `db:"caller_project_urns"`
	ProjectNames  pq.StringArray `db:"caller_project_names"`
	ProjectGIDs   pq.Int64Array  `db:"caller_project_gids"`
	CertKnown     sql.NullBool   `db:"caller_cert_known"`
	CertRevoked   sql.NullBool   `db:"caller_cert_revoked"`
	CertNotAfter  sql.NullTime   `db:"caller_cert_not_after"`
}

// fields are the row's columns in identitySelect's order, for a scan without sqlx's reflection
// (prepared.scanRow): the caller's identity is read by every request of a user.
func (r *identityRow) fields() []any {
	return []any{&r.Gen, &r.Now, &r.ID, &r.URN, &r.Name, &r.Email, &r.IsAdmin, &r.CreatedAt, &r.Issuer, &r.Subject,
		&r.EmailVerified, &r.Disabled, &r.Projects, &r.ProjectURNs, &r.ProjectNames, &r.ProjectGIDs,
		&r.CertKnown, &r.CertRevoked, &r.CertNotAfter}
}

// identityOf makes the caller's identity of a row of identitySelect read with kept (the
// identity kept for k, generation -1 when none): kept itself when the generation matched,
// else what the row read, then kept for k (outside transactions). ErrNotFound when the user
// does not exist.
func (s *Store) identityOf(k identityKey, kept identity, row *identityRow) (identity, error) {
	if row.Gen == kept.gen {
		s.identities.hits.Add(1)
		kept.projects = slices.Clone(kept.projects) // the caller's to change
		return kept, nil
	}
	s.identities.misses.Add(1)
	if !row.ID.Valid {
		return identity{}, ErrNotFound
	}
	id := identity{gen: row.Gen, projects: []int64(row.Projects),
		user: User{ID: row.ID.Int64, URN: row.URN.String, Name: row.Name.String, Email: row.Email.String,
			IsAdmin: row.IsAdmin.Bool, CreatedAt: row.CreatedAt.Time, Issuer: row.Issuer.String, Subject: row.Subject.String,
			EmailVerified: row.EmailVerified.Bool, Disabled: row.Disabled.Bool},
		certKnown: row.CertKnown.Bool, certRevoked: row.CertRevoked.Bool, certNotAfter: row.CertNotAfter.Time}
	if s.tx == nil && row.Gen > 0 {
		s.identities.put(k, id)
		// The caller's own jobs are what he reads most: they need no other names.
		s.names.putCaller(row)
	}
	return id, nil
}

// ownerNames keeps the users' and projects' names that jobs show (jobRow's user and project
// columns), read at one identity generation: a statement that reads the same generation takes
// them from here instead of joining the users and the projects, which was more than half of what
// Postgres did for a GET of a job once the caller's identity was kept (bench/ B4).
type ownerNames struct {
	mu       sync.Mutex
	gen      int64
	users    map[int64]userNames
	projects map[int64]projectNames

	fast atomic.Int64 // jobs read without the joins, for tests
}

type userNames struct{ urn, name string }

type projectNames struct {
	urn, name string
	gid       int
}

// maxOwnerNames bounds the users and the projects an ownerNames keeps.
const maxOwnerNames = 10000

// put keeps the owner's and the project's names of a job read at generation gen.
func (c *ownerNames) put(gen int64, r *jobRow) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at(gen)
	c.users[r.UserID] = userNames{urn: r.UserURN, name: r.UserName}
	c.projects[r.ProjectID] = projectNames{urn: r.ProjectURN, name: r.ProjectName, gid: r.ProjectGID}
}

// putCaller keeps the names of a caller and of his projects, read by identitySelect.
func (c *ownerNames) putCaller(r *identityRow) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at(r.Gen)
	c.users[r.ID.Int64] = userNames{urn: r.URN.String, name: r.Name.String}
	if len(r.ProjectURNs) != len(r.Projects) || len(r.ProjectNames) != len(r.Projects) || len(r.ProjectGIDs) != len(r.Projects) {
		return
	}
	for i, id := range r.Projects {
		c.projects[id] = projectNames{urn: r.ProjectURNs[i], name: r.ProjectNames[i], gid: int(r.ProjectGIDs[i])}
	}
}

// at forgets the names read at another generation than gen, or too many (c.mu held).
func (c *ownerNames) at(gen int64) {
	if gen != c.gen || c.users == nil || len(c.users) >= maxOwnerNames || len(c.projects) >= maxOwnerNames {
		c.gen, c.users, c.projects = gen, map[int64]userNames{}, map[int64]projectNames{}
	}
}

// fill sets the owner's and the project's names of a job read at generation gen, and reports
// whether it could: both were read at that generation.
func (c *ownerNames) fill(gen int64, r *jobRow) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	u, uok := c.users[r.UserID]
	p, pok := c.projects[r.ProjectID]
	if gen != c.gen || !uok || !pok {
		return false
	}
	r.UserURN, r.UserName = u.urn, u.name
	r.ProjectURN, r.ProjectName, r.ProjectGID = p.urn, p.name, p.gid
	return true
}

// jobAtGenerationSelect reads job $1 alone, with the identity generation and the database's
// time: when the caller's identity and the job's owner's names were kept at that generation,
// nothing else is to read.
// (jobSelect's columns of the jobs table; TestJobReadWithoutJoins compares the two.) Its
// columns are scanned in order (jobRow.alone).
const jobAtGenerationSelect = `SELECT COALESCE((SELECT gen FROM identity_generation), -2) AS identity_gen, now() AS identity_now,
    j.uuid, j.name, j.description, j.deployment_environment, j.request, j.user_id, j.user_email, j.project_id,
    j.status, j.event_times, j.restart_initial_uuid, j.restart_count,
    j.assigned_cluster_id, j.assigned_slave_name, j.assigned_instance_id, j.attempt,
    ` + jobScheduling + `, j.resources, j.final_usage, j.idle_gpus, j.idle_since, j.created_at, j.updated_at
FROM jobs j WHERE j.uuid = $1`

// keptIdentity is the identity kept for k that a statement may be served from: outside
// transactions only.
func (s *Store) keptIdentity(k identityKey) identity {
	if s.tx != nil {
		return identity{gen: -1}
	}
	return s.identities.lookup(k)
}

// alone is where jobAtGenerationSelect's columns after the generation and the time go, in
// their order.
func (r *jobRow) alone() []any {
	return []any{&r.UUID, &r.Name, &r.Description, &r.DeploymentEnvironment, &r.Request, &r.UserID, &r.UserEmail, &r.ProjectID,
		&r.Status, &r.EventTimes, &r.RestartInitialUUID, &r.RestartCount,
		&r.AssignedClusterID, &r.AssignedSlaveName, &r.AssignedInstanceID, &r.Attempt,
		&r.Scheduling, &r.Resources, &r.FinalUsage, &r.IdleGPUs, &r.IdleSince, &r.CreatedAt, &r.UpdatedAt}
}

// makeRoom bounds one of the store's caches: when m holds limit entries or more, an arbitrary
// quarter of them goes (map order). What is kept is cheap to read again, so which entries go
// matters less than that no bookkeeping is paid at every read.
func makeRoom[K comparable, V any](m map[K]V, limit int) {
	if len(m) < limit {
		return
	}
	for k := range m {
		delete(m, k)
		if len(m) < limit*3/4 {
			return
		}
	}
}
