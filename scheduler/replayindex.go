package scheduler

import (
	"math"
	"math/bits"
)

// The replay's indexes over the slaves (forecast.go): a replay places thousands of jobs on a full
// cluster, and looking at every candidate slave for each was most of the forecast's time.

// slaveSet is a set of slave indices, a bit each.
type slaveSet []uint64

func newSlaveSet(n int) slaveSet { return make(slaveSet, (n+63)/64) }

func (s slaveSet) add(i int)      { s[i/64] |= 1 << (i % 64) }
func (s slaveSet) remove(i int)   { s[i/64] &^= 1 << (i % 64) }
func (s slaveSet) has(i int) bool { return s[i/64]&(1<<(i%64)) != 0 }

// eachIn calls f with each index in both s and t, in increasing order, until f says done.
func (s slaveSet) eachIn(t slaveSet, f func(int) bool) {
	for w, x := range s {
		for x &= t[w]; x != 0; x &= x - 1 {
			if f(w*64 + bits.TrailingZeros64(x)) {
				return
			}
		}
	}
}

// never is a fromTree's value for a slave without the GPUs free.
const never = math.MaxInt64

// fromTree keeps, for one GPU count g, each slave's bound on when a job of g GPUs could start on
// it: from when g of its GPUs have been free (the g-th earliest of its free GPUs' freeAt, in Unix
// nanoseconds; never with fewer free), and the least bound of each range of slaves. A job's GPUs
// are some g of the slave's free ones that match it, so its start there is no earlier: the replay
// visits the slaves in the order of the bound and stops where no bound can beat the best start
// found, instead of looking at every slave with room.
type fromTree struct {
	n int     // leaves: a power of two, at least the slaves
	v []int64 // v[n+i] is slave i's bound; v[k] the least of v[2k] and v[2k+1]
}

func newFromTree(slaves int) *fromTree {
	n := 1
	for n < slaves {
		n *= 2
	}
	t := &fromTree{n: n, v: make([]int64, 2*n)}
	for k := range t.v {
		t.v[k] = never
	}
	return t
}

// set gives slave i the bound x.
func (t *fromTree) set(i int, x int64) {
	k := t.n + i
	if t.v[k] == x {
		return
	}
	t.v[k] = x
	for k > 1 {
		k /= 2
		m := min(t.v[2*k], t.v[2*k+1])
		if t.v[k] == m {
			return
		}
		t.v[k] = m
	}
}

// first is the first slave from pos on whose bound is at most x, or -1.
func (t *fromTree) first(pos int, x int64) int {
	return t.firstIn(1, 0, t.n, pos, x)
}

func (t *fromTree) firstIn(k, lo, hi, pos int, x int64) int {
	if hi <= pos || t.v[k] > x {
		return -1
	}
	if hi-lo == 1 {
		return lo
	}
	mid := (lo + hi) / 2
	if i := t.firstIn(2*k, lo, mid, pos, x); i >= 0 {
		return i
	}
	return t.firstIn(2*k+1, mid, hi, pos, x)
}

// treeNode is a range of slaves in a best-first walk: node k covering slaves from lo.
type treeNode struct {
	k, lo int
}

// best walks the slaves in the order of their bounds (ties: the lower index first), offering
// each with a bound below never to try, which returns the key of the best start found so far
// (start, slave; ok false while none); the walk ends when no bound left can beat it. heap is
// scratch, returned for reuse.
func (t *fromTree) best(heap []treeNode, try func(i int) (start int64, at int, ok bool)) []treeNode {
	less := func(a, b treeNode) bool {
		return t.v[a.k] < t.v[b.k] || t.v[a.k] == t.v[b.k] && a.lo < b.lo
	}
	h := append(heap[:0], treeNode{1, 0})
	start, at, ok := int64(0), 0, false
	for len(h) > 0 {
		// Pop the least.
		top := h[0]
		n := len(h) - 1
		h[0] = h[n]
		h = h[:n]
		for i := 0; ; {
			j := 2*i + 1
			if j >= n {
				break
			}
			if j+1 < n && less(h[j+1], h[j]) {
				j++
			}
			if !less(h[j], h[i]) {
				break
			}
			h[i], h[j] = h[j], h[i]
			i = j
		}
		v := t.v[top.k]
		if v == never || ok && (v > start || v == start && top.lo > at) {
			break // nothing left in the heap can beat the best found
		}
		if top.k >= t.n {
			start, at, ok = try(top.lo)
			continue
		}
		w := t.n >> bits.Len(uint(top.k)) // the children's width (node k is at depth Len(k)-1)
		for _, c := range [2]treeNode{{2 * top.k, top.lo}, {2*top.k + 1, top.lo + w}} {
			h = append(h, c)
			for i := len(h) - 1; i > 0; {
				p := (i - 1) / 2
				if !less(h[i], h[p]) {
					break
				}
				h[i], h[p] = h[p], h[i]
				i = p
			}
		}
	}
	return h
}

// replayTrees lets a test turn the fromTree walk off, to compare it with the scan.
var replayTrees = true
