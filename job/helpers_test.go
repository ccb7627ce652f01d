package job

import (
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"
)

// testNow is the clock of every parse test, so that "notAfter in the past" is stable.
var testNow = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func testOptions() Options {
	o := DefaultOptions()
	o.Now = func() time.Time { return testNow }
	o.KnownFeatures = []string{"infiniband", "nvlink"}
	// Rule tests write host ports freely; the default range is tested in limits_test.go.
	o.Limits.HostPortMin, o.Limits.HostPortMax = 1, 65535
	o.Limits.PortMappings = 1000
	return o
}

// remove, as a value in set, deletes the key.
var remove = &struct{}{}

// minimalDoc is the smallest valid job; tests change it with set.
func minimalDoc() map[string]any {
	return map[string]any{
		"name": "test",
		"request": map[string]any{
			"resources": map[string]any{"cpus": 1, "gpus": 0, "cpuMemoryGb": 1},
			"docker":    map[string]any{"image": "debian:stable"},
		},
	}
}

// set returns a copy of doc with the value at a dotted path replaced (objects are created on
// the way). Keys holding dots cannot be addressed; tests do not need them.
func set(doc map[string]any, path string, v any) map[string]any {
	out := deepCopy(doc).(map[string]any)
	m := out
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	last := parts[len(parts)-1]
	if v == remove {
		delete(m, last)
	} else {
		m[last] = v
	}
	return out
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		c := maps.Clone(x)
		for k, e := range c {
			c[k] = deepCopy(e)
		}
		return c
	case []any:
		c := make([]any, len(x))
		for i, e := range x {
			c[i] = deepCopy(e)
		}
		return c
	}
	return v
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mustParse parses data and fails the test on any error.
func mustParse(t testing.TB, data []byte) *Job {
	t.Helper()
	j, err := Parse(data, testOptions())
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, data)
	}
	return j
}

// problemsOf returns the problems of a *ValidationError, failing the test on any other result.
func problemsOf(t testing.TB, data []byte) []Problem {
	t.Helper()
	_, err := Parse(data, testOptions())
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Parse: got %v, want a *ValidationError\n%s", err, data)
	}
	return ve.Problems
}

// checkProblems compares problems with wants of the form "path: part of the message".
func checkProblems(t testing.TB, got []Problem, wants ...string) {
	t.Helper()
	if len(got) != len(wants) {
		t.Fatalf("got %d problems, want %d:\n got %q\nwant %q", len(got), len(wants), got, wants)
	}
	for i, w := range wants {
		path, msg, _ := strings.Cut(w, ": ")
		if got[i].Path != path || !strings.Contains(got[i].Message, msg) {
			t.Errorf("problem %d = %q, want path %q and a message containing %q", i, got[i], path, msg)
		}
	}
}
