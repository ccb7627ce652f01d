package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Project groups users; jobs run in a project and mount its storage.
type Project struct {
	ID          int64     `db:"id" json:"id"`
	URN         string    `db:"urn" json:"urn"`
	Name        string    `db:"name" json:"name"`
	GID         int       `db:"gid" json:"gid"`
	Description string    `db:"description" json:"description"`
	CreatedAt   time.Time `db:"created_at" json:"createdAt"`
}

const projectColumns = `id, urn, name, gid, description, created_at`

// CreateProject adds a project; gid 0 takes the next free one. ErrConflict if the name, URN
// or GID is taken.
func (s *Store) CreateProject(ctx context.Context, urn, name, description string, gid int) (Project, error) {
	var p Project
	var err error
	if gid > 0 {
		err = s.q.GetContext(ctx, &p, `INSERT INTO projects (urn, name, description, gid) VALUES ($1, $2, $3, $4) RETURNING `+projectColumns, urn, name, description, gid)
	} else {
		err = s.q.GetContext(ctx, &p, `INSERT INTO projects (urn, name, description) VALUES ($1, $2, $3) RETURNING `+projectColumns, urn, name, description)
	}
	return p, mapErr(err, "create project "+name)
}

// GetProjectByURN finds a project by URN.
func (s *Store) GetProjectByURN(ctx context.Context, urn string) (Project, error) {
	var p Project
	err := s.q.GetContext(ctx, &p, `SELECT `+projectColumns+` FROM projects WHERE urn = $1`, urn)
	return p, mapErr(err, "get project "+urn)
}

// GetProjectByName finds a project by its short name.
func (s *Store) GetProjectByName(ctx context.Context, name string) (Project, error) {
	var p Project
	err := s.q.GetContext(ctx, &p, `SELECT `+projectColumns+` FROM projects WHERE name = $1`, name)
	return p, mapErr(err, "get project "+name)
}

// ListProjects lists all projects by name.
func (s *Store) ListProjects(ctx context.Context) ([]Project, error) {
	var ps []Project
	err := s.q.SelectContext(ctx, &ps, `SELECT `+projectColumns+` FROM projects ORDER BY name`)
	return ps, mapErr(err, "list projects")
}

// ListUserProjects lists the projects a user is a member of.
func (s *Store) ListUserProjects(ctx context.Context, userID int64) ([]Project, error) {
	var ps []Project
	err := s.q.SelectContext(ctx, &ps, `SELECT p.id, p.urn, p.name, p.gid, p.description, p.created_at
FROM projects p JOIN memberships m ON m.project_id = p.id WHERE m.user_id = $1 ORDER BY p.name`, userID)
	return ps, mapErr(err, "list projects of user")
}

// AddMember makes a user a member of a project; adding an existing member is not an error.
func (s *Store) AddMember(ctx context.Context, projectID, userID int64) error {
	_, err := s.q.ExecContext(ctx, `INSERT INTO memberships (user_id, project_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`, userID, projectID)
	return mapErr(err, "add member")
}

// RemoveMember removes a membership. ErrNotFound if there was none.
func (s *Store) RemoveMember(ctx context.Context, projectID, userID int64) error {
	res, err := s.q.ExecContext(ctx, `DELETE FROM memberships WHERE user_id = $1 AND project_id = $2`, userID, projectID)
	return affectedOne(res, err, "remove member")
}

// IsMember reports whether a user is a member of a project.
func (s *Store) IsMember(ctx context.Context, projectID, userID int64) (bool, error) {
	var ok bool
	err := s.q.GetContext(ctx, &ok, `SELECT EXISTS (SELECT 1 FROM memberships WHERE user_id = $1 AND project_id = $2)`, userID, projectID)
	return ok, mapErr(err, "check membership")
}

// ListMembers lists a project's members.
func (s *Store) ListMembers(ctx context.Context, projectID int64) ([]User, error) {
	var us []User
	err := s.q.SelectContext(ctx, &us, `SELECT u.id, u.urn, u.name, u.email, u.is_admin, u.created_at
FROM users u JOIN memberships m ON m.user_id = u.id WHERE m.project_id = $1 ORDER BY u.name`, projectID)
	return us, mapErr(err, "list members")
}

func affectedOne(res sql.Result, err error, what string) error {
	if err != nil {
		return mapErr(err, what)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return mapErr(err, what)
	}
	if n == 0 {
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	return nil
}
