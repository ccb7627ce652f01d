package web_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
)

// Every seed example the job package accepts is accepted by the API too: it answers a UUID and
// GET returns the job with its defaults filled. imec's examples ask for host port 8080, outside
// the default host port range: this master opens every port, as an operator may (the default
// range refuses them with a 400 naming the field, see TestHostileInput).
func TestSeedExamplesThroughTheAPI(t *testing.T) {
	opts := job.DefaultOptions()
	opts.Limits.HostPortMin, opts.Limits.HostPortMax = 1, 65535
	w := newWorldWith(t, testmaster.Options{Job: &opts})
	// The examples name this reservation: it must exist and be alice's for the API to take them.
	ctx := context.Background()
	if _, err := w.m.Store.CreateCluster(ctx, store.Cluster{ID: 1, Name: "one"}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.m.Store.CreateReservation(ctx, store.Reservation{ID: "f6dbca7b-58fd-47e3-9ac4-9ad33e7f6030", Name: "seed",
		ClusterID: sql.NullInt64{Int64: 1, Valid: true}, Start: time.Now(), End: time.Now().Add(time.Hour),
		UserIDs: []int64{w.alice.ID}, CreatedBy: w.dave.ID}); err != nil {
		t.Fatal(err)
	}
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
