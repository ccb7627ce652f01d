package store

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testCall is a groupQueue's call for its tests.
type testCall struct {
	call
	id int
}

// testQueue is a groupQueue whose writes record their batches, whether they ran in a caller's
// goroutine (under do) and how many ran at once, and wait for gate when it is set.
type testQueue struct {
	groupQueue[*testCall]
	mu       sync.Mutex
	batches  [][]int
	inCaller []bool
	now, top atomic.Int32
	gate     chan struct{}
}

func newTestQueue(inFlight, most int, gate chan struct{}) *testQueue {
	q := &testQueue{gate: gate}
	q.groupQueue = groupQueue[*testCall]{inFlight: inFlight, max: most, timeout: time.Minute, write: func(ctx context.Context, batch []*testCall) {
		n := q.now.Add(1)
		for top := q.top.Load(); n > top && !q.top.CompareAndSwap(top, n); top = q.top.Load() {
		}
		defer q.now.Add(-1)
		buf := make([]byte, 8<<10)
		stack := string(buf[:runtime.Stack(buf, false)])
		if q.gate != nil {
			<-q.gate
		}
		ids := make([]int, len(batch))
		for i, c := range batch {
			ids[i] = c.id
		}
		q.mu.Lock()
		q.batches = append(q.batches, ids)
		q.inCaller = append(q.inCaller, strings.Contains(stack, ").do("))
		q.mu.Unlock()
	}}
	return q
}

func (q *testQueue) call(ctx context.Context, id int) bool {
	return q.do(&testCall{call: newCall(ctx), id: id})
}

// A call that finds a statement free is written at once, in its caller's goroutine; calls that
// come while inFlight statements run wait and leave together, at most max to a batch, each
// written once, never more than inFlight at once; a call given up on before its batch leaves
// is not written; and the queue ends with no statement counted as running.
func TestGroupQueueCallerLeads(t *testing.T) {
	quiet := newTestQueue(2, 3, nil)
	if !quiet.call(context.Background(), 1) {
		t.Fatal("a lone call was not written")
	}
	if !slices.Equal(quiet.batches[0], []int{1}) || !quiet.inCaller[0] {
		t.Fatalf("a lone call written as %v, in its caller's goroutine %v; want [1], true", quiet.batches, quiet.inCaller)
	}

	gate := make(chan struct{})
	q := newTestQueue(2, 3, gate)
	var wg sync.WaitGroup
	results := make([]bool, 9)
	start := func(id int, ctx context.Context) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[id] = q.call(ctx, id)
		}()
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !ok(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("waited a minute for %s", what)
			}
		}
	}
	waiting := func() int {
		q.groupQueue.mu.Lock()
		defer q.groupQueue.mu.Unlock()
		return len(q.waiting)
	}
	// Two calls take both statements and are held in their writes; seven more wait, one of
	// them given up on.
	start(0, context.Background())
	waitFor("a write", func() bool { return q.now.Load() == 1 })
	start(1, context.Background())
	waitFor("two writes", func() bool { return q.now.Load() == 2 })
	gone, cancel := context.WithCancel(context.Background())
	for id := 2; id < 9; id++ {
		ctx := context.Background()
		if id == 5 {
			ctx = gone
		}
		start(id, ctx)
	}
	waitFor("seven calls waiting", func() bool { return waiting() == 7 })
	cancel()
	close(gate)
	wg.Wait()
	var written []int
	for _, b := range q.batches {
		if len(b) > 3 {
			t.Errorf("a batch of %d calls (%v), want at most 3", len(b), b)
		}
		written = append(written, b...)
	}
	slices.Sort(written)
	if want := []int{0, 1, 2, 3, 4, 6, 7, 8}; !slices.Equal(written, want) {
		t.Errorf("written %v, want %v (each once, not 5: given up on)", written, want)
	}
	for id, ok := range results {
		if ok != (id != 5) {
			t.Errorf("call %d told %v", id, ok)
		}
	}
	if top := q.top.Load(); top > 2 {
		t.Errorf("%d writes at once, want at most 2", top)
	}
	if len(q.batches) > 2+3 {
		t.Errorf("%d batches for 9 calls (%v): the waiting ones did not leave together", len(q.batches), q.batches)
	}
	// A goroutine left to write what still waited when its leader's call was written ends
	// once it finds nothing more.
	waitFor("no statement counted as running", func() bool {
		q.groupQueue.mu.Lock()
		defer q.groupQueue.mu.Unlock()
		return q.running == 0
	})
}
