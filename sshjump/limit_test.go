package sshjump

import (
	"testing"
	"time"
)

// An address is refused after max failures within the window, and again let in once they
// fall out of it; other addresses are not affected.
func TestFailureLimit(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := newFailures(3, time.Minute)
	f.now = func() time.Time { return now }
	for i := range 3 {
		if f.blocked("10.0.0.5") {
			t.Fatalf("blocked after %d failures", i)
		}
		f.fail("10.0.0.5")
		now = now.Add(10 * time.Second)
	}
	if !f.blocked("10.0.0.5") {
		t.Fatal("not blocked after 3 failures within a minute")
	}
	if f.blocked("10.0.0.6") {
		t.Fatal("another address blocked")
	}
	f.forgive("10.0.0.5") // the third came from a connection that logged in after all
	if f.blocked("10.0.0.5") {
		t.Fatal("blocked after a failure was taken back")
	}
	f.fail("10.0.0.5")
	now = now.Add(31 * time.Second) // the first failure is now 61 s old
	if f.blocked("10.0.0.5") {
		t.Fatal("still blocked with 2 failures in the window")
	}
}
