package leader

import (
	"hash/maphash"
	"time"

	"github.com/opengpulab/gpulab/job"
)

// EstimateTolerance is how far a queued job's start estimate (and each end of its range) may
// move before the leader writes it again. Estimates are shown to the minute, and many move a
// little at every pass (a job still starting is expected to end its maxDuration from now): at
// B1x's size a pass rewrote the estimates of its 5,000 planned jobs every time (0.4–0.5 s of a
// 1-s pass) to move them by a second.
const EstimateTolerance = time.Minute

// written is what the leader knows the database holds as the start estimate of queued jobs:
// an entry per job it wrote or cleared this term (nil: none). A job without an entry is
// unknown (new, back in the queue, or the term is new) and is always written.
type written map[string]*job.StartEstimate

// changed returns, among the named jobs, those whose estimate in est (absent: none) differs from
// what was written by more than the tolerance, or is unknown: the ones to write.
func (w written) changed(est map[string]job.StartEstimate, among []string) []string {
	out := []string{}
	for _, id := range among {
		old, known := w[id]
		now, has := est[id]
		switch {
		case !known, (old == nil) != !has:
			out = append(out, id)
		case has && !closeEstimates(*old, now):
			out = append(out, id)
		}
	}
	return out
}

// record notes what was written for the named jobs.
func (w written) record(est map[string]job.StartEstimate, ids []string) {
	for _, id := range ids {
		if e, ok := est[id]; ok {
			w[id] = &e
		} else {
			w[id] = nil
		}
	}
}

// forget drops the jobs for which keep says no (those no longer queued).
func (w written) forget(keep func(id string) bool) {
	for id := range w {
		if !keep(id) {
			delete(w, id)
		}
	}
}

func closeEstimates(a, b job.StartEstimate) bool {
	near := func(x, y time.Time) bool { return x.Sub(y).Abs() < EstimateTolerance }
	nearPtr := func(x, y *time.Time) bool { return x == nil && y == nil || x != nil && y != nil && near(*x, *y) }
	return near(a.Start, b.Start) && nearPtr(a.Earliest, b.Earliest) && nearPtr(a.Latest, b.Latest)
}

// explained is what the leader knows the database holds as the explanation of queued jobs: a
// hash of its lines, by job, as this term last wrote it. A job not in it is unknown and its
// explanation is always sent. A pass sends only the explanations that differ from it: at
// B8x's size a pass planned some 17,000 queued jobs (every job of a shape that fits where a
// job just ended) and sent all their explanations, most of them unchanged, as one JSON
// document of a few MB that Postgres compared row by row, twice a second.
type explained map[string]uint64

// explainSeed keys the hashes; the memory lives only as long as the process.
var explainSeed = maphash.MakeSeed()

func explanationHash(lines []string) uint64 {
	var h maphash.Hash
	h.SetSeed(explainSeed)
	for _, l := range lines {
		h.WriteString(l)
		h.WriteByte(0)
	}
	return h.Sum64()
}

// changed returns the explanations of expl that differ from what was written, or are unknown.
func (e explained) changed(expl map[string][]string) map[string][]string {
	out := make(map[string][]string)
	for id, lines := range expl {
		if h, ok := e[id]; !ok || h != explanationHash(lines) {
			out[id] = lines
		}
	}
	return out
}

// record notes what was written.
func (e explained) record(sent map[string][]string) {
	for id, lines := range sent {
		e[id] = explanationHash(lines)
	}
}

// forget drops the jobs for which keep says no (those no longer queued).
func (e explained) forget(keep func(id string) bool) {
	for id := range e {
		if !keep(id) {
			delete(e, id)
		}
	}
}
