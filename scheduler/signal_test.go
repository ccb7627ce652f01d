package scheduler

import (
	"testing"
	"time"
)

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	case <-time.After(10 * time.Millisecond):
		return false
	}
}

// WakeKeys wakes the waiters of its keys only; Wake wakes everybody; a wake is not lost between
// taking a channel and waiting on it.
func TestSignalKeys(t *testing.T) {
	s := NewSignal()
	all, a, b := s.C(), s.For("a"), s.For("b")
	s.WakeKeys("a", "nobody")
	if !closed(a) || closed(b) || closed(all) {
		t.Fatal("WakeKeys(a) woke the wrong waiters")
	}
	a2 := s.For("a")
	if closed(a2) {
		t.Fatal("a fresh channel for a is already closed")
	}
	s.Wake()
	if !closed(all) || !closed(a2) || !closed(b) {
		t.Fatal("Wake did not wake every waiter")
	}
	if closed(s.C()) || closed(s.For("b")) {
		t.Fatal("channels taken after Wake are closed")
	}
}
