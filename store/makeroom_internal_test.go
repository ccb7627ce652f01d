package store

import "testing"

// makeRoom leaves a cache under its bound alone and takes a full one down to three quarters.
func TestMakeRoom(t *testing.T) {
	m := map[int]bool{}
	for i := range 99 {
		m[i] = true
	}
	makeRoom(m, 100)
	if len(m) != 99 {
		t.Fatalf("under the bound: %d entries left of 99", len(m))
	}
	m[99] = true
	makeRoom(m, 100)
	if len(m) != 74 {
		t.Fatalf("at the bound: %d entries left of 100, want 74", len(m))
	}
}
