package store

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lib/pq"
)

// changeQueue makes state changes together (groupQueue): the changes that arrive while earlier
// ones are being written go in one changeJobs statement, one commit. A slave reports every job
// it is given twice (STARTING, RUNNING) and its end once, each a conditional change of a job's
// row with its event: in B1x's burst 44,000 reports arrive within seconds, while the leader
// commits the burst's assignments, and one statement and one commit a report (each waiting
// for the WAL's flush) took Postgres's CPU and the requests' pool from the assignments. A lone
// change is written alone, as before. Its statements run on connections of their own (see
// OpenPool), never waiting behind the requests' reads for one. A change whose caller gave up after its batch left may
// still be made, as a lone statement whose client went away may have committed; a slave's
// retry of it is then a success (a change already made).
type changeQueue struct {
	groupQueue[*changeCall]
	s *Store

	statements, changes atomic.Int64 // for ChangeStats
}

// Change batching defaults: two statements in flight (one being written while the next
// gathers), up to 100 changes each, and a batch's own deadline.
const (
	changesInFlight = 2
	changesMax      = 100
	changesTimeout  = 30 * time.Second
)

func newChangeQueue(s *Store) *changeQueue {
	q := &changeQueue{s: s}
	// A job changed twice at once (a slave's retry beside its first try, a cancel beside a
	// report) waits for the next batch: one statement would find the job once for both.
	q.groupQueue = groupQueue[*changeCall]{inFlight: changesInFlight, max: changesMax, timeout: changesTimeout,
		key: func(c *changeCall) string { return strings.ToLower(c.id) }, write: q.writeBatch}
	return q
}

// changeCall is one change waiting for its batch.
type changeCall struct {
	call
	id     string
	change Change
	place  JobPlace
	err    error
}

// change queues change c of job id and waits for its batch's outcome, or for ctx.
func (q *changeQueue) change(ctx context.Context, id string, c Change) (JobPlace, error) {
	call := &changeCall{call: newCall(ctx), id: id, change: c}
	if !q.do(call) {
		return JobPlace{}, mapErr(ctx.Err(), "change job "+id)
	}
	return call.place, call.err
}

// writeBatch makes a batch's changes in one statement and sets each call's outcome. When the
// statement fails on what a change holds (a value Postgres refuses, such as a job id that is
// not a uuid) or on a deadlock with another transaction, nothing of it was made and each
// change is made alone, so that one bad change fails alone; any other failure is every
// change's.
func (q *changeQueue) writeBatch(ctx context.Context, batch []*changeCall) {
	ids, cs := make([]string, len(batch)), make([]Change, len(batch))
	for i, c := range batch {
		ids[i], cs[i] = c.id, c.change
	}
	outcomes, err := q.s.makeChanges(ctx, ids, cs)
	if err != nil && len(batch) > 1 && retryAlone(err) {
		for _, c := range batch {
			c.place, c.err = q.s.changeOne(ctx, c.id, c.change)
			q.count(1, 1)
		}
		return
	}
	q.count(1, len(batch))
	for i, c := range batch {
		if err != nil {
			c.err = mapErr(err, "change job "+c.id)
			continue
		}
		c.place, c.err = outcomes[i].place, outcomes[i].err
	}
}

// retryAlone says whether a batch's statement that failed with err should be retried a change
// at a time: a data or integrity error (one change's values) or a transaction rolled back
// (a deadlock or a serialization failure with another transaction).
func retryAlone(err error) bool {
	var pqErr *pq.Error
	if !errors.As(err, &pqErr) {
		return false
	}
	class := string(pqErr.Code)[:2]
	return class == "22" || class == "23" || class == "40"
}

func (q *changeQueue) count(statements, changes int) {
	q.statements.Add(int64(statements))
	q.changes.Add(int64(changes))
}

// ChangeStats counts the statements of state changes sent through the queue since the store
// was opened and the changes they carried (their ratio is the mean batch: 1 on a quiet master).
func (s *Store) ChangeStats() (statements, changes int64) {
	if s.changes == nil {
		return 0, 0
	}
	return s.changes.statements.Load(), s.changes.changes.Load()
}
