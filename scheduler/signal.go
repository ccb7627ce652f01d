package scheduler

import "sync"

// Signal wakes goroutines waiting on it: the scheduler loop on a submit, a slave back online or a job end;
// slaves' long polls when jobs were assigned or must stop. A Wake between two waits is not
// lost: C returns a channel closed by the next Wake after it was taken.
//
// Waiters may also wait for one key (For: a slave's name), so that a pass that assigns jobs to
// a few slaves wakes those slaves' long polls only. Waking all of them made every pass cost one
// work query per connected slave (hundreds per pass on a large cluster) for nothing.
type Signal struct {
	mu    sync.Mutex
	ch    chan struct{}
	keyed map[string]chan struct{}
}

// NewSignal makes a signal.
func NewSignal() *Signal { return &Signal{ch: make(chan struct{}), keyed: map[string]chan struct{}{}} }

// C returns a channel that is closed at the next Wake.
func (s *Signal) C() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch
}

// For returns a channel that is closed at the next Wake or WakeKeys naming key.
func (s *Signal) For(key string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.keyed[key]
	if !ok {
		c = make(chan struct{})
		s.keyed[key] = c
	}
	return c
}

// Wake wakes every current waiter, keyed or not.
func (s *Signal) Wake() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.ch)
	s.ch = make(chan struct{})
	for k, c := range s.keyed {
		close(c)
		delete(s.keyed, k)
	}
}

// WakeKeys wakes the waiters for the given keys only.
func (s *Signal) WakeKeys(keys ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		if c, ok := s.keyed[k]; ok {
			close(c)
			delete(s.keyed, k)
		}
	}
}
