package store

import (
	"context"
	"sync/atomic"
	"time"
)

// wakeSender sends the scheduler's notification (ChannelScheduler) for the changes this master
// commits, apart from them and coalesced: at most one statement every wakeEvery, whatever the
// number of submits and job ends that asked for one meanwhile.
//
// The notification used to be part of each change's own statement. Postgres serializes the
// commits of transactions that notify (a cluster-wide lock held from before the commit until
// its WAL record is flushed), so with fsync on every submit and every job end committed alone,
// one disk flush after the other, while the other commits were grouped: in B8x (50 submits and
// 50 ends a second) about one backend at every moment waited for that lock ("Lock: object" in
// pg_stat_activity), holding a connection of the master's pool. Sent alone, a notification's
// transaction writes nothing else and its commit does not wait for the disk (notifyScheduler),
// and one master sends one at a time. A wake lost with a crash of this master between a commit
// and its notification costs the leader the time to its next pass (at most the scheduler
// interval), as a notification lost with the listening connection does.
type wakeSender struct {
	send  func(ctx context.Context) error
	every time.Duration
	kick  chan struct{} // one pending wake at most
	stop  chan struct{}
	done  chan struct{}
	// requested counts the wakes asked for; covered the count a finished send covered (every
	// wake asked for before the send began): equal once everything asked for was sent.
	requested, covered atomic.Int64
}

// wakeEvery is the least time between two notifications of one master: the leader wakes for
// the first and reads every change made since when its pass begins.
const wakeEvery = 10 * time.Millisecond

// wakeTimeout bounds one notification's statement.
const wakeTimeout = 10 * time.Second

func newWakeSender(send func(ctx context.Context) error, every time.Duration) *wakeSender {
	w := &wakeSender{send: send, every: every, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

// wake asks for a notification soon; it never blocks.
func (w *wakeSender) wake() {
	w.requested.Add(1)
	select {
	case w.kick <- struct{}{}:
	default: // one is pending already: it covers this one
	}
}

func (w *wakeSender) run() {
	defer close(w.done)
	for {
		select {
		case <-w.stop:
			return
		case <-w.kick:
		}
		asked := w.requested.Load()
		ctx, cancel := context.WithTimeout(context.Background(), wakeTimeout)
		// A failure is not retried: the database is away or the master overloaded, and the
		// leader's passes come at least every scheduler interval.
		_ = w.send(ctx)
		cancel()
		w.covered.Store(asked)
		select {
		case <-w.stop:
			return
		case <-time.After(w.every):
		}
	}
}

// close stops sending; wakes pending are dropped.
func (w *wakeSender) close() {
	close(w.stop)
	<-w.done
}

// WakeScheduler has the scheduler leader woken, on whichever master it runs, by a notification
// sent soon after (see wakeSender); inside a transaction, after it commits, so that the leader
// reads what it changed. It never blocks.
func (s *Store) WakeScheduler() {
	switch {
	case s.tx != nil && s.commitWake != nil:
		*s.commitWake = true
	case s.wakes != nil:
		s.wakes.wake()
	}
}
