package store_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/store"
)

// TestConnectionsFirstComeFirstServed: with every connection of the pool taken, requests get
// one in the order they asked for it (database/sql alone hands a freed connection to a random
// waiter), and the waits are counted. (The queue's bounds are set out of reach: on a loaded
// machine lining the waiters up can take longer than LIFOAfter; connqueue_internal_test.go
// checks the bounds.)
func TestConnectionsFirstComeFirstServed(t *testing.T) {
	st := newStore(t)
	st.SetQueueBounds(time.Hour, time.Hour)
	ctx := context.Background()
	u, p := fixture(t, st, "alice", "vision")
	id := createJob(t, st, u, p, "QUEUED").UUID
	// The waiters' statement prepared beforehand: inside a transaction the store prepares a new
	// statement in the background, on a connection of the pool's own that bypasses the queue.
	// Meeting every place taken, that preparation waited among the waiters in database/sql,
	// which hands connections back in no set order ([0 1 3 2 5 4 7 6], 9 waits counted).
	if _, err := st.JobPlace(ctx, id, ""); err != nil {
		t.Fatal(err)
	}

	// Every place taken by a transaction that waits to be let go.
	conns := st.DB().Stats().MaxOpenConnections
	release := make([]chan struct{}, conns)
	var inside, holders sync.WaitGroup
	for k := range release {
		release[k] = make(chan struct{})
		inside.Add(1)
		holders.Go(func() {
			_ = st.WithTx(ctx, func(tx *store.Store) error {
				inside.Done()
				<-release[k]
				return nil
			})
		})
	}
	inside.Wait()
	defer func() {
		for _, r := range release[1:] {
			close(r)
		}
		holders.Wait()
	}()

	// Waiters line up one after the other, each once the one before it waits.
	const waiters = 8
	base, waits0 := st.DB().Stats().WaitCount, st.ConnWaits().Count
	waiting := func() int64 { return st.ConnWaits().Waiting + st.DB().Stats().WaitCount - base }
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for k := range waiters {
		wg.Go(func() {
			// Noted while the waiter holds its place: noted after it gave the place back, the
			// next waiter's note could come first on a loaded machine (make test beside a lint
			// run: [0 1 2 3 5 6 4 7]).
			err := st.WithTx(ctx, func(tx *store.Store) error {
				_, err := tx.JobPlace(ctx, id, "")
				mu.Lock()
				order = append(order, k)
				mu.Unlock()
				return err
			})
			if err != nil {
				t.Error(err)
			}
		})
		for deadline := time.Now().Add(time.Minute); waiting() < int64(k+1); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d does not wait (%d waiting)", k, waiting())
			}
		}
	}
	// One connection given back: the waiters pass it on, each when its statement ended.
	close(release[0])
	wg.Wait()
	if want := []int{0, 1, 2, 3, 4, 5, 6, 7}; !slices.Equal(order, want) {
		t.Errorf("the waiters got the connection in the order %v, want %v", order, want)
	}
	if w := st.ConnWaits(); w.Count-waits0 != waiters || w.Total <= 0 || w.Waiting != 0 {
		t.Errorf("waits counted: %+v (from %d), want %d more", w, waits0, waiters)
	}
}
