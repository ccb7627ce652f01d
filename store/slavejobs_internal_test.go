package store

import (
	"database/sql"
	"reflect"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
)

// decodeSlaveJobs reads the array Postgres writes for a slave's live jobs (json_agg of
// json_build_object: a timestamptz with microseconds and an offset, or null).
func TestDecodeSlaveJobs(t *testing.T) {
	doc := []byte(`[{"uuid" : "5d7c3f0e-0000-4000-8000-000000000001", "status" : "RUNNING", "attempt" : 2, "missingSince" : null, "missing" : false}, ` +
		`{"uuid" : "5d7c3f0e-0000-4000-8000-000000000002", "status" : "STARTING", "attempt" : 1, "missingSince" : "2026-11-29T01:40:12.123456+01:00", "missing" : true}]`)
	got, err := decodeSlaveJobs("sim-1", doc)
	if err != nil {
		t.Fatal(err)
	}
	since := time.Date(2026, 11, 29, 0, 40, 12, 123456000, time.UTC)
	want := []SlaveJob{
		{UUID: "5d7c3f0e-0000-4000-8000-000000000001", Status: job.StatusRunning, Attempt: 2},
		{UUID: "5d7c3f0e-0000-4000-8000-000000000002", Status: job.StatusStarting, Attempt: 1, Missing: true, MissingSince: sql.NullTime{Time: since, Valid: true}},
	}
	if len(got) != 2 || !got[1].MissingSince.Time.Equal(since) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	got[1].MissingSince.Time = since // the same instant, compared without its zone
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded %+v, want %+v", got, want)
	}
	if _, err := decodeSlaveJobs("sim-1", []byte(`[{"uuid": 7}]`)); err == nil {
		t.Error("a uuid that is a number decoded without an error")
	}
	if jobs, err := decodeSlaveJobs("sim-1", []byte(`[]`)); err != nil || len(jobs) != 0 {
		t.Errorf("an empty array: %v, %v", jobs, err)
	}
}
