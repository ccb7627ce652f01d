package store

import (
	"testing"

	"github.com/lib/pq"
)

// TestTextsAsStringArray: texts writes what lib/pq's StringArray writes, in a buffer of the
// size it computed, from strings and from bytes alike. (That Postgres reads it back as it was:
// TestTextsRoundTrip.)
func TestTextsAsStringArray(t *testing.T) {
	for _, a := range [][]string{
		nil, {}, {""}, {"a"}, {"a", "b", ""},
		{`{"gpus": [{"index": 0, "util": 93}], "note": "a \"quote\" and a \\ backslash"}`, `null`},
		{`\`, `"`, `\\""`, `,`, `{}`, `NULL`, " spaces ", "üñí\tcode\n"},
	} {
		got, err := texts[string](a).Value()
		if err != nil {
			t.Fatal(err)
		}
		var asBytes [][]byte // nil for nil
		if a != nil {
			asBytes = make([][]byte, 0, len(a))
		}
		for _, s := range a {
			asBytes = append(asBytes, []byte(s))
		}
		gotBytes, err := texts[[]byte](asBytes).Value()
		if err != nil {
			t.Fatal(err)
		}
		if a != nil && string(gotBytes.([]byte)) != string(got.([]byte)) {
			t.Errorf("%q: as bytes %q, as strings %q", a, gotBytes, got)
		}
		want, err := pq.StringArray(a).Value()
		if err != nil {
			t.Fatal(err)
		}
		if want == nil {
			if got != nil {
				t.Errorf("%q: %q, want NULL", a, got)
			}
			continue
		}
		b, ok := got.([]byte)
		if !ok || string(b) != want.(string) {
			t.Errorf("%q: %q, want %q", a, got, want)
		}
		if ok && len(b) != cap(b) {
			t.Errorf("%q: %d bytes in a buffer of %d: the size was computed wrong", a, len(b), cap(b))
		}
	}
}
