package store

import (
	"slices"
	"testing"
)

// Ints reads Postgres's integer arrays as Postgres writes them, and refuses what it cannot read
// rather than reading part of it.
func TestIntsScan(t *testing.T) {
	for _, tc := range []struct {
		src  any
		want Ints
	}{
		{nil, nil},
		{[]byte("{}"), Ints{}},
		{[]byte("{7}"), Ints{7}},
		{[]byte("{0,1,2,3}"), Ints{0, 1, 2, 3}},
		{"{-1,12}", Ints{-1, 12}},
	} {
		var got Ints
		if err := got.Scan(tc.src); err != nil || !slices.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
			t.Errorf("Scan(%q) = %v, %v; want %v", tc.src, got, err, tc.want)
		}
	}
	for _, bad := range []any{[]byte("{1,NULL}"), []byte("1,2"), []byte("{1,2"), []byte("1,2}"), []byte("{"), []byte("{{1},{2}}"), []byte("{1,,2}"), 42} {
		var got Ints
		if err := got.Scan(bad); err == nil {
			t.Errorf("Scan(%v) = %v, want an error", bad, got)
		}
	}
}
