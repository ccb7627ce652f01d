package store

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// A UUID lies in a prefix's range exactly when its text begins with the prefix, as LIKE
// 'prefix%' matched it: checked on random UUIDs against prefixes of them, of other UUIDs and
// of the two spliced, and on prefixes no UUID's text begins with.
func TestUUIDPrefixRangeIsLike(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	const hex = "0123456789abcdef"
	randomUUID := func() string {
		var b strings.Builder
		for i := range 36 {
			if i == 8 || i == 13 || i == 18 || i == 23 {
				b.WriteByte('-')
				continue
			}
			// Mostly the ends of the alphabet, so that the bounds' 0s and fs are met.
			switch rng.IntN(4) {
			case 0:
				b.WriteByte('0')
			case 1:
				b.WriteByte('f')
			default:
				b.WriteByte(hex[rng.IntN(16)])
			}
		}
		return b.String()
	}
	for range 20000 {
		u, v := randomUUID(), randomUUID()
		n := rng.IntN(37)
		for _, prefix := range []string{v[:n], u[:n], u[:max(n-1, 0)] + v[max(n-1, 0):n]} {
			lo, hi, ok := uuidPrefixRange(prefix)
			if !ok {
				t.Fatalf("prefix %q of a UUID: no range", prefix)
			}
			if in, like := lo <= u && u <= hi, strings.HasPrefix(u, prefix); in != like {
				t.Fatalf("uuid %s, prefix %q: in [%s, %s] is %v, LIKE matches %v", u, prefix, lo, hi, in, like)
			}
		}
	}
	for _, bad := range []string{"abcdefg", "abcdef0-1", "abcdef01a", "ABCDEF", "abcdef01-0000-0000-0000-0000000000000", "abcdef%", "abcdef_1"} {
		if lo, hi, ok := uuidPrefixRange(bad); ok {
			t.Errorf("prefix %q: range [%s, %s], want none (no UUID's text begins with it)", bad, lo, hi)
		}
	}
	if lo, hi, ok := uuidPrefixRange("abcdef12-3"); !ok || lo != "abcdef12-3000-0000-0000-000000000000" || hi != "abcdef12-3fff-ffff-ffff-ffffffffffff" {
		t.Errorf("abcdef12-3: [%s, %s] %v", lo, hi, ok)
	}
}
