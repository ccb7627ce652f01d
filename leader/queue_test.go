package leader_test

import (
	"bytes"
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/leader"
	"github.com/opengpulab/gpulab/metrics"
	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/store"
)

// TestQueueMemory: the leader keeps the queued jobs' requests between passes and reads only
// the new ones (a request changed behind its back, which never happens, stays as remembered),
// forgets jobs that left the queue, keeps queue order, and its periodic full read finds the
// changed request: logged as drift, counted, and replaced by what the database holds.
func TestQueueMemory(t *testing.T) {
	w, loop, logs, mets := checkedWorld(t, time.Hour)
	ctx := context.Background()
	a, b, c := w.submit(time.Hour), w.submit(time.Hour), w.submit(time.Hour)
	read := func() []scheduler.Job {
		t.Helper()
		jobs, err := loop.ReadQueue(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return jobs
	}
	ids := func(jobs []scheduler.Job) []string {
		var out []string
		for _, j := range jobs {
			out = append(out, j.UUID)
		}
		return out
	}
	first := read()
	if got := ids(first); !slices.Equal(got, []string{a, b, c}) {
		t.Fatalf("first read %v, want %v", got, []string{a, b, c})
	}
	if first[0].Request.Resources.GPUs != 1 || first[0].UserID != w.u.ID || first[0].ProjectID != w.p.ID || first[0].Submitted.IsZero() {
		t.Fatalf("first job %+v: want its request, owner and submit time", first[0])
	}

	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := w.st.DB().ExecContext(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec(`UPDATE jobs SET status = 'CANCELLED' WHERE uuid = $1`, b)
	// What never happens: a queued job's request changed in place.
	exec(`UPDATE jobs SET request = jsonb_set(request, '{resources,gpus}', '7') WHERE uuid = $1`, c)
	d := w.submit(time.Hour)
	second := read()
	if got := ids(second); !slices.Equal(got, []string{a, c, d}) {
		t.Fatalf("after a cancel and a submit: %v, want %v", got, []string{a, c, d})
	}
	if second[1].Request.Resources.GPUs != 1 {
		t.Fatalf("job c read again (%d GPUs): only new jobs' requests are read between checks", second[1].Request.Resources.GPUs)
	}
	if strings.Contains(logs.String(), "drift") {
		t.Fatalf("drift logged before any check:\n%s", logs.String())
	}

	loop.CheckQueueNow()
	third := read()
	if got := ids(third); !slices.Equal(got, []string{a, c, d}) || third[1].Request.Resources.GPUs != 7 {
		t.Fatalf("after the check: %v with job c at %d GPUs, want %v and the database's 7", got, third[1].Request.Resources.GPUs, []string{a, c, d})
	}
	if !strings.Contains(logs.String(), "scheduler memory drift") || !strings.Contains(logs.String(), c) {
		t.Errorf("the check did not log the drift of job %s:\n%s", c, logs.String())
	}
	if drift := driftCounted(t, mets); drift != 1 {
		t.Errorf("gpulab_scheduler_memory_drift_total = %v, want 1", drift)
	}
}

// checkedWorld is a leader that checks its memory every `every`, logging to logs and counting
// drift in mets.
func checkedWorld(t *testing.T, every time.Duration) (*estimateWorld, *leader.Loop, *bytes.Buffer, *metrics.Master) {
	t.Helper()
	w := newEstimateWorld(t)
	logs := &bytes.Buffer{}
	mets := metrics.NewMaster(nil, metrics.MasterOptions{})
	return w, w.loop(leader.Config{FullReadEvery: every, Metrics: mets}, logs), logs, mets
}

// driftCounted reads gpulab_scheduler_memory_drift_total (-1 when it is not there).
func driftCounted(t *testing.T, mets *metrics.Master) float64 {
	t.Helper()
	families, err := mets.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "gpulab_scheduler_memory_drift_total" {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return -1
}

// The periodic check compares the memory brought up to date with the full read: jobs submitted,
// cancelled or assigned since the last pass are changes, not drift (at B8x's size hundreds of
// them were logged as drift at every check).
func TestQueueCheckCountsNoRecentChangeAsDrift(t *testing.T) {
	w, loop, logs, mets := checkedWorld(t, time.Hour)
	ctx := context.Background()
	a, b := w.submit(time.Hour), w.submit(time.Hour)
	if _, err := loop.ReadQueue(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := w.st.TransitionJob(ctx, a, []job.Status{job.StatusQueued}, job.StatusCancelled, store.Event{}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.st.AssignJobs(ctx, []store.Assignment{{JobUUID: b, Placement: store.Placement{SlaveName: "node1", SlaveInstanceID: "i1", ClusterID: 1,
		Resources: job.StateResources{SlaveName: "node1", GPUIDs: []int{0}, CPUIDs: []int{0}, CPUMemoryGb: 1}}}}); err != nil {
		t.Fatal(err)
	}
	c := w.submit(time.Hour)
	loop.CheckQueueNow()
	jobs, err := loop.ReadQueue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].UUID != c {
		t.Errorf("after the check: %d queued jobs, want only %s", len(jobs), c)
	}
	if strings.Contains(logs.String(), "drift") {
		t.Errorf("changes made since the last read were taken for drift:\n%s", logs.String())
	}
	if drift := driftCounted(t, mets); drift > 0 {
		t.Errorf("gpulab_scheduler_memory_drift_total = %v, want 0", drift)
	}
}

// The check's full read runs beside the passes: what changes between its read and the pass that
// compares (a cancel before a pass in between, an assignment and a submit after it) is no
// drift, and is in the memory after it; a request changed in place before the check's read is
// found, as in a check within a pass.
func TestQueueCheckBesideThePasses(t *testing.T) {
	w, loop, logs, mets := checkedWorld(t, time.Nanosecond)
	ctx := context.Background()
	a, b, c := w.submit(time.Hour), w.submit(time.Hour), w.submit(time.Hour)
	read := func() ([]scheduler.Job, []store.Held) {
		t.Helper()
		jobs, held, err := loop.ReadJobs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return jobs, held
	}
	read() // the term's first read: in full
	if _, err := w.st.DB().ExecContext(ctx, `UPDATE jobs SET request = jsonb_set(request, '{resources,gpus}', '7') WHERE uuid = $1`, c); err != nil {
		t.Fatal(err)
	}
	read() // starts a check, reads the feed
	deliver := loop.HoldQueueCheck(false)
	// Changes after the check's read: one before a pass that reads the feed without the
	// check's outcome, two after it.
	if _, err := w.st.TransitionJob(ctx, a, []job.Status{job.StatusQueued}, job.StatusCancelled, store.Event{}); err != nil {
		t.Fatal(err)
	}
	if jobs, _ := read(); len(jobs) != 2 || jobs[1].Request.Resources.GPUs != 1 {
		t.Fatalf("a pass while the check runs: %+v, want jobs %s and %s (as remembered, 1 GPU)", jobs, b, c)
	}
	if _, err := w.st.AssignJobs(ctx, []store.Assignment{{JobUUID: b, Placement: store.Placement{SlaveName: "node1", SlaveInstanceID: "i1", ClusterID: 1,
		Resources: job.StateResources{SlaveName: "node1", GPUIDs: []int{0}, CPUIDs: []int{0}, CPUMemoryGb: 1}}}}); err != nil {
		t.Fatal(err)
	}
	d := w.submit(time.Hour)
	if strings.Contains(logs.String(), "drift") {
		t.Fatalf("drift logged before the check was compared:\n%s", logs.String())
	}
	deliver()
	jobs, held := read()
	if len(jobs) != 2 || jobs[0].UUID != c || jobs[1].UUID != d || jobs[0].Request.Resources.GPUs != 7 {
		t.Errorf("after the check: %+v, want %s (at the database's 7 GPUs) and %s", jobs, c, d)
	}
	if len(held) != 1 || held[0].UUID != b {
		t.Errorf("held after the check: %+v, want job %s", held, b)
	}
	if drift := driftCounted(t, mets); drift != 1 {
		t.Errorf("gpulab_scheduler_memory_drift_total = %v, want 1 (job %s only)", drift, c)
	}
	for _, id := range []string{a, b, d} {
		if strings.Contains(logs.String(), id) {
			t.Errorf("job %s, changed after the check's read, was logged:\n%s", id, logs.String())
		}
	}
	if !strings.Contains(logs.String(), c) {
		t.Errorf("the drift of job %s was not logged:\n%s", c, logs.String())
	}
}

// A check that fails is logged and changes nothing (taken for a read of nothing, it would
// empty the memory); one begun before a new term (the memory forgotten and read again) ends
// in no drift and leaves the new term's memory as it is.
func TestQueueCheckFailedOrStale(t *testing.T) {
	w, loop, logs, mets := checkedWorld(t, time.Hour)
	ctx := context.Background()
	a := w.submit(time.Hour)
	if _, err := loop.ReadQueue(ctx); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	loop.StartQueueCheck(cancelled)
	loop.WaitQueueCheck()
	jobs, err := loop.ReadQueue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].UUID != a || !strings.Contains(logs.String(), "check of its memory failed") {
		t.Fatalf("after a failed check: %d jobs, log:\n%s", len(jobs), logs.String())
	}

	// A check reads a; the term ends; a is cancelled and b submitted; the new term reads them.
	deliver := loop.HoldQueueCheck(true)
	loop.ForgetQueue()
	if _, err := w.st.TransitionJob(ctx, a, []job.Status{job.StatusQueued}, job.StatusCancelled, store.Event{}); err != nil {
		t.Fatal(err)
	}
	b := w.submit(time.Hour)
	if _, err := loop.ReadQueue(ctx); err != nil {
		t.Fatal(err)
	}
	deliver()
	jobs, err = loop.ReadQueue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].UUID != b {
		t.Errorf("after a stale check: %+v, want only %s", jobs, b)
	}
	if drift := driftCounted(t, mets); drift > 0 || strings.Contains(logs.String(), "drift") {
		t.Errorf("a check of the last term was compared (drift %v):\n%s", drift, logs.String())
	}
}

// The leader keeps of a queued job's request what Plan reads (its resources, its scheduling,
// its storage: a RAM disk counts as memory) and not the rest (image, command, environment).
func TestQueueKeepsWhatPlanReads(t *testing.T) {
	w, loop, _, _ := checkedWorld(t, time.Hour)
	ctx := context.Background()
	j, err := job.Parse([]byte(`{"name": "full", "request": {
 "resources": {"gpus": 2, "cpus": 4, "cpuMemoryGb": 8, "gpuModel": ["V100"], "clusterId": 1},
 "docker": {"image": "registry.example.org/team/train:v3", "command": "python train.py --epochs 90",
  "environment": {"EPOCHS": "90"}, "storage": [{"hostPath": "tmpfs", "containerPath": "/scratch", "sizeGb": 4}]},
 "scheduling": {"interactive": true, "restartable": true, "minDuration": "1 hour", "maxDuration": "2 hours"}}}`), job.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	j.UUID = "00000000-0000-4000-8000-00000000f011"
	j.Owner = job.Owner{UserURN: w.u.URN, ProjectURN: w.p.URN}
	j.State.Status = job.StatusQueued
	if err := w.st.CreateJob(ctx, j, w.u.ID, w.p.ID, "submitted"); err != nil {
		t.Fatal(err)
	}
	jobs, err := loop.ReadQueue(ctx)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("queue: %v %v", jobs, err)
	}
	got := jobs[0].Request
	if !reflect.DeepEqual(got.Resources, j.Request.Resources) || !reflect.DeepEqual(got.Scheduling, j.Request.Scheduling) {
		t.Errorf("kept resources %+v and scheduling %+v, want %+v and %+v", got.Resources, got.Scheduling, j.Request.Resources, j.Request.Scheduling)
	}
	if got.TotalMemoryGb() != 12 || !reflect.DeepEqual(got.Docker.Storage, j.Request.Docker.Storage) {
		t.Errorf("memory %d GB with storage %+v, want 12 (8 and a 4-GB RAM disk)", got.TotalMemoryGb(), got.Docker.Storage)
	}
	if got.Docker.Image != "" || len(got.Docker.Environment) > 0 {
		t.Errorf("the leader keeps the image %q and environment %v", got.Docker.Image, got.Docker.Environment)
	}
}
