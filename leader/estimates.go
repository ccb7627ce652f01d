package leader

import (
	"hash/maphash"
	"strings"
	"time"

	"github.com/opengpulab/gpulab/job"
)

// EstimateTolerance is how far a queued job's start estimate (and each end of its range) may
// move before the leader writes it again, at the least (see EstimateShare). Estimates are shown
// to the minute, and many move a little at every pass (a job still starting is expected to end
// its maxDuration from now): at B1x's size a pass rewrote the estimates of its 5,000 planned
// jobs every time (0.4–0.5 s of a 1-s pass) to move them by a second.
const EstimateTolerance = time.Minute

// EstimateShare is how far, as a share of how far ahead it lies, an estimate may move before it
// is written again, where that is more than EstimateTolerance: an estimate hours ahead is read
// to the hour, the forecast's own error is a quarter of the wait (issue 15's Philly replay,
// err/wait p50 0.21–0.28), and each rewrite is a row and its WAL. The nearer of the written and
// the new time counts, so that one brought closer is written as soon as it moves by a tenth of
// its new distance; one minutes ahead keeps the minute.
const EstimateShare = 0.1

// FarEstimateTolerance and FarEstimateShare are EstimateTolerance and EstimateShare for the
// estimates a far forecast writes (leader.FarForecastEvery): those of the jobs beyond the
// first scheduler.ForecastCap of the queue, refreshed once a minute, whose error is a quarter
// of their wait or more (issue 15's Philly replay). In B8x, the 2–4-GPU jobs of the users
// with the largest tallies are estimated some ten minutes ahead at every far forecast while
// lighter users' one-GPU jobs take every GPU freed: at a tenth and a minute, the far forecast
// wrote 3,000–6,700 estimates a minute, most of them those (30 Nov). The first jobs of the
// queue, which a far forecast covers too, are written again by the next near forecast when
// they moved by its tolerance.
const (
	FarEstimateTolerance = 5 * time.Minute
	FarEstimateShare     = 0.25
)

// tolerance is how far an estimate may move before it is written again: least, or share of
// how far ahead it lies when that is more (closeEstimates).
type tolerance struct {
	least time.Duration
	share float64
}

var (
	nearTolerance = tolerance{EstimateTolerance, EstimateShare}
	farTolerance  = tolerance{FarEstimateTolerance, FarEstimateShare}
)

// written is what the leader knows the database holds as the start estimate of queued jobs:
// an entry per job it wrote or cleared this term (nil: none). A job without an entry is
// unknown (new, back in the queue, or the term is new) and is always written.
type written map[string]*job.StartEstimate

// changed returns, among the named jobs, those whose estimate in est (absent: none) differs from
// what was written by more than tol at now (closeEstimates), or is unknown: the ones to write.
func (w written) changed(est map[string]job.StartEstimate, among []string, now time.Time, tol tolerance) []string {
	out := []string{}
	for _, id := range among {
		old, known := w[id]
		cur, has := est[id]
		switch {
		case !known, (old == nil) != !has:
			out = append(out, id)
		case has && !closeEstimates(*old, cur, now, tol):
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

// closeEstimates says whether a and b, seen at now, are within tol of each other: their starts
// and each end of their ranges closer than tol.least, or than tol.share of how far ahead of now
// the nearer of the two lies (EstimateTolerance, EstimateShare).
func closeEstimates(a, b job.StartEstimate, now time.Time, tol tolerance) bool {
	near := func(x, y time.Time) bool {
		ahead := min(x.Sub(now), y.Sub(now))
		return x.Sub(y).Abs() < max(tol.least, time.Duration(tol.share*float64(ahead)))
	}
	nearPtr := func(x, y *time.Time) bool { return x == nil && y == nil || x != nil && y != nil && near(*x, *y) }
	return near(a.Start, b.Start) && nearPtr(a.Earliest, b.Earliest) && nearPtr(a.Latest, b.Latest)
}

// ExplainDetailEvery is how often a waiting job's explanation is written again when only its
// details moved: the numbers, times and names in it (any word with a digit), its asides in
// parentheses, and how much of what it needs is free where (gistHash). A change of reason
// (what blocks the job, a line more or less) is written at once. In B8x, jobs of 3 and 4 GPUs
// pile up behind a stream of one-GPU jobs that take every GPU freed, and all of them went from
// "at most 1 free" to "at most 2 free on a slave (sim-2952)" and back at nearly every pass: the
// changed explanations a pass grew from ~60 (the new jobs) to 250–740 by the 20th minute, each
// a row update and an event, so that a job waiting for hours would have gathered thousands of
// events; from "at most 1 free" to "none free" and back was still 16,000 a minute of them with
// 16,000 such jobs queued (30 Nov). The explanation a user reads is at most this old in its
// details; its history (the scheduler's events) records the reasons, not every count.
const ExplainDetailEvery = time.Minute

// ReasonBackWithin: a waiting job whose reason goes back to the one it had before its last
// change of reason, within this time of that change, has its explanation written at once but
// without an event. Jobs behind the backfill head go from "needs 1 GPU, none free" to "held
// back so that job … can start" whenever a GPU frees on the head's slave, and back when the
// head starts and the next one's slave has none free: in B8x 1,300–1,800 jobs at a time, once
// or twice a minute (30 Nov), so that a job waiting for hours gathered one or two events a
// minute saying the same two things. Its history records each of the two reasons, and again
// every ReasonBackWithin while it goes on flapping; what it reads now is always current.
const ReasonBackWithin = 10 * time.Minute

// explained is what the leader knows the database holds as the explanation of queued jobs, by
// job, as this term last wrote it. A job not in it is unknown and its explanation is always
// sent. A pass sends only the explanations that differ from it: at B8x's size a pass planned
// some 17,000 queued jobs (every job of a shape that fits where a job just ended) and sent all
// their explanations, most of them unchanged, as one JSON document of a few MB that Postgres
// compared row by row, twice a second.
type explained map[string]explainedJob

// explainedJob is what was written of one job's explanation: hashes of its lines and of their
// gist (the lines without their details), and when; the gist it had before its last change of
// reason written with an event (was, 0: none), and when that was (changedAt).
type explainedJob struct {
	lines, gist, was uint64
	at, changedAt    time.Time
}

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

// gistHash hashes the lines without their details: every word that holds a digit (a count, a
// time, a slave's or a job's name) counts as one placeholder, what stands in parentheses is
// left out, and so is what a line of need ("needs 4 GPUs, …") says after its first comma: how
// much of it is free where. That is the cluster's state as the pass saw it, not the reason:
// a job of 2–4 GPUs behind a stream of one-GPU jobs reads "none free on the 5000 slaves" when
// a pass finds every GPU taken and "at most 1 free on a slave (93 slaves have 1)" when it
// finds a few just freed, and went from one to the other at nearly every pass (see
// ExplainDetailEvery). What the job lacks (GPUs, CPUs or memory, and of which kind) is
// before the comma, and a change of it is a change of reason.
func gistHash(lines []string) uint64 {
	var h maphash.Hash
	h.SetSeed(explainSeed)
	for _, l := range lines {
		if strings.HasPrefix(l, "needs ") {
			l, _, _ = strings.Cut(l, ",")
		}
		depth := 0
		for w := range strings.FieldsSeq(l) {
			open, closed := strings.Count(w, "("), strings.Count(w, ")")
			if depth > 0 || open > 0 {
				depth = max(0, depth+open-closed)
				continue
			}
			if strings.ContainsAny(w, "0123456789") {
				w = "#"
			}
			h.WriteString(w)
			h.WriteByte(' ')
		}
		h.WriteByte(0)
	}
	return h.Sum64()
}

// changed returns the explanations of expl to write at now: those of unknown jobs and those
// whose reason changed (news, each to be recorded as an event), and, without an event
// (refreshed), those whose reason went back to the one before its last change within
// ReasonBackWithin and those whose details alone moved and were last written
// ExplainDetailEvery ago or more.
func (e explained) changed(expl map[string][]string, now time.Time) (news, refreshed map[string][]string) {
	news, refreshed = map[string][]string{}, map[string][]string{}
	for id, lines := range expl {
		old, ok := e[id]
		if !ok {
			news[id] = lines
			continue
		}
		if old.lines == explanationHash(lines) {
			continue
		}
		switch g := gistHash(lines); {
		case g == old.gist:
			if now.Sub(old.at) >= ExplainDetailEvery {
				refreshed[id] = lines
			}
		case g == old.was && now.Sub(old.changedAt) < ReasonBackWithin:
			refreshed[id] = lines
		default:
			news[id] = lines
		}
	}
	return news, refreshed
}

// record notes what was written at now: news with an event (a new reason), or refreshed
// without one (the same reason, or the one before it again).
func (e explained) record(sent map[string][]string, now time.Time, news bool) {
	for id, lines := range sent {
		old := e[id] // an unknown job's zero value: no gist before
		j := explainedJob{lines: explanationHash(lines), gist: gistHash(lines), at: now, was: old.was, changedAt: old.changedAt}
		switch {
		case news:
			j.was, j.changedAt = old.gist, now
		case j.gist != old.gist:
			j.was = old.gist // back to the reason before: the two swap
		}
		e[id] = j
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
