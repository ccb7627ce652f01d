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
// Within people's line the callers take turns too (WithSender: a client certificate, a
// session, an address): one user's script sending requests on many connections waits behind
// its own requests, not in front of everyone else's (fair queuing, one request of each caller
// in turn; within a caller, the rule above). Slaves' calls stay one line: 5,000 slaves with a
// call each taking turns would be first come first served again, what the rule above undoes.
//
// Every statement outside a transaction holds a place while it runs, a transaction from its
// BEGIN to its end; a statement inside a transaction runs on the transaction's connection and
// takes none.
type connQueue struct {
	lifoAfter, shedAfter time.Duration
	now                  func() time.Time

	mu    sync.Mutex
	free  int
	lines [2]line // [classPeople], [classRetried]
	turn  int     // the class served next when both wait

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

// senderKey marks a context with who sent the request (WithSender).
type senderKey struct{}

// WithSender names who sent the request ctx belongs to (a client certificate, a session, an
// address): in people's line for a connection, senders take turns (connQueue). Requests with
// no sender named are one sender together.
func WithSender(ctx context.Context, sender string) context.Context {
	return context.WithValue(ctx, senderKey{}, sender)
}

// SenderOf is the sender WithSender named ("" when none).
func SenderOf(ctx context.Context) string {
	c, _ := ctx.Value(senderKey{}).(string)
	return c
}

// connWaiter is one request waiting for a place; ready gets nil (a place) or ErrOverloaded.
type connWaiter struct {
	since time.Time
	ready chan error
	of    *callerLine
}

// line is one class's waiters: each caller's oldest first, the callers with waiters in the
// order they are served in turn.
type line struct {
	n       int
	callers map[string]*callerLine
	turns   list.List // of *callerLine with waiters, the next to serve in front
}

// callerLine is one caller's waiters in a line.
type callerLine struct {
	key     string
	waiters list.List // of *connWaiter, oldest first
	turn    *list.Element
}

// push lines w up behind caller's other waiters.
func (l *line) push(caller string, w *connWaiter) *list.Element {
	if l.callers == nil {
		l.callers = map[string]*callerLine{}
	}
	c := l.callers[caller]
	if c == nil {
		c = &callerLine{key: caller}
		l.callers[caller] = c
	}
	if c.turn == nil {
		c.turn = l.turns.PushBack(c)
	}
	w.of = c
	l.n++
	return c.waiters.PushBack(w)
}

// remove takes a waiter out of the line.
func (l *line) remove(e *list.Element) {
	c := e.Value.(*connWaiter).of
	c.waiters.Remove(e)
	l.n--
	if c.waiters.Len() == 0 {
		l.turns.Remove(c.turn)
		delete(l.callers, c.key)
	}
}

// next is the waiter served next: the caller whose turn it is, its oldest waiter or, once that
// one has waited lifoAfter, its newest. The caller's turn passes to the next one.
func (l *line) next(now time.Time, lifoAfter time.Duration) *list.Element {
	t := l.turns.Front()
	if t == nil {
		return nil
	}
	c := t.Value.(*callerLine)
	l.turns.MoveToBack(t)
	e := c.waiters.Front()
	if now.Sub(e.Value.(*connWaiter).since) >= lifoAfter {
		e = c.waiters.Back() // overloaded: the newest first
	}
	return e
}

// expired lists the waiters that have waited shedAfter, every caller's.
func (l *line) expired(now time.Time, shedAfter time.Duration) []*list.Element {
	var out []*list.Element
	for t := l.turns.Front(); t != nil; t = t.Next() {
		c := t.Value.(*callerLine)
		for e := c.waiters.Front(); e != nil && now.Sub(e.Value.(*connWaiter).since) >= shedAfter; e = e.Next() {
			out = append(out, e)
		}
	}
	return out
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
	if q.free > 0 && q.lines[classPeople].n == 0 && q.lines[classRetried].n == 0 { // nobody overtaken
		q.free--
		q.mu.Unlock()
		return nil
	}
	w := &connWaiter{since: q.now(), ready: make(chan error, 1)}
	c := classOf(ctx)
	caller := ""
	if c == classPeople {
		caller = SenderOf(ctx)
	}
	line := &q.lines[c]
	e := line.push(caller, w)
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
			line.remove(e)
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
	for c := range q.lines {
		q.shedOld(c, now)
	}
	c := q.turn
	if q.lines[c].n == 0 {
		c = 1 - c
	}
	line := &q.lines[c]
	e := line.next(now, q.lifoAfter)
	if e == nil {
		q.free++
		return
	}
	q.turn = 1 - c
	line.remove(e)
	e.Value.(*connWaiter).ready <- nil
}

// shedOld refuses the waiters of class c that have waited ShedAfter.
func (q *connQueue) shedOld(c int, now time.Time) {
	line := &q.lines[c]
	for _, e := range line.expired(now, q.shedAfter) {
		line.remove(e)
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
