package leader

import (
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/store"
)

// BenchmarkJobsStep is a pass's work on the jobs in memory at B8x's size (20,000 queued, 37,000
// live), the database left out: the feed's 1,000 changed rows applied, then what is held listed
// and made into the snapshot's running jobs.
func BenchmarkJobsStep(b *testing.B) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	req := []byte(`{"resources":{"gpus":1,"cpus":4,"cpuMemoryGb":16},"docker":{"image":"x","command":"true"},"scheduling":{"maxDuration":"1 hour"}}`)
	queuedRow := func(i int) store.SchedJob {
		return store.SchedJob{Held: store.Held{UUID: fmt.Sprintf("q-%08d", i), UserID: int64(i % 100), ProjectID: int64(i % 20), Status: job.StatusQueued},
			Created: t0.Add(time.Duration(i) * time.Millisecond), Request: req}
	}
	heldRow := func(i int, st job.Status) store.SchedJob {
		return store.SchedJob{Held: store.Held{UUID: fmt.Sprintf("h-%08d", i), UserID: int64(i % 100), ProjectID: int64(i % 20), Status: st,
			SlaveName: fmt.Sprintf("sim-%d", i/8), GPUIDs: []int{i % 8}, CPUIDs: []int{i % 8, i%8 + 8}, MemoryGb: 16,
			RunningAt: sql.NullTime{Time: t0, Valid: st == job.StatusRunning}, MaxDuration: 3600},
			Created: t0.Add(time.Duration(i) * time.Millisecond), Holds: true}
	}
	var rows []store.SchedJob
	for i := range 20000 {
		rows = append(rows, queuedRow(100000+i))
	}
	for i := range 37000 {
		rows = append(rows, heldRow(i, job.StatusRunning))
	}
	mem, err := fullMemory(rows)
	if err != nil {
		b.Fatal(err)
	}
	q := &queue{memory: mem}
	next, nextHeld := 200000, 37000
	now := t0.Add(time.Hour)
	var slaves []scheduler.Slave
	for i := range 37000 / 8 {
		slaves = append(slaves, scheduler.Slave{Name: fmt.Sprintf("sim-%d", i), InstanceID: "i"})
	}
	slices.SortFunc(slaves, func(a, b scheduler.Slave) int { return strings.Compare(a.Name, b.Name) })
	view := &slaveView{slaves: slaves, index: scheduler.NewSlaveIndex(slaves, nil), gen: 1}
	var running []scheduler.Placed
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		var changed []store.SchedJob
		for range 100 { // submitted
			changed = append(changed, queuedRow(next))
			next++
		}
		for _, j := range q.order[:100] { // assigned
			r := heldRow(nextHeld, job.StatusAssigned)
			r.UUID, r.Created = j.UUID, j.Submitted
			changed = append(changed, r)
			nextHeld++
		}
		for _, h := range q.holders[:100] { // ended
			r := h.SchedJob
			r.Status, r.Holds = job.StatusFinished, false
			changed = append(changed, r)
		}
		for _, h := range q.holders[100:800] { // a state change
			r := h.SchedJob
			r.Status = job.StatusStarting
			changed = append(changed, r)
		}
		if err := q.apply(changed, nil); err != nil {
			b.Fatal(err)
		}
		q.takeChanges()
		running = heldList{live: q.holders}.placed(running[:0], now, view)
	}
}

// BenchmarkCheckCompare is the comparison of a check's read with the memory at B8x's size.
func BenchmarkCheckCompare(b *testing.B) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	req := []byte(`{"resources":{"gpus":1,"cpus":4,"cpuMemoryGb":16},"docker":{"image":"x","command":"true"},"scheduling":{"maxDuration":"1 hour"}}`)
	var rows []store.SchedJob
	for i := range 20000 {
		rows = append(rows, store.SchedJob{Held: store.Held{UUID: fmt.Sprintf("q-%08d", i), Status: job.StatusQueued}, Created: t0, Request: req})
	}
	for i := range 37000 {
		rows = append(rows, store.SchedJob{Held: store.Held{UUID: fmt.Sprintf("h-%08d", i), Status: job.StatusRunning, GPUIDs: []int{1}, CPUIDs: []int{1, 2}},
			Created: t0, Holds: true})
	}
	a, _ := fullMemory(rows)
	c, _ := fullMemory(rows)
	q := &queue{memory: a}
	b.ResetTimer()
	for range b.N {
		if q.compare(c) != 0 {
			b.Fatal("drift")
		}
	}
}
