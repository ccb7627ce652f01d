package scheduler

// The best fit among many slaves, found without looking at each.
//
// decide places a job on the capable slave of best rank: fewest matching GPUs left free, then
// the least loaded. For a job that every GPU matches (no model named, no more GPU memory than
// the smallest GPU has: most jobs), a slave's matching free GPUs are its free GPUs, so rank's
// first key is the slave's free count less the job's: the same for every slave with that count.
// Filed by free count (freeIndex), the slaves that could take the job are looked at count by
// count from the job's own up, and the first count where one can take it holds the best: every
// slave with more free GPUs ranks worse whatever its load. The scan over every capable slave
// at each assignment was most of a large pass's Plan: B1x's burst (5,000 slaves, 22,185 jobs
// placed of 100,000) was planned in 1.25 s with it, in 0.54 s through the index
// (BenchmarkPlanB1x at 5000x100000, 30 Nov). The choice is the scan's, ties included (to the
// first slave in order): TestScanShortcutsKeepThePlan compares the two.

// bestFitFrom is the number of capable slaves from which decide looks through the index rather
// than at each: below it, the scan is as quick. Tests lower it so that small clusters use the
// index too.
var bestFitFrom = 128

// freeIndex files the slaves of a pass (by their place in planner.slaves) under their count of
// free GPUs. It is made at the first job that uses it, after the running jobs took their
// resources, and kept up to date by refile after each assignment: the only change to a slave's
// free GPUs within a pass (backfill's masks are undone before decide returns).
type freeIndex struct {
	lists [][]int32 // per count of free GPUs, the slaves with that many (in no order)
	slot  []int32   // each slave's place in its list
	count []int32   // the count each slave is filed under
	// allMatch is the most GPU memory a job may ask for and still match every GPU of every
	// slave (when it names no model): the smallest GPU's memory.
	allMatch int64
}

// freeIndex returns the pass's index, making it at the first call.
func (p *planner) freeIndex() *freeIndex {
	if p.free != nil {
		return p.free
	}
	fi := &freeIndex{slot: make([]int32, len(p.slaves)), count: make([]int32, len(p.slaves)), allMatch: -1}
	most := 0
	for _, st := range p.slaves {
		most = max(most, len(st.gpus))
		if len(st.gpus) > 0 && (fi.allMatch < 0 || st.minGPUMemMiB < fi.allMatch) {
			fi.allMatch = st.minGPUMemMiB
		}
	}
	fi.allMatch = max(fi.allMatch, 0)
	fi.lists = make([][]int32, most+1)
	for i, st := range p.slaves {
		fi.file(i, st.nFree)
	}
	p.free = fi
	return fi
}

// file puts slave i in the list of count c.
func (fi *freeIndex) file(i, c int) {
	fi.count[i], fi.slot[i] = int32(c), int32(len(fi.lists[c]))
	fi.lists[c] = append(fi.lists[c], int32(i))
}

// refile moves st to the list of its free count now, if it changed (after an assignment).
func (p *planner) refile(st *slaveState) {
	fi := p.free
	if fi == nil {
		return
	}
	i := int(st.pos)
	c := int(fi.count[i])
	if c == st.nFree {
		return
	}
	// Out of its list: the list's last slave takes its place.
	l := fi.lists[c]
	last := l[len(l)-1]
	l[fi.slot[i]], fi.slot[last] = last, fi.slot[i]
	fi.lists[c] = l[:len(l)-1]
	fi.file(i, st.nFree)
}

// indexed says whether decide finds j's best fit through the index: a job every GPU matches,
// with a scope of many slaves (capable), on a cluster where counting pays.
func (p *planner) indexed(n *need, capable int) bool {
	return scanShortcuts && capable >= bestFitFrom && n.modelOK == nil && n.gpuMemMiB <= p.freeIndex().allMatch
}

// bestFit is the slave decide's quick scan would choose for j among its capable slaves (those
// in its scope that could take it by their totals), found through the index: nil when none has
// room now. guard says the backfill head's reserved resources are kept from j (masked on the
// head's slave), which takes that slave out of the count: it is looked at on its own.
func (p *planner) bestFit(j *Job, n *need, guard bool) *slaveState {
	var best *slaveState
	var bestRank rank
	// consider says whether st can take j, and keeps it if it ranks best so far.
	consider := func(st *slaveState, v verdict) bool {
		if v.stage != stageFits || p.blocks(j, st, n) != nil {
			return false
		}
		rk := st.rank(n, v.amount)
		if best == nil || rk.less(bestRank) || !bestRank.less(rk) && st.pos < best.pos {
			best, bestRank = st, rk
		}
		return true
	}
	var apart *slaveState
	if guard {
		apart = p.reserved.st
		if apart.mayFit(n) && p.inScope(j, apart) {
			p.reserved.mask()
			v := apart.check(n, true)
			p.reserved.unmask()
			consider(apart, v)
		}
	}
	fi := p.freeIndex()
	for c := n.gpus; c < len(fi.lists); c++ {
		found := false
		for _, i := range fi.lists[c] {
			st := p.slaves[i]
			// In scope and with room now, a slave is capable: what is free is part of its totals.
			if st != apart && st.mayFit(n) && p.inScope(j, st) && consider(st, st.check(n, true)) {
				found = true
			}
		}
		if found {
			// Every slave with more free GPUs leaves more of them free: it ranks worse.
			break
		}
	}
	return best
}
