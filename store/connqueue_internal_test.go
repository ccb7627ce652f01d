package store

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) set(d time.Duration) {
	c.mu.Lock()
	c.t = time.Unix(1_000_000, 0).Add(d)
	c.mu.Unlock()
}

// served is what a waiter got from the queue.
type served struct {
	k   int
	err error
}

// queueWithWaiters is a queue of one place, taken, and n waiters lined up one after the other,
// waiter k at k ms on clock. Each waiter served reports and gives its place back at once.
func queueWithWaiters(t *testing.T, clock *fakeClock, n int) (*connQueue, chan served) {
	t.Helper()
	q := newConnQueue(1)
	q.now = clock.now
	if err := q.enter(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := make(chan served, n)
	for k := range n {
		clock.set(time.Duration(k) * time.Millisecond)
		lineUp(t, q, context.Background(), k, out)
	}
	return q, out
}

// lineUp adds waiter k, with ctx, behind those waiting, and returns once it waits. When it is
// served it reports to out and gives its place back at once.
func lineUp(t *testing.T, q *connQueue, ctx context.Context, k int, out chan served) {
	t.Helper()
	n := q.waitingNow()
	go func() {
		err := q.enter(ctx)
		out <- served{k, err}
		if err == nil {
			q.leave()
		}
	}()
	for deadline := time.Now().Add(time.Minute); q.waitingNow() != n+1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waiter %d does not wait", k)
		}
	}
}

func collect(t *testing.T, out chan served, n int) (order []int, errs []error) {
	t.Helper()
	for range n {
		s := <-out
		order = append(order, s.k)
		errs = append(errs, s.err)
	}
	return order, errs
}

// While the waits are short the queue is first come, first served.
func TestQueueFirstComeFirstServedWhileWaitsAreShort(t *testing.T) {
	clock := &fakeClock{}
	q, out := queueWithWaiters(t, clock, 5)
	clock.set(LIFOAfter - time.Millisecond) // the oldest has waited just under the bound
	q.leave()
	order, errs := collect(t, out, 5)
	if want := []int{0, 1, 2, 3, 4}; !slices.Equal(order, want) {
		t.Errorf("served in the order %v, want %v", order, want)
	}
	for _, err := range errs {
		if err != nil {
			t.Errorf("a waiter got %v", err)
		}
	}
	if free := freeOnceLeft(q, 1); free != 1 || q.waits.Load() != 5 || q.waiting.Load() != 0 || q.shed[classPeople].Load() != 0 {
		t.Errorf("free %d, waits %d, waiting %d, shed %d; want 1, 5, 0, 0", free, q.waits.Load(), q.waiting.Load(), q.shed[classPeople].Load())
	}
}

// Once the oldest waiter has waited LIFOAfter, the newest is served first; when the waits are
// short again, the oldest is.
func TestQueueServesNewestFirstWhenOverloaded(t *testing.T) {
	clock := &fakeClock{}
	q, out := queueWithWaiters(t, clock, 5)
	clock.set(LIFOAfter + 4*time.Millisecond)
	q.leave()
	order, errs := collect(t, out, 5)
	if want := []int{4, 3, 2, 1, 0}; !slices.Equal(order, want) {
		t.Errorf("served in the order %v, want %v", order, want)
	}
	for _, err := range errs {
		if err != nil {
			t.Errorf("a waiter got %v", err)
		}
	}

	// The same queue, not overloaded any more: first come first served again.
	if err := q.enter(context.Background()); err != nil {
		t.Fatal(err)
	}
	out = make(chan served, 3)
	for k := range 3 {
		lineUp(t, q, context.Background(), k, out)
	}
	q.leave()
	if order, _ := collect(t, out, 3); !slices.Equal(order, []int{0, 1, 2}) {
		t.Errorf("after the overload, served in the order %v, want [0 1 2]", order)
	}
}

// freeOnceLeft is the queue's free places once they are want, or after a minute: a waiter
// reports that it was served before it gives its place back.
func freeOnceLeft(q *connQueue, want int) int {
	for deadline := time.Now().Add(time.Minute); q.freeNow() != want && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
	}
	return q.freeNow()
}

func (q *connQueue) freeNow() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.free
}

func (q *connQueue) waitingNow() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.lines[classPeople].n + q.lines[classRetried].n
}

// A waiter that has waited ShedAfter while the queue is overloaded is refused with
// ErrOverloaded (an ErrUnavailable: 503 with Retry-After), and counted; the others are served.
func TestQueueShedsWhoWaitedTooLong(t *testing.T) {
	clock := &fakeClock{}
	q, out := queueWithWaiters(t, clock, 4)
	clock.set(ShedAfter + 1*time.Millisecond) // waiters 0 and 1 have waited ShedAfter
	q.leave()
	got := map[int]error{}
	for range 4 {
		s := <-out
		got[s.k] = s.err
	}
	for k := range 2 {
		if !errors.Is(got[k], ErrOverloaded) || !errors.Is(got[k], ErrUnavailable) {
			t.Errorf("waiter %d (waited ShedAfter) got %v, want ErrOverloaded", k, got[k])
		}
	}
	for k := 2; k < 4; k++ {
		if got[k] != nil {
			t.Errorf("waiter %d got %v, want a place", k, got[k])
		}
	}
	if free := freeOnceLeft(q, 1); q.shed[classPeople].Load() != 2 || free != 1 {
		t.Errorf("shed %d, free %d; want 2, 1", q.shed[classPeople].Load(), free)
	}
}

// A waiter whose context ends leaves the line; a place handed to it as it gave up goes back:
// the queue loses no place either way.
func TestQueueWaiterGivingUpKeepsThePlaces(t *testing.T) {
	q := newConnQueue(2)
	for range 2 {
		if err := q.enter(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for range 50 {
		ctx, cancel := context.WithCancel(context.Background())
		wg.Go(func() {
			if err := q.enter(ctx); err == nil {
				q.leave()
			}
		})
		wg.Go(func() { q.leave(); _ = q.enter(context.Background()) }) // a place passed on as the waiter gives up
		cancel()
	}
	wg.Wait()
	q.leave()
	q.leave()
	if q.freeNow() != 2 || q.waitingNow() != 0 {
		t.Errorf("free %d, waiting %d after every request left; want 2, 0", q.freeNow(), q.waitingNow())
	}
}

// Slaves' calls (Retried) and everyone else's take turns when both wait, each class in its own
// order: people's few requests do not wait behind a slaves' burst, nor slaves' behind people's.
func TestQueueClassesTakeTurns(t *testing.T) {
	clock := &fakeClock{}
	q := newConnQueue(1)
	q.now = clock.now
	if err := q.enter(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := make(chan served, 6)
	slave := Retried(context.Background())
	for k := range 4 {
		lineUp(t, q, slave, k, out) // slaves 0-3
	}
	lineUp(t, q, context.Background(), 10, out) // people 10, 11
	lineUp(t, q, context.Background(), 11, out)
	q.leave()
	order, _ := collect(t, out, 6)
	if want := []int{10, 0, 11, 1, 2, 3}; !slices.Equal(order, want) {
		t.Errorf("served in the order %v, want %v (people 10, 11; slaves 0-3)", order, want)
	}
}

// In people's line the callers take turns: a caller with many requests waiting is served one
// at a time between the others', each caller's in the line's own order (first come first
// served, newest first when overloaded). Slaves' calls (Retried) stay one line whatever their
// callers.
func TestQueueCallersTakeTurns(t *testing.T) {
	clock := &fakeClock{}
	q := newConnQueue(1)
	q.now = clock.now
	if err := q.enter(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := make(chan served, 9)
	script, person := WithSender(context.Background(), "serial:17"), WithSender(context.Background(), "session:ab")
	// A script has 5 requests waiting, a person 2 behind them, a third caller 1.
	for k := range 5 {
		clock.set(time.Duration(k) * time.Millisecond)
		lineUp(t, q, script, k, out)
	}
	for k := 5; k < 7; k++ {
		clock.set(time.Duration(k) * time.Millisecond)
		lineUp(t, q, person, k, out)
	}
	clock.set(7 * time.Millisecond)
	lineUp(t, q, WithSender(context.Background(), "addr:10.0.0.9"), 7, out)
	q.leave()
	if order, _ := collect(t, out, 8); !slices.Equal(order, []int{0, 5, 7, 1, 6, 2, 3, 4}) {
		t.Errorf("served in the order %v, want the callers in turn: [0 5 7 1 6 2 3 4]", order)
	}

	// Overloaded: each caller's newest first, the callers still in turn.
	if err := q.enter(context.Background()); err != nil {
		t.Fatal(err)
	}
	for k := range 3 {
		clock.set(time.Second + time.Duration(k)*time.Millisecond)
		lineUp(t, q, script, k, out)
	}
	clock.set(time.Second + 3*time.Millisecond)
	lineUp(t, q, person, 3, out)
	clock.set(time.Second + LIFOAfter + 10*time.Millisecond)
	q.leave()
	if order, _ := collect(t, out, 4); !slices.Equal(order, []int{2, 3, 1, 0}) {
		t.Errorf("overloaded, served in the order %v, want [2 3 1 0]", order)
	}

	// Slaves' calls are one line: first come first served whoever sends them.
	if err := q.enter(context.Background()); err != nil {
		t.Fatal(err)
	}
	for k := range 4 {
		clock.set(2*time.Second + time.Duration(k)*time.Millisecond)
		lineUp(t, q, Retried(WithSender(context.Background(), []string{"a", "a", "b", "c"}[k])), k, out)
	}
	q.leave()
	if order, _ := collect(t, out, 4); !slices.Equal(order, []int{0, 1, 2, 3}) {
		t.Errorf("slaves' calls served in the order %v, want [0 1 2 3]", order)
	}
	if q.lines[classPeople].callers == nil || len(q.lines[classPeople].callers) != 0 || q.lines[classPeople].turns.Len() != 0 {
		t.Errorf("callers left in people's line: %v", q.lines[classPeople].callers)
	}
}
