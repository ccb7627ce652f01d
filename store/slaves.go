package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lib/pq"

	"github.com/opengpulab/gpulab/job"
)

// Slave is a registered worker machine.
type Slave struct {
	ID            int64           `db:"id"`
	Name          string          `db:"name"`
	InstanceID    string          `db:"instance_id"`
	ClusterID     int             `db:"cluster_id"`
	Host          string          `db:"host"`
	DNSName       string          `db:"dns_name"`
	Version       string          `db:"version"`
	Inventory     json.RawMessage `db:"inventory"`
	Usage         json.RawMessage `db:"usage"`
	AcceptingJobs bool            `db:"accepting_jobs"`
	Online        bool            `db:"online"`
	LastHeartbeat sql.NullTime    `db:"last_heartbeat"`
	OfflineSince  sql.NullTime    `db:"offline_since"`
	RegisteredAt  time.Time       `db:"registered_at"`
	// CapacityGPUs are the most GPUs the slave has registered with (a protocol.GPU list): a
	// request is impossible only against them, not against a momentary inventory.
	CapacityGPUs json.RawMessage `db:"capacity_gpus"`
	// Disabled slaves get no jobs and no job secrets (SetSlaveDisabled).
	Disabled bool `db:"disabled"`
	// SSHHost and SSHPort are where the slave serves SSH for its running jobs, as users (or the
	// master's jump host) reach it; SSHHostKey its host key in authorized_keys form. An empty
	// host: the slave serves no SSH.
	SSHHost    string `db:"ssh_host"`
	SSHPort    int    `db:"ssh_port"`
	SSHHostKey string `db:"ssh_host_key"`
}

const slaveColumns = `id, name, instance_id, cluster_id, host, dns_name, version, inventory, usage, accepting_jobs,
online, last_heartbeat, offline_since, registered_at, capacity_gpus, disabled, ssh_host, ssh_port, ssh_host_key`

// ListSlaves lists slaves by cluster and name.
func (s *Store) ListSlaves(ctx context.Context) ([]Slave, error) {
	var ss []Slave
	err := s.q.SelectContext(ctx, &ss, `SELECT `+slaveColumns+` FROM slaves ORDER BY cluster_id, name`)
	return ss, mapErr(err, "list slaves")
}

// Largest is the most any one registered slave offers, each resource on its own (GPUs: its
// inventory's or its GPU capacity's, the larger), and how many registered slaves it was taken
// from.
type Largest struct {
	Slaves    int   `db:"slaves"`
	GPUs      int   `db:"gpus"`
	CPUs      int   `db:"cpus"`
	MemoryMiB int64 `db:"memory_mib"`
}

// LargestSlave computes Largest in Postgres from the registered slaves' capacities
// (slave_capacities, written by RegisterSlave): one row of three numbers a slave, where looking
// into every slave's wide row and its inventory's JSON was 58–111 ms at 5,000 slaves (B8x) every
// 15 s, while that master's submits waited (handlers' capacity check).
func (s *Store) LargestSlave(ctx context.Context) (Largest, error) {
	var l Largest
	err := s.q.GetContext(ctx, &l, `SELECT count(*) AS slaves, COALESCE(max(gpus), 0) AS gpus,
    COALESCE(max(cpus), 0) AS cpus, COALESCE(max(memory_mib), 0) AS memory_mib
FROM slave_capacities`)
	return l, mapErr(err, "largest slave")
}

// SlaveShown is what an answer about jobs shows of their slaves: where users reach them over
// SSH and, in imec's job shape, the slave's instance, process id and GPU software.
type SlaveShown struct {
	Name          string `db:"name"`
	InstanceID    string `db:"instance_id"`
	SSHHost       string `db:"ssh_host"`
	SSHPort       int    `db:"ssh_port"`
	PID           int    `db:"pid"`
	DriverVersion string `db:"driver_version"`
	CudaVersion   string `db:"cuda_version"`
}

// SlavesShown reads what answers about jobs show of the named slaves; none (and no query) for no
// names. A list of 50 running jobs names up to 50 slaves, whose whole rows (inventory, usage,
// capacity: some KB each) were read and decoded for these few fields.
func (s *Store) SlavesShown(ctx context.Context, names []string) ([]SlaveShown, error) {
	if len(names) == 0 {
		return nil, nil
	}
	var ss []SlaveShown
	err := s.q.SelectContext(ctx, &ss, `SELECT name, instance_id, ssh_host, ssh_port,
    COALESCE((inventory->>'pid')::bigint, 0) AS pid,
    COALESCE(inventory->>'driverVersion', '') AS driver_version,
    COALESCE(inventory->>'cudaVersion', '') AS cuda_version
FROM slaves WHERE name = ANY($1)`, pq.Array(names))
	return ss, mapErr(err, "read the slaves of jobs shown")
}

// GetSlave reads a slave by name.
func (s *Store) GetSlave(ctx context.Context, name string) (Slave, error) {
	var sl Slave
	err := s.q.GetContext(ctx, &sl, `SELECT `+slaveColumns+` FROM slaves WHERE name = $1`, name)
	return sl, mapErr(err, "get slave "+name)
}

// CreateSlaveToken stores the hash of a one-time join token, valid for valid (database clock).
func (s *Store) CreateSlaveToken(ctx context.Context, hash, slaveName string, clusterID int, valid time.Duration) error {
	_, err := s.q.ExecContext(ctx, `INSERT INTO slave_tokens (token_hash, slave_name, cluster_id, expires_at)
VALUES ($1, $2, $3, now() + make_interval(secs => $4))`, hash, slaveName, clusterID, valid.Seconds())
	return mapErr(err, "create slave token for "+slaveName)
}

// UseSlaveToken spends a join token: it works once, before it expires. ErrNotFound otherwise.
func (s *Store) UseSlaveToken(ctx context.Context, hash string) (name string, clusterID int, err error) {
	var row struct {
		Name      string `db:"slave_name"`
		ClusterID int    `db:"cluster_id"`
	}
	err = s.q.GetContext(ctx, &row, `UPDATE slave_tokens SET used_at = now()
WHERE token_hash = $1 AND used_at IS NULL AND expires_at > now() RETURNING slave_name, cluster_id`, hash)
	return row.Name, row.ClusterID, mapErr(err, "use slave token")
}

// JoinSlave records a slave that joined (with a token for this cluster). It is offline until
// it registers; joining again moves it to the token's cluster.
func (s *Store) JoinSlave(ctx context.Context, name string, clusterID int) error {
	_, err := s.q.ExecContext(ctx, `INSERT INTO slaves (name, instance_id, cluster_id) VALUES ($1, '', $2)
ON CONFLICT (name) DO UPDATE SET cluster_id = EXCLUDED.cluster_id`, name, clusterID)
	return mapErr(err, "join slave "+name)
}

// SlaveRegistration is what a slave reports at start.
type SlaveRegistration struct {
	Name, InstanceID, Host, DNSName, Version string
	ClusterID                                int
	Inventory                                json.RawMessage
	// SSHHost, SSHPort and SSHHostKey are the slave's SSH endpoint (empty: none); a registration
	// without one clears the previous instance's.
	SSHHost    string
	SSHPort    int
	SSHHostKey string
}

// capacityOf is what a slave offers (slave_capacities' gpus, cpus and memory_mib), from its row's
// inventory and GPU capacity (a field of another type than protocol.Inventory writes counts for
// nothing), as migration 0027 computed it for the slaves registered before it.
const capacityOf = `GREATEST(CASE WHEN jsonb_typeof(inventory->'gpus') = 'array' THEN jsonb_array_length(inventory->'gpus') ELSE 0 END,
        CASE WHEN jsonb_typeof(capacity_gpus) = 'array' THEN jsonb_array_length(capacity_gpus) ELSE 0 END),
    COALESCE(CASE WHEN jsonb_typeof(inventory->'cpus') = 'number' THEN (inventory->>'cpus')::numeric END, 0)::bigint,
    COALESCE(CASE WHEN jsonb_typeof(inventory->'memoryMiB') = 'number' THEN (inventory->>'memoryMiB')::numeric END, 0)::bigint`

// RegisterSlave records a slave's (new) instance and inventory, marks it online and writes
// what it offers (slave_capacities, for LargestSlave), in one statement. The cluster comes from
// the slave's certificate (its join token), never from the slave's word. The slave's capacity
// grows with its inventory and never shrinks by itself: a GPU missing for a while is not a GPU
// the cluster no longer has.
func (s *Store) RegisterSlave(ctx context.Context, r SlaveRegistration) (Slave, error) {
	var sl Slave
	err := s.q.GetContext(ctx, &sl, `WITH s AS (
INSERT INTO slaves (name, instance_id, cluster_id, host, dns_name, version, inventory, online, last_heartbeat, capacity_gpus,
    ssh_host, ssh_port, ssh_host_key)
VALUES ($1, $2, $3, $4, $5, $6, $7, TRUE, now(),
    CASE WHEN jsonb_typeof($7::jsonb->'gpus') = 'array' THEN $7::jsonb->'gpus' ELSE '[]'::jsonb END, $8, $9, $10)
ON CONFLICT (name) DO UPDATE SET instance_id = EXCLUDED.instance_id, cluster_id = EXCLUDED.cluster_id, host = EXCLUDED.host,
    dns_name = EXCLUDED.dns_name, version = EXCLUDED.version, inventory = EXCLUDED.inventory, online = TRUE,
    ssh_host = EXCLUDED.ssh_host, ssh_port = EXCLUDED.ssh_port, ssh_host_key = EXCLUDED.ssh_host_key,
    last_heartbeat = now(), offline_since = NULL,
    capacity_gpus = CASE WHEN jsonb_array_length(EXCLUDED.capacity_gpus) >= jsonb_array_length(slaves.capacity_gpus)
        THEN EXCLUDED.capacity_gpus ELSE slaves.capacity_gpus END
RETURNING `+slaveColumns+`
), c AS (
INSERT INTO slave_capacities (slave_id, gpus, cpus, memory_mib)
SELECT id, `+capacityOf+` FROM s
ON CONFLICT (slave_id) DO UPDATE SET gpus = EXCLUDED.gpus, cpus = EXCLUDED.cpus, memory_mib = EXCLUDED.memory_mib
)
SELECT `+slaveColumns+` FROM s`, r.Name, r.InstanceID, r.ClusterID, r.Host, r.DNSName, r.Version, r.Inventory,
		r.SSHHost, r.SSHPort, r.SSHHostKey)
	return sl, mapErr(err, "register slave "+r.Name)
}

// SetSlaveAccepting drains (false) or reopens (true) a slave.
func (s *Store) SetSlaveAccepting(ctx context.Context, name string, accepting bool) error {
	res, err := s.q.ExecContext(ctx, `UPDATE slaves SET accepting_jobs = $2 WHERE name = $1`, name, accepting)
	return affectedOne(res, err, "drain slave "+name)
}

// MarkSlavesOffline marks online slaves silent for longer than grace (database clock) offline
// and returns their names. Nothing is marked before the leader has itself led for grace
// (leaderSince, database clock): after a database outage or a change of leader, every slave's
// last heartbeat is old for reasons that are not the slave's.
func (s *Store) MarkSlavesOffline(ctx context.Context, grace time.Duration, leaderSince time.Time) ([]string, error) {
	var names []string
	err := s.q.SelectContext(ctx, &names, `UPDATE slaves SET online = FALSE, offline_since = now()
WHERE online AND (last_heartbeat IS NULL OR last_heartbeat < now() - make_interval(secs => $1))
  AND $2::timestamptz < now() - make_interval(secs => $1) RETURNING name`, grace.Seconds(), leaderSince)
	return names, mapErr(err, "mark slaves offline")
}

// SlaveJob is a job the master has on a slave, as the slave protocol needs it.
type SlaveJob struct {
	UUID    string     `db:"uuid"`
	Status  job.Status `db:"status"`
	Attempt int        `db:"attempt"`
	// Missing is set when the slave's heartbeats have not listed the job for longer than the
	// grace given to ListSlaveJobs; MissingSince when they stopped listing it.
	MissingSince sql.NullTime `db:"missing_since"`
	Missing      bool         `db:"missing"`
	// Renew: the job is ASSIGNED or STARTING and its lease is due for renewal (less than half
	// left) if the slave lists it (RenewLeases).
	Renew bool `db:"renew"`
}

// ListSlaveJobs lists the jobs on a slave (ASSIGNED … HALTING), oldest first, through the
// slave's live-job index: a heartbeat or a long poll reads only them, never the slave's past.
func (s *Store) ListSlaveJobs(ctx context.Context, slaveName string, missingGrace time.Duration) ([]SlaveJob, error) {
	var out []SlaveJob
	err := s.q.SelectContext(ctx, &out, `SELECT uuid::text AS uuid, status, attempt, missing_since,
    COALESCE(missing_since < now() - make_interval(secs => $2), FALSE) AS missing, `+renewDue("jobs", "$3", "$4")+` AS renew
FROM jobs WHERE assigned_slave_name = $1 AND status IN `+liveStatuses+` ORDER BY created_at, uuid`, slaveName, missingGrace.Seconds(),
		s.leases.Assigned.Seconds()/2, s.leases.Starting.Seconds()/2)
	return out, mapErr(err, "list jobs of slave "+slaveName)
}

// JobStatuses returns the current state and attempt of the given jobs that were last placed
// on the slave (others and missing ones are left out: a slave learns nothing of other slaves'
// jobs by listing their ids).
func (s *Store) JobStatuses(ctx context.Context, slave string, uuids []string) (map[string]SlaveJob, error) {
	out := map[string]SlaveJob{}
	if len(uuids) == 0 {
		return out, nil
	}
	var rows []SlaveJob
	if err := s.q.SelectContext(ctx, &rows, `SELECT uuid::text AS uuid, status, attempt FROM jobs WHERE uuid = ANY($1::uuid[]) AND assigned_slave_name = $2`, pq.Array(uuids), slave); err != nil {
		return nil, mapErr(err, "job states")
	}
	for _, r := range rows {
		out[r.UUID] = r
	}
	return out, nil
}

// MarkMissing notes that the slave's heartbeat did not list these jobs (missing_since, kept from
// the first time), and clears the mark of the jobs it listed again.
func (s *Store) MarkMissing(ctx context.Context, slave string, missing, listed []string) error {
	if len(missing) > 0 {
		if _, err := s.q.ExecContext(ctx, `UPDATE jobs SET missing_since = now() WHERE uuid = ANY($1::uuid[]) AND assigned_slave_name = $2
AND status IN `+liveStatuses+` AND missing_since IS NULL`, pq.Array(missing), slave); err != nil {
			return mapErr(err, "mark jobs missing on slave "+slave)
		}
	}
	if len(listed) > 0 {
		if _, err := s.q.ExecContext(ctx, `UPDATE jobs SET missing_since = NULL WHERE uuid = ANY($1::uuid[]) AND missing_since IS NOT NULL`,
			pq.Array(listed)); err != nil {
			return mapErr(err, "clear missing marks on slave "+slave)
		}
	}
	return nil
}

// RenewLeases extends the leases of jobs the slave reports holding while it takes or starts
// them: an ASSIGNED one (the slave has it, and its STARTING update is on its way: on an
// overloaded master it may wait minutes for a connection) up to the hand-over lease after the
// assignment, a STARTING one (an image pull in progress) up to the start deadline after
// STARTING. Leases with more than half their time left are not written again. The rows are
// found by their ids alone (see handedOver).
func (s *Store) RenewLeases(ctx context.Context, slave string, uuids []string) error {
	if len(uuids) == 0 {
		return nil
	}
	l := s.leases
	_, err := s.q.ExecContext(ctx, `UPDATE jobs SET lease_expires_at = CASE status
    WHEN 'ASSIGNED' THEN LEAST(now() + make_interval(secs => $3), (event_times->>'ASSIGNED')::timestamptz + make_interval(secs => $4))
    ELSE LEAST(now() + make_interval(secs => $5), (event_times->>'STARTING')::timestamptz + make_interval(secs => $6)) END
WHERE uuid = ANY($1::uuid[]) AND (assigned_slave_name = $2 AND (
    status = 'ASSIGNED' AND lease_expires_at < now() + make_interval(secs => $3 / 2) OR
    status = 'STARTING' AND lease_expires_at < now() + make_interval(secs => $5 / 2))) IS TRUE`,
		pq.Array(uuids), slave, l.Assigned.Seconds(), l.BeforeHandOver().Seconds(), l.Starting.Seconds(), l.StartDeadline.Seconds())
	return mapErr(err, "renew the leases of jobs on slave "+slave)
}

// Placement is where the scheduler put a job.
type Placement struct {
	SlaveName, SlaveInstanceID string
	ClusterID                  int
	Resources                  job.StateResources
	// TallyIncrement is what the job adds to its owner's tally per 5-minute tally interval.
	TallyIncrement float64
}

// Assignment is one job placed by a scheduling pass: AssignJobs writes a pass's in one
// statement.
type Assignment struct {
	JobUUID string
	Placement
	Message string
}

// assignJobs moves the given jobs that are still QUEUED to ASSIGNED with their placement, and
// records a status event for each, in one statement: a pass that places thousands of jobs
// (a burst after an outage, a new slave) commits in one round trip instead of three per job.
// A job no longer QUEUED (cancelled since the snapshot) is left alone, as TransitionJob would.
const assignJobs = `WITH ` + assignInput + `, assigned AS (
	` + assignUpdate + assignWhere + `
), ` + assignClear + `
INSERT INTO job_events (job_uuid, kind, from_status, to_status, actor, message)
SELECT uuid, 'status', 'QUEUED', 'ASSIGNED', 'scheduler', message FROM assigned
RETURNING job_uuid::text`

// assignInput, assignUpdate and assignWhere are the parts assignJobs and assignJobsAsLeader
// share: the assignments as rows, and the update of the jobs still QUEUED.
const (
	assignInput = `input AS (
	SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::int[], $5::jsonb[], $6::float8[], $7::text[])
		AS t(uuid, slave, instance, cluster, resources, tally, message)
)`
	assignUpdate = `UPDATE jobs j SET status = 'ASSIGNED', event_times = j.event_times || jsonb_build_object('ASSIGNED', now()), updated_at = now(),
		attempt = j.attempt + 1, lease_expires_at = now() + make_interval(secs => $8), handed_over_at = NULL, missing_since = NULL,
		assigned_slave_name = i.slave, assigned_instance_id = i.instance, assigned_cluster_id = i.cluster, resources = i.resources,
		scheduling = j.scheduling || jsonb_build_object('tallyIncrement', i.tally)
	FROM input i WHERE `
	assignWhere = `j.uuid = i.uuid AND j.status = 'QUEUED'
		AND NOT EXISTS (SELECT 1 FROM slaves s WHERE s.name = i.slave AND s.disabled)
	RETURNING j.uuid, i.message`
	// assignClear deletes what the assigned jobs were told while they waited (job_waits), but
	// never waits for it: a row another statement is writing (the forecaster's estimates, in
	// the order of their uuids) is left, unseen once the job is no longer QUEUED, rather than
	// waited for while this statement holds the jobs' rows; the leader's retention sweep removes
	// it an hour later (DeleteStaleJobWaits).
	assignClear = `waited AS (
	SELECT w.job_uuid FROM job_waits w JOIN assigned a ON a.uuid = w.job_uuid FOR UPDATE OF w SKIP LOCKED
), cleared AS (
	DELETE FROM job_waits w USING waited x WHERE w.job_uuid = x.job_uuid
)`
)

// leadProof begins a CTE "lead" that proves the scheduler lease as AsLeader does, in a
// statement that acts as the leader on its own: the epoch's parameter follows it. Its rows are
// the proof; the statement's writes must depend on it (an uncorrelated EXISTS on it is a
// one-time filter, evaluated before any row is written), and it holds the lease's row FOR KEY
// SHARE until the statement commits, so that no takeover (a new epoch, a key) comes between.
const leadProof = `lead AS (
	` + leaseHeld

// assignJobsAsLeader is assignJobs as one transaction of its own that proves the scheduler
// lease ($9, as AsLeader does, the lease's row held until the commit) before it moves a job,
// and wakes the long polls of the slaves named ($10, slavePayloads) when it moved any.
const assignJobsAsLeader = `WITH ` + leadProof + `$9 FOR KEY SHARE
), ` + assignInput + `, assigned AS (
	` + assignUpdate + `EXISTS (SELECT 1 FROM lead) AND ` + assignWhere + `
), ` + assignClear + `, events AS (
	INSERT INTO job_events (job_uuid, kind, from_status, to_status, actor, message)
	SELECT uuid, 'status', 'QUEUED', 'ASSIGNED', 'scheduler', message FROM assigned
	RETURNING job_uuid
), woken AS (
	SELECT pg_notify('` + ChannelSlaves + `', payload) FROM unnest($10::text[]) AS payload WHERE EXISTS (SELECT 1 FROM assigned)
)
SELECT EXISTS (SELECT 1 FROM lead), ARRAY(SELECT job_uuid::text FROM events), (SELECT count(*) FROM woken)`

// AssignJobsAsLeader is AssignJobs as the holder of lead, in one statement that is its own
// transaction: the lease proved first, as AsLeader does, and the long polls of the slaves named
// in wake (on every master) woken at its commit when a job moved. A pass that only assigns made
// five round trips for it (begin, proof, assignment, notification, commit), each one on a loaded
// machine a wait for both processes to be scheduled again (B2x, 29 Nov). ErrNotLeader when the
// lease is not held: nothing is written.
func (s *Store) AssignJobsAsLeader(ctx context.Context, lead Leadership, as []Assignment, wake []string) ([]string, error) {
	if len(as) == 0 {
		return nil, nil
	}
	args, err := assignArgs(as, s.leases)
	if err != nil {
		return nil, err
	}
	var leading bool
	var done pq.StringArray
	var notified int // read only so that the woken CTE, a SELECT, runs at all
	if err := s.q.(*prepared).scanRow(ctx, assignJobsAsLeader, append(args, lead.Epoch, pq.Array(slavePayloads(wake))), &leading, &done, &notified); err != nil {
		return nil, mapErr(err, fmt.Sprintf("assign %d jobs", len(as)))
	}
	if !leading {
		return nil, notLeader(lead)
	}
	return done, nil
}

// assignArgs are assignJobs's parameters ($1–$8) for these assignments.
func assignArgs(as []Assignment, leases Leases) ([]any, error) {
	n := len(as)
	uuids, slaves, instances, resources, messages := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	clusters, tallies := make([]int64, n), make([]float64, n)
	for i, a := range as {
		res, err := json.Marshal(a.Resources)
		if err != nil {
			return nil, fmt.Errorf("encode resources of job %s: %w", a.JobUUID, err)
		}
		uuids[i], slaves[i], instances[i], resources[i], messages[i] = a.JobUUID, a.SlaveName, a.SlaveInstanceID, string(res), a.Message
		clusters[i], tallies[i] = int64(a.ClusterID), a.TallyIncrement
	}
	return []any{texts[string](uuids), texts[string](slaves), texts[string](instances), pq.Array(clusters),
		texts[string](resources), pq.Array(tallies), texts[string](messages), leases.BeforeHandOver().Seconds()}, nil
}

// AssignJobs moves QUEUED jobs to ASSIGNED on their slaves, conditionally, each with its status
// event, and returns the uuids it moved (those no longer QUEUED are skipped).
func (s *Store) AssignJobs(ctx context.Context, as []Assignment) ([]string, error) {
	if len(as) == 0 {
		return nil, nil
	}
	args, err := assignArgs(as, s.leases)
	if err != nil {
		return nil, err
	}
	var done []string
	err = s.q.SelectContext(ctx, &done, assignJobs, args...)
	return done, mapErr(err, fmt.Sprintf("assign %d jobs", len(as)))
}

// handOver stamps the first hand-over of assigned jobs to their slave and starts their assigned
// lease from it (LEAST: a later hand-over of the same job, a poll that returned it again,
// never lengthens it), and reads the jobs, with the log a job placed again already has (its
// later attempt goes on after it), in the same statement: the read sees the jobs as they were
// before the stamp, which it does not show. The stamp's commit does not wait for the WAL's
// flush (as a heartbeat's): one lost in a crash of Postgres leaves the job the longer lease it
// had before.
//
// The stamp's conditions besides the ids are wrapped in (…) IS TRUE, which no index answers, so
// that the ids are the only way to the rows (jobs_pkey): left bare, a generic plan may look the
// rows up by their state instead (jobs_status_idx, costed when few jobs were in that state)
// and read every job in it at each call: in B8x's fill, 33,000 assigned jobs for each poll
// that handed a slave its jobs, most of Postgres's time. RenewLeases does the same.
const handOver = `WITH async AS (SELECT set_config('synchronous_commit', 'off', true)), stamped AS (
    UPDATE jobs SET handed_over_at = now(), lease_expires_at = LEAST(lease_expires_at, now() + make_interval(secs => $3))
    FROM async WHERE uuid = ANY($1::uuid[]) AND (assigned_slave_name = $2 AND status = 'ASSIGNED' AND handed_over_at IS NULL) IS TRUE
)
SELECT x.*, l.log_next, l.log_size FROM (` + jobSelect + ` WHERE j.uuid = ANY($1::uuid[])) x
LEFT JOIN LATERAL (SELECT COALESCE(MAX(seq) + 1, 0) AS log_next, COALESCE(SUM(length(data)), 0) AS log_size
    FROM job_logs WHERE job_uuid = x.uuid AND x.attempt > 1) l ON true`

// HandedJob is a job a long poll hands its slave (HandOver), with the log its earlier
// attempts left (none for a first attempt).
type HandedJob struct {
	*JobRecord
	LogNextSeq int
	LogSize    int64
}

// HandOver reads the jobs of the given UUIDs for a long poll of the slave and records, in the
// same statement, that the poll hands it those still assigned to it: each one's lease
// (Leases.Assigned) runs from its first hand-over. A job that does not exist is left out; one
// no longer assigned to the slave is read but left alone (the caller offers only an ASSIGNED
// one). A poll handing out work read the jobs, their logs and stamped the hand-over in a
// statement each before: up to a job per GPU after a pass on a full cluster.
func (s *Store) HandOver(ctx context.Context, slave string, uuids []string) (map[string]*HandedJob, error) {
	out := make(map[string]*HandedJob, len(uuids))
	if len(uuids) == 0 {
		return out, nil
	}
	var rows []struct {
		jobRow
		LogNext int   `db:"log_next"`
		LogSize int64 `db:"log_size"`
	}
	if err := s.q.SelectContext(ctx, &rows, handOver, pq.Array(uuids), slave, s.leases.Assigned.Seconds()); err != nil {
		return nil, mapErr(err, "hand jobs over to slave "+slave)
	}
	for i := range rows {
		rec, err := s.record(&rows[i].jobRow)
		if err != nil {
			return nil, err
		}
		out[rec.Job.UUID] = &HandedJob{JobRecord: rec, LogNextSeq: rows[i].LogNext, LogSize: rows[i].LogSize}
	}
	return out, nil
}

// SetQueuedExplanations stores, for each queued job, why it waits, in one statement per pass.
// A job of news whose explanation changed gets a scheduler event, so GET jobs/{id}/debug shows
// how the reasons evolved without one event per pass; refreshed holds explanations whose
// details alone moved (counts, times, names), stored without an event.
func (s *Store) SetQueuedExplanations(ctx context.Context, news, refreshed map[string][]string) error {
	if len(news)+len(refreshed) == 0 {
		return nil
	}
	n, r, err := encodeExplanations(news, refreshed)
	if err != nil {
		return err
	}
	_, err = s.q.ExecContext(ctx, setExplanations, n, r)
	return mapErr(err, "set queued explanations")
}

// encodeExplanations encodes SetQueuedExplanations's parameters.
func encodeExplanations(news, refreshed map[string][]string) (n, r []byte, err error) {
	// A nil map encodes as null, which jsonb_each refuses.
	encode := func(m map[string][]string) ([]byte, error) {
		if m == nil {
			return []byte("{}"), nil
		}
		return json.Marshal(m)
	}
	if n, err = encode(news); err == nil {
		r, err = encode(refreshed)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("encode explanations: %w", err)
	}
	return n, r, nil
}

// explanationsInput, explanationsChanged and explanationsWrite are SetQueuedExplanations's
// statement in parts, which SetQueuedExplanationsAsLeader shares: the explanations as rows
// (event: from news), those that differ from what the queued jobs were told (job_waits), their
// upsert in the order of the jobs' uuids (as the forecaster's estimates: two writers of the
// same rows in one order never deadlock; a job named twice is written once, as news) and a
// scheduler event for each one of news.
const (
	explanationsInput = `e AS (
    SELECT key, value, TRUE AS event FROM jsonb_each($1::jsonb)
    UNION ALL SELECT key, value, FALSE FROM jsonb_each($2::jsonb))`
	explanationsChanged = `changed AS (
    SELECT DISTINCT ON (j.uuid) j.uuid, e.value, e.event FROM e JOIN jobs j ON j.uuid = e.key::uuid LEFT JOIN job_waits w ON w.job_uuid = j.uuid
    WHERE `
	explanationsWrite = `j.status = 'QUEUED' AND w.explanations IS DISTINCT FROM jsonb_build_object('queuedExplanations', e.value)
    ORDER BY j.uuid, e.event DESC
), written AS (
    INSERT INTO job_waits AS w (job_uuid, explanations) SELECT uuid, jsonb_build_object('queuedExplanations', value) FROM changed
    ON CONFLICT (job_uuid) DO UPDATE SET explanations = EXCLUDED.explanations
), events AS (
    INSERT INTO job_events (job_uuid, kind, actor, message)
    SELECT uuid, 'scheduler', 'scheduler', (SELECT string_agg(x, '; ') FROM jsonb_array_elements_text(value) x) FROM changed WHERE event
)`
)

// setExplanations is SetQueuedExplanations's statement, setExplanationsAsLeader
// SetQueuedExplanationsAsLeader's (its epoch $3).
const (
	setExplanations = `WITH ` + explanationsInput + `, ` + explanationsChanged + explanationsWrite + `
SELECT 1`
	setExplanationsAsLeader = `WITH ` + leadProof + `$3 FOR KEY SHARE
), ` + explanationsInput + `, ` + explanationsChanged + `EXISTS (SELECT 1 FROM lead) AND ` + explanationsWrite + `
SELECT EXISTS (SELECT 1 FROM lead)`
)

// SetQueuedExplanationsAsLeader is SetQueuedExplanations as the holder of lead, in one
// statement that is its own transaction (see leadProof): a pass's transaction for it alone was
// four round trips (begin, proof, explanations, commit). ErrNotLeader, nothing written, when
// the lease is not held.
func (s *Store) SetQueuedExplanationsAsLeader(ctx context.Context, lead Leadership, news, refreshed map[string][]string) error {
	if len(news)+len(refreshed) == 0 {
		return nil
	}
	n, r, err := encodeExplanations(news, refreshed)
	if err != nil {
		return err
	}
	var leading bool
	err = s.q.(*prepared).scanRow(ctx, setExplanationsAsLeader, []any{n, r, lead.Epoch}, &leading)
	if err != nil {
		return mapErr(err, "set queued explanations")
	}
	if !leading {
		return notLeader(lead)
	}
	return nil
}

// SetEstimatedStarts stores when each queued job is expected to start, without a range; see
// SetStartEstimates.
func (s *Store) SetEstimatedStarts(ctx context.Context, starts map[string]time.Time) error {
	est := make(map[string]job.StartEstimate, len(starts))
	for id, t := range starts {
		est[id] = job.StartEstimate{Start: t}
	}
	return s.SetStartEstimates(ctx, est)
}

// SetStartEstimates stores each queued job's expected start and its range, and clears the
// estimate of queued jobs that have none now, in one statement per pass; only rows whose
// estimate changed are written.
func (s *Store) SetStartEstimates(ctx context.Context, est map[string]job.StartEstimate) error {
	return s.SetStartEstimatesAmong(ctx, est, nil)
}

// JobLogState returns the next log chunk number and the log size of a job.
func (s *Store) JobLogState(ctx context.Context, uuid string) (nextSeq int, size int64, err error) {
	var row struct {
		Next int   `db:"next"`
		Size int64 `db:"size"`
	}
	err = s.q.GetContext(ctx, &row, `SELECT COALESCE(MAX(seq) + 1, 0) AS next, COALESCE(SUM(length(data)), 0) AS size FROM job_logs WHERE job_uuid = $1`, uuid)
	return row.Next, row.Size, mapErr(err, "log state of job "+uuid)
}

// AddHaltEvent appends a halt decision to a job's state.scheduling.haltEvents.
func (s *Store) AddHaltEvent(ctx context.Context, uuid string, ev job.HaltEvent) error {
	data, err := json.Marshal([]job.HaltEvent{ev})
	if err != nil {
		return fmt.Errorf("encode halt event: %w", err)
	}
	res, err := s.q.ExecContext(ctx, `UPDATE jobs SET scheduling = jsonb_set(scheduling, '{haltEvents}',
    COALESCE(scheduling->'haltEvents', '[]'::jsonb) || $2::jsonb) WHERE uuid = $1`, uuid, data)
	return affectedOne(res, err, "add halt event to job "+uuid)
}

// Held is what one job on a slave holds, as the scheduler's snapshot needs it: a handful of
// columns instead of the whole job (decoding every running job's request and state documents
// was most of a pass on a busy cluster).
type Held struct {
	UUID         string         `db:"uuid"`
	UserID       int64          `db:"user_id"`
	ProjectID    int64          `db:"project_id"`
	Status       job.Status     `db:"status"`
	SlaveName    string         `db:"slave"`
	GPUIDs       Ints           `db:"gpu_ids"`
	CPUIDs       Ints           `db:"cpu_ids"`
	MemoryGb     int            `db:"memory_gb"`
	RunningAt    sql.NullTime   `db:"running_at"` // when it reached RUNNING, if it has
	MinDuration  int64          `db:"min_duration_s"`
	MaxDuration  int64          `db:"max_duration_s"`
	Restartable  bool           `db:"restartable"`
	Interactive  bool           `db:"interactive"`
	Bucket       string         `db:"bucket"` // maxSimultaneousJobs.bucketName, "" when none
	Reservations pq.StringArray `db:"reservation_ids"`
	// Releasing marks what an ended (or requeued) job still holds until its slave confirms the
	// container gone (job_releases): taken, but no longer the job's to count or halt.
	Releasing bool `db:"releasing"`
}

// heldResources are the columns of Held read from a resources document r.
const heldResources = `CASE WHEN jsonb_typeof(r->'gpuIds') = 'array' THEN ARRAY(SELECT jsonb_array_elements_text(r->'gpuIds')::bigint) ELSE '{}' END AS gpu_ids,
	CASE WHEN jsonb_typeof(r->'cpuIds') = 'array' THEN ARRAY(SELECT jsonb_array_elements_text(r->'cpuIds')::bigint) ELSE '{}' END AS cpu_ids,
	COALESCE((r->>'cpuMemoryGb')::int, 0) AS memory_gb`

// heldJobColumns are Held's columns (with created_at) of a job row, with r its resources.
const heldJobColumns = `uuid::text AS uuid, user_id, project_id, status, COALESCE(assigned_slave_name, '') AS slave, ` + heldResources + `,
	(event_times->>'RUNNING')::timestamptz AS running_at,
	min_duration_s, max_duration_s, restartable, interactive,
	COALESCE(request#>>'{scheduling,maxSimultaneousJobs,bucketName}', '') AS bucket,
	reservation_ids, FALSE AS releasing, created_at`

// releasingColumns and releasingFrom read Held's columns (with created_at: when the release
// began) of what ended jobs still hold (job_releases).
const (
	releasingColumns = `rl.job_uuid::text AS uuid, j.user_id, j.project_id, j.status, rl.slave_name AS slave, ` + heldResources + `,
	NULL::timestamptz AS running_at, 0 AS min_duration_s, 0 AS max_duration_s, FALSE AS restartable, FALSE AS interactive, '' AS bucket,
	'{}'::text[] AS reservation_ids, TRUE AS releasing, rl.since AS created_at`
	releasingFrom = `FROM job_releases rl JOIN jobs j ON j.uuid = rl.job_uuid, LATERAL (SELECT rl.resources AS r) x`
)

const listHeld = `SELECT * FROM (
SELECT ` + heldJobColumns + `
FROM jobs, LATERAL (SELECT resources AS r) x WHERE status IN ` + liveStatuses + ` AND resources IS NOT NULL
UNION ALL
SELECT ` + releasingColumns + ` ` + releasingFrom + `
) held ORDER BY created_at, uuid`

// ListHeld lists what is taken on the slaves, oldest first: what the jobs on a slave (ASSIGNED
// … HALTING) hold, and what ended jobs hold until their slave confirms their containers gone.
func (s *Store) ListHeld(ctx context.Context) ([]Held, error) {
	var rows []struct {
		Held
		CreatedAt time.Time `db:"created_at"`
	}
	if err := s.q.SelectContext(ctx, &rows, listHeld); err != nil {
		return nil, mapErr(err, "list held resources")
	}
	out := make([]Held, len(rows))
	for i := range rows {
		out[i] = rows[i].Held
	}
	return out, nil
}

// JobPlace is what a slave's call about a job needs to know of it: where it is, in what state
// and attempt, and for the queue-wait metric when it was queued and in which cluster it runs.
type JobPlace struct {
	Status  job.Status `db:"status"`
	Attempt int        `db:"attempt"`
	// Slave is the slave the job is assigned to ("" when none); SlaveDisabled whether that
	// slave is disabled.
	Slave         string       `db:"slave"`
	SlaveDisabled bool         `db:"slave_disabled"`
	QueuedAt      sql.NullTime `db:"queued_at"`
	ClusterID     int          `db:"cluster_id"`
}

// jobPlaceQuery is JobPlace's statement and certificateQuery CheckCertificate's, made once.
var (
	jobPlaceQuery = `SELECT j.status, j.attempt, COALESCE(j.assigned_slave_name, '') AS slave,
    COALESCE((SELECT s.disabled FROM slaves s WHERE s.name = j.assigned_slave_name), false) AS slave_disabled,
    (j.event_times->>'QUEUED')::timestamptz AS queued_at, COALESCE((j.resources->>'clusterId')::int, 0) AS cluster_id,
    ` + certStateOf("$2") + ` AS cert_state
FROM jobs j WHERE j.uuid = $1`
	certificateQuery = `SELECT ` + certStateOf("$1")
)

// JobPlace reads where a job is and in what state, in one statement with its slave's disabled
// flag: for a slave's log-state call (its update, done and log calls have the statement that
// acts read it: SlaveChangeJob, AppendLog). The slaves' calls about their jobs used to read the
// whole job (GetJob: its request, state and owner, decoded) to look at these few columns; in
// B8x's fill those reads were 12 % of what the requests allocated (1.2 of 9.9 GB; the
// collector was a third of the master's CPU). ErrNotFound when there is no such job.
//
// With certSerial set (the calling slave's certificate), the statement also reads that
// certificate's state, as a heartbeat's does: one recorded as revoked or expired gets a
// *CertificateRefusedError, whether the job exists or not (where it does not, the certificate
// is read in a statement of its own), so a revocation holds at the slave's next call. Read in
// a statement of its own before, it was a third of these calls' statements and of their waits
// for a connection (B8x). "": checked by the caller.
func (s *Store) JobPlace(ctx context.Context, uuid, certSerial string) (JobPlace, error) {
	var row struct {
		JobPlace
		CertState sql.NullString `db:"cert_state"`
	}
	err := s.q.GetContext(ctx, &row, jobPlaceQuery, uuid, certSerial)
	if errors.Is(err, sql.ErrNoRows) && certSerial != "" {
		if err := s.CheckCertificate(ctx, certSerial); err != nil {
			return JobPlace{}, err
		}
	}
	if err != nil {
		return JobPlace{}, mapErr(err, "read job "+uuid)
	}
	if err := certRefused(certSerial, row.CertState); err != nil {
		return JobPlace{}, err
	}
	return row.JobPlace, nil
}

// CheckCertificate returns the *CertificateRefusedError of a certificate recorded as revoked
// or expired (by the database's clock, as every statement that reads a caller's certificate
// judges it), nil for any other, or one the master has no record of.
func (s *Store) CheckCertificate(ctx context.Context, serial string) error {
	var state sql.NullString
	if err := s.q.GetContext(ctx, &state, certificateQuery, serial); err != nil {
		return mapErr(err, "check certificate "+serial)
	}
	return certRefused(serial, state)
}
