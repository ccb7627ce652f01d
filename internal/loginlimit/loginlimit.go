// Package loginlimit counts failed logins in a sliding window, for the master's SSH jump host
// and the slaves' SSH servers: a key (a client address, or a user name) with Max failures
// within the window is refused until the oldest falls out of it. Guessing SSH keys is hopeless
// anyway; the limit keeps a scanner from costing a database look-up (or a call to the master)
// per try, and a user's logins from being tried from many addresses at once.
package loginlimit

import (
	"sync"
	"time"
)

// maxKeys bounds the memory: beyond it, keys whose failures are all old are forgotten.
const maxKeys = 4096

// Window counts failures per key. A Window with Max 0 never blocks. Safe for concurrent use.
type Window struct {
	max    int
	window time.Duration
	now    func() time.Time

	mu    sync.Mutex
	fails map[string][]time.Time
}

// New returns a Window that blocks a key after max failures within window.
func New(max int, window time.Duration) *Window {
	return &Window{max: max, window: window, now: time.Now, fails: map[string][]time.Time{}}
}

// recent drops key's failures that fell out of the window and returns the others; the caller
// holds mu.
func (w *Window) recent(key string, now time.Time) []time.Time {
	ts := w.fails[key]
	i := 0
	for i < len(ts) && now.Sub(ts[i]) >= w.window {
		i++
	}
	ts = ts[i:]
	if len(ts) == 0 {
		delete(w.fails, key)
		return nil
	}
	w.fails[key] = ts
	return ts
}

// Blocked says whether any of keys has used up its failures.
func (w *Window) Blocked(keys ...string) bool {
	if w.max <= 0 {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	for _, k := range keys {
		if len(w.recent(k, now)) >= w.max {
			return true
		}
	}
	return false
}

// Fail records one failed login for each of keys.
func (w *Window) Fail(keys ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	for _, k := range keys {
		ts := w.recent(k, now)
		if w.max > 0 && len(ts) >= w.max {
			continue // already blocked: more entries would only cost memory
		}
		w.fails[k] = append(ts, now)
	}
	if len(w.fails) > maxKeys {
		for other := range w.fails {
			w.recent(other, now)
		}
	}
}

// Forgive takes back the latest failure of each of keys (a connection that logged in after
// all, with its next key).
func (w *Window) Forgive(keys ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	for _, k := range keys {
		if ts := w.fails[k]; len(ts) > 0 {
			w.fails[k] = ts[:len(ts)-1]
			w.recent(k, now)
		}
	}
}

// User is the key of a user name (or SSH user name) in a Window, apart from addresses.
func User(name string) string { return "user " + name }
