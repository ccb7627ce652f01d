package store

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds of the connection queue (connQueue). A statement takes a few milliseconds, so a wait
// of LIFOAfter means hundreds of requests ahead: the queue is overloaded, not busy. Chosen in
// B8x's runs (sixteenth session, bench/RESULTS.md): 200 ms and 5 s refused 3 % of the soak's
// submits; 500 ms and 15 s 0.3 %, with the fill's burst as short.
const (
	// LIFOAfter: once a class's oldest waiter has waited this long, its newest is served first.
	LIFOAfter = 500 * time.Millisecond
	// ShedAfter: a request that has waited this long while the queue is overloaded is
	// refused (ErrOverloaded: 503 with Retry-After) rather than left to wait out its deadline.
	ShedAfter = 15 * time.Second
)

// ErrOverloaded is the error of a request the connection queue refused: it waited ShedAfter
// while newer requests were served first. It is an ErrUnavailable, so callers answer 503 with
// Retry-After.
var ErrOverloaded = fmt.Errorf("%w: overloaded, no connection after waiting %s", ErrUnavailable, ShedAfter)

// connQueue hands a pool's connections out, first come first served while the waits are
// short, newest first when they are not ("adaptive LIFO" with CoDel-like shedding, as large
// RPC servers queue their requests), and takes turns between two classes of requests: those of
// slaves, which retry by themselves (Retried), and everyone else's, people's above all.
//
// database/sql alone gives a connection given back to a random one of the requests waiting
// for it (connRequestSet.TakeRandom, as of Go 1.26), so under load a request can be passed
// over again and again. In front of the pool, with as many places as it has connections, the
// queue keeps the pool from ever having waiters and decides the order itself. First come
// first served alone made overload worse (B8x's fill, fifteenth session: 147,197 slave updates
// timed out against 43,217 with the random order): once the wait passes the callers' deadline
// every request waits all of it, and a request of several statements queues once for each.
// So when a class's oldest waiter has waited LIFOAfter, its newest is served first: it has
// its deadline ahead of it and its later statements get through too; and a waiter that has
// waited ShedAfter is refused at once, so that its caller backs off instead of holding a
// request open until its deadline. A class goes back to first come first served as soon as
// its oldest waiter is younger than LIFOAfter. Newest-first leaves the oldest waiting while
// the overload lasts: with 5,000 slaves' calls in the same line, people's requests were among
// them (B8x, sixteenth session: 27 submits and 33 reads of the soak's ~16,000 refused after
// 15 s), hence the two classes, served in turn whenever both wait: the few requests of people
// wait only for each other and for one slave call each, and slaves keep at least half of the
// connections however many requests people send. (golang.org/x/sync/semaphore, used before,
// serves only in arrival order; no maintained package offers this policy.)
//
// Every statement outside a transaction holds a place while it runs, a transaction from its
// BEGIN to its end; a statement inside a transaction runs on the transaction's connection and
// takes none.
type connQueue struct {
	lifoAfter, shedAfter time.Duration
	now                  func() time.Time

	mu      sync.Mutex
	free    int
	waiters [2]list.List // of *connWaiter, oldest first: [classPeople], [classRetried]
	turn    int          // the class served next when both wait

	waits   atomic.Int64    // requests that found every place taken
	waited  atomic.Int64    // their waits, in nanoseconds
	waiting atomic.Int64    // now
	shed    [2]atomic.Int64 // requests refused with ErrOverloaded, by class
}

// The classes of requests (Retried).
const (
	classPeople  = 0
	classRetried = 1
)

// retriedKey marks a context as Retried.
type retriedKey struct{}

// Retried marks ctx as a request whose caller retries by itself, with back-off (a slave's
// protocol call): under load its statements take turns with everyone else's instead of
// waiting among them (see connQueue).
func Retried(ctx context.Context) context.Context {
	return context.WithValue(ctx, retriedKey{}, true)
}

// IsRetried says whether ctx was marked Retried.
func IsRetried(ctx context.Context) bool { return ctx.Value(retriedKey{}) != nil }

func classOf(ctx context.Context) int {
	if IsRetried(ctx) {
		return classRetried
	}
	return classPeople
}

// connWaiter is one request waiting for a place; ready gets nil (a place) or ErrOverloaded.
type connWaiter struct {
	since time.Time
	ready chan error
}

func newConnQueue(places int) *connQueue {
	return &connQueue{free: places, lifoAfter: LIFOAfter, shedAfter: ShedAfter, now: time.Now}
}

// enter waits for a place (nil queue: none to wait for): nil, ErrOverloaded, or ctx's error
// when it ends first.
func (q *connQueue) enter(ctx context.Context) error {
	if q == nil {
		return nil
	}
	q.mu.Lock()
	if q.free > 0 && q.waiters[classPeople].Len() == 0 && q.waiters[classRetried].Len() == 0 { // nobody overtaken
		q.free--
		q.mu.Unlock()
		return nil
	}
	w := &connWaiter{since: q.now(), ready: make(chan error, 1)}
	line := &q.waiters[classOf(ctx)]
	e := line.PushBack(w)
	q.mu.Unlock()
	q.waiting.Add(1)
	defer func() {
		q.waiting.Add(-1)
		q.waits.Add(1)
		q.waited.Add(int64(q.now().Sub(w.since)))
	}()
	select {
	case err := <-w.ready:
		return err
	case <-ctx.Done():
		q.mu.Lock()
		select {
		case err := <-w.ready: // served just now
			q.mu.Unlock()
			if err == nil {
				q.leave()
			}
		default:
			line.Remove(e)
			q.mu.Unlock()
		}
		return ctx.Err()
	}
}

// leave gives a place back: to a waiter, if any is left after shedding, else to the free ones.
func (q *connQueue) leave() {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	for c := range q.waiters {
		q.shedOld(c, now)
	}
	c := q.turn
	if q.waiters[c].Len() == 0 {
		c = 1 - c
	}
	line := &q.waiters[c]
	e := line.Front()
	if e == nil {
		q.free++
		return
	}
	q.turn = 1 - c
	if now.Sub(e.Value.(*connWaiter).since) >= q.lifoAfter {
		e = line.Back() // overloaded: the newest first
	}
	line.Remove(e)
	e.Value.(*connWaiter).ready <- nil
}

// shedOld refuses the waiters of class c that have waited ShedAfter (the oldest are in front).
func (q *connQueue) shedOld(c int, now time.Time) {
	line := &q.waiters[c]
	for e := line.Front(); e != nil && now.Sub(e.Value.(*connWaiter).since) >= q.shedAfter; e = line.Front() {
		line.Remove(e)
		e.Value.(*connWaiter).ready <- ErrOverloaded
		q.shed[c].Add(1)
	}
}

// ConnWaits are the waits for a connection of the store's pool: how many requests found every
// connection taken, their waits together, how many wait now, and how many were refused
// (ErrOverloaded), slaves' own calls (Retried) and people's apart. (The pool's own sql.DBStats
// show no waits: the queue in front of it does the waiting.)
type ConnWaits struct {
	Count      int64
	Total      time.Duration
	Waiting    int64
	ShedSlaves int64
	ShedPeople int64
}

// ConnWaits reports the waits for the store's connections since it was opened.
func (s *Store) ConnWaits() ConnWaits {
	if s.conns == nil {
		return ConnWaits{}
	}
	return ConnWaits{Count: s.conns.waits.Load(), Total: time.Duration(s.conns.waited.Load()), Waiting: s.conns.waiting.Load(),
		ShedSlaves: s.conns.shed[classRetried].Load(), ShedPeople: s.conns.shed[classPeople].Load()}
}
