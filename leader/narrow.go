package leader

import (
	"slices"

	"github.com/opengpulab/gpulab/scheduler"
)

// DefaultSweep is how many of the waiting jobs that cannot start now a narrowed pass plans
// anyway, first in queue order: as many as the forecast covers (scheduler.ForecastCap), so
// that estimates are those of a full pass.
const DefaultSweep = scheduler.ForecastCap

// narrow returns the queued jobs a pass plans when it need not plan them all (issue 16). With
// a long queue on a full cluster most jobs cannot start, and planning each of them again at
// every pass (its explanation against every slave) was most of the pass. A narrowed pass
// plans:
//   - every job no earlier pass of this term planned (a new one is judged at once: impossible
//     requests fail, every job gets its first explanation);
//   - every job that could start now by counts alone: some online, accepting slave of its
//     cluster (any, when it names none) has as many free GPUs, CPUs and GB of memory as it
//     asks for (a superset of what Plan places: models, pins, caps and reservations are Plan's
//     to judge);
//   - every job whose notAfter has passed (Plan fails it), and every interactive job (one that
//     cannot start fails unless a halt makes room for it);
//   - the first sweep of the other jobs in queue order: the head that backfill reserves room
//     for, the starters that halts make room for and the jobs the forecast covers are among
//     them.
//
// A job waiting for time alone (scheduler.Snapshot.WaitsForTime: notBefore ahead, or its
// reservations not begun) is left out, and counts neither in the sweep nor as a cut: Plan would
// take nothing for it and decide nothing else because of it. Without this, a backlog booked for
// a reservation days ahead (B2x: 20,000 jobs) was planned at every pass, and filled the sweep.
//
// early are the jobs whose turn comes before that of any job left out: Plan decides for them
// exactly what it decides in a full pass (it gives turns in queue order, and only what comes
// before a job's turn bears on it). A job left out could not start, so it takes nothing and
// counts against no cap: every plan of the narrowed queue places what the full plan would,
// unless a later job took a halt the full plan would give a job left out (planNarrowed falls
// back to a full plan then), or the backfill head lies beyond the sweep (more than sweep jobs
// ahead of it wait for something other than room). What a narrowed pass leaves alone is the
// explanation and estimate of the jobs beyond the sweep, halts for them, and failing those
// that became impossible (their cluster or the only slaves able to take them removed): all
// done by the next full pass (Config.FullReadEvery).
func narrow(snap scheduler.Snapshot, planned map[string]bool, sweep int) (jobs []scheduler.Job, early map[string]bool) {
	fits := fitsByCounts(snap)
	always := func(j *scheduler.Job) bool {
		return !planned[j.UUID] || j.Request.Scheduling.Interactive ||
			j.Request.Scheduling.NotAfter != nil && !j.Request.Scheduling.NotAfter.After(snap.Now)
	}
	// The jobs waiting for time are left out before the queue is put in order: a job's place
	// depends on it alone (its key), so the others keep their order, and the sort is of the
	// few that may start rather than of a backlog booked days ahead (B2x: 20,000 jobs sorted
	// at every pass).
	type keyed struct {
		key scheduler.QueueKey
		at  int // the job's place in snap.Queued
	}
	keys := make([]keyed, 0, len(snap.Queued))
	for i := range snap.Queued {
		j := &snap.Queued[i]
		if always(j) || !snap.WaitsForTime(j) {
			keys = append(keys, keyed{snap.QueueKey(j), i})
		}
	}
	slices.SortFunc(keys, func(a, b keyed) int { return a.key.Compare(b.key) })
	// Kept jobs are marked by their place: a map of their uuids, as large as the queue, was a
	// share of the leader's garbage at every pass (B8x: 24,000 queued).
	keep := make([]bool, len(snap.Queued))
	kept := 0
	early = map[string]bool{}
	rest, cut := 0, false
	for _, k := range keys {
		j := k.key.Job
		switch {
		case always(j), fits(*j):
			keep[k.at] = true
			kept++
		case rest < sweep:
			keep[k.at] = true
			kept++
			rest++
		default:
			cut = true
		}
		if !cut {
			early[j.UUID] = true
		}
	}
	jobs = make([]scheduler.Job, 0, kept)
	for i := range snap.Queued { // the snapshot's own order, as a full pass has it
		if keep[i] {
			jobs = append(jobs, snap.Queued[i])
		}
	}
	return jobs, early
}

// planNarrowed plans the narrowed queue (narrow) and returns the plan and the jobs it planned.
// When the plan halts a running job for a job beyond the early ones, which the full plan might
// have given to a job left out, it plans the whole queue instead (narrowed false).
func planNarrowed(snap scheduler.Snapshot, planned map[string]bool, sweep int) (plan scheduler.Plan, jobs []scheduler.Job, narrowed bool) {
	jobs, early := narrow(snap, planned, sweep)
	if len(jobs) == len(snap.Queued) {
		return snap.Plan(), snap.Queued, false
	}
	sub := snap
	sub.Queued = jobs
	plan = sub.Plan()
	for _, h := range plan.Halts {
		if !early[h.ForJobUUID] {
			return snap.Plan(), snap.Queued, false
		}
	}
	return plan, jobs, true
}

// room is what a slave has free, by counts.
type room struct{ gpus, cpus, memGb int }

// fitsByCounts returns whether a job could start now by counts alone on some online,
// accepting slave of its cluster (see narrow). Answers are kept per shape (GPUs, CPUs,
// memory, cluster): a long queue has few shapes.
func fitsByCounts(snap scheduler.Snapshot) func(scheduler.Job) bool {
	// What is held, by slave: only GPUs the slave reports and CPU ids it has count, as Plan
	// counts them (a GPU that dropped out may still be held).
	type held struct {
		gpus, cpus []int
		memGb      int
	}
	holds := make(map[string]*held, len(snap.Slaves))
	for _, pl := range snap.Running {
		h := holds[pl.SlaveName]
		if h == nil {
			h = &held{}
			holds[pl.SlaveName] = h
		}
		h.gpus = append(h.gpus, pl.GPUIndices...)
		h.cpus = append(h.cpus, pl.CPUIDs...)
		h.memGb += pl.MemoryGb
	}
	byCluster := map[int][]room{}
	var all []room
	var taken bitset // reused from slave to slave: a map per slave was most of this function
	for _, s := range snap.Slaves {
		if !s.Online || !s.Accepting {
			continue
		}
		r := room{gpus: len(s.GPUs), cpus: s.CPUs, memGb: s.MemoryGb}
		if h := holds[s.Name]; h != nil {
			top := 0
			for _, g := range s.GPUs {
				top = max(top, g.Index+1)
			}
			taken.reset(top)
			for _, g := range h.gpus {
				taken.add(g)
			}
			for _, g := range s.GPUs {
				if taken.has(g.Index) {
					r.gpus--
				}
			}
			taken.reset(s.CPUs)
			for _, c := range h.cpus {
				if c < s.CPUs && taken.add(c) {
					r.cpus--
				}
			}
			r.memGb -= h.memGb
		}
		byCluster[s.ClusterID] = append(byCluster[s.ClusterID], r)
		all = append(all, r)
	}
	type shape struct{ gpus, cpus, memGb, cluster int }
	known := map[shape]bool{}
	return func(j scheduler.Job) bool {
		res := j.Request.Resources
		k := shape{res.GPUs, res.CPUs, res.CPUMemoryGb, res.ClusterID}
		if v, ok := known[k]; ok {
			return v
		}
		rooms := all
		if k.cluster > 0 {
			rooms = byCluster[k.cluster]
		}
		v := false
		for _, r := range rooms {
			if r.gpus >= k.gpus && r.cpus >= k.cpus && r.memGb >= k.memGb {
				v = true
				break
			}
		}
		known[k] = v
		return v
	}
}

// bitset is a set of the ints from 0 to its size, for counting what is held on a slave.
type bitset []uint64

// reset empties the set and sizes it for 0 ≤ i < n.
func (b *bitset) reset(n int) {
	words := (max(n, 0) + 63) / 64
	if cap(*b) < words {
		*b = make(bitset, words)
		return
	}
	*b = (*b)[:words]
	clear(*b)
}

// add puts i in the set and says whether it was new; an i out of the set's range is ignored.
func (b bitset) add(i int) bool {
	if i < 0 || i >= 64*len(b) {
		return false
	}
	w, m := i/64, uint64(1)<<(i%64)
	if b[w]&m != 0 {
		return false
	}
	b[w] |= m
	return true
}

// has says whether i is in the set.
func (b bitset) has(i int) bool {
	return i >= 0 && i < 64*len(b) && b[i/64]&(uint64(1)<<(i%64)) != 0
}
