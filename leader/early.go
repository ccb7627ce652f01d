package leader

import (
	"context"
	"sync"
	"time"

	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/store"
)

// A full plan's assignments are committed while Plan decides the rest (scheduler.Snapshot's
// OnAssign), in parts of earlyPart from the first full one on, by assignParts writers: Plan
// works on the master's cores while Postgres writes what it decided. B1x's burst (22,185 jobs
// placed on 5,000 slaves) planned for 0.5–1.0 s and then committed for 2.0–2.6 s, one after the
// other. A pass that places fewer jobs (every pass of a steady cluster) writes them after Plan
// as before, in one statement. Narrowed plans write nothing early: planNarrowed may plan twice.
const earlyPart = assignSplitFrom

// earlyWriter commits a plan's assignments as they are decided (add), in whole parts; what is
// left when Plan returns (less than a part) is apply's to write with the rest of the plan.
type earlyWriter struct {
	l     *Loop
	ctx   context.Context
	lead  store.Leadership
	hosts map[string]string

	part  []scheduler.Assignment // decided, not yet handed to a writer
	sent  int                    // the assignments handed to the writers: a prefix of the plan's
	parts chan []scheduler.Assignment
	wg    sync.WaitGroup
	began time.Time

	mu   sync.Mutex
	done earlyWrites
}

// earlyWrites is what the early writes did: the first sent assignments of the plan were handed
// to them, of which moved were assigned and conflicts were found changed since the snapshot
// (skipped, as apply skips them); err is the first failure, after which nothing more is written.
type earlyWrites struct {
	sent             int
	moved, conflicts []string
	err              error
}

// writeEarly starts the writers of a full plan's early assignments.
func (l *Loop) writeEarly(ctx context.Context, lead store.Leadership, hosts map[string]string) *earlyWriter {
	w := &earlyWriter{l: l, ctx: ctx, lead: lead, hosts: hosts, parts: make(chan []scheduler.Assignment, 64)}
	for range assignParts {
		w.wg.Go(w.write)
	}
	return w
}

// add is Plan's OnAssign: it hands every whole part to the writers (waiting for one when all
// are busy and 64 parts wait already).
func (w *earlyWriter) add(a scheduler.Assignment) {
	if w.part == nil {
		w.part = make([]scheduler.Assignment, 0, earlyPart)
	}
	w.part = append(w.part, a)
	if len(w.part) == earlyPart {
		if w.sent == 0 {
			w.began = time.Now()
		}
		w.parts <- w.part
		w.sent += len(w.part)
		w.part = nil
	}
}

// write commits the parts it is handed, each in its own statement that proves the lease and
// wakes the slaves given jobs (store.AssignJobsAsLeader).
func (w *earlyWriter) write() {
	for part := range w.parts {
		w.mu.Lock()
		failed := w.done.err != nil
		w.mu.Unlock()
		if failed {
			continue
		}
		if w.l.beforeEarlyPart != nil {
			w.l.beforeEarlyPart(part)
		}
		batch, err := w.l.placements(part, w.hosts)
		var moved []string
		if err == nil {
			moved, err = w.l.st.AssignJobsAsLeader(w.ctx, w.lead, batch, slavesOf(batch))
		}
		w.mu.Lock()
		if err != nil {
			if w.done.err == nil {
				w.done.err = err
			}
		} else {
			w.done.moved = append(w.done.moved, moved...)
			w.done.conflicts = append(w.done.conflicts, skipped(batch, moved)...)
		}
		w.mu.Unlock()
	}
}

// finish waits for the parts handed out to be written and says what was: apply writes the
// plan's assignments after the first sent.
func (w *earlyWriter) finish() earlyWrites {
	close(w.parts)
	w.wg.Wait()
	w.done.sent = w.sent
	if w.sent > 0 {
		w.l.timed("early assign", w.began)
	}
	return w.done
}

// skipped are the jobs of batch that the assignment did not move (moved): changed since the
// snapshot.
func skipped(batch []store.Assignment, moved []string) []string {
	if len(moved) == len(batch) {
		return nil
	}
	in := make(map[string]bool, len(moved))
	for _, id := range moved {
		in[id] = true
	}
	var out []string
	for _, a := range batch {
		if !in[a.JobUUID] {
			out = append(out, a.JobUUID)
		}
	}
	return out
}
