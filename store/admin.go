package store

import (
	"context"
	"fmt"
)

// The admin page's writes and reads that the command line did not need.

// SetClusterPrivate makes a cluster private (only its owning projects run there, others as
// guests) or public again.
func (s *Store) SetClusterPrivate(ctx context.Context, clusterID int, private bool) error {
	res, err := s.q.ExecContext(ctx, `UPDATE clusters SET is_private = $2 WHERE id = $1`, clusterID, private)
	s.clusters.drop()
	return affectedOne(res, err, fmt.Sprintf("set cluster %d private", clusterID))
}

// AddClusterOwner makes a project an owner of a cluster; adding an owner twice is not an error.
func (s *Store) AddClusterOwner(ctx context.Context, clusterID int, projectID int64) error {
	_, err := s.q.ExecContext(ctx, `INSERT INTO cluster_projects (cluster_id, project_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`, clusterID, projectID)
	return mapErr(err, fmt.Sprintf("add owner of cluster %d", clusterID))
}

// RemoveClusterOwner removes an owning project of a cluster. ErrNotFound if it was none.
func (s *Store) RemoveClusterOwner(ctx context.Context, clusterID int, projectID int64) error {
	res, err := s.q.ExecContext(ctx, `DELETE FROM cluster_projects WHERE cluster_id = $1 AND project_id = $2`, clusterID, projectID)
	return affectedOne(res, err, fmt.Sprintf("remove owner of cluster %d", clusterID))
}

// ListMemberships maps every project id to its members (by name), in one query instead of one
// per project.
func (s *Store) ListMemberships(ctx context.Context) (map[int64][]User, error) {
	var rows []struct {
		ProjectID int64 `db:"project_id"`
		User
	}
	if err := s.q.SelectContext(ctx, &rows, `SELECT m.project_id, u.id, u.urn, u.name, u.email, u.is_admin, u.created_at
FROM memberships m JOIN users u ON u.id = m.user_id ORDER BY m.project_id, u.name`); err != nil {
		return nil, mapErr(err, "list memberships")
	}
	out := map[int64][]User{}
	for _, r := range rows {
		out[r.ProjectID] = append(out[r.ProjectID], r.User)
	}
	return out, nil
}

// GetUser reads a user by id.
func (s *Store) GetUser(ctx context.Context, id int64) (User, error) {
	var u User
	err := s.q.GetContext(ctx, &u, `SELECT `+userColumns+` FROM users WHERE id = $1`, id)
	return u, mapErr(err, fmt.Sprintf("get user %d", id))
}

// GetProject reads a project by id.
func (s *Store) GetProject(ctx context.Context, id int64) (Project, error) {
	var p Project
	err := s.q.GetContext(ctx, &p, `SELECT `+projectColumns+` FROM projects WHERE id = $1`, id)
	return p, mapErr(err, fmt.Sprintf("get project %d", id))
}

// GetCluster reads a cluster by id.
func (s *Store) GetCluster(ctx context.Context, id int) (Cluster, error) {
	var c Cluster
	err := s.q.GetContext(ctx, &c, `SELECT `+clusterColumns+` FROM clusters WHERE id = $1`, id)
	return c, mapErr(err, fmt.Sprintf("get cluster %d", id))
}
