package store

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/lib/pq"
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
	s.clusters.drop()
	return out, mapErr(err, "create cluster")
}

// ListClusters lists clusters by id.
func (s *Store) ListClusters(ctx context.Context) ([]Cluster, error) {
	var cs []Cluster
	err := s.q.SelectContext(ctx, &cs, `SELECT `+clusterColumns+` FROM clusters ORDER BY id`)
	return cs, mapErr(err, "list clusters")
}

// RecentClusters is ListClusters as read at most RecentClustersAge ago, for what only shows the
// clusters (a filter's or a form's choices, a job's cluster name): the portal's Jobs page read
// them at every request, one statement and 4 % of the master's CPU a page (bench/ B4), for a
// list that changes when an administrator adds a cluster. This store's own changes show at
// once; another master's within RecentClustersAge. The scheduler reads ListClusters.
func (s *Store) RecentClusters(ctx context.Context) ([]Cluster, error) {
	if s.tx != nil {
		return s.ListClusters(ctx)
	}
	if cs, ok := s.clusters.get(); ok {
		return cs, nil
	}
	gen := s.clusters.generation()
	cs, err := s.ListClusters(ctx)
	if err == nil {
		s.clusters.put(cs, gen)
	}
	return cs, err
}

// RecentClustersAge is how old RecentClusters' list may be.
const RecentClustersAge = 2 * time.Second

// clusterCache is RecentClusters' list. A list read before a change this store made (gen) is
// not kept.
type clusterCache struct {
	mu   sync.Mutex
	list []Cluster
	kept bool // list is kept (an empty list too: B4's site has no cluster, and read it at every page)
	at   time.Time
	gen  uint64
}

func (c *clusterCache) get() ([]Cluster, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.kept || time.Since(c.at) > RecentClustersAge {
		return nil, false
	}
	return slices.Clone(c.list), true
}

func (c *clusterCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

func (c *clusterCache) put(cs []Cluster, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen == c.gen {
		c.list, c.kept, c.at = slices.Clone(cs), true, time.Now()
	}
}

// drop forgets the list: this store changed a cluster.
func (c *clusterCache) drop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.list, c.kept = nil, false
	c.gen++
}

// ClustersWithOwners lists the clusters by id with each one's owning projects (by id): what the
// scheduler's pass reads of them, in one statement (ListClusters and ClusterOwners were two of
// the nine round trips a pass makes before it plans).
func (s *Store) ClustersWithOwners(ctx context.Context) ([]Cluster, map[int][]int64, error) {
	var rows []struct {
		Cluster
		Owners pq.Int64Array `db:"owners"`
	}
	if err := s.q.SelectContext(ctx, &rows, `SELECT `+clusterColumns+`,
	ARRAY(SELECT project_id FROM cluster_projects cp WHERE cp.cluster_id = clusters.id ORDER BY project_id) AS owners
FROM clusters ORDER BY id`); err != nil {
		return nil, nil, mapErr(err, "list clusters with their owners")
	}
	cs, owners := make([]Cluster, len(rows)), map[int][]int64{}
	for i, r := range rows {
		cs[i] = r.Cluster
		if len(r.Owners) > 0 {
			owners[r.ID] = r.Owners
		}
	}
	return cs, owners, nil
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
