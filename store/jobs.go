package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lib/pq"

	"github.com/opengpulab/gpulab/job"
)

// JobRecord is a stored job with the ids the master needs to check who may see and touch it.
type JobRecord struct {
	Job         *job.Job
	UserID      int64
	UserName    string
	ProjectID   int64
	ProjectName string
	ProjectGID  int
	// Attempt counts the job's placements; the slave calls of the current one name it.
	Attempt int
	// Version is a fingerprint of everything read of the job: two reads with the same
	// Version show the same job, so what was made of one (its JSON) serves the other.
	Version uint64
}

// jobRow is one row of the jobs query with its user and project joined in.
type jobRow struct {
	UUID                  string         `db:"uuid"`
	Name                  string         `db:"name"`
	Description           string         `db:"description"`
	DeploymentEnvironment string         `db:"deployment_environment"`
	Request               []byte         `db:"request"`
	UserID                int64          `db:"user_id"`
	UserURN               string         `db:"user_urn"`
	UserName              string         `db:"user_name"`
	UserEmail             string         `db:"user_email"`
	ProjectID             int64          `db:"project_id"`
	ProjectURN            string         `db:"project_urn"`
	ProjectName           string         `db:"project_name"`
	ProjectGID            int            `db:"project_gid"`
	Status                string         `db:"status"`
	EventTimes            []byte         `db:"event_times"`
	RestartInitialUUID    sql.NullString `db:"restart_initial_uuid"`
	RestartCount          int            `db:"restart_count"`
	AssignedClusterID     sql.NullInt64  `db:"assigned_cluster_id"`
	AssignedSlaveName     sql.NullString `db:"assigned_slave_name"`
	AssignedInstanceID    sql.NullString `db:"assigned_instance_id"`
	Attempt               int            `db:"attempt"`
	Scheduling            []byte         `db:"scheduling"`
	Resources             []byte         `db:"resources"`
	FinalUsage            []byte         `db:"final_usage"`
	IdleGPUs              pq.Int64Array  `db:"idle_gpus"`
	IdleSince             sql.NullTime   `db:"idle_since"`
	CreatedAt             time.Time      `db:"created_at"`
	UpdatedAt             time.Time      `db:"updated_at"`
}

const jobSelect = `SELECT j.uuid, j.name, j.description, j.deployment_environment, j.request,
    j.user_id, u.urn AS user_urn, u.name AS user_name, j.user_email,
    j.project_id, p.urn AS project_urn, p.name AS project_name, p.gid AS project_gid,
    j.status, j.event_times, j.restart_initial_uuid, j.restart_count,
    j.assigned_cluster_id, j.assigned_slave_name, j.assigned_instance_id, j.attempt,
    ` + jobScheduling + `, j.resources, j.final_usage, j.idle_gpus, j.idle_since, j.created_at, j.updated_at
FROM jobs j JOIN users u ON u.id = j.user_id JOIN projects p ON p.id = j.project_id`

// jobScheduling is a job's state.scheduling as its reads give it: the row's document and, while
// the job is QUEUED, what it is told (its explanations and estimated start, kept in job_waits:
// migration 0022). Postgres evaluates the lookup for queued jobs only.
const jobScheduling = `CASE WHEN j.status = 'QUEUED' THEN j.scheduling || COALESCE((SELECT w.explanations || w.estimate
        FROM job_waits w WHERE w.job_uuid = j.uuid), '{}') ELSE j.scheduling END AS scheduling`

// record makes a JobRecord of a row. Its JSON columns are decoded through the store's
// decodeCache.
func (s *Store) record(r *jobRow) (*JobRecord, error) {
	j, err := s.decoded.decode(r)
	if err != nil {
		return nil, err
	}
	return recordOf(r, j)
}

// sharedRecord is record whose job shares its request, event times and resources with the
// decodeCache: for a caller that only reads it (Caller.Job, which a GET of the job shows).
// Copying them for each GET was 5 % of the master's CPU for it (bench B4).
func (s *Store) sharedRecord(r *jobRow) (*JobRecord, error) {
	j, err := s.decoded.decodeShared(r)
	if err != nil {
		return nil, err
	}
	return recordOf(r, j)
}

// recordOf completes j, decoded from r's JSON columns, with the row's other columns.
func recordOf(r *jobRow, j *job.Job) (*JobRecord, error) {
	j.UUID = r.UUID
	j.Name = r.Name
	j.Description = r.Description
	j.DeploymentEnvironment = r.DeploymentEnvironment
	j.Owner = job.Owner{UserURN: r.UserURN, UserEmail: r.UserEmail, ProjectURN: r.ProjectURN}
	j.State.Status = job.Status(r.Status)
	j.State.Created, j.State.Updated = r.CreatedAt, r.UpdatedAt
	if len(r.Scheduling) > 0 {
		if err := json.Unmarshal(r.Scheduling, &j.State.Scheduling); err != nil {
			return nil, fmt.Errorf("decode scheduling state of job %s: %w", r.UUID, err)
		}
	}
	j.State.Scheduling.AssignedClusterID = int(r.AssignedClusterID.Int64)
	j.State.Scheduling.AssignedSlaveName = r.AssignedSlaveName.String
	j.State.Scheduling.AssignedInstanceID = r.AssignedInstanceID.String
	if len(r.FinalUsage) > 0 {
		j.State.FinalUsageStatistics = json.RawMessage(r.FinalUsage)
	}
	j.State.IdleGPUs, j.State.IdleSince = nil, nil
	for _, g := range r.IdleGPUs {
		j.State.IdleGPUs = append(j.State.IdleGPUs, int(g))
	}
	if r.IdleSince.Valid {
		t := r.IdleSince.Time
		j.State.IdleSince = &t
	}
	if r.RestartInitialUUID.Valid {
		j.RestartInfo = &job.RestartInfo{InitialJobUUID: r.RestartInitialUUID.String, RestartCount: r.RestartCount}
	}
	return &JobRecord{Job: j, UserID: r.UserID, UserName: r.UserName, ProjectID: r.ProjectID, ProjectName: r.ProjectName, ProjectGID: r.ProjectGID,
		Attempt: r.Attempt, Version: r.fingerprint()}, nil
}

// fingerprintSeed seeds the row fingerprints: a fingerprint is compared only within this
// process (it keys its caches), never stored or sent.
var fingerprintSeed = maphash.MakeSeed()

// fingerprint hashes every column of the row, each with its length, so that no two different
// rows run together into the same bytes. With maphash rather than FNV-1a, which hashed a byte
// at a time: a list of 50 jobs spent 170 µs of its 2.4 ms hashing their documents (B4).
func (r *jobRow) fingerprint() uint64 {
	var h maphash.Hash
	h.SetSeed(fingerprintSeed)
	var n [8]byte
	field := func(b []byte) {
		binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
		_, _ = h.Write(n[:])
		_, _ = h.Write(b)
	}
	str := func(v string) {
		binary.LittleEndian.PutUint64(n[:], uint64(len(v)))
		_, _ = h.Write(n[:])
		_, _ = h.WriteString(v)
	}
	num := func(v int64) {
		binary.LittleEndian.PutUint64(n[:], uint64(v))
		_, _ = h.Write(n[:])
	}
	tm := func(t time.Time, valid bool) {
		if !valid {
			num(-1)
			return
		}
		num(t.UnixNano())
	}
	str(r.UUID)
	str(r.Name)
	str(r.Description)
	str(r.DeploymentEnvironment)
	field(r.Request)
	num(r.UserID)
	str(r.UserURN)
	str(r.UserName)
	str(r.UserEmail)
	num(r.ProjectID)
	str(r.ProjectURN)
	str(r.ProjectName)
	num(int64(r.ProjectGID))
	str(r.Status)
	field(r.EventTimes)
	nullStr := func(v sql.NullString) {
		if !v.Valid {
			num(-1)
			return
		}
		str(v.String)
	}
	nullStr(r.RestartInitialUUID)
	num(int64(r.RestartCount))
	if r.AssignedClusterID.Valid {
		num(r.AssignedClusterID.Int64)
	} else {
		num(-1)
	}
	nullStr(r.AssignedSlaveName)
	nullStr(r.AssignedInstanceID)
	num(int64(r.Attempt))
	field(r.Scheduling)
	field(r.Resources)
	field(r.FinalUsage)
	num(int64(len(r.IdleGPUs)))
	for _, g := range r.IdleGPUs {
		num(g)
	}
	tm(r.IdleSince.Time, r.IdleSince.Valid)
	tm(r.CreatedAt, true)
	tm(r.UpdatedAt, true)
	return h.Sum64()
}

// maxDecoded bounds the jobs a decodeCache keeps (a few kB each).
const maxDecoded = 10000

// decodeCache keeps, for the jobs read lately, their request, event times and resources
// decoded, with the bytes they were decoded from. A request never changes after submit and the
// other two rarely, while the scheduler's snapshot and every slave's poll read the same jobs
// again and again: decoding them was a quarter of the master's CPU in the soak (bench/, B8).
// An entry serves only a row with the very same bytes, and always as a copy (job.Job.Clone),
// so nothing a caller changes reaches the cache.
type decodeCache struct {
	mu   sync.Mutex
	jobs map[string]*decodedJob
}

type decodedJob struct {
	request, eventTimes, resources []byte // as stored
	job                            *job.Job
}

func newDecodeCache() *decodeCache { return &decodeCache{jobs: map[string]*decodedJob{}} }

// decodeShared is decode whose job, when the cache holds the row's very bytes, shares the
// cache's request, event times and resources: its caller must not change them.
func (c *decodeCache) decodeShared(r *jobRow) (*job.Job, error) {
	c.mu.Lock()
	d := c.jobs[r.UUID]
	c.mu.Unlock()
	if d != nil && bytes.Equal(d.request, r.Request) && bytes.Equal(d.eventTimes, r.EventTimes) && bytes.Equal(d.resources, r.Resources) {
		return &job.Job{Request: d.job.Request, State: job.State{EventTimes: d.job.State.EventTimes, Resources: d.job.State.Resources}}, nil
	}
	return c.decode(r)
}

// decode returns a job with Request, State.EventTimes and State.Resources decoded from the row.
func (c *decodeCache) decode(r *jobRow) (*job.Job, error) {
	c.mu.Lock()
	d := c.jobs[r.UUID]
	c.mu.Unlock()
	j := &job.Job{}
	if d != nil {
		j = d.job.Clone()
	}
	changed := false
	if d == nil || !bytes.Equal(d.request, r.Request) {
		j.Request = job.Request{}
		if err := json.Unmarshal(r.Request, &j.Request); err != nil {
			return nil, fmt.Errorf("decode request of job %s: %w", r.UUID, err)
		}
		changed = true
	}
	if d == nil || !bytes.Equal(d.eventTimes, r.EventTimes) {
		j.State.EventTimes = map[job.Status]time.Time{}
		if err := json.Unmarshal(r.EventTimes, &j.State.EventTimes); err != nil {
			return nil, fmt.Errorf("decode event times of job %s: %w", r.UUID, err)
		}
		changed = true
	}
	if d == nil || !bytes.Equal(d.resources, r.Resources) {
		j.State.Resources = nil
		if len(r.Resources) > 0 {
			j.State.Resources = &job.StateResources{}
			if err := json.Unmarshal(r.Resources, j.State.Resources); err != nil {
				return nil, fmt.Errorf("decode resources of job %s: %w", r.UUID, err)
			}
		}
		changed = true
	}
	if changed {
		keep := &decodedJob{request: bytes.Clone(r.Request), eventTimes: bytes.Clone(r.EventTimes), resources: bytes.Clone(r.Resources),
			job: &job.Job{Request: j.Request, State: job.State{EventTimes: j.State.EventTimes, Resources: j.State.Resources}}}
		keep.job = keep.job.Clone()
		c.mu.Lock()
		makeRoom(c.jobs, maxDecoded)
		c.jobs[r.UUID] = keep
		c.mu.Unlock()
	}
	return j, nil
}

// insertJob stores a job and its first event in one statement: a submission is one round trip
// and one commit, not four (BEGIN, the job, the event, COMMIT). The scheduler leader is woken
// apart (Store.WakeScheduler).
const insertJob = `WITH j AS (
    INSERT INTO jobs (uuid, name, description, deployment_environment, request, user_id, user_email,
        project_id, status, event_times, interactive, restartable, cluster_id, gpus, cpus, cpu_memory_gb,
        min_duration_s, max_duration_s, reservation_ids, restart_initial_uuid, restart_count, submit_key)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, jsonb_build_object($9::text, now()), $10, $11, $12, $13, $14, $15,
        $16, $17, $18, $19, $20, NULLIF($22, ''))
    ON CONFLICT (user_id, submit_key) WHERE submit_key IS NOT NULL DO NOTHING
    RETURNING uuid, status, created_at
), e AS (
    INSERT INTO job_events (job_uuid, kind, to_status, actor, message)
    SELECT uuid, '` + EventStatus + `', status, 'owner', $21 FROM j
)
SELECT created_at FROM j`

// CreateJob stores a new job (already validated by job.Parse) in state j.State.Status, with its
// first event, atomically. It fills j.State.Created and the event time.
func (s *Store) CreateJob(ctx context.Context, j *job.Job, userID, projectID int64, message string) error {
	_, err := s.SubmitJob(ctx, j, userID, projectID, message, "")
	return err
}

// SubmitJob is CreateJob for a submission with an idempotency key (none when ""): when the
// user made a job with the same key before, nothing is stored and that job's uuid is returned
// (j is left as it was); else it returns "".
func (s *Store) SubmitJob(ctx context.Context, j *job.Job, userID, projectID int64, message, key string) (string, error) {
	req, err := json.Marshal(j.Request)
	if err != nil {
		return "", fmt.Errorf("encode request of job %s: %w", j.UUID, err)
	}
	r := j.Request
	row := submitRow{uuid: j.UUID, name: j.Name, description: j.Description, env: j.DeploymentEnvironment, request: req,
		userID: userID, email: j.Owner.UserEmail, projectID: projectID, status: string(j.State.Status),
		interactive: r.Scheduling.Interactive, restartable: r.Scheduling.Restartable, clusterID: r.Resources.ClusterID,
		gpus: r.Resources.GPUs, cpus: r.Resources.CPUs, memoryGb: r.Resources.CPUMemoryGb,
		minSecs: int64(time.Duration(r.Scheduling.MinDuration) / time.Second), maxSecs: int64(time.Duration(r.Scheduling.MaxDuration) / time.Second),
		reservations: r.Scheduling.ReservationIDs, message: message, key: key}
	if j.RestartInfo != nil {
		row.initial, row.restartCount = j.RestartInfo.InitialJobUUID, j.RestartInfo.RestartCount
	}
	var created time.Time
	var existing string
	if s.submits != nil && s.tx == nil && row.batchable() {
		created, existing, err = s.submits.submit(ctx, row)
	} else {
		created, existing, err = s.insertOne(ctx, &row)
	}
	if err != nil || existing != "" {
		return existing, err
	}
	j.State.Created, j.State.Updated = created, created
	j.State.EventTimes = map[job.Status]time.Time{j.State.Status: created}
	return "", nil
}

// GetJob reads one job by its full UUID.
func (s *Store) GetJob(ctx context.Context, uuid string) (*JobRecord, error) {
	var r jobRow
	if err := s.q.GetContext(ctx, &r, jobSelect+` WHERE j.uuid = $1`, uuid); err != nil {
		return nil, mapErr(err, "get job "+uuid)
	}
	return s.record(&r)
}

// FindJob reads a job by its UUID or by a unique prefix of it (at least 6 characters, checked
// by the caller). ErrAmbiguous when the prefix matches more than one job.
func (s *Store) FindJob(ctx context.Context, idOrPrefix string) (*JobRecord, error) {
	id := strings.ToLower(idOrPrefix)
	if len(id) == 36 {
		return s.GetJob(ctx, id)
	}
	lo, hi, ok := uuidPrefixRange(id)
	if !ok {
		return nil, fmt.Errorf("find job %s: %w", idOrPrefix, ErrNotFound)
	}
	var rows []jobRow
	if err := s.q.SelectContext(ctx, &rows, jobSelect+` WHERE j.uuid BETWEEN $1::uuid AND $2::uuid LIMIT 2`, lo, hi); err != nil {
		return nil, mapErr(err, "find job "+idOrPrefix)
	}
	switch len(rows) {
	case 0:
		return nil, fmt.Errorf("find job %s: %w", idOrPrefix, ErrNotFound)
	case 1:
		return s.record(&rows[0])
	}
	return nil, fmt.Errorf("find job %s: %w", idOrPrefix, ErrAmbiguous)
}

// uuidPrefixRange gives the lowest and the highest UUID whose text begins with prefix (lower
// case), or not ok when no UUID's does. Postgres orders UUIDs as their text orders, so a prefix
// is a range of the primary key: the index on the UUIDs' text that LIKE needed cost every change
// of a job's state an index entry more, a third of the WAL of a state change of 16,000 jobs
// (migration 0025).
func uuidPrefixRange(prefix string) (lo, hi string, ok bool) {
	const zero, full = "00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff"
	if len(prefix) > len(zero) {
		return "", "", false
	}
	for i := range len(prefix) {
		c := prefix[i]
		if zero[i] == '-' {
			if c != '-' {
				return "", "", false
			}
		} else if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", "", false
		}
	}
	return prefix + zero[len(prefix):], prefix + full[len(prefix):], true
}

// JobFilter selects jobs for ListJobs. Zero fields do not filter.
type JobFilter struct {
	Statuses []job.Status
	UserIDs  []int64 // jobs of these users
	// AlsoOthersRunning adds everybody's running jobs to those the state and user/project
	// filters above select (imec's `other_user_running`); the filters below apply to both.
	AlsoOthersRunning bool
	UserURN           string
	UserName          string
	ProjectURN        string
	ProjectName       string
	ClusterID         int // requested or assigned cluster
	AssignedSlaveName string
	Interactive       *bool
	ReservationID     string
	// CreatedWithin keeps the jobs submitted this long ago or less (database clock).
	CreatedWithin time.Duration
	// Visible restricts to what a non-admin may list: own jobs, jobs of his projects and, when
	// OthersRunning is set, everybody's running jobs (which the caller sanitizes).
	Visible *Visibility
	Sort    string // a key of SortKeys, "-" prefix for descending
	Limit   int
	Offset  int
	// Shared says the caller only reads the records: they may then be the very ones the store
	// keeps of jobs listed lately, and must not be changed. Copying each job of a list of 50
	// out of that memory was a sixth of the master's CPU of the list (bench B4), for answers
	// that mostly come from the JSON kept of each job.
	Shared bool
}

// Visibility is the caller's side of JobFilter.Visible.
type Visibility struct {
	UserID        int64
	ProjectIDs    []int64
	OthersRunning bool
}

// SortKeys maps the API's sort keys to columns.
var SortKeys = map[string]string{
	"created": "j.created_at",
	"updated": "j.updated_at",
	"name":    "j.name",
	"status":  "j.status",
	"user":    "u.name",
	"project": "p.name",
	"uuid":    "j.uuid",
}

// ListJobs lists jobs matching f, newest first unless f.Sort says otherwise.
func (s *Store) ListJobs(ctx context.Context, f JobFilter) ([]*JobRecord, error) {
	var where, who []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if len(f.Statuses) > 0 {
		who = append(who, "j.status = ANY("+arg(pq.Array(statusStrings(f.Statuses)))+")")
	}
	switch len(f.UserIDs) {
	case 0:
	case 1:
		// A plain equality lets Postgres walk jobs_user_created_idx in order and stop at the
		// page's end; = ANY(array) made it fetch all the user's jobs and sort them.
		who = append(who, "j.user_id = "+arg(f.UserIDs[0]))
	default:
		who = append(who, "j.user_id = ANY("+arg(pq.Array(f.UserIDs))+")")
	}
	// A user or project named is looked up first (each name and URN is unique) and its jobs
	// matched by id: Postgres then walks jobs_user_created_idx or jobs_project_created_idx in
	// order and stops at the page's end. Matched on the joined row (u.name = $n), it walked all
	// jobs newest first until it had a page of that user's: the portal's own Jobs page (the
	// caller's name) read about 100 rows for each it showed in B4.
	if f.UserURN != "" {
		who = append(who, "j.user_id = (SELECT id FROM users WHERE urn = "+arg(f.UserURN)+")")
	}
	if f.UserName != "" {
		who = append(who, "j.user_id = (SELECT id FROM users WHERE name = "+arg(f.UserName)+")")
	}
	if f.ProjectURN != "" {
		who = append(who, "j.project_id = (SELECT id FROM projects WHERE urn = "+arg(f.ProjectURN)+")")
	}
	if f.ProjectName != "" {
		who = append(who, "j.project_id = (SELECT id FROM projects WHERE name = "+arg(f.ProjectName)+")")
	}
	if f.AlsoOthersRunning {
		own := "TRUE"
		if len(who) > 0 {
			own = strings.Join(who, " AND ")
		}
		where = append(where, "(("+own+") OR j.status = ANY("+arg(pq.Array(statusStrings(job.RunningStatuses)))+"))")
	} else {
		where = append(where, who...)
	}
	if f.ClusterID > 0 {
		a := arg(f.ClusterID)
		where = append(where, "(j.cluster_id = "+a+" OR j.assigned_cluster_id = "+a+")")
	}
	if f.AssignedSlaveName != "" {
		where = append(where, "j.assigned_slave_name = "+arg(f.AssignedSlaveName))
	}
	if f.Interactive != nil {
		where = append(where, "j.interactive = "+arg(*f.Interactive))
	}
	if f.ReservationID != "" {
		// The second clause is jobs_reservations_idx's predicate (migration 0021), which
		// Postgres must find in the query to use that index.
		where = append(where, "j.reservation_ids @> "+arg(pq.Array([]string{f.ReservationID}))+" AND j.reservation_ids <> '{}'")
	}
	if f.CreatedWithin > 0 {
		where = append(where, "j.created_at >= now() - make_interval(secs => "+arg(f.CreatedWithin.Seconds())+")")
	}
	if v := f.Visible; v != nil && !ownJobsOnly(f) {
		cond := "j.user_id = " + arg(v.UserID)
		if len(v.ProjectIDs) > 0 {
			cond += " OR j.project_id = ANY(" + arg(pq.Array(v.ProjectIDs)) + ")"
		}
		if v.OthersRunning {
			cond += " OR j.status = ANY(" + arg(pq.Array(statusStrings(job.RunningStatuses))) + ")"
		}
		where = append(where, "("+cond+")")
	}
	q := jobSelect
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	order := "j.created_at DESC"
	if f.Sort != "" {
		key, desc := strings.TrimPrefix(f.Sort, "-"), strings.HasPrefix(f.Sort, "-")
		col, ok := SortKeys[key]
		if !ok {
			return nil, fmt.Errorf("list jobs: unknown sort key %q", key)
		}
		order = col
		if desc {
			order += " DESC"
		}
	}
	q += " ORDER BY " + order + ", j.uuid"
	if f.Limit > 0 && f.Limit <= maxListedByVersion && s.tx == nil {
		// The page's limit is written into the statement, rounded up to a few sizes (and
		// the page cut in listByVersion): with LIMIT $n Postgres's generic plan assumes a
		// long page, so it planned the statement anew at every call, twice the time of
		// running it (bench/ B4, pg_stat_statements). Few sizes keep few statements.
		q += fmt.Sprintf(" LIMIT %d", listedLimit(f.Limit))
		if f.Offset > 0 {
			q += " OFFSET " + arg(f.Offset)
		}
		sel := listSelect
		if strings.HasPrefix(order, "u.") || strings.HasPrefix(order, "p.") {
			sel = listSelectJoined // sorted by the owner's or the project's name
		}
		return s.listByVersion(ctx, strings.Replace(q, jobSelect, sel, 1), args, f.Limit, f.Shared)
	}
	if f.Limit > 0 {
		q += " LIMIT " + arg(f.Limit)
	}
	if f.Offset > 0 {
		q += " OFFSET " + arg(f.Offset)
	}
	var rows []jobRow
	if err := s.q.SelectContext(ctx, &rows, q, args...); err != nil {
		return nil, mapErr(err, "list jobs")
	}
	out := make([]*JobRecord, 0, len(rows))
	for i := range rows {
		rec, err := s.record(&rows[i])
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	return out, nil
}

// maxListedByVersion is the longest page ListJobs reads in two steps (listByVersion); a longer
// list, or one without a limit, is read at once, as is any list inside a transaction: there a
// row changed twice keeps the transaction's xmin and its now(), so its version would not tell
// the two apart.
const maxListedByVersion = 500

// listedLimit is the limit a page of n jobs is read with: the least of a few page sizes that
// is n or more (the last is maxListedByVersion). 25 is the portal's page, which read 50 rows
// for the 25 it shows (each row a fetch from the table: most of Postgres's work for a page,
// bench B4).
func listedLimit(n int) int {
	for _, size := range []int{10, 20, 25, 50, 100, 200} {
		if n <= size {
			return size
		}
	}
	return maxListedByVersion
}

// listSelect is jobSelect with only what tells a row's version: Postgres gives every version
// of a row the id of the transaction that wrote it (xmin), so a job whose row has the xmin of
// a record read before is that record, as long as the names it shows (its owner's and its
// project's) did not change, which the identity generation tells (migration 0019: every change
// to users and projects moves it; a list whose rows were all kept reads neither table, where
// joining them for their xmins was a fifth of Postgres's work for a list of 50). (updated_at
// too, in microseconds: an xmin comes back only after four billion transactions, and then the
// job must also have been updated at the very same time to be taken for the record kept.)
// The three come as one text, the version: read as columns, decoding them (lib/pq's decode)
// was 8 % of the master's CPU of a list of 50 (bench B4, 28 Nov). Without the generation's
// row (an operator's doing) concat_ws leaves it out, and a version of two parts is never kept
// (versioned): every row is read whole.
//
// Every condition ListJobs writes is on the jobs table alone; a sort by the owner's or the
// project's name joins them (listSelectJoined).
const listSelect = `SELECT j.uuid, ` + rowVersionOf + ` AS version
FROM jobs j`

// listSelectJoined is listSelect with jobSelect's joins, for sorts by their names.
const listSelectJoined = listSelect + ` JOIN users u ON u.id = j.user_id JOIN projects p ON p.id = j.project_id`

// rowVersionOf is a listed row's version (listSelect): its xmin, the identity generation,
// updated_at in microseconds and, for a queued job, the xmin of its row of job_waits (what it
// is told changes there, not in the job's row; "-" when it has none), as one text. The time
// goes through date_part's float (exact to the microsecond for dates before 2200), not
// extract's numeric: the versions of B4's page of 50 then cost Postgres 59 µs instead of 88,
// of a statement of 173 µs instead of 202 (29 Nov, pgbench, one client). The generation is the
// part concat_ws leaves out when its row is missing (versioned).
const rowVersionOf = `concat_ws(' ', j.xmin, (SELECT gen FROM identity_generation),
    (date_part('epoch', j.updated_at) * 1000000)::bigint,
    CASE WHEN j.status = 'QUEUED' THEN COALESCE((SELECT w.xmin::text FROM job_waits w WHERE w.job_uuid = j.uuid), '-') ELSE '-' END)`

// versioned says whether a version read with rowVersionOf has its four parts, so that a record
// may be kept by it: one without the identity generation's row has three, and a record kept by
// it would show an owner's old name for as long as his job did not change.
func versioned(v string) bool { return strings.Count(v, " ") == 3 }

// versionedSelect is jobSelect with listSelect's version.
var versionedSelect = strings.Replace(jobSelect, "\nFROM jobs j ", `, `+rowVersionOf+` AS version
FROM jobs j `, 1)

// listByVersion reads a page of jobs in two steps: the page's uuids and row versions first
// (q: the list's query on listSelect, whose limit is listedLimit's rounding of limit; the page
// is cut to limit), then the whole rows of only those jobs whose version
// the store has not made a record of lately (listedCache). Lists and portal pages show the
// same jobs again and again, and reading, scanning and decoding 50 whole rows with their JSON
// columns was 55 % of the master's CPU of a list (bench B4) and most of Postgres's. A job
// whose row changed between the two reads is shown as the second read finds it; one deleted
// meanwhile is left out: each statement sees the jobs as they are when it runs, as one
// statement did.
func (s *Store) listByVersion(ctx context.Context, q string, args []any, limit int, shared bool) ([]*JobRecord, error) {
	// The page is scanned by hand (prepared.scanRows): sqlx's reflection over 50 rows was 6 %
	// of the master's CPU of a list (bench B4), and a row kept is found without copying its
	// uuid or its version out of the driver's buffer.
	type listed struct {
		uuid string
		rec  *JobRecord
	}
	page := make([]listed, 0, limit)
	var missing []string
	err := s.q.(*prepared).scanRows(ctx, q, args, func(rows *sql.Rows) error {
		var id, v sql.RawBytes
		for rows.Next() {
			if len(page) == limit {
				continue // the rest of a page rounded up (listedLimit); Close would drain it too
			}
			if err := rows.Scan(&id, &v); err != nil {
				return err
			}
			if rec := s.listed.get(id, v, shared); rec != nil {
				page = append(page, listed{rec.Job.UUID, rec})
				continue
			}
			u := string(id)
			page = append(page, listed{uuid: u})
			missing = append(missing, u)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, mapErr(err, "list jobs")
	}
	var recs map[string]*JobRecord
	if len(missing) > 0 {
		var rows []struct {
			jobRow
			Version string `db:"version"`
		}
		err := s.q.SelectContext(ctx, &rows, versionedSelect+` WHERE j.uuid = ANY($1)`, pq.Array(missing))
		if err != nil {
			return nil, mapErr(err, "list jobs")
		}
		recs = make(map[string]*JobRecord, len(rows))
		for i := range rows {
			rec, err := s.record(&rows[i].jobRow)
			if err != nil {
				return nil, err
			}
			s.listed.put(rec, rows[i].Version)
			recs[rec.Job.UUID] = rec
		}
	}
	out := make([]*JobRecord, 0, len(page))
	for _, p := range page {
		if p.rec == nil {
			p.rec = recs[p.uuid]
		}
		if p.rec != nil {
			out = append(out, p.rec)
		}
	}
	return out, nil
}

// maxListed bounds the records a listedCache keeps (a few kB each).
const maxListed = 10000

// listedCache keeps the records of the jobs listed lately with the versions of the rows they
// were made of (listByVersion). It hands out copies, so nothing a caller changes reaches it,
// or its own records to callers that only read them (JobFilter.Shared).
type listedCache struct {
	mu   sync.Mutex
	jobs map[string]listedJob

	hits, misses atomic.Int64 // for tests
}

type listedJob struct {
	version string // listSelect's
	rec     *JobRecord
}

func newListedCache() *listedCache { return &listedCache{jobs: map[string]listedJob{}} }

// get returns a copy of the record kept of the job's row at version v (shared: the record
// itself), or nil. It takes the driver's bytes: finding them in the map copies nothing.
func (c *listedCache) get(uuid, v []byte, shared bool) *JobRecord {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	e, ok := c.jobs[string(uuid)]
	c.mu.Unlock()
	if !ok || e.version != string(v) {
		c.misses.Add(1)
		return nil
	}
	c.hits.Add(1)
	if shared {
		return e.rec
	}
	rec := *e.rec
	rec.Job = e.rec.Job.Clone()
	return &rec
}

// put keeps a copy of rec, made of rows at version v, unless v lacks a part (versioned).
func (c *listedCache) put(rec *JobRecord, v string) {
	if c == nil || !versioned(v) {
		return
	}
	keep := *rec
	keep.Job = rec.Job.Clone()
	c.mu.Lock()
	defer c.mu.Unlock()
	makeRoom(c.jobs, maxListed)
	c.jobs[rec.Job.UUID] = listedJob{version: v, rec: &keep}
}

// ownJobsOnly reports whether f lists only jobs of the user f.Visible is for: what he may see
// then needs no condition of its own, and leaving it out keeps Postgres from misjudging how
// many rows match (an OR it cannot see through) and sorting all his jobs for one page.
func ownJobsOnly(f JobFilter) bool {
	return f.Visible != nil && len(f.UserIDs) == 1 && f.UserIDs[0] == f.Visible.UserID && !f.AlsoOthersRunning
}

func statusStrings(ss []job.Status) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}

// DeleteJobRow removes a job with its events and logs for good (admin `real=true`).
func (s *Store) DeleteJobRow(ctx context.Context, uuid string) error {
	res, err := s.q.ExecContext(ctx, `DELETE FROM jobs WHERE uuid = $1`, uuid)
	return affectedOne(res, err, "delete job "+uuid)
}

// CountJobs counts jobs by state, for metrics and tests.
func (s *Store) CountJobs(ctx context.Context) (map[job.Status]int, error) {
	var rows []struct {
		Status string `db:"status"`
		N      int    `db:"n"`
	}
	if err := s.q.SelectContext(ctx, &rows, `SELECT status, count(*) AS n FROM jobs GROUP BY status`); err != nil {
		return nil, mapErr(err, "count jobs")
	}
	out := map[job.Status]int{}
	for _, r := range rows {
		out[job.Status(r.Status)] = r.N
	}
	return out, nil
}

// NameLimit bounds how many jobs of one name a user may have that have not ended: the fair-use
// limit of notebooks (jobs named JupyterHub-singleuser). Max 0: no limit.
type NameLimit struct {
	Name string
	Max  int
}

// LimitError is SubmitJobWithin's refusal: the user has Count jobs named Name not ended.
type LimitError struct {
	Name       string
	Count, Max int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%d jobs named %s not ended (limit %d)", e.Count, e.Name, e.Max)
}

// activeStatuses are the states of jobs that have not ended (job.Status.Ended).
var activeStatuses = func() []string {
	var out []string
	for _, st := range job.AllStatuses {
		if !st.Ended() {
			out = append(out, string(st))
		}
	}
	return out
}()

// SubmitJobWithin is SubmitJob under a NameLimit: a job of the limit's name is stored only when
// the user has fewer than lim.Max such jobs not ended, else a *LimitError comes back. Count and
// insert are one transaction under a lock per user and name, so two submissions racing (at
// two masters too) cannot both take the last place. A repeated submission (same idempotency
// key) answers its job, as SubmitJob does, whatever the count.
func (s *Store) SubmitJobWithin(ctx context.Context, j *job.Job, userID, projectID int64, message, key string, lim NameLimit) (string, error) {
	if lim.Max <= 0 || j.Name != lim.Name {
		return s.SubmitJob(ctx, j, userID, projectID, message, key)
	}
	var existing string
	err := s.WithTx(ctx, func(tx *Store) error {
		if _, err := tx.q.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('jobname:' || $1::text || ':' || $2))`, userID, lim.Name); err != nil {
			return mapErr(err, "lock jobs named "+lim.Name)
		}
		if key != "" {
			var err error
			existing, err = tx.jobOfKey(ctx, userID, key)
			if err == nil {
				return nil
			}
			if !errors.Is(err, ErrNotFound) {
				return err
			}
			existing = ""
		}
		var n int
		if err := tx.q.GetContext(ctx, &n, `SELECT count(*) FROM jobs WHERE user_id = $1 AND name = $2 AND status = ANY($3)`,
			userID, lim.Name, pq.Array(activeStatuses)); err != nil {
			return mapErr(err, "count jobs named "+lim.Name)
		}
		if n >= lim.Max {
			return &LimitError{Name: lim.Name, Count: n, Max: lim.Max}
		}
		var err error
		existing, err = tx.SubmitJob(ctx, j, userID, projectID, message, key)
		return err
	})
	return existing, err
}
