package bench

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gmetrics "github.com/opengpulab/gpulab/metrics"
)

// percentile is the nearest-rank percentile p (0–100) of ds; 0 when empty.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	k := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(k, 0), len(s)-1)]
}

// loadResult is what a closed-loop load run measured over its measured window.
type loadResult struct {
	N, Errors int
	Window    time.Duration
	Lat       []time.Duration
	FirstErr  error
}

// Rate is completed requests per second.
func (r loadResult) Rate() float64 { return float64(r.N) / r.Window.Seconds() }

func (r loadResult) P50() time.Duration { return percentile(r.Lat, 50) }
func (r loadResult) P99() time.Duration { return percentile(r.Lat, 99) }

// closedLoop runs workers that each call do back to back for warm+measure; only calls that
// start and end inside the measured window count. do gets the worker's index and its call
// number.
func closedLoop(workers int, warm, measure time.Duration, do func(ctx context.Context, w, i int) error) loadResult {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	from, to := start.Add(warm), start.Add(warm+measure)
	var mu sync.Mutex
	res := loadResult{Window: measure}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			n, errs := 0, 0
			var first error
			for i := 0; ; i++ {
				t0 := time.Now()
				if !t0.Before(to) {
					break
				}
				err := do(ctx, w, i)
				t1 := time.Now()
				if t0.Before(from) || t1.After(to) {
					continue
				}
				if err != nil {
					errs++
					if first == nil {
						first = err
					}
					continue
				}
				n++
				lat = append(lat, t1.Sub(t0))
			}
			mu.Lock()
			res.N += n
			res.Errors += errs
			res.Lat = append(res.Lat, lat...)
			if res.FirstErr == nil {
				res.FirstErr = first
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return res
}

// openLoop calls do at a fixed rate (each call in its own goroutine, so a slow answer does not
// slow the rate) n times, and waits for all calls.
func openLoop(rate float64, n int, do func(i int)) {
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go func() { defer wg.Done(); do(i) }()
	}
	wg.Wait()
}

// timeMap records when things happened, by key, safely from many goroutines.
type timeMap struct {
	mu sync.Mutex
	m  map[string]time.Time
}

func newTimeMap() *timeMap { return &timeMap{m: map[string]time.Time{}} }

func (tm *timeMap) set(k string, t time.Time) {
	tm.mu.Lock()
	if _, ok := tm.m[k]; !ok {
		tm.m[k] = t
	}
	tm.mu.Unlock()
}

func (tm *timeMap) get(k string) (time.Time, bool) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	t, ok := tm.m[k]
	return t, ok
}

func (tm *timeMap) len() int {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return len(tm.m)
}

// counter is an atomic event counter.
type counter struct{ atomic.Int64 }

// ms formats a duration in milliseconds, with a decimal under 10 ms.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	if v < 10 {
		return fmt.Sprintf("%.2f ms", v)
	}
	return fmt.Sprintf("%.0f ms", v)
}

// secs formats a duration in seconds.
func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// perSec formats a rate.
func perSec(r float64) string { return fmt.Sprintf("%.0f /s", r) }

// mib formats bytes in MiB.
func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// ratio formats a/b as "×r".
func ratio(a, b float64) string {
	if b == 0 || math.IsNaN(a/b) {
		return "—"
	}
	return fmt.Sprintf("×%.2f", a/b)
}

// schedQuantile reads a quantile of the waits for a CPU counted between two reports, as the
// upper end of its bucket.
func TestSchedQuantile(t *testing.T) {
	buckets := []float64{0, 1e-6, 1e-3, 1, math.MaxFloat64}
	from := memReport{Sched: []uint64{5, 5, 5, 5}, SchedBuckets: buckets}
	to := memReport{Sched: []uint64{5, 95, 9, 6}, SchedBuckets: buckets} // 90, 4 and 1 more
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, time.Millisecond}, {0.9, time.Millisecond}, {0.95, time.Second}, {0.99, time.Hour}, {1, time.Hour}} {
		if got := schedQuantile(from, to, c.q); got != c.want {
			t.Errorf("q %g: %s, want %s", c.q, got, c.want)
		}
	}
	if got := schedQuantile(to, to, 0.5); got != 0 {
		t.Errorf("nothing counted: %s", got)
	}
	last := memReport{Sched: []uint64{5, 95, 9, 7}, SchedBuckets: buckets}
	if got := schedQuantile(to, last, 0.5); got != time.Hour {
		t.Errorf("the open bucket: %s, want the hour it is capped at", got)
	}
	// The heartbeats' histogram appears with the first heartbeat: counted from zero.
	if got := beatQuantile(memReport{}, memReport{Beats: []uint64{0, 9, 1, 0}, BeatBuckets: buckets}, 0.95); got != time.Second {
		t.Errorf("heartbeats from no histogram: %s, want 1s", got)
	}
}

// TestBeatHandlerTimes: the master's histogram of the heartbeat route (one series per status)
// becomes counts per bucket, the first from 0 and the last open; other routes are left out.
func TestBeatHandlerTimes(t *testing.T) {
	mets := gmetrics.NewMaster(nil, gmetrics.MasterOptions{})
	d := &driver{mets: mets}
	if counts, _ := d.beatHandlerTimes(); counts != nil {
		t.Errorf("before any heartbeat: %v, want none", counts)
	}
	for _, ms := range []int{0, 3, 3, 40, 20000} {
		mets.ObserveRequest("POST /api/slave/v1/heartbeat", "POST", 200, time.Duration(ms)*time.Millisecond)
	}
	mets.ObserveRequest("POST /api/slave/v1/heartbeat", "POST", 401, 3*time.Millisecond)
	mets.ObserveRequest("GET /api/gpulab/v3.0/jobs", "GET", 200, 3*time.Millisecond)
	counts, bounds := d.beatHandlerTimes()
	if len(bounds) != len(counts)+1 || bounds[0] != 0 || bounds[len(bounds)-1] != math.MaxFloat64 {
		t.Fatalf("bounds %v for %d counts", bounds, len(counts))
	}
	got := map[float64]uint64{}
	var total uint64
	for i, c := range counts {
		if c > 0 {
			got[bounds[i+1]] = c
		}
		total += c
	}
	want := map[float64]uint64{0.001: 1, 0.005: 3, 0.05: 1, 30: 1}
	if total != 6 || !reflect.DeepEqual(got, want) {
		t.Errorf("counts by upper bound %v (%d in all), want %v (6)", got, total, want)
	}
	if got := histQuantile(nil, counts, bounds, 0.5); got != 5*time.Millisecond {
		t.Errorf("median %s, want 5ms", got)
	}
}

// bunching counts per slot of the window only, and its p99 and largest slot see a group.
func TestBunching(t *testing.T) {
	from := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var even []time.Time
	for k := range 100 { // one every 10 ms over a second: 10 in every 100-ms slot
		even = append(even, from.Add(time.Duration(k)*10*time.Millisecond))
	}
	if mean, p99, most := bunching(even, from, time.Second, 100*time.Millisecond); mean != 10 || p99 != 10 || most != 10 {
		t.Errorf("evenly spread: mean %g, p99 %d, most %d; want 10, 10, 10", mean, p99, most)
	}
	// 40 in the last slot and none in the three before it; two outside the window not counted.
	bunched := append([]time.Time{}, even[:60]...)
	for range 40 {
		bunched = append(bunched, from.Add(950*time.Millisecond))
	}
	bunched = append(bunched, from.Add(-time.Millisecond), from.Add(time.Second))
	mean, p99, most := bunching(bunched, from, time.Second, 100*time.Millisecond)
	if p99 != 40 || most != 40 || mean != 10 {
		t.Errorf("bunched: mean %g, p99 %d, most %d; want 10, 40, 40", mean, p99, most)
	}
}
