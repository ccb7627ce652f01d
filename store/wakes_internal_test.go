package store

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// Wakes asked for while a notification is being sent are covered by one more, sent after it;
// none is sent when none was asked for; a wake never blocks, even while a send hangs.
func TestWakesCoalesce(t *testing.T) {
	var sends atomic.Int64
	inSend, release := make(chan struct{}, 256), make(chan struct{})
	w := newWakeSender(func(ctx context.Context) error {
		sends.Add(1)
		inSend <- struct{}{}
		<-release
		return nil
	}, time.Millisecond)
	defer w.close()
	defer close(release) // before close: a send still waiting ends
	w.wake()
	<-inSend // the first send hangs
	for range 100 {
		w.wake()
	}
	release <- struct{}{}
	<-inSend // one more, for the hundred
	release <- struct{}{}
	waitCovered(t, w)
	if n := sends.Load(); n != 2 {
		t.Fatalf("%d notifications for 101 wakes asked for in two rounds, want 2", n)
	}
	// Nothing asked for: nothing sent.
	select {
	case <-inSend:
		t.Fatal("a notification sent with no wake asked for")
	case <-time.After(20 * time.Millisecond):
	}
}

func waitCovered(t *testing.T, w *wakeSender) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for w.covered.Load() < w.requested.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("wakes asked for: %d, sent for: %d", w.requested.Load(), w.covered.Load())
		}
		time.Sleep(time.Millisecond)
	}
}
