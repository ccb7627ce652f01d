package sshd

import (
	"sync"
	"time"
)

// failLimiter counts failed logins per client address in a sliding window: an address with
// max failures within the window is refused without asking the master until the oldest
// failure leaves the window, so that keys cannot be tried by the thousand.
type failLimiter struct {
	max    int
	window time.Duration
	now    func() time.Time

	mu    sync.Mutex
	fails map[string][]time.Time
}

func newFailLimiter(max int, window time.Duration) *failLimiter {
	return &failLimiter{max: max, window: window, now: time.Now, fails: map[string][]time.Time{}}
}

// recent drops the failures of addr older than the window and returns those left. The lock
// is held.
func (l *failLimiter) recent(addr string) []time.Time {
	cut := l.now().Add(-l.window)
	fs := l.fails[addr]
	i := 0
	for i < len(fs) && !fs[i].After(cut) {
		i++
	}
	fs = fs[i:]
	if len(fs) == 0 {
		delete(l.fails, addr)
		return nil
	}
	l.fails[addr] = fs
	return fs
}

func (l *failLimiter) blocked(addr string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.recent(addr)) >= l.max
}

func (l *failLimiter) fail(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fs := l.recent(addr)
	if len(fs) >= l.max {
		return
	}
	l.fails[addr] = append(fs, l.now())
	// Bound the map: a flood from many addresses forgets the oldest entries wholesale.
	if len(l.fails) > 100000 {
		l.fails = map[string][]time.Time{}
	}
}
