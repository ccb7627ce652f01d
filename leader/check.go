package leader

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/opengpulab/gpulab/store"
)

// checker runs the periodic check of a memory the leader keeps between passes (the queue, the
// fleet) beside the passes, one at a time: a full read of every queued and live job (60,000 at
// B8x's size) or of every slave inside a pass made that pass seconds long, and the jobs
// submitted meanwhile waited for it. The read the check makes is handed to the first pass
// after it, which brings it up to date with the feed from the check's mark (taken before the
// read: what the read did not see was written by a transaction still running at the mark or
// begun after it) and compares.
type checker[T any] struct {
	every time.Duration
	// at is when the last check's read began, or the last full read of a pass.
	at time.Time
	// busy says a check runs; its outcome comes on out. gen tells the checks of this term's
	// memory from those begun before a reset.
	busy    bool
	out     chan checked[T]
	gen     int
	running sync.WaitGroup
}

// checked is a check's outcome: its read, and the mark taken before it.
type checked[T any] struct {
	gen     int
	mark    store.ChangeMark
	read    T
	started time.Time
	err     error
}

func newChecker[T any](every time.Duration) checker[T] {
	return checker[T]{every: every, out: make(chan checked[T], 1)}
}

// reset forgets when the last check was (a new term reads in full); a check still running is
// ignored when it ends.
func (c *checker[T]) reset() {
	c.at = time.Time{}
	c.gen++
}

// due says a check should begin: none runs, and the last began an interval (every) ago.
func (c *checker[T]) due() bool { return !c.busy && time.Since(c.at) >= c.every }

// start runs read beside the passes; its outcome comes to the pass that takes it.
func (c *checker[T]) start(ctx context.Context, st *store.Store, read func(context.Context) (T, error)) {
	c.busy = true
	c.running.Add(1)
	go func(gen int) {
		defer c.running.Done()
		o := checked[T]{gen: gen, started: time.Now()}
		if o.mark, o.err = st.TakeChangeMark(ctx); o.err == nil {
			o.read, o.err = read(ctx)
		}
		c.out <- o // room for one: one check at a time
	}(c.gen)
}

// take returns the outcome of a check that ended, if one did and it is of this term and did
// not fail (a failure is logged; the next check is one interval later).
func (c *checker[T]) take(log *slog.Logger, what string) *checked[T] {
	select {
	case o := <-c.out:
		c.busy = false
		switch {
		case o.gen != c.gen:
		case o.err != nil:
			log.Warn("the scheduler's check of its memory failed; the next in one check interval", "memory", what, "err", o.err)
			c.at = time.Now()
		default:
			return &o
		}
	default:
	}
	return nil
}

// feed is what a pass's read of the feed needs of the checks: the outcome of a check that
// ended (nil when none), and where the feed is read from (the memory's mark, and when a check
// ended, the union of the two: what a read after either could not see). It starts a check when
// one is due.
func (c *checker[T]) feed(ctx context.Context, st *store.Store, log *slog.Logger, what string, mark store.ChangeMark,
	read func(context.Context) (T, error)) (*checked[T], store.ChangeMark) {
	done := c.take(log, what)
	if done == nil {
		if c.due() {
			c.start(ctx, st, read)
		}
		return nil, mark
	}
	return done, mark.Union(done.mark)
}

// wait waits for a check still running (its context ended) to end: a term's goroutines end
// with it.
func (c *checker[T]) wait() { c.running.Wait() }

// wentBack reports whether mark, taken by this pass, is older than last, the mark the memory's
// last read went on from. A mark's Next (the id the next transaction will get) only ever moves
// forward, unless Postgres recovered from a crash: the ids of the transactions whose log it had
// not written when it stopped (an asynchronous commit, a write not yet flushed) are given out again, below
// marks taken before the crash, and a feed read from such a mark never shows what they write (a
// job submitted as Postgres came back stayed QUEUED, unseen by the leader until the next check,
// in the chaos test postgres-outage). The memory is then read again in full.
func wentBack(mark, last store.ChangeMark) bool { return mark.Before(last) }

// wentBackMessage is the warning logged when wentBack: not a bug, so not counted as drift.
const wentBackMessage = "the database's transaction ids went back (it recovered from a crash): the scheduler reads everything again"
