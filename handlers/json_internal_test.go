package handlers

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
)

// madeJSON writes exactly what encoding/json's encoder writes for the same values, whether
// items come as values or as JSON made by json.Marshal beforehand (shownCache's).
func TestMadeJSONIsTheEncodersJSON(t *testing.T) {
	j := &job.Job{UUID: "0b0e8a2e-1c3f-4a51-9d0a-1f2e3d4c5b6a", Name: "a <b> & c", Description: "line\nbreak \u2028",
		Request: job.Request{Docker: job.Docker{Image: "debian", Environment: map[string]string{"Z": "1", "A": "<2>"}}},
		State:   job.State{Status: job.StatusFinished, EventTimes: map[job.Status]time.Time{job.StatusQueued: time.Unix(1700000000, 5).UTC()}}}
	made, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		value     any
		sameValue any
	}{
		{"one job", json.RawMessage(made), j},
		{"a list", []any{json.RawMessage(made), j, map[string]int{"b": 1, "a": 2}}, []any{j, j, map[string]int{"b": 1, "a": 2}}},
		{"an empty list", []any{}, []any{}},
		{"no list", []any(nil), []any(nil)},
	} {
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(c.sameValue); err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		writeJSON(rec, 200, c.value)
		if got := rec.Body.String(); got != want.String() {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, want.String())
		}
		if rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s: content type %q", c.name, rec.Header().Get("Content-Type"))
		}
	}
	// Asked for indented JSON, a RawMessage is indented too.
	rec := httptest.NewRecorder()
	writeJSON(prettyWriter{rec}, 200, []any{json.RawMessage(made)})
	if !bytes.Contains(rec.Body.Bytes(), []byte("\n    \"uuid\"")) {
		t.Errorf("pretty list: %.200s", rec.Body.String())
	}
}

// writesRecorder records the size of every write.
type writesRecorder struct {
	*httptest.ResponseRecorder
	sizes []int
}

func (w *writesRecorder) Write(b []byte) (int, error) {
	w.sizes = append(w.sizes, len(b))
	return w.ResponseRecorder.Write(b)
}

// writeJSON hands the response writer pieces of at most 4 KiB (so that HTTP/2 frames stay
// that small), whole and in order, whichever way the JSON is made.
func TestWriteJSONWritesInPieces(t *testing.T) {
	long := bytes.Repeat([]byte("x"), 10000)
	for name, v := range map[string]any{
		"encoded": map[string]string{"a": string(long)},
		"made":    json.RawMessage(`"` + string(long) + `"`),
	} {
		w := &writesRecorder{ResponseRecorder: httptest.NewRecorder()}
		writeJSON(w, 200, v)
		want, _ := json.Marshal(v)
		if got := bytes.TrimSpace(w.Body.Bytes()); !bytes.Equal(got, want) {
			t.Errorf("%s: wrote %d bytes, not the JSON (%d bytes)", name, len(got), len(want))
		}
		if len(w.sizes) < 3 {
			t.Errorf("%s: %d writes %v, want pieces", name, len(w.sizes), w.sizes)
		}
		for _, n := range w.sizes {
			if n > pieceSize {
				t.Errorf("%s: a write of %d bytes (writes %v)", name, n, w.sizes)
			}
		}
	}
}
