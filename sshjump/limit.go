package sshjump

import (
	"sync"
	"time"
)

// failures counts failed logins per client address over a sliding window: an address with
// max failures within the window is refused until the oldest falls out of it. Guessing keys
// is hopeless anyway; this keeps a scanner from costing the master a database look-up per try.
type failures struct {
	max    int
	window time.Duration
	now    func() time.Time

	mu   sync.Mutex
	byIP map[string][]time.Time
}

func newFailures(max int, window time.Duration) *failures {
	return &failures{max: max, window: window, now: time.Now, byIP: map[string][]time.Time{}}
}

// recent drops what fell out of the window; the caller holds mu.
func (f *failures) recent(ip string, now time.Time) []time.Time {
	ts := f.byIP[ip]
	i := 0
	for i < len(ts) && now.Sub(ts[i]) >= f.window {
		i++
	}
	ts = ts[i:]
	if len(ts) == 0 {
		delete(f.byIP, ip)
		return nil
	}
	f.byIP[ip] = ts
	return ts
}

// blocked says whether ip has used up its failures.
func (f *failures) blocked(ip string) bool {
	if f.max <= 0 {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.recent(ip, f.now())) >= f.max
}

// fail records a failed login from ip. Addresses whose failures are all old are forgotten
// now and then, so the map stays as big as the current attackers.
func (f *failures) fail(ip string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	f.byIP[ip] = append(f.recent(ip, now), now)
	if len(f.byIP) > 1024 {
		for other := range f.byIP {
			f.recent(other, now)
		}
	}
}

// forgive takes back ip's latest failure (a connection that logged in after all).
func (f *failures) forgive(ip string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ts := f.byIP[ip]; len(ts) > 0 {
		f.byIP[ip] = ts[:len(ts)-1]
		f.recent(ip, f.now())
	}
}
