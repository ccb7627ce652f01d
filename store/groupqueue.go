package store

import (
	"context"
	"sync"
	"time"
)

// groupQueue gathers the calls that arrive while the database is busy with earlier ones, so
// that they are written together, one statement and one commit for many (group commit, as
// databases do for their logs). The heartbeats (beatQueue), the submissions (submitQueue) and
// the jobs' state changes (changeQueue) go through one each.
//
// No call waits for a batch to fill: at most inFlight statements run at a time, and a call that
// finds one free is sent at once, with whatever else is waiting (up to max). Only when inFlight
// statements are running do calls queue, and then they leave together as soon as one of them
// ends. A quiet master sends each call alone; a busy one sends larger batches. A call whose
// caller gave up before its batch left is dropped; one given up on after may still be written.
type groupQueue[C queuedCall] struct {
	inFlight int
	max      int
	// timeout is a batch's own deadline, which no one caller's context sets since it carries
	// others.
	timeout time.Duration
	// key, when set, keeps calls of the same non-empty key out of one batch: the second waits
	// for the next.
	key func(C) string
	// write writes a batch and sets each call's outcome; the queue then tells the callers.
	write func(ctx context.Context, batch []C)

	mu      sync.Mutex
	waiting []C
	running int
}

// queuedCall is a call of a groupQueue: a pointer to a struct that embeds call.
type queuedCall interface{ base() *call }

// call is what a groupQueue keeps of every call.
type call struct {
	ctx    context.Context
	done   chan struct{}
	queued time.Time // when the call was queued
}

func newCall(ctx context.Context) call {
	return call{ctx: ctx, done: make(chan struct{}), queued: time.Now()}
}

func (c *call) base() *call { return c }

// do queues c and waits for its batch's outcome (true), or for its context (false). A call that
// finds a statement free writes its batch itself (lead), in its caller's goroutine.
func (q *groupQueue[C]) do(c C) bool {
	b := c.base()
	q.mu.Lock()
	q.waiting = append(q.waiting, c)
	lead := q.running < q.inFlight
	if lead {
		q.running++
	}
	q.mu.Unlock()
	if lead {
		q.lead(b)
	}
	select {
	case <-b.done:
		// Its share of the batch: one statement, as the request sees it, taking the time from
		// its queueing to its batch's outcome.
		addStatement(b.ctx, time.Since(b.queued))
		return true
	case <-b.ctx.Done():
		return false
	}
}

// lead writes batches of the waiting calls, in the goroutine of the call own, until own's is
// written (or own is given up on); the calls still waiting then are left to a goroutine of
// their own (send). A batch started by a goroutine made for it waited for a processor before it
// even took its calls, while the caller that made it was running already and only went on to
// wait: on B8x's busy 2-core master, the goroutines runnable in send were a quarter of all the
// time goroutines waited for a processor (an execution trace of 5 s: 14 of 57 s; 3 Dec). What
// the batch's callers wait for once it is written is the same either way.
func (q *groupQueue[C]) lead(own *call) {
	for {
		batch := q.take()
		if batch == nil {
			return
		}
		q.writeBatch(batch)
		select {
		case <-own.done:
		case <-own.ctx.Done():
		default:
			continue // own is still waiting: a later batch takes it
		}
		q.mu.Lock()
		more := len(q.waiting) > 0
		if !more {
			q.running--
		}
		q.mu.Unlock()
		if more {
			go q.send()
		}
		return
	}
}

// send writes batches of the waiting calls until none is left.
func (q *groupQueue[C]) send() {
	for {
		batch := q.take()
		if batch == nil {
			return
		}
		q.writeBatch(batch)
	}
}

// writeBatch writes a batch under its own deadline and tells its callers.
func (q *groupQueue[C]) writeBatch(batch []C) {
	ctx, cancel := context.WithTimeout(context.Background(), q.timeout)
	q.write(ctx, batch)
	cancel()
	for _, c := range batch {
		close(c.base().done)
	}
}

// take removes up to max waiting calls, oldest first, dropping those whose callers gave up;
// nil (and one statement fewer running) when none waits.
func (q *groupQueue[C]) take() []C {
	q.mu.Lock()
	defer q.mu.Unlock()
	var batch []C
	var seen map[string]bool
	if q.key != nil {
		seen = map[string]bool{}
	}
	left := q.waiting[:0]
	for _, c := range q.waiting {
		k := ""
		if q.key != nil {
			k = q.key(c)
		}
		switch {
		case c.base().ctx.Err() != nil:
		case len(batch) == q.max || (k != "" && seen[k]):
			left = append(left, c)
		default:
			if k != "" {
				seen[k] = true
			}
			batch = append(batch, c)
		}
	}
	clear(q.waiting[len(left):])
	q.waiting = left
	if len(batch) == 0 {
		q.running--
		return nil
	}
	return batch
}
