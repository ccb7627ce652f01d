package store

import (
	"context"
	"database/sql"
	"encoding/json"
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

// Slave is a registered worker machine.
type Slave struct {
	ID            int64           `db:"id"`
	Name          string          `db:"name"`
	InstanceID    string          `db:"instance_id"`
	ClusterID     int             `db:"cluster_id"`
	Host          string          `db:"host"`
	Version       string          `db:"version"`
	Inventory     json.RawMessage `db:"inventory"`
	Usage         json.RawMessage `db:"usage"`
	AcceptingJobs bool            `db:"accepting_jobs"`
	Online        bool            `db:"online"`
	LastHeartbeat sql.NullTime    `db:"last_heartbeat"`
	RegisteredAt  time.Time       `db:"registered_at"`
}

// ListSlaves lists slaves by cluster and name.
func (s *Store) ListSlaves(ctx context.Context) ([]Slave, error) {
	var ss []Slave
	err := s.q.SelectContext(ctx, &ss, `SELECT id, name, instance_id, cluster_id, host, version, inventory, usage,
accepting_jobs, online, last_heartbeat, registered_at FROM slaves ORDER BY cluster_id, name`)
	return ss, mapErr(err, "list slaves")
}
