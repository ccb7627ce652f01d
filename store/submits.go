package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lib/pq"
)

// submitQueue stores submissions together (groupQueue): the submissions that arrive while
// earlier ones are being stored go in one INSERT of many jobs and their first events, one
// commit. At 16 clients (bench/ B5) a statement and a commit a job cost Postgres 0.85 ms of CPU
// a submission, most of it per statement and per commit rather than per row (on this 2-core
// machine pgbench stored 3,100–3,500 jobs a second one a statement, 11,800–13,100 eight a
// statement), and held the master at 1,100 submissions a second. A lone client's submission is
// stored alone, as before. One given up on after its batch left may still be stored, as a lone
// statement whose client went away may have committed (its Idempotency-Key, when it sent one,
// finds it). Jobs stored together have the same created_at (the transaction's time): they were
// submitted at the same time.
type submitQueue struct {
	groupQueue[*submitCall]
	s *Store

	statements, stored atomic.Int64 // for SubmitStats
}

// Submission batching defaults: two statements in flight (one being written while the next
// gathers), up to 100 jobs each (a request's JSON is at most maxJobBody; 100 are a few MB), and
// a batch's own deadline.
const (
	submitsInFlight = 2
	submitsMax      = 100
	submitsTimeout  = 30 * time.Second
)

func newSubmitQueue(s *Store) *submitQueue {
	q := &submitQueue{s: s}
	q.groupQueue = groupQueue[*submitCall]{inFlight: submitsInFlight, max: submitsMax, timeout: submitsTimeout, write: q.storeBatch}
	return q
}

// submitCall is one submission waiting for its batch.
type submitCall struct {
	call
	row     submitRow
	created time.Time
	// existing is the job an earlier submission with the same key made ("" when this one
	// stored its job).
	existing string
	err      error
}

// submitRow is what insertJob stores of a job.
type submitRow struct {
	uuid, name, description, env string
	request                      []byte
	userID                       int64
	email                        string
	projectID                    int64
	status                       string
	interactive, restartable     bool
	clusterID                    int // 0: none
	gpus, cpus, memoryGb         int
	minSecs, maxSecs             int64
	reservations                 []string
	initial                      string // restart_initial_uuid, "" for none
	restartCount                 int
	message, key                 string
}

// batchable says whether the row can go in insertJobs, which passes each job's reservations
// as one comma-separated text (the parser allows UUIDs only; anything else is stored alone).
func (r *submitRow) batchable() bool {
	for _, id := range r.reservations {
		if id == "" || strings.Contains(id, ",") {
			return false
		}
	}
	return true
}

// submit queues a submission and waits for its batch's outcome, or for ctx.
func (q *submitQueue) submit(ctx context.Context, row submitRow) (created time.Time, existing string, err error) {
	c := &submitCall{call: newCall(ctx), row: row}
	if !q.do(c) {
		return time.Time{}, "", mapErr(ctx.Err(), "create job "+row.uuid)
	}
	return c.created, c.existing, c.err
}

// storeBatch stores a batch in one statement and sets each call's outcome. When the statement
// fails on what a job holds (a constraint, a value), nothing of it was stored and each job is
// stored alone, so that one bad job fails alone; any other failure is every job's.
func (q *submitQueue) storeBatch(ctx context.Context, batch []*submitCall) {
	s := q.s
	if len(batch) == 1 {
		c := batch[0]
		c.created, c.existing, c.err = s.insertOne(ctx, &c.row)
		q.count(1, c.err == nil && c.existing == "")
		return
	}
	created, err := s.insertMany(ctx, batch)
	var pqErr *pq.Error
	if errors.As(err, &pqErr) && (strings.HasPrefix(string(pqErr.Code), "22") || strings.HasPrefix(string(pqErr.Code), "23")) {
		for _, c := range batch {
			c.created, c.existing, c.err = s.insertOne(ctx, &c.row)
			q.count(1, c.err == nil && c.existing == "")
		}
		return
	}
	q.statements.Add(1)
	for _, c := range batch {
		if err != nil {
			c.err = mapErr(err, "create job "+c.row.uuid)
			continue
		}
		if t, ok := created[strings.ToLower(c.row.uuid)]; ok {
			c.created = t
			q.stored.Add(1)
			continue
		}
		if c.row.key == "" {
			c.err = fmt.Errorf("create job %s: not stored by its batch's statement", c.row.uuid)
			continue
		}
		// Not stored: a job of the same user and key exists (made before, or by this batch).
		c.existing, c.err = s.jobOfKey(ctx, c.row.userID, c.row.key)
	}
	if len(created) > 0 {
		s.WakeScheduler()
	}
}

func (q *submitQueue) count(statements int64, stored bool) {
	q.statements.Add(statements)
	if stored {
		q.stored.Add(1)
	}
}

// insertOne stores one job with insertJob: its creation time, or the job an earlier submission
// with the same key made.
func (s *Store) insertOne(ctx context.Context, r *submitRow) (time.Time, string, error) {
	var created time.Time
	var clusterID sql.NullInt64
	if r.clusterID > 0 {
		clusterID = sql.NullInt64{Int64: int64(r.clusterID), Valid: true}
	}
	initial := sql.NullString{String: r.initial, Valid: r.initial != ""}
	reservations := r.reservations
	if reservations == nil {
		reservations = []string{}
	}
	err := s.q.GetContext(ctx, &created, insertJob, r.uuid, r.name, r.description, r.env, r.request,
		r.userID, r.email, r.projectID, r.status, r.interactive, r.restartable,
		clusterID, r.gpus, r.cpus, r.memoryGb, r.minSecs, r.maxSecs,
		pq.Array(reservations), initial, r.restartCount, r.message, r.key)
	if errors.Is(err, sql.ErrNoRows) && r.key != "" {
		existing, err := s.jobOfKey(ctx, r.userID, r.key)
		return time.Time{}, existing, err
	}
	if err != nil {
		return time.Time{}, "", mapErr(err, "create job "+r.uuid)
	}
	s.WakeScheduler() // on whichever master leads: a new job to plan
	return created, "", nil
}

// jobOfKey is the job a user's submission with Idempotency-Key key made (ErrNotFound: none).
func (s *Store) jobOfKey(ctx context.Context, userID int64, key string) (string, error) {
	var id string
	err := s.q.GetContext(ctx, &id, `SELECT uuid::text FROM jobs WHERE user_id = $1 AND submit_key = $2`, userID, key)
	return id, mapErr(err, "find the job of submission "+key)
}

// insertJobs is insertJob for many jobs, each column an array (unnest): one statement and one
// commit. Each job's reservations are one comma-separated text (submitRow.batchable).
const insertJobs = `WITH i AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[], $8::bigint[],
        $9::text[], $10::bool[], $11::bool[], $12::int[], $13::int[], $14::int[], $15::int[], $16::bigint[], $17::bigint[],
        $18::text[], $19::text[], $20::int[], $21::text[], $22::text[])
    AS i(uuid, name, description, deployment_environment, request, user_id, user_email, project_id, status, interactive,
        restartable, cluster_id, gpus, cpus, cpu_memory_gb, min_duration_s, max_duration_s, reservation_ids,
        restart_initial_uuid, restart_count, message, submit_key)
), j AS (
    INSERT INTO jobs (uuid, name, description, deployment_environment, request, user_id, user_email,
        project_id, status, event_times, interactive, restartable, cluster_id, gpus, cpus, cpu_memory_gb,
        min_duration_s, max_duration_s, reservation_ids, restart_initial_uuid, restart_count, submit_key)
    SELECT uuid, name, description, deployment_environment, request::jsonb, user_id, user_email, project_id, status,
        jsonb_build_object(status, now()), interactive, restartable, NULLIF(cluster_id, 0), gpus, cpus, cpu_memory_gb,
        min_duration_s, max_duration_s, string_to_array(reservation_ids, ','), NULLIF(restart_initial_uuid, '')::uuid,
        restart_count, NULLIF(submit_key, '')
    FROM i
    ON CONFLICT (user_id, submit_key) WHERE submit_key IS NOT NULL DO NOTHING
    RETURNING uuid, status, created_at
), e AS (
    INSERT INTO job_events (job_uuid, kind, to_status, actor, message)
    SELECT j.uuid, '` + EventStatus + `', j.status, 'owner', i.message FROM j JOIN i ON i.uuid = j.uuid
)
SELECT uuid::text AS uuid, created_at FROM j`

// insertMany stores a batch with insertJobs: the creation time of each job it stored, by uuid
// (a job left out had its key used before).
func (s *Store) insertMany(ctx context.Context, batch []*submitCall) (map[string]time.Time, error) {
	n := len(batch)
	var (
		uuids, names, descs, envs, reqs, emails, statuses, reservations, initials, messages, keys = make([]string, n),
			make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n),
			make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		users, projects, minSecs, maxSecs    = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		clusters, gpus, cpus, mems, restarts = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		interactive, restartable             = make([]bool, n), make([]bool, n)
	)
	for i, c := range batch {
		r := &c.row
		uuids[i], names[i], descs[i], envs[i], reqs[i] = r.uuid, r.name, r.description, r.env, string(r.request)
		users[i], emails[i], projects[i], statuses[i] = r.userID, r.email, r.projectID, r.status
		interactive[i], restartable[i] = r.interactive, r.restartable
		clusters[i], gpus[i], cpus[i], mems[i] = int64(r.clusterID), int64(r.gpus), int64(r.cpus), int64(r.memoryGb)
		minSecs[i], maxSecs[i] = r.minSecs, r.maxSecs
		reservations[i], initials[i], restarts[i] = strings.Join(r.reservations, ","), r.initial, int64(r.restartCount)
		messages[i], keys[i] = r.message, r.key
	}
	var rows []struct {
		UUID    string    `db:"uuid"`
		Created time.Time `db:"created_at"`
	}
	err := s.q.SelectContext(ctx, &rows, insertJobs, pq.Array(uuids), pq.Array(names), pq.Array(descs), pq.Array(envs),
		pq.Array(reqs), pq.Array(users), pq.Array(emails), pq.Array(projects), pq.Array(statuses), pq.Array(interactive),
		pq.Array(restartable), pq.Array(clusters), pq.Array(gpus), pq.Array(cpus), pq.Array(mems), pq.Array(minSecs),
		pq.Array(maxSecs), pq.Array(reservations), pq.Array(initials), pq.Array(restarts), pq.Array(messages), pq.Array(keys))
	if err != nil {
		return nil, err
	}
	out := make(map[string]time.Time, len(rows))
	for _, r := range rows {
		out[strings.ToLower(r.UUID)] = r.Created
	}
	return out, nil
}

// SubmitStats counts the submission statements sent by the queue since the store was opened
// and the jobs they stored (their ratio is the mean batch: 1 on a quiet master).
func (s *Store) SubmitStats() (statements, jobs int64) {
	if s.submits == nil {
		return 0, 0
	}
	return s.submits.statements.Load(), s.submits.stored.Load()
}
