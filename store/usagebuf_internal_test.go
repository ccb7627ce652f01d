package store

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// A sum averages each value over the time its samples stand for; a GPU left out of a sample
// (the slave could not read it) is averaged over its own samples, not counted as idle.
func TestUsageSumAverages(t *testing.T) {
	var s usageSum
	s.add(UsageSample{CPUPercent: 100, MemoryMiB: 1000, GPUs: []GPUSample{{Index: 1, UtilPercent: 90, MemoryUsedMiB: 500}, {Index: 0, UtilPercent: 10, MemoryUsedMiB: 100}}}, 5)
	s.add(UsageSample{CPUPercent: 40, MemoryMiB: 2000, GPUs: []GPUSample{{Index: 0, UtilPercent: 30, MemoryUsedMiB: 300}}}, 15)
	got := s.average("j")
	want := UsageSample{JobUUID: "j", CPUPercent: 55, MemoryMiB: 1750,
		GPUs: []GPUSample{{Index: 0, UtilPercent: 25, MemoryUsedMiB: 250}, {Index: 1, UtilPercent: 90, MemoryUsedMiB: 500}}}
	if !reflect.DeepEqual(got, want) || s.secs != 20 {
		t.Errorf("average of two samples: %+v over %gs, want %+v over 20s", got, s.secs, want)
	}
	// Merging two sums is the sum of all their samples.
	var a, b, all usageSum
	t0 := time.Unix(1000, 0)
	a.since, b.since, all.since = t0.Add(time.Second), t0, t0
	for i, u := range []UsageSample{{CPUPercent: 10, GPUs: []GPUSample{{Index: 2, UtilPercent: 1}}}, {CPUPercent: 70, MemoryMiB: 7}, {CPUPercent: 20, GPUs: []GPUSample{{Index: 0, UtilPercent: 50}}}} {
		if i == 1 {
			b.add(u, 2)
		} else {
			a.add(u, 3)
		}
		all.add(u, float64(map[bool]int{true: 2, false: 3}[i == 1]))
	}
	a.merge(&b)
	if !reflect.DeepEqual(a, all) {
		t.Errorf("merged %+v, want %+v", a, all)
	}
	if (&usageSum{}).average("x").CPUPercent != 0 || math.IsNaN((&usageSum{}).average("x").CPUPercent) {
		t.Errorf("an empty sum must average to zeros")
	}
}

// recorder is a buffer's write that keeps what it was given, failing while fail is set.
type recorder struct {
	mu      sync.Mutex
	fail    bool
	secs    []float64
	samples []UsageSample
	calls   int
}

func (r *recorder) write(_ context.Context, secs []float64, samples []UsageSample) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.fail {
		return errors.New("database down")
	}
	r.secs, r.samples = append(r.secs, secs...), append(r.samples, samples...)
	return nil
}

// The buffer writes a job's sum once it covers the interval, all due jobs in one write, keeps
// what a failed write carried for the next, and writes everything left when closed.
func TestUsageBufferFlushes(t *testing.T) {
	rec := &recorder{}
	b := newUsageBuffer(rec.write)
	b.setEvery(10 * time.Second)
	t0 := time.Unix(1000, 0)
	sample := func(job string, cpu float64) []UsageSample { return []UsageSample{{JobUUID: job, CPUPercent: cpu}} }
	// No flusher goroutine: this test drives the flushes (as if one had run and ended).
	b.stop, b.done = make(chan struct{}), make(chan struct{})
	close(b.done)
	add := b.add
	add(t0, 5, sample("a", 10))
	add(t0.Add(4*time.Second), 5, sample("b", 50))
	add(t0.Add(5*time.Second), 5, sample("a", 30))
	ctx := context.Background()
	if err := b.flush(ctx, t0.Add(9*time.Second), false); err != nil || rec.calls != 0 {
		t.Fatalf("nothing is due before the interval: %d writes, %v", rec.calls, err)
	}
	if p, ok := b.pending("a", t0.Add(9*time.Second)); !ok || p.Secs != 10 || p.CPUPercent != 20 {
		t.Errorf("a's pending point: %+v %v, want 10 s at 20 %%", p, ok)
	}
	if _, ok := b.pending("c", t0); ok {
		t.Errorf("a job without samples has a pending point")
	}
	if err := b.flush(ctx, t0.Add(10*time.Second), false); err != nil || rec.calls != 1 || len(rec.samples) != 1 ||
		rec.samples[0].JobUUID != "a" || rec.samples[0].CPUPercent != 20 || rec.secs[0] != 10 {
		t.Fatalf("at 10 s: %d writes of %+v over %v, %v; want a's two samples as one 10 s row at 20 %%", rec.calls, rec.samples, rec.secs, err)
	}
	if _, ok := b.pending("a", t0.Add(10*time.Second)); ok {
		t.Errorf("a's sum is still pending after it was written")
	}
	// A failed write keeps b's sum, merged with what comes before the next one.
	rec.fail = true
	if err := b.flush(ctx, t0.Add(14*time.Second), false); err == nil {
		t.Fatalf("a failed write must be reported")
	}
	add(t0.Add(15*time.Second), 5, sample("b", 10))
	add(t0.Add(15*time.Second), 5, sample("a", 90))
	rec.fail = false
	if err := b.flush(ctx, t0.Add(16*time.Second), false); err != nil || len(rec.samples) != 2 ||
		rec.samples[1].JobUUID != "b" || rec.samples[1].CPUPercent != 30 || rec.secs[1] != 10 {
		t.Fatalf("after the failure: %+v over %v, %v; want b's two samples as one 10 s row at 30 %%", rec.samples, rec.secs, err)
	}
	if err := b.close(ctx); err != nil || len(rec.samples) != 3 || rec.samples[2].JobUUID != "a" || rec.samples[2].CPUPercent != 90 {
		t.Fatalf("close: %+v, %v; want a's last sample written", rec.samples, err)
	}
	b.add(t0.Add(20*time.Second), 5, sample("a", 1))
	if _, ok := b.pending("a", t0.Add(20*time.Second)); ok {
		t.Errorf("a closed buffer took a sample")
	}
}

// The flusher goroutine writes a sum once it is due, without anyone asking.
func TestUsageBufferFlusherRuns(t *testing.T) {
	rec := &recorder{}
	b := newUsageBuffer(rec.write)
	b.setEvery(100 * time.Millisecond)
	b.add(time.Now(), 1, []UsageSample{{JobUUID: "a", CPUPercent: 5}})
	deadline := time.Now().Add(time.Minute)
	for {
		rec.mu.Lock()
		n := len(rec.samples)
		rec.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the flusher wrote nothing within a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := b.close(context.Background()); err != nil || len(rec.samples) != 1 {
		t.Errorf("close: %v, %d samples written", err, len(rec.samples))
	}
}

// ownSamples keeps the samples of the jobs the master has on the slave, in their order, wherever
// the others are among them, and hands back the slave's own list when every sample is its own.
func TestOwnSamples(t *testing.T) {
	jobs := []SlaveJob{{UUID: "a"}, {UUID: "b"}, {UUID: "c"}}
	ids := func(us []UsageSample) string {
		var s []string
		for _, u := range us {
			s = append(s, u.JobUUID)
		}
		return strings.Join(s, ",")
	}
	for _, c := range []struct{ in, want string }{
		{"a,b,c", "a,b,c"}, {"x,a,b", "a,b"}, {"a,x,b", "a,b"}, {"a,b,x", "a,b"}, {"x,y", ""}, {"", ""},
		{"c,x,a,y,b", "c,a,b"},
	} {
		var in []UsageSample
		if c.in != "" {
			for _, id := range strings.Split(c.in, ",") {
				in = append(in, UsageSample{JobUUID: id})
			}
		}
		got := ownSamples(in, jobs)
		if ids(got) != c.want {
			t.Errorf("%s: kept %q, want %q", c.in, ids(got), c.want)
		}
		if c.in == c.want && c.in != "" && &got[0] != &in[0] {
			t.Errorf("%s: every sample its own, but copied", c.in)
		}
		if ids(in) != c.in {
			t.Errorf("%s: the slave's list changed to %s", c.in, ids(in))
		}
	}
}
