package scheduler

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Halting for fairness (SPEC 7.4). A user with a low usage tally should not wait for weeks
// behind the long jobs of heavy users, and an interactive job should not fail just because the
// cluster is full. So when a queued job (the starter) finds no room now, the planner may halt
// running jobs of lower priority on one slave to make it. Halting costs the victims their work,
// hence the limits: never before a victim's minDuration, never an interactive job, never a job
// that started less than antiStorm ago (two passes must not halt each other's jobs back and
// forth), and only when the victims' resources really make the starter fit on that slave.
//
// The starter gets no assignment in the pass that halts: the room frees only once the victims
// have stopped. Until then their resources stay held (they are in Running), so no later job of
// the pass can take them, and the next pass places the starter.

// Halt asks one running job to stop so that a queued job can take its place.
type Halt struct {
	JobUUID string
	// Reason is the haltEvent reason: "SCORE" (the starter's owner has the lower tally, or the
	// starter is interactive), "CLUSTER" (a guest on a private cluster makes room for an owner)
	// or "RESERVATION" (a job makes room for one using a reservation of the slave).
	Reason string
	// ForJobUUID is the queued job the room is made for.
	ForJobUUID string
	// VictimScore and StarterScore are the owners' usage tallies (lower is higher priority),
	// recorded so that a user can see why the halt was fair; under PolicyLAS, the jobs'
	// attained-service levels. (A fair SCORE halt compares FairRanks, which weigh the tallies
	// by the jobs' maxDuration and maxDuration left.)
	VictimScore, StarterScore float64
}

// HaltScore is the reason of a halt made for a job of higher priority.
const HaltScore = "SCORE"

// HaltCluster is the reason of a halt of a guest on a private cluster, made for a job of one of
// the projects that own it (SPEC 7.3: owners have absolute priority on their hardware).
const HaltCluster = "CLUSTER"

// antiStorm is how long a job must have been running before it may be halted, whatever its
// minDuration: a job placed a pass ago is never undone by the next.
const antiStorm = time.Minute

// DefaultHaltFactor is Snapshot.HaltFactor's default: a SCORE halt needs the victim's fair rank
// at twice the starter's. In the Philly replay, factor 1 halted more jobs for no gain in
// fairness or completion times.
const DefaultHaltFactor = 2

// maxVictimCandidates bounds the subsets tried per slave (2^n): beyond it the least costly
// candidates are kept, which are the ones chosen anyway.
const maxVictimCandidates = 12

// makeRoom is called for a job that fits on no slave now; misses are the online, accepting
// slaves that could take it but are busy. It returns the explanation's first line when the job
// waits for halts (new ones, recorded in p.halts, or ones already under way), "" when halting
// cannot help.
func (p *planner) makeRoom(j *Job, n *need, misses []miss) string {
	if !p.halting || !p.mayHalt || len(misses) == 0 {
		return ""
	}
	// Jobs already halting may be leaving exactly the room this job needs: wait for them rather
	// than halt more (not looked for when no slave has a halting job).
	if p.haltingSlaves > 0 {
		for _, m := range misses {
			if !m.st.halting {
				continue
			}
			var going []*Placed
			for _, pl := range m.st.held {
				if pl.Halting {
					going = append(going, pl)
				}
			}
			slices.SortFunc(going, func(a, b *Placed) int { return cmp.Compare(a.JobUUID, b.JobUUID) })
			if len(going) > 0 && m.st.fitsWithout(n, going) {
				return fmt.Sprintf("waiting for %s to halt on %s", jobNames(going), m.st.s.Name)
			}
		}
	}

	// Under the fair policy a SCORE halt compares fair ranks (FairRank): the starter's by its
	// maxDuration, a victim's by the maxDuration it has left, so a heavy user's short job may
	// halt a lighter user's long one, as the queue order would have put it first.
	starterTally := p.tallies[j.UserID]
	starterScore := p.starterScore(j)
	inter := j.Request.Scheduling.Interactive
	// No slave's top outranks the starter, and none is one where a halt needs no outranking
	// (private cluster, reservation): the loop below would skip every slave. On a full
	// cluster with a long queue, that loop over thousands of slaves for each waiting job was
	// most of a pass (B8x's steady state: 0.5 s of a 0.52-s plan). One of the shortcuts
	// TestScanShortcutsKeepThePlan checks.
	if top, special := p.haltTop(); scanShortcuts && !inter && !special && !p.outranks(top, starterScore) {
		return ""
	}
	var best *slaveState
	var bestSet []*Placed
	var bestRun time.Duration
	for _, m := range misses {
		st := m.st
		if !st.haltable || p.starter[st] {
			continue
		}
		// Most busy slaves hold no job of an owner above the starter's: skip them without
		// looking at each job (makeRoom runs for every waiting job the pass reaches).
		if !inter && !p.outranks(st.topScore, starterScore) && (st.cluster == nil || !st.cluster.Private) && len(p.bookedOn[st]) == 0 {
			continue
		}
		var cands []*Placed
		for _, pl := range st.haltables {
			if len(p.victims) > 0 && p.victims[pl.JobUUID] {
				continue
			}
			if p.scoreVictim(pl, inter, starterScore) || p.guestVictim(st, j, pl) || p.bookingVictim(st, j, n, pl) {
				cands = append(cands, pl)
			}
		}
		if len(cands) == 0 {
			continue
		}
		// Preference: restartable first (they lose least), then the least run time, then uuid.
		slices.SortStableFunc(cands, func(a, b *Placed) int {
			if a.Restartable != b.Restartable {
				if a.Restartable {
					return -1
				}
				return 1
			}
			if c := cmp.Compare(p.now.Sub(a.Started), p.now.Sub(b.Started)); c != 0 {
				return c
			}
			return cmp.Compare(a.JobUUID, b.JobUUID)
		})
		if len(cands) > maxVictimCandidates {
			cands = cands[:maxVictimCandidates]
		}
		set := p.smallestSet(st, n, cands)
		if set == nil {
			continue
		}
		run := p.runTime(set)
		if best == nil || len(set) < len(bestSet) || len(set) == len(bestSet) && run < bestRun {
			best, bestSet, bestRun = st, set, run
		}
	}
	if best == nil {
		return ""
	}
	if p.victims == nil {
		p.victims, p.starter = map[string]bool{}, map[*slaveState]bool{}
	}
	p.starter[best] = true
	lighter := true // the starter's owner has a lower tally than every victim's
	for _, pl := range bestSet {
		reason := HaltScore
		switch {
		case p.guestVictim(best, j, pl):
			reason = HaltCluster
		case p.bookingVictim(best, j, n, pl):
			reason = HaltReservation
		}
		p.victims[pl.JobUUID] = true
		vs, ss := p.tallies[pl.UserID], starterTally
		if p.las {
			vs, ss = float64(lasLevel(p.attained(pl))), starterScore
		}
		lighter = lighter && starterTally < p.tallies[pl.UserID]
		p.halts = append(p.halts, Halt{JobUUID: pl.JobUUID, Reason: reason, ForJobUUID: j.UUID,
			VictimScore: vs, StarterScore: ss})
	}
	why := fmt.Sprintf("its owner's usage %.4g is below theirs", starterTally)
	switch {
	case p.las:
		why = "it has received less GPU time than they have"
	case !lighter:
		why = fmt.Sprintf("its owner's usage %.4g times its maxDuration is far below theirs times what they have left", starterTally)
	}
	switch {
	case p.onBooked(best, p.activeNamed(j)):
		why = "it uses a reservation of this slave; others make room"
	case best.cluster != nil && best.cluster.Private && slices.Contains(best.cluster.Projects, j.ProjectID):
		why = "your project owns this private cluster; guests make room"
	case inter:
		why = "interactive jobs go first"
	}
	stopped := "it has"
	if len(bestSet) > 1 {
		stopped = "they have"
	}
	return fmt.Sprintf("halting %s (%s) to make room on %s; starts when %s stopped", jobNames(bestSet), why, best.s.Name, stopped)
}

// starterScore is what a queued job's priority is measured by when it may halt others (lower:
// higher priority): its FairRank, or under PolicyLAS its attained-service level.
func (p *planner) starterScore(j *Job) float64 {
	if p.las {
		return float64(lasLevel(j.Attained))
	}
	return FairRank(p.tallies[j.UserID], j.Request.Scheduling.MaxDuration.Std())
}

// haltable says whether a running job could be halted for some starter at all: it has run its
// minDuration and antiStorm, is not interactive and not halting already.
func (p *planner) haltable(pl *Placed) bool {
	if pl.Started.IsZero() || pl.Interactive || pl.Halting {
		return false
	}
	ran := p.now.Sub(pl.Started)
	return ran >= pl.MinDuration && ran >= antiStorm
}

// scoreVictim says whether a running job, known to be haltable (past its minDuration and
// antiStorm, not interactive, not halting) and not yet a victim this pass, may be halted for the
// starter by priority: any for an interactive starter, else one of lower priority.
func (p *planner) scoreVictim(pl *Placed, starterInteractive bool, starterScore float64) bool {
	if starterInteractive {
		return true
	}
	if p.haltRestartableOnly && !pl.Restartable {
		return false
	}
	return p.outranks(p.haltScore(pl), starterScore)
}

// haltScore is what a running job's priority is measured by when it may be halted: its
// owner's tally, or under PolicyLAS its attained-service level (higher: lower priority).
func (p *planner) haltScore(pl *Placed) float64 {
	if p.las {
		return float64(lasLevel(p.attained(pl)))
	}
	left := 14 * 24 * time.Hour
	if !pl.Ends.IsZero() {
		left = max(0, pl.Ends.Sub(p.now))
	}
	return FairRank(p.tallies[pl.UserID], left)
}

// haltTop is the highest topScore of the haltable slaves (-1 when none), and whether some
// haltable slave is on a private cluster or under a reservation, where a halt may take a job
// that does not outrank the starter. Found at the first call: the slaves' tops and bookings are
// fixed when the pass begins (victims taken later only lower what is left to take, so the
// top stays an upper bound).
func (p *planner) haltTop() (top float64, special bool) {
	if !p.topKnown {
		p.top, p.topKnown = -1, true
		for _, st := range p.slaves {
			if !st.haltable {
				continue
			}
			p.top = max(p.top, st.topScore)
			if st.cluster != nil && st.cluster.Private || len(p.bookedOn[st]) > 0 {
				p.topSpecial = true
			}
		}
	}
	return p.top, p.topSpecial
}

// outranks says whether a victim's score is far enough above a starter's for a SCORE halt.
// It grows with the victim's score, so the highest score on a slave tells whether any of its
// jobs can be a victim (slaveState.topScore).
func (p *planner) outranks(victimScore, starterScore float64) bool {
	if p.las {
		return victimScore > starterScore
	}
	return starterScore < victimScore && starterScore*p.haltFactor <= victimScore
}

// guestVictim says whether a running job is a guest on a private cluster that the starter's
// project owns, and may be halted for it whatever the tallies: past its minDuration (and
// antiStorm), not interactive, not already halting.
func (p *planner) guestVictim(st *slaveState, starter *Job, pl *Placed) bool {
	c := st.cluster
	if c == nil || !c.Private || !slices.Contains(c.Projects, starter.ProjectID) || slices.Contains(c.Projects, pl.ProjectID) {
		return false
	}
	return p.haltable(pl) && !p.victims[pl.JobUUID]
}

// smallestSet finds the fewest candidates whose resources, with what is free, make the job fit
// on the slave; among sets of that size, the fewest non-restartable ones, then the least run
// time, then the first in preference order. Nil when even all of them are not enough.
func (p *planner) smallestSet(st *slaveState, n *need, cands []*Placed) []*Placed {
	if !st.fitsWithout(n, cands) {
		return nil
	}
	idx := make([]int, 0, len(cands))
	set := make([]*Placed, 0, len(cands))
	for k := 1; k <= len(cands); k++ {
		var best []*Placed
		var bestHard int
		var bestRun time.Duration
		var try func(from int)
		try = func(from int) {
			if len(idx) == k {
				set = set[:0]
				hard := 0
				for _, i := range idx {
					set = append(set, cands[i])
					if !cands[i].Restartable {
						hard++
					}
				}
				if !st.fitsWithout(n, set) {
					return
				}
				run := p.runTime(set)
				if best == nil || hard < bestHard || hard == bestHard && run < bestRun {
					best, bestHard, bestRun = slices.Clone(set), hard, run
				}
				return
			}
			for i := from; i <= len(cands)-(k-len(idx)); i++ {
				idx = append(idx, i)
				try(i + 1)
				idx = idx[:len(idx)-1]
			}
		}
		try(0)
		if best != nil {
			return best
		}
	}
	return nil
}

func (p *planner) runTime(set []*Placed) time.Duration {
	var d time.Duration
	for _, pl := range set {
		d += p.now.Sub(pl.Started)
	}
	return d
}

// fitsWithout says whether the job would fit on the slave, as it stands in this pass, once the
// given running jobs have released what they hold. It works on copies.
func (st *slaveState) fitsWithout(n *need, gone []*Placed) bool {
	if st.s.CudaMajor < n.cuda {
		return false
	}
	gpuFree, cpuFree := slices.Clone(st.gpuFree), slices.Clone(st.cpuFree)
	cpusFree, memFree := st.cpus(true), st.s.MemoryGb-st.memUsed
	for _, pl := range gone {
		cpusFree, memFree = st.release(pl, gpuFree, cpuFree, cpusFree, memFree)
	}
	gpus := 0
	for k := range st.gpus {
		if gpuFree[k] && st.gpuOK(n, k) {
			gpus++
		}
	}
	return gpus >= n.gpus && cpusFree >= n.cpus && memFree >= n.memGb
}

// jobNames names jobs by short uuid: "job 1a2b3c4d" or "jobs 1a2b3c4d, 5e6f7a8b".
func jobNames(pls []*Placed) string {
	ids := make([]string, len(pls))
	for i, pl := range pls {
		ids[i] = shortID(pl.JobUUID)
	}
	if len(ids) == 1 {
		return "job " + ids[0]
	}
	return "jobs " + strings.Join(ids, ", ")
}

// release marks what a running job holds as free in copies of the slave's free lists (used by
// backfill's planned start and by halting's "would it fit without them"), returning the new
// free CPU count and memory.
func (st *slaveState) release(pl *Placed, gpuFree, cpuFree []bool, cpusFree, memFree int) (int, int) {
	for _, idx := range pl.GPUIndices {
		if k := st.gpuPos(idx); k >= 0 {
			gpuFree[k] = true
		}
	}
	for _, id := range pl.CPUIDs {
		if id >= 0 && id < len(cpuFree) && !cpuFree[id] {
			cpuFree[id] = true
			cpusFree++
		}
	}
	return cpusFree, memFree + pl.MemoryGb
}

// MayHalt is a quick necessary condition for Plan to halt anything: false means no queued job
// outranks, by the halt factor, enough haltable jobs on one slave to get the GPUs it asks there
// (with what is free), so Plan decides no halt. It is true whenever it cannot tell cheaply:
// interactive starters (which may halt anything), private clusters and reservations. The
// simulator asks it before a halting pass in which no queued job fits the emptiest slave (a
// third of a halting replay's passes): such a pass can decide nothing but halts, so when
// MayHalt says no it is skipped with the same outcome, at a fraction of Plan's cost.
func (s Snapshot) MayHalt() bool {
	p := haltOptions(s)
	if !p.halting || len(s.Queued) == 0 {
		return false
	}
	if len(s.Reservations) > 0 {
		return true
	}
	for _, c := range s.Clusters {
		if c.Private {
			return true
		}
	}
	// The strongest starter (lowest score) of each GPU count: outranks falls as the starter's
	// score rises, so it is the one that could halt the most.
	var best []float64 // by GPU count; NaN: no starter of that count
	lowest := math.Inf(1)
	for i := range s.Queued {
		j := &s.Queued[i]
		if j.Request.Scheduling.Interactive {
			return true
		}
		score := p.starterScore(j)
		g := max(0, j.Request.Resources.GPUs)
		for len(best) <= g {
			best = append(best, math.NaN())
		}
		if math.IsNaN(best[g]) || score < best[g] {
			best[g] = score
		}
		lowest = min(lowest, score)
	}
	type victim struct {
		slave string
		gpus  int
		score float64
	}
	var victims []victim
	highest := math.Inf(-1)
	for i := range s.Running {
		r := &s.Running[i]
		if p.haltable(r) && (!p.haltRestartableOnly || r.Restartable) {
			v := victim{r.SlaveName, len(r.GPUIndices), p.haltScore(r)}
			victims = append(victims, v)
			highest = max(highest, v.score)
		}
	}
	// Mostly no victim outranks even the strongest starter: the answer without a map.
	if len(victims) == 0 || !p.outranks(highest, lowest) {
		return false
	}
	// Each slave's free GPUs, by the first slave of each name (a slave listed twice counts all
	// its GPUs as free: the condition only grows); the index's names when it has them.
	slaves, byName := s.Slaves, map[string]int(nil)
	if s.Index.fits(s.Slaves) {
		slaves, byName = s.Index.slaves, s.Index.byName
	} else {
		byName = make(map[string]int, len(slaves))
		for i := range slaves {
			if _, dup := byName[slaves[i].Name]; !dup {
				byName[slaves[i].Name] = i
			}
		}
	}
	free := make([]int, len(slaves))
	for i := range slaves {
		free[byName[slaves[i].Name]] += len(slaves[i].GPUs)
	}
	for i := range s.Running {
		if k, ok := byName[s.Running[i].SlaveName]; ok {
			free[k] -= len(s.Running[i].GPUIndices)
		}
	}
	at := make([]int, len(victims)) // each victim's slave; -1: not a listed slave
	for i, v := range victims {
		if k, ok := byName[v.slave]; ok {
			at[i] = k
		} else {
			at[i] = -1
		}
	}
	room, seen := make([]int, len(slaves)), make([]bool, len(slaves))
	for g, starter := range best {
		if math.IsNaN(starter) {
			continue
		}
		clear(seen)
		for i, v := range victims {
			k := at[i]
			if k < 0 || !p.outranks(v.score, starter) {
				continue
			}
			if !seen[k] {
				seen[k], room[k] = true, max(0, free[k])
			}
			if room[k] += v.gpus; room[k] >= g {
				return true
			}
		}
	}
	return false
}
