package loginlimit

import (
	"testing"
	"time"
)

// A key is refused after max failures within the window and let in again once they fall out
// of it; other keys are not affected; a forgiven failure no longer counts; a user is limited
// apart from the addresses his logins come from.
func TestWindow(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := New(3, time.Minute)
	w.now = func() time.Time { return now }
	for i := range 3 {
		if w.Blocked("10.0.0.5") {
			t.Fatalf("blocked after %d failures", i)
		}
		w.Fail("10.0.0.5", User("alice"))
		now = now.Add(10 * time.Second)
	}
	if !w.Blocked("10.0.0.5") || !w.Blocked("10.0.0.9", User("alice")) {
		t.Fatal("not blocked after 3 failures within a minute (address, then user from elsewhere)")
	}
	if w.Blocked("10.0.0.6", User("bob")) {
		t.Fatal("another address and user blocked")
	}
	w.Forgive("10.0.0.5") // the third came from a connection that logged in after all
	if w.Blocked("10.0.0.5") {
		t.Fatal("blocked after a failure was taken back")
	}
	w.Fail("10.0.0.5")
	now = now.Add(31 * time.Second) // the first failure is now 61 s old
	if w.Blocked("10.0.0.5") || w.Blocked(User("alice")) {
		t.Fatal("still blocked with 2 failures in the window")
	}
	if New(0, time.Minute).Blocked("x") {
		t.Fatal("a Window with max 0 blocks")
	}
}
