package store

import (
	"context"
	"database/sql"
	"time"

	"github.com/jmoiron/sqlx"
)

// HeartbeatCommitMode runs a heartbeat's statement in a transaction of its own that it rolls
// back, and returns the synchronous_commit its commit would have had.
func (s *Store) HeartbeatCommitMode(ctx context.Context, b Beat) (string, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return "", err
	}
	defer func() { _ = tx.Rollback() }()
	var i int
	var online bool
	var jobs, releases []byte
	var refused string
	if err := tx.QueryRowContext(ctx, heartbeats, heartbeatArgs([]Beat{b}, s.leases)...).Scan(&i, &online, &jobs, &releases, &refused); err != nil && err != sql.ErrNoRows {
		return "", err
	}
	var mode string
	err = tx.QueryRowContext(ctx, `SHOW synchronous_commit`).Scan(&mode)
	return mode, err
}

// BeatPlans sums, over the heartbeats' own connections, the plans Postgres made for the
// heartbeats statement: kept ones (generic) and ones made for one execution (custom).
func (s *Store) BeatPlans(ctx context.Context) (generic, custom int64, err error) {
	return plansOf(ctx, s.beats.s.db, beatsInFlight, heartbeats)
}

// ChangePlans is BeatPlans for the state changes' statement of several changes.
func (s *Store) ChangePlans(ctx context.Context) (generic, custom int64, err error) {
	return plansOf(ctx, s.changes.s.db, changesInFlight, changeJobs)
}

// plansOf sums the plans made for statement over every connection of pool db (of conns).
func plansOf(ctx context.Context, db *sqlx.DB, conns int, statement string) (generic, custom int64, err error) {
	held := make([]*sql.Conn, 0, conns)
	defer func() {
		for _, c := range held {
			_ = c.Close()
		}
	}()
	for range conns { // every connection of the pool, each held while the next is read
		c, err := db.Conn(ctx)
		if err != nil {
			return 0, 0, err
		}
		held = append(held, c)
		var g, cu int64
		if err := c.QueryRowContext(ctx, `SELECT COALESCE(sum(generic_plans), 0), COALESCE(sum(custom_plans), 0)
FROM pg_prepared_statements WHERE statement = $1`, statement).Scan(&g, &cu); err != nil {
			return 0, 0, err
		}
		generic, custom = generic+g, custom+cu
	}
	return generic, custom, nil
}

// HoldBeats keeps the heartbeat queue from sending anything: heartbeats wait until release,
// which sends them as a busy master would, together. waiting says how many wait.
func (s *Store) HoldBeats() (waiting func() int, release func()) { return s.beats.hold() }

// ListedStats counts the listed jobs the two-step list found kept (hits) and read whole.
func (s *Store) ListedStats() (hits, misses int64) {
	return s.listed.hits.Load(), s.listed.misses.Load()
}

// SetQueueBounds sets the bounds of the store's connection queue (LIFOAfter, ShedAfter), for
// tests whose waiters line up slower than a loaded machine would keep under LIFOAfter.
func (s *Store) SetQueueBounds(lifoAfter, shedAfter time.Duration) {
	s.conns.mu.Lock()
	s.conns.lifoAfter, s.conns.shedAfter = lifoAfter, shedAfter
	s.conns.mu.Unlock()
}

// IdentityStats counts the callers' identities served from the kept ones (hits) and read.
func (s *Store) IdentityStats() (hits, misses int64) {
	return s.identities.hits.Load(), s.identities.misses.Load()
}

// JobsReadAlone counts the jobs GetUserAndJob read without their owner's and project's rows.
func (s *Store) JobsReadAlone() int64 { return s.names.fast.Load() }

// WaitWakes waits until every scheduler wake asked for so far was sent (wakeSender).
func (s *Store) WaitWakes() {
	for s.wakes.covered.Load() < s.wakes.requested.Load() {
		time.Sleep(time.Millisecond)
	}
}

// WakesAsked is how many scheduler wakes were asked for so far.
func (s *Store) WakesAsked() int64 { return s.wakes.requested.Load() }

// HoldSubmits is HoldBeats for the submission queue.
func (s *Store) HoldSubmits() (waiting func() int, release func()) { return s.submits.hold() }

// HoldChanges is HoldBeats for the state changes' queue.
func (s *Store) HoldChanges() (waiting func() int, release func()) { return s.changes.hold() }

// hold keeps the queue from sending anything until release, which sends what waits as a busy
// master would, together; waiting says how many wait.
func (q *groupQueue[C]) hold() (waiting func() int, release func()) {
	q.mu.Lock()
	held := q.inFlight - q.running
	q.running = q.inFlight
	q.mu.Unlock()
	waiting = func() int {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.waiting)
	}
	release = func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		q.running -= held
		for q.running < q.inFlight && len(q.waiting) > 0 {
			q.running++
			go q.send()
		}
	}
	return waiting, release
}

// LostSlavesStatement is ListLostJobs's first statement, for a test of its plan.
const LostSlavesStatement = lostSlaves

// TextsArg is a text[] argument written as the hottest statements write theirs (texts).
func TextsArg(a []string) any { return texts[string](a) }
