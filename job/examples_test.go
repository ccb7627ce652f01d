package job

import (
	"os"
	"path/filepath"
	"testing"
)

// Every file in examples/ (the README's and make run's) is a valid job, v2 or v1; the
// HelloWorld asks for no more than one CPU and is not interactive, so that it waits instead of
// failing on a two-core machine where another job runs.
func TestExamplesAreValidJobs(t *testing.T) {
	files, err := filepath.Glob("../examples/*.json")
	if err != nil || len(files) < 2 {
		t.Fatalf("examples: %v %v", files, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		j, err := Parse(data, DefaultOptions())
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if filepath.Base(f) == "helloworld.json" && (j.Request.Resources.CPUs > 1 || j.Request.Scheduling.Interactive) {
			t.Errorf("%s: %d CPUs, interactive %v: it would fail at once on a small machine with another job running",
				f, j.Request.Resources.CPUs, j.Request.Scheduling.Interactive)
		}
	}
}
