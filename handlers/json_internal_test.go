package handlers

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
)

// writeJSON writes exactly what encoding/json's encoder writes for the same values, whether
// items come as values or as JSON made by json.Marshal beforehand (shownCache's), and a
// list after a longer one (their buffer is reused) is not followed by what the longer left.
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
