package scheduler

import (
	"slices"
	"sort"
	"time"
)

// Overtaking (issue 15). The forecast replays the queue as it stands, but in the fair order a
// job submitted later by a lighter user, or for a shorter time, goes before the jobs already
// waiting: on the Philly replay the waits predicted under ten minutes came true 1.6 times
// longer at the median, 3.7 times at the 75th percentile. What overtakes a job is the work
// that arrives ranked ahead of it. If arrivals ranked ahead of a job bring work at a share σ of
// the cluster's GPUs, the time until the work ahead of it is done stretches from W to W/(1−σ)
// (a preemptive-priority queue's waiting time): a job of a light user with a short maxDuration
// has little ranked ahead of it and keeps its estimate; a heavy user's long job is told it will
// wait longer. σ is measured on the jobs submitted in the last ArrivalWindow
// (Snapshot.Arrivals), ranked as they would be now (FairRank with today's tallies) and each
// weighing its GPUs times the run time its owner's ratio expects of its maxDuration.

// Arrival is Count jobs (1 when zero) submitted recently by one owner with the same GPUs and
// maxDuration: the master reads them grouped so, a day of a busy site in a few thousand rows.
type Arrival struct {
	UserID      int64
	GPUs        int
	MaxDuration time.Duration
	Count       int
}

// ArrivalWindow is how far back Snapshot.Arrivals reach: a day follows the daily rhythm of
// submissions without forgetting the night.
const ArrivalWindow = 24 * time.Hour

// maxOvertake bounds σ: a queue that arrivals ranked ahead would fill completely gets waits five
// times the replayed ones, not unbounded ones.
const maxOvertake = 0.8

// overtaking is the share of the cluster's GPUs that arrivals ranked ahead of a given rank
// bring, from one pass's arrivals.
type overtaking struct {
	ranks []float64 // ascending
	share []float64 // share[i]: the arrivals ranked below ranks[i], as a share of the GPUs
}

func newOvertaking(arrivals []Arrival, tallies map[int64]float64, ratios RunRatios, gpus int) *overtaking {
	if len(arrivals) == 0 || gpus <= 0 {
		return nil
	}
	type ar struct{ rank, work float64 }
	as := make([]ar, 0, len(arrivals))
	for _, a := range arrivals {
		if a.GPUs <= 0 {
			continue // a CPU job takes no GPU from anyone
		}
		run := float64(a.MaxDuration) * ratios.of(a.UserID, a.MaxDuration).Mid
		as = append(as, ar{FairRank(tallies[a.UserID], a.MaxDuration), float64(max(a.Count, 1)) * float64(a.GPUs) * run})
	}
	if len(as) == 0 {
		return nil
	}
	slices.SortFunc(as, func(a, b ar) int {
		switch {
		case a.rank < b.rank:
			return -1
		case a.rank > b.rank:
			return 1
		}
		return 0
	})
	capacity := float64(gpus) * float64(ArrivalWindow)
	o := &overtaking{ranks: make([]float64, len(as)), share: make([]float64, len(as)+1)}
	for i, a := range as {
		o.ranks[i] = a.rank
		o.share[i+1] = o.share[i] + a.work/capacity
	}
	return o
}

// of is σ for a job of the given rank: the share of the arrivals ranked strictly ahead of it.
func (o *overtaking) of(rank float64) float64 {
	if o == nil {
		return 0
	}
	i := sort.SearchFloat64s(o.ranks, rank) // arrivals ranked below rank: ranks[:i]
	return min(o.share[i], maxOvertake)
}

// stretch scales a range's likely and late waits (from now) by 1/(1−σ); the early end stays,
// since nothing need overtake the job.
func stretch(now time.Time, r Range, sigma float64) Range {
	if sigma <= 0 {
		return r
	}
	f := 1 / (1 - sigma)
	scale := func(t time.Time) time.Time {
		if !t.After(now) {
			return t
		}
		return now.Add(time.Duration(float64(t.Sub(now)) * f))
	}
	r.Likely, r.Late = scale(r.Likely), scale(r.Late)
	return r
}

// overtake stretches the ranges of the waiting jobs by what arrivals ranked ahead of each
// bring (see above).
func (p *planner) overtake(ranges map[string]Range, waiting []*Job, s Snapshot) {
	if len(s.Arrivals) == 0 || len(ranges) == 0 {
		return
	}
	gpus := 0
	for _, st := range p.slaves {
		if st.online && st.accepting {
			gpus += len(st.gpus)
		}
	}
	o := newOvertaking(s.Arrivals, s.Tallies, s.Ratios, gpus)
	if o == nil {
		return
	}
	for _, j := range waiting {
		r, ok := ranges[j.UUID]
		if !ok {
			continue
		}
		ranges[j.UUID] = stretch(s.Now, r, o.of(FairRank(s.Tallies[j.UserID], j.Request.Scheduling.MaxDuration.Std())))
	}
}
