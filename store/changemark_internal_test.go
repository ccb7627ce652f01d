package store

import (
	"reflect"
	"testing"
)

// A mark is read from a snapshot as Postgres writes it; its condition names its ids; the union
// of two marks is what a read after either could not see, whichever is the older.
func TestChangeMark(t *testing.T) {
	for text, want := range map[string]ChangeMark{
		"7:7:":     {Next: 7},
		"5:12:5,9": {Next: 12, Running: []uint64{5, 9}},
		"18446744073709551000:18446744073709551615:18446744073709551000": {Next: 18446744073709551615, Running: []uint64{18446744073709551000}},
	} {
		got, err := parseSnapshot(text)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("parseSnapshot(%q) = %+v, %v; want %+v", text, got, err, want)
		}
	}
	for _, bad := range []string{"", "7:7", "a:7:", "1:b:", "1:7:x", "1:7:3,", "1:7:3:4", "8:7:", "5:9:4", "5:9:9"} {
		if m, err := parseSnapshot(bad); err == nil {
			t.Errorf("parseSnapshot(%q) = %+v, want an error", bad, m)
		}
	}
	if got, want := changedSince(ChangeMark{Next: 12, Running: []uint64{5, 9}}), `(sched_xid >= '12'::xid8 OR sched_xid = ANY('{5,9}'::xid8[]))`; got != want {
		t.Errorf("changedSince = %s, want %s", got, want)
	}
	if got, want := changedSince(ChangeMark{Next: 7}), `(sched_xid >= '7'::xid8)`; got != want {
		t.Errorf("changedSince = %s, want %s", got, want)
	}
	older, newer := ChangeMark{Next: 10, Running: []uint64{4, 8}}, ChangeMark{Next: 20, Running: []uint64{8, 12, 15}}
	want := ChangeMark{Next: 10, Running: []uint64{4, 8}} // 12 and 15 are past 10: in the range
	for _, u := range []ChangeMark{older.Union(newer), newer.Union(older)} {
		if !reflect.DeepEqual(u, want) {
			t.Errorf("union %+v, want %+v", u, want)
		}
	}
	// Two marks of the same Next, taken apart: ids running at either are in the union.
	a, b := ChangeMark{Next: 10, Running: []uint64{6}}, ChangeMark{Next: 10, Running: []uint64{3, 6}}
	if u := a.Union(b); !reflect.DeepEqual(u, ChangeMark{Next: 10, Running: []uint64{3, 6}}) {
		t.Errorf("union %+v", u)
	}
	if !older.Before(newer) || newer.Before(older) || a.Before(b) {
		t.Error("Before")
	}
	if s := newer.String(); s != "20:8,12,15" {
		t.Errorf("String = %s", s)
	}
}
