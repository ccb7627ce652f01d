package web_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every seed example the job package accepts is accepted by the API too: it answers a UUID and
// GET returns the job with its defaults filled.
func TestSeedExamplesThroughTheAPI(t *testing.T) {
	w := newWorld(t)
	files, err := filepath.Glob("../job/testdata/seeds/*.json")
	if err != nil || len(files) < 20 {
		t.Fatalf("seed examples: %d files, %v", len(files), err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		if strings.Count(name, ".") > 1 { // .asprinted.json, .commafixed.json: refused on purpose
			continue
		}
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			id := w.submit(t, w.alice, string(data), "")
			status, j := w.get(t, w.alice, id)
			if status != 200 {
				t.Fatalf("GET: %d", status)
			}
			sched := j["request"].(map[string]any)["scheduling"].(map[string]any)
			if sched["minDuration"] == nil || sched["maxDuration"] == nil {
				t.Fatalf("durations not filled: %v", sched)
			}
			res := j["request"].(map[string]any)["resources"].(map[string]any)
			for _, k := range []string{"cpus", "gpus", "cpuMemoryGb"} {
				if _, ok := res[k]; !ok {
					t.Fatalf("resources.%s missing: %v", k, res)
				}
			}
		})
	}
}
