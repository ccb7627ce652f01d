package store

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// DefaultUsageFlush is how long a job's heartbeat samples are summed in the master before they
// are written as one row of its usage series (SetUsageFlush).
const DefaultUsageFlush = 30 * time.Second

// usageSum is the time-weighted sum of a job's samples since since (the first one's arrival,
// on this master's clock): what one row of the series will average.
type usageSum struct {
	since          time.Time
	secs, cpu, mem float64
	gpus           []gpuSum // by index
}

// gpuSum is one GPU's part of a usageSum. A GPU has its own seconds: a slave that could not
// read a GPU at one heartbeat leaves it out of that sample, which must not count as 0 %.
type gpuSum struct {
	index           int
	secs, util, mem float64
}

// add sums a sample standing for secs seconds.
func (s *usageSum) add(u UsageSample, secs float64) {
	s.secs += secs
	s.cpu += u.CPUPercent * secs
	s.mem += float64(u.MemoryMiB) * secs
	for _, g := range u.GPUs {
		sum := s.gpu(g.Index)
		sum.secs += secs
		sum.util += g.UtilPercent * secs
		sum.mem += float64(g.MemoryUsedMiB) * secs
	}
}

// gpu is the sum of GPU index, added (in index order) when new.
func (s *usageSum) gpu(index int) *gpuSum {
	i, found := slices.BinarySearchFunc(s.gpus, index, func(x gpuSum, idx int) int { return x.index - idx })
	if !found {
		s.gpus = slices.Insert(s.gpus, i, gpuSum{index: index})
	}
	return &s.gpus[i]
}

// merge adds o's sums to s (o began at o.since).
func (s *usageSum) merge(o *usageSum) {
	if s.since.IsZero() || o.since.Before(s.since) {
		s.since = o.since
	}
	s.secs, s.cpu, s.mem = s.secs+o.secs, s.cpu+o.cpu, s.mem+o.mem
	for _, g := range o.gpus {
		sum := s.gpu(g.index)
		sum.secs += g.secs
		sum.util += g.util
		sum.mem += g.mem
	}
}

// average is the sum as one sample: each value averaged over the time its samples stand for.
func (s *usageSum) average(job string) UsageSample {
	u := UsageSample{JobUUID: job}
	if s.secs > 0 {
		u.CPUPercent = s.cpu / s.secs
		u.MemoryMiB = int64(math.Round(s.mem / s.secs))
	}
	for _, g := range s.gpus {
		if g.secs > 0 {
			u.GPUs = append(u.GPUs, GPUSample{Index: g.index, UtilPercent: g.util / g.secs, MemoryUsedMiB: int64(math.Round(g.mem / g.secs))})
		}
	}
	return u
}

// usageBuffer sums the jobs' heartbeat samples in the master and writes each job's sum as one
// row of its series once it covers the flush interval (SetUsageFlush): a heartbeat writes no
// row per job (issue 16: 5,000 slaves running 22,000 jobs appended 4,400 rows a second with
// their two index entries, a large share of Postgres's CPU and WAL), and the rows that are
// written leave a few at a time, all due jobs of a tick in one statement. The series' finest
// points are then of the flush interval rather than of the heartbeat interval; the idle-GPU
// check asks for an interval short enough for its window (leader.UsageFlush).
//
// What is summed and not yet written is lost if the master dies (at most one flush interval of
// a job's usage: soft state, like the heartbeat itself); Close writes it on a clean stop, and a
// write that fails is kept and tried again at the next tick. A job's sum lives until it is
// written, so the buffer holds at most one per job the slaves report.
type usageBuffer struct {
	write func(ctx context.Context, secs []float64, samples []UsageSample) error

	mu     sync.Mutex
	every  time.Duration
	sums   map[string]*usageSum
	stop   chan struct{} // closed by close; nil until the flusher runs
	done   chan struct{} // closed when the flusher has ended
	closed bool          // the store is closed: nothing more is taken
}

func newUsageBuffer(write func(ctx context.Context, secs []float64, samples []UsageSample) error) *usageBuffer {
	return &usageBuffer{write: write, every: DefaultUsageFlush, sums: map[string]*usageSum{}}
}

// setEvery sets the flush interval.
func (b *usageBuffer) setEvery(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.every = d
}

// add sums samples, each standing for secs, and starts the flusher with the first ones.
func (b *usageBuffer) add(now time.Time, secs float64, samples []UsageSample) {
	if len(samples) == 0 || secs <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	for _, u := range samples {
		s := b.sums[u.JobUUID]
		if s == nil {
			s = &usageSum{since: now}
			b.sums[u.JobUUID] = s
		}
		s.add(u, secs)
	}
	if b.stop == nil {
		b.stop, b.done = make(chan struct{}), make(chan struct{})
		go b.run(b.stop, b.done)
	}
}

// flushTick is how often the flusher looks for due sums: a quarter of the interval, within
// [50 ms, 1 s], so a sum is written at most a quarter late and a tick writes what a quarter
// second of heartbeats made due.
func flushTick(every time.Duration) time.Duration {
	return min(max(every/4, 50*time.Millisecond), time.Second)
}

// run writes the due sums at every tick until stop is closed.
func (b *usageBuffer) run(stop, done chan struct{}) {
	defer close(done)
	b.mu.Lock()
	every := b.every
	b.mu.Unlock()
	t := time.NewTicker(flushTick(every))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			_ = b.flush(ctx, now, false)
			cancel()
			b.mu.Lock()
			if e := b.every; e != every {
				every = e
				t.Reset(flushTick(every))
			}
			b.mu.Unlock()
		}
	}
}

// take removes and returns the sums begun at least every before now (all with all), in a stable
// order.
func (b *usageBuffer) take(now time.Time, all bool) (jobs []string, sums []*usageSum) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, s := range b.sums {
		if all || now.Sub(s.since) >= b.every {
			jobs = append(jobs, id)
		}
	}
	slices.Sort(jobs)
	for _, id := range jobs {
		sums = append(sums, b.sums[id])
		delete(b.sums, id)
	}
	return jobs, sums
}

// flush writes the due sums (every one with all) in one statement; on failure they are put back
// to be written with what came meanwhile.
func (b *usageBuffer) flush(ctx context.Context, now time.Time, all bool) error {
	jobs, sums := b.take(now, all)
	if len(jobs) == 0 {
		return nil
	}
	secs, samples := make([]float64, len(jobs)), make([]UsageSample, len(jobs))
	for i, s := range sums {
		secs[i], samples[i] = s.secs, s.average(jobs[i])
	}
	err := b.write(ctx, secs, samples)
	if err == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, id := range jobs {
		if s := b.sums[id]; s != nil {
			sums[i].merge(s)
		}
		b.sums[id] = sums[i]
	}
	return fmt.Errorf("write the usage of %d jobs: %w", len(jobs), err)
}

// pending is the job's sum not yet written, as a point of its series at now (ok false: none).
func (b *usageBuffer) pending(job string, now time.Time) (UsagePoint, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sums[job]
	if s == nil || s.secs <= 0 {
		return UsagePoint{}, false
	}
	u := s.average(job)
	return UsagePoint{Time: now, Secs: s.secs, CPUPercent: u.CPUPercent, MemoryMiB: u.MemoryMiB, GPUs: u.GPUs}, true
}

// close stops the flusher and writes every sum left.
func (b *usageBuffer) close(ctx context.Context) error {
	b.mu.Lock()
	stop, done := b.stop, b.done
	b.closed = true
	b.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
	return b.flush(ctx, time.Now(), true)
}
