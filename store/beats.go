package store

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// beatQueue gathers the heartbeats that arrive while the database is busy with earlier ones,
// so that they are recorded together, one statement for many slaves (heartbeats): at 1,000
// heartbeats a second (5,000 slaves, bench/ B8x) one statement and one commit each took every
// connection of the pool and most of Postgres's CPU in per-statement and per-commit work.
//
// No heartbeat waits for a batch to fill: at most inFlight statements run at a time, and a
// heartbeat that finds one free is sent at once, with whatever else is waiting (up to max).
// Only when inFlight statements are running do heartbeats queue, and then they leave together
// as soon as one of them ends. A quiet master sends each heartbeat alone, as before; a busy one
// sends larger batches. (Group commit, as databases do for their logs.) The statements run on
// inFlight connections of their own (see OpenPool), never waiting behind the API's requests.
type beatQueue struct {
	s        *Store
	inFlight int
	max      int
	timeout  time.Duration

	mu      sync.Mutex
	waiting []*beatCall
	running int

	statements, recorded atomic.Int64 // for BeatStats
	observe              atomic.Pointer[BeatObserver]
}

// BeatObserver is told of each heartbeat statement: how many heartbeats it carried, how long
// the oldest of them had waited for it (a statement slot) and how long the statement took.
// It splits a slow heartbeat into the master's queue and the database's work.
type BeatObserver func(size int, waited, took time.Duration)

// beatCall is one heartbeat waiting for its batch.
type beatCall struct {
	ctx  context.Context
	beat Beat
	done chan struct{}
	view BeatView
	err  error
	// queued is when the heartbeat was queued, for BeatObserver.
	queued time.Time
}

// Heartbeat batching defaults: two statements in flight (one being written while the other's
// rows are read back), up to 200 heartbeats each (a second of B8x's fleet in ~5 statements),
// and a batch's own deadline, which no one caller's context sets since it carries others.
const (
	beatsInFlight = 2
	beatsMax      = 200
	beatsTimeout  = 30 * time.Second
)

func newBeatQueue(s *Store) *beatQueue {
	return &beatQueue{s: s, inFlight: beatsInFlight, max: beatsMax, timeout: beatsTimeout}
}

// record queues b and waits for its batch's outcome, or for ctx. A heartbeat given up on after
// its batch was sent may still be recorded: a heartbeat is soft state, which the slave's next
// one writes again.
func (q *beatQueue) record(ctx context.Context, b Beat) (BeatView, error) {
	c := &beatCall{ctx: ctx, beat: b, done: make(chan struct{}), queued: time.Now()}
	q.mu.Lock()
	q.waiting = append(q.waiting, c)
	if q.running < q.inFlight {
		q.running++
		go q.send()
	}
	q.mu.Unlock()
	select {
	case <-c.done:
		// Its share of the batch: one statement, as the request sees it, taking the time from
		// its queueing to its batch's outcome.
		addStatement(ctx, time.Since(c.queued))
		return c.view, c.err
	case <-ctx.Done():
		return BeatView{}, mapErr(ctx.Err(), "heartbeat of slave "+b.Slave)
	}
}

// send records batches of the waiting heartbeats until none is left.
func (q *beatQueue) send() {
	for {
		batch := q.take()
		if batch == nil {
			return
		}
		beats := make([]Beat, len(batch))
		for i, c := range batch {
			beats[i] = c.beat
		}
		ctx, cancel := context.WithTimeout(context.Background(), q.timeout)
		t0 := time.Now()
		views, errs, err := q.s.recordBeats(ctx, beats)
		cancel()
		if f := q.observe.Load(); f != nil {
			(*f)(len(batch), t0.Sub(batch[0].queued), time.Since(t0))
		}
		q.statements.Add(1)
		q.recorded.Add(int64(len(beats)))
		for i, c := range batch {
			if err != nil {
				c.err = err
			} else {
				c.view, c.err = views[i], errs[i]
			}
			close(c.done)
		}
	}
}

// take removes up to max waiting heartbeats, oldest first, dropping those whose callers gave
// up; nil (and one statement fewer running) when none waits. A slave's second heartbeat (a
// retry) stays for the next batch: in one statement the two would update the same row once,
// and one of them would find no row.
func (q *beatQueue) take() []*beatCall {
	q.mu.Lock()
	defer q.mu.Unlock()
	var batch []*beatCall
	seen := map[string]bool{}
	left := q.waiting[:0]
	for _, c := range q.waiting {
		switch {
		case c.ctx.Err() != nil:
		case len(batch) == q.max || seen[c.beat.Slave]:
			left = append(left, c)
		default:
			seen[c.beat.Slave] = true
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

// ObserveBeats has f told of every heartbeat statement from now on (nil: none). Safe to call
// while heartbeats are recorded.
func (s *Store) ObserveBeats(f BeatObserver) {
	if s.beats == nil {
		return
	}
	if f == nil {
		s.beats.observe.Store(nil)
		return
	}
	s.beats.observe.Store(&f)
}

// BeatStats counts the heartbeat statements sent since the store was opened and the heartbeats
// they carried (their ratio is the mean batch: 1 on a quiet master).
func (s *Store) BeatStats() (statements, heartbeats int64) {
	if s.beats == nil {
		return 0, 0
	}
	return s.beats.statements.Load(), s.beats.recorded.Load()
}
