package scheduler

import "sync"

// Signal wakes every goroutine waiting on it: the scheduler loop on a submit, heartbeat or job
// end; slaves' long polls when jobs were assigned or must stop. A Wake between two waits is
// not lost: C returns a channel closed by the next Wake after it was taken.
type Signal struct {
	mu sync.Mutex
	ch chan struct{}
}

// NewSignal makes a signal.
func NewSignal() *Signal { return &Signal{ch: make(chan struct{})} }

// C returns a channel that is closed at the next Wake.
func (s *Signal) C() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch
}

// Wake wakes every current waiter.
func (s *Signal) Wake() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.ch)
	s.ch = make(chan struct{})
}
