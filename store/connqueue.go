package store

import (
	"context"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// connQueue hands a pool's connections out in the order they were asked for. database/sql
// gives a connection given back to a random one of the requests waiting for it
// (connRequestSet.TakeRandom, as of Go 1.26), so under load a request can be passed over again
// and again while later ones go through: in B8x's fill tens of thousands of requests waited
// for the 20 connections, and slave updates timed out at their 30-s deadline by the thousand.
// In front of the pool, with as many places as it has connections, the queue keeps the pool
// from ever having waiters, and a request waits for those ahead of it, not for its luck
// (golang.org/x/sync/semaphore serves its waiters first come, first served).
//
// Every statement outside a transaction holds a place while it runs, a transaction from its
// BEGIN to its end; a statement inside a transaction runs on the transaction's connection and
// takes none.
type connQueue struct {
	sem *semaphore.Weighted

	waits   atomic.Int64 // requests that found every place taken
	waited  atomic.Int64 // their waits, in nanoseconds
	waiting atomic.Int64 // now
}

func newConnQueue(places int) *connQueue {
	return &connQueue{sem: semaphore.NewWeighted(int64(places))}
}

// enter waits for a place (nil queue: none to wait for); ctx's error when it ends first.
func (q *connQueue) enter(ctx context.Context) error {
	if q == nil || q.sem.TryAcquire(1) { // TryAcquire fails while anyone waits: no overtaking
		return nil
	}
	t0 := time.Now()
	q.waiting.Add(1)
	err := q.sem.Acquire(ctx, 1)
	q.waiting.Add(-1)
	q.waits.Add(1)
	q.waited.Add(int64(time.Since(t0)))
	return err
}

// leave gives a place back.
func (q *connQueue) leave() {
	if q != nil {
		q.sem.Release(1)
	}
}

// ConnWaits are the waits for a connection of the store's pool: how many requests found every
// connection taken, their waits together, and how many wait now. (The pool's own sql.DBStats
// show none: the queue in front of it does the waiting.)
type ConnWaits struct {
	Count   int64
	Total   time.Duration
	Waiting int64
}

// ConnWaits reports the waits for the store's connections since it was opened.
func (s *Store) ConnWaits() ConnWaits {
	if s.conns == nil {
		return ConnWaits{}
	}
	return ConnWaits{Count: s.conns.waits.Load(), Total: time.Duration(s.conns.waited.Load()), Waiting: s.conns.waiting.Load()}
}
