package leader

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/store"
)

// BenchmarkHeldLists is a pass's changes to the memory's list of held jobs at B8x's size:
// 34,000 held, 40 ended and 40 assigned, each anywhere in the list (created over the last
// hours).
func BenchmarkHeldLists(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	t0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	mk := func(i int) heldJob {
		return heldJob{SchedJob: store.SchedJob{Held: store.Held{UUID: fmt.Sprintf("%08d", i)}, Created: t0.Add(time.Duration(rng.Int64N(int64(4 * time.Hour))))}}
	}
	list := make([]heldJob, 34000, 34100)
	for i := range list {
		list[i] = mk(i)
	}
	slices.SortFunc(list, compareHeldJobs)
	for b.Loop() {
		gone := make([]heldJob, 0, 40)
		for len(gone) < 40 {
			gone = append(gone, list[rng.IntN(len(list))])
		}
		slices.SortFunc(gone, compareHeldJobs)
		gone = slices.CompactFunc(gone, func(a, b heldJob) bool { return a.UUID == b.UUID })
		list = removeSorted(list, gone, compareHeldJobs)
		slices.SortFunc(gone, compareHeldJobs)
		list = mergeSorted(list, gone, compareHeldJobs)
	}
}
