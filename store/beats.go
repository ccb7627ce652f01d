package store

import (
	"context"
	"sync/atomic"
	"time"
)

// beatQueue records heartbeats together (groupQueue), one statement for many slaves
// (heartbeats): at 1,000 heartbeats a second (5,000 slaves, bench/ B8x) one statement and one
// commit each took every connection of the pool and most of Postgres's CPU in per-statement and
// per-commit work. Its statements run on inFlight connections of their own (see OpenPool),
// never waiting behind the API's requests. A slave's second heartbeat (a retry) waits for the
// next batch: in one statement the two would update the same row once, and one of them would
// find no row.
type beatQueue struct {
	groupQueue[*beatCall]
	s *Store

	statements, recorded atomic.Int64 // for BeatStats
	observe              atomic.Pointer[BeatObserver]
}

// BeatObserver is told of each heartbeat statement: how many heartbeats it carried, how long
// the oldest of them had waited for it (a statement slot) and how long the statement took.
// It splits a slow heartbeat into the master's queue and the database's work.
type BeatObserver func(size int, waited, took time.Duration)

// beatCall is one heartbeat waiting for its batch.
type beatCall struct {
	call
	beat Beat
	view BeatView
	err  error
}

// Heartbeat batching defaults: two statements in flight (one being written while the other's
// rows are read back), up to 200 heartbeats each (a second of B8x's fleet in ~5 statements),
// and a batch's own deadline.
const (
	beatsInFlight = 2
	beatsMax      = 200
	beatsTimeout  = 30 * time.Second
)

func newBeatQueue(s *Store) *beatQueue {
	q := &beatQueue{s: s}
	q.groupQueue = groupQueue[*beatCall]{inFlight: beatsInFlight, max: beatsMax, timeout: beatsTimeout,
		key: func(c *beatCall) string { return c.beat.Slave }, write: q.recordBatch}
	return q
}

// record queues b and waits for its batch's outcome, or for ctx. A heartbeat given up on after
// its batch was sent may still be recorded: a heartbeat is soft state, which the slave's next
// one writes again.
func (q *beatQueue) record(ctx context.Context, b Beat) (BeatView, error) {
	c := &beatCall{call: newCall(ctx), beat: b}
	if !q.do(c) {
		return BeatView{}, mapErr(ctx.Err(), "heartbeat of slave "+b.Slave)
	}
	return c.view, c.err
}

// recordBatch records a batch of heartbeats in one statement.
func (q *beatQueue) recordBatch(ctx context.Context, batch []*beatCall) {
	beats := make([]Beat, len(batch))
	for i, c := range batch {
		beats[i] = c.beat
	}
	t0 := time.Now()
	views, errs, err := q.s.recordBeats(ctx, beats)
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
	}
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
