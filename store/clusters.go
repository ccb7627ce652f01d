package store

import (
	"context"
	"time"
)

// Cluster groups slaves; jobs may ask for one by id. A private cluster belongs to projects.
type Cluster struct {
	ID          int       `db:"id" json:"id"`
	Name        string    `db:"name" json:"name"`
	Description string    `db:"description" json:"description"`
	Private     bool      `db:"is_private" json:"private"`
	GuestLimitS int64     `db:"guest_limit_s" json:"guestLimitSeconds"`
	CreatedAt   time.Time `db:"created_at" json:"createdAt"`
}

const clusterColumns = `id, name, description, is_private, guest_limit_s, created_at`

// CreateCluster adds a cluster. ErrConflict if the id is taken.
func (s *Store) CreateCluster(ctx context.Context, c Cluster) (Cluster, error) {
	var out Cluster
	err := s.q.GetContext(ctx, &out, `INSERT INTO clusters (id, name, description, is_private, guest_limit_s)
VALUES ($1, $2, $3, $4, $5) RETURNING `+clusterColumns, c.ID, c.Name, c.Description, c.Private, max(c.GuestLimitS, 0))
	return out, mapErr(err, "create cluster")
}

// ListClusters lists clusters by id.
func (s *Store) ListClusters(ctx context.Context) ([]Cluster, error) {
	var cs []Cluster
	err := s.q.SelectContext(ctx, &cs, `SELECT `+clusterColumns+` FROM clusters ORDER BY id`)
	return cs, mapErr(err, "list clusters")
}

// ClusterOwners maps each private cluster to its owning projects.
func (s *Store) ClusterOwners(ctx context.Context) (map[int][]int64, error) {
	var rows []struct {
		ClusterID int   `db:"cluster_id"`
		ProjectID int64 `db:"project_id"`
	}
	if err := s.q.SelectContext(ctx, &rows, `SELECT cluster_id, project_id FROM cluster_projects ORDER BY cluster_id, project_id`); err != nil {
		return nil, mapErr(err, "list cluster owners")
	}
	out := map[int][]int64{}
	for _, r := range rows {
		out[r.ClusterID] = append(out[r.ClusterID], r.ProjectID)
	}
	return out, nil
}
