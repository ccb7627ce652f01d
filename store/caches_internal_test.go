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

// A page is read with the least of the few limits that holds it: the portal's 25 as 25.
func TestListedLimit(t *testing.T) {
	for n, want := range map[int]int{1: 10, 10: 10, 11: 20, 25: 25, 26: 50, 50: 50, 101: 200, 201: maxListedByVersion, 500: maxListedByVersion} {
		if got := listedLimit(n); got != want {
			t.Errorf("listedLimit(%d) = %d, want %d", n, got, want)
		}
	}
}
