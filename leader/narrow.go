package leader

import (
	"slices"

	"github.com/opengpulab/gpulab/scheduler"
)

// DefaultSweep is how many of the waiting jobs that cannot start now a narrowed pass plans
// anyway, first in queue order: as many as the forecast covers (scheduler.ForecastCap), so
// that estimates are those of a full pass.
const DefaultSweep = scheduler.ForecastCap

// narrow returns the queued jobs a pass hands the planner when it need not plan them all
// (issue 16), and those the planner must decide whatever their counts. With a long queue on a
// full cluster most jobs cannot start, and planning each of them again at every pass (its
// explanation against every slave) was most of the pass. The planner narrows the plan itself
// (scheduler.Snapshot.Sweep): it decides every job that could start by counts at its turn —
// after the assignments before it, so that once the room freed since the last pass is taken,
// the jobs of the same shape behind are no longer planned (B8x: some 25 jobs end between two
// passes, and a 1-GPU job fits where any of them ended: judged against the room at the pass's
// start, every one of 24,000 queued jobs was planned at every pass) — plus the first sweep of
// the others in queue order: the head that backfill reserves room for, the starters that halts
// make room for and the jobs the forecast covers are among them.
//
// Here, a job waiting for time alone (scheduler.Snapshot.WaitsForTime: notBefore ahead, or its
// reservations not begun) is left out unless it must be decided: Plan would take nothing for
// it and decide nothing else because of it, and without this a backlog booked for a
// reservation days ahead (B2x: 20,000 jobs) was planned at every pass and filled the sweep.
// Every job no earlier pass of this term planned must be decided (a new one is judged at once:
// impossible requests fail, every job gets its first explanation); so must interactive jobs
// and those past their notAfter, which the planner sees to itself.
//
// What a narrowed pass leaves alone is the explanation and estimate of the jobs left out,
// halts for them, and failing those that became impossible (their cluster or the only slaves
// able to take them removed): all done by the next full pass (Config.FullReadEvery).
//
// fresh are the queued jobs no pass of this term planned: few (the new ones); job finds a
// queued job by uuid (the queue's memory), not ok when it is not queued. decide gives their
// places in jobs (scheduler.Snapshot.Decide), found by their place in the queue's order
// (submitted, then uuid: compareJobs) from the few fresh jobs, never by looking every queued
// job up in fresh: with 10,000 jobs queued and new ones arriving at every pass (B8x), that
// look-up was a tenth of the pass's CPU. A queued job is looked up in fresh only when it waits
// for time alone.
func narrow(snap scheduler.Snapshot, fresh map[string]bool, job func(id string) (scheduler.Job, bool)) (jobs []scheduler.Job, decide []int) {
	// The queue is copied only from the first job left out: most passes leave none out, and a
	// copy of 20,000 jobs at every pass was a fifth of what the loop allocated (B8x).
	jobs = snap.Queued
	copied := false
	for i := range snap.Queued {
		j := &snap.Queued[i]
		keep := !snap.WaitsForTime(j) || j.Request.Scheduling.Interactive ||
			j.Request.Scheduling.NotAfter != nil && !j.Request.Scheduling.NotAfter.After(snap.Now) ||
			len(fresh) > 0 && fresh[j.UUID]
		switch {
		case !keep && !copied:
			// Sized to what comes before: the jobs left out are often most of the queue
			// (B2x: a backlog at its head), and a copy the queue's length was allocated and
			// cleared at every pass.
			jobs, copied = slices.Clone(snap.Queued[:i]), true
		case keep && copied:
			jobs = append(jobs, *j)
		}
	}
	decide = make([]int, 0, len(fresh))
	for id := range fresh {
		if i, ok := placeIn(jobs, id, job); ok {
			decide = append(decide, i)
		}
	}
	slices.Sort(decide) // the map's order is random; the plan's input need not be
	return jobs, decide
}

// placeIn finds the queued job id in jobs, which the queue keeps in compareJobs's order: by
// a binary search for the job as the queue holds it, or, should jobs not be in that order, by
// looking at each. Not ok when id is not queued.
func placeIn(jobs []scheduler.Job, id string, job func(id string) (scheduler.Job, bool)) (int, bool) {
	j, ok := job(id)
	if !ok {
		return 0, false
	}
	if i, found := slices.BinarySearchFunc(jobs, j, compareJobs); found {
		return i, true // compareJobs is 0 for the same uuid only
	}
	i := slices.IndexFunc(jobs, func(x scheduler.Job) bool { return x.UUID == id })
	return i, i >= 0
}

// narrowScratch is what planNarrowed fills again at every pass rather than allocating it: a
// new copy of the jobs it decided (some 5,000 at B8x's size, ~2 MB a pass) and a new map of
// those it skipped were the master's largest allocations in B8x's soak (1.26 of 18.8 GB), where
// the collector's work is a large part of the master's CPU. What a pass gets from it is valid
// until the next pass; the forecaster, which may still plan a snapshot then, gets a copy
// (Loop.handOff).
type narrowScratch struct {
	decided []scheduler.Job
	skipped map[string]bool
}

// planNarrowed plans the narrowed queue (narrow) and returns the plan and the jobs it decided,
// in scratch's slice when some were skipped (scratch nil: a new one).
// When the plan halts a running job for a job after the first it left out, which the full plan
// might have given to that one, it plans the whole queue instead (narrowed false).
func planNarrowed(snap scheduler.Snapshot, fresh map[string]bool, job func(id string) (scheduler.Job, bool), sweep int, scratch *narrowScratch) (plan scheduler.Plan, jobs []scheduler.Job, narrowed bool) {
	jobs, decide := narrow(snap, fresh, job)
	sub := snap
	sub.Queued, sub.Sweep, sub.Decide = jobs, sweep, decide
	plan = sub.Plan()
	if plan.HaltAfterCut {
		return snap.Plan(), snap.Queued, false
	}
	if len(plan.Skipped) == 0 {
		return plan, jobs, len(jobs) < len(snap.Queued)
	}
	if scratch == nil {
		scratch = &narrowScratch{}
	}
	if scratch.skipped == nil {
		scratch.skipped = make(map[string]bool, len(plan.Skipped))
	}
	skipped := scratch.skipped
	clear(skipped)
	for _, id := range plan.Skipped {
		skipped[id] = true
	}
	decided := scratch.decided[:0]
	for _, j := range jobs {
		if !skipped[j.UUID] {
			decided = append(decided, j)
		}
	}
	clear(decided[len(decided):cap(decided)]) // what more jobs left behind: not kept alive
	scratch.decided = decided
	return plan, decided, true
}
