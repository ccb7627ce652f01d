package store

import (
	"context"
	"time"
)

// JobCount is how many unended jobs are in one state on one cluster (0: not placed and no
// cluster asked for).
type JobCount struct {
	Status    string `db:"status"`
	ClusterID int    `db:"cluster_id"`
	Count     int    `db:"n"`
}

// GPUCount is how many GPUs of one model online slaves of a cluster have, and how many of
// them jobs hold.
type GPUCount struct {
	ClusterID int    `db:"cluster_id"`
	Model     string `db:"model"`
	Total     int    `db:"total"`
	Used      int    `db:"used"`
}

// SlaveCount is how many slaves of a cluster are in one state: online, draining (online, not
// accepting jobs), offline or disabled.
type SlaveCount struct {
	ClusterID int    `db:"cluster_id"`
	State     string `db:"state"`
	Count     int    `db:"n"`
}

// SlaveHeartbeat is a slave's latest heartbeat's age in seconds (-1: never).
type SlaveHeartbeat struct {
	Name      string  `db:"name"`
	ClusterID int     `db:"cluster_id"`
	AgeS      float64 `db:"age_s"`
}

// Gauges are the cluster's numbers at one moment, for the master's /metrics: each a cheap
// aggregate (the unended jobs by the status index, the slaves' rows).
type Gauges struct {
	Jobs       []JobCount
	GPUs       []GPUCount
	Slaves     []SlaveCount
	Heartbeats []SlaveHeartbeat
	At         time.Time
}

const (
	gaugeJobs = `SELECT status, COALESCE(assigned_cluster_id, cluster_id, 0) AS cluster_id, count(*) AS n FROM jobs
WHERE status IN ('ONHOLD','QUEUED','ASSIGNED','STARTING','RUNNING','MUSTHALT','HALTING')
GROUP BY 1, 2 ORDER BY 1, 2`
	// A slave without GPUs has "gpus": null (a nil slice), so arrays are checked before they
	// are expanded.
	// GPUs held: by the jobs placed on a slave, and by ended jobs whose container the slave has
	// not yet confirmed gone (job_releases), as the scheduler counts them.
	gaugeGPUs = `WITH gpu AS (
    SELECT s.name, s.cluster_id, (g->>'index')::int AS idx, COALESCE(NULLIF(g->>'model', ''), 'unknown') AS model
    FROM slaves s CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(s.inventory->'gpus') = 'array' THEN s.inventory->'gpus' ELSE '[]'::jsonb END) g
    WHERE s.online
), held AS (
    SELECT j.assigned_slave_name AS name, x::int AS idx FROM jobs j
    CROSS JOIN LATERAL jsonb_array_elements_text(CASE WHEN jsonb_typeof(j.resources->'gpuIds') = 'array' THEN j.resources->'gpuIds' ELSE '[]'::jsonb END) x
    WHERE j.status IN ('ASSIGNED','STARTING','RUNNING','MUSTHALT','HALTING') AND j.assigned_slave_name IS NOT NULL
    UNION
    SELECT r.slave_name, x::int FROM job_releases r
    CROSS JOIN LATERAL jsonb_array_elements_text(CASE WHEN jsonb_typeof(r.resources->'gpuIds') = 'array' THEN r.resources->'gpuIds' ELSE '[]'::jsonb END) x
)
SELECT gpu.cluster_id, gpu.model, count(*) AS total, count(held.idx) AS used
FROM gpu LEFT JOIN held ON held.name = gpu.name AND held.idx = gpu.idx
GROUP BY 1, 2 ORDER BY 1, 2`
	gaugeSlaves = `SELECT cluster_id, CASE WHEN disabled THEN 'disabled' WHEN NOT online THEN 'offline'
    WHEN NOT accepting_jobs THEN 'draining' ELSE 'online' END AS state, count(*) AS n
FROM slaves GROUP BY 1, 2 ORDER BY 1, 2`
	gaugeHeartbeats = `SELECT name, cluster_id, COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - last_heartbeat)::float8, -1) AS age_s
FROM slaves WHERE NOT disabled ORDER BY name`
)

// Gauges reads the cluster's numbers for /metrics: four cheap statements, no transaction.
func (s *Store) Gauges(ctx context.Context) (Gauges, error) {
	g := Gauges{At: time.Now()}
	for _, q := range []struct {
		dst  any
		stmt string
	}{{&g.Jobs, gaugeJobs}, {&g.GPUs, gaugeGPUs}, {&g.Slaves, gaugeSlaves}, {&g.Heartbeats, gaugeHeartbeats}} {
		if err := s.q.SelectContext(ctx, q.dst, q.stmt); err != nil {
			return g, mapErr(err, "read metrics")
		}
	}
	return g, nil
}
