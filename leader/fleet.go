package leader

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/store"
)

// fleet is the leader's memory of the slaves between passes, kept as the queue keeps the jobs:
// a pass reads only the slaves whose scheduling columns changed since its last read (store's
// change feed: SlavesChangedSince). Reading every slave at every pass scanned the slaves'
// table, which each heartbeat rewrites a row of (20–30 ms of Postgres per pass for 1,000 slaves
// in B2x, growing with the slaves and their heartbeats).
//
// The memory starts empty (a new term reads everything) and is checked against a full read
// every checkEvery: any difference is a bug (a change the feed missed), logged and counted,
// and the full read replaces the memory. The check's read runs beside the passes (checker), as
// the queue's does: 5,000 slaves' inventories are some megabytes, read in 0.3–0.7 s
// in B8x.
type fleet struct {
	rows map[string]store.SchedSlave
	docs map[string]*slaveDocs
	// sorted are the registered slaves by cluster and name, with their documents: made again
	// only when a slave changed (nil), and shared by the passes until then.
	sorted []fleetSlave
	mark   store.ChangeMark

	check   checker[map[string]store.SchedSlave]
	log     *slog.Logger
	onDrift func(n int)
}

// fleetSlave is a slave as a pass uses it: its row and its decoded documents.
type fleetSlave struct {
	store.SchedSlave
	docs *slaveDocs
}

func newFleet(checkEvery time.Duration, log *slog.Logger, onDrift func(int)) *fleet {
	return &fleet{check: newChecker[map[string]store.SchedSlave](checkEvery), log: log, onDrift: onDrift}
}

// reset forgets everything: the next read is a full one (a change of leader). A check still
// running is ignored when it ends.
func (f *fleet) reset() {
	f.rows, f.docs, f.sorted = nil, nil, nil
	f.check.reset()
}

// fleetFeed is how a pass reads the slaves (next): whole (a term's first read), or the feed
// from a mark, with the outcome of a check that ended to bring up to date with it.
type fleetFeed struct {
	full bool
	from store.ChangeMark
	done *checked[map[string]store.SchedSlave]
}

// next says how this pass reads the slaves; it takes the outcome of a check that ended and
// starts one that is due. The pass reads the feed (with its basics: store.ReadPass) and hands
// it to take.
func (f *fleet) next(ctx context.Context, st *store.Store) fleetFeed {
	if f.rows == nil {
		return fleetFeed{full: true}
	}
	done, from := f.check.feed(ctx, st, f.log, "slaves", f.mark, readFleet(st))
	return fleetFeed{from: from, done: done}
}

// readAll is queue.readAll for the slaves.
func (f *fleet) readAll() fleetFeed {
	f.check.reset()
	return fleetFeed{full: true}
}

// take returns the registered slaves (a slave that joined but never registered has nothing the
// scheduler could use) by cluster and name, given the feed's rows read as next said (with a
// full read, none: take reads every slave itself); mark, taken before the feed's read, is where
// the next read of the feed starts (a mark older than the last, wentBack, makes it a full
// read). The slice is shared with later passes: not to be changed.
func (f *fleet) take(ctx context.Context, st *store.Store, n fleetFeed, rows []store.SchedSlave, mark store.ChangeMark) ([]fleetSlave, error) {
	if !n.full && wentBack(mark, f.mark) {
		f.log.Warn(wentBackMessage, "what", "slaves", "mark", mark.String(), "last", f.mark.String())
		n = f.readAll()
	}
	if n.full {
		all, err := st.SchedulerSlaves(ctx)
		if err != nil {
			return nil, err
		}
		if err := f.replace(byName(all)); err != nil {
			return nil, err
		}
		f.check.at = time.Now()
	} else {
		for _, r := range rows {
			old, ok := f.rows[r.Name]
			if ok && sameRow(old, r) {
				continue // read again: a transaction running at the last mark stamped it
			}
			d := f.docs[r.Name]
			if !ok || d == nil || !sameDocs(old, r) {
				var err error
				if d, err = decodeSlaveDocs(r); err != nil {
					return nil, err
				}
			}
			f.rows[r.Name], f.docs[r.Name], f.sorted = r, d, nil
		}
		if done := n.done; done != nil {
			// Both as of this read now: what changed since the check's read is no drift.
			for _, r := range rows {
				done.read[r.Name] = r
			}
			if f.compare(done.read) > 0 {
				if err := f.replace(done.read); err != nil {
					return nil, err
				}
			}
			f.check.at = done.started
		}
	}
	f.mark = mark
	if f.sorted == nil {
		f.sorted = make([]fleetSlave, 0, len(f.rows))
		for name, r := range f.rows {
			if r.InstanceID != "" {
				f.sorted = append(f.sorted, fleetSlave{SchedSlave: r, docs: f.docs[name]})
			}
		}
		slices.SortFunc(f.sorted, func(a, b fleetSlave) int {
			return cmp.Or(cmp.Compare(a.ClusterID, b.ClusterID), strings.Compare(a.Name, b.Name))
		})
	}
	return f.sorted, nil
}

// readFleet is a check's read: every slave.
func readFleet(st *store.Store) func(context.Context) (map[string]store.SchedSlave, error) {
	return func(ctx context.Context) (map[string]store.SchedSlave, error) {
		rows, err := st.SchedulerSlaves(ctx)
		return byName(rows), err
	}
}

func byName(rows []store.SchedSlave) map[string]store.SchedSlave {
	all := make(map[string]store.SchedSlave, len(rows))
	for _, r := range rows {
		all[r.Name] = r
	}
	return all
}

// replace puts a full read in the memory's place, decoding only the documents that changed.
func (f *fleet) replace(all map[string]store.SchedSlave) error {
	docs := make(map[string]*slaveDocs, len(all))
	for name, r := range all {
		// A full read every few minutes would decode 5,000 inventories (a second) that have
		// not changed: those are kept.
		if old, ok := f.rows[name]; ok && f.docs[name] != nil && sameDocs(old, r) {
			docs[name] = f.docs[name]
			continue
		}
		d, err := decodeSlaveDocs(r)
		if err != nil {
			return err
		}
		docs[name] = d
	}
	f.rows, f.docs, f.sorted = all, docs, nil
	return nil
}

// sameDocs reports whether two reads of a slave hold the same documents.
func sameDocs(a, b store.SchedSlave) bool {
	return bytes.Equal(a.Inventory, b.Inventory) && bytes.Equal(a.CapacityGPUs, b.CapacityGPUs)
}

// sameRow reports whether two reads of a slave are the same.
func sameRow(a, b store.SchedSlave) bool {
	return sameDocs(a, b) && a.Name == b.Name && a.InstanceID == b.InstanceID && a.ClusterID == b.ClusterID &&
		a.Host == b.Host && a.DNSName == b.DNSName && a.AcceptingJobs == b.AcceptingJobs && a.Online == b.Online && a.Disabled == b.Disabled
}

// compare logs and counts what a full read found different from the memory (a bug), and
// returns how many slaves differ.
func (f *fleet) compare(all map[string]store.SchedSlave) int {
	var diff []string
	for name, r := range all {
		if old, ok := f.rows[name]; !ok || !sameRow(old, r) {
			diff = append(diff, name)
		}
	}
	for name := range f.rows {
		if _, ok := all[name]; !ok {
			diff = append(diff, name)
		}
	}
	slices.Sort(diff)
	for i, name := range diff {
		if i == 10 {
			break
		}
		f.log.Error("scheduler memory drift: a slave differs from the database (a bug: a change the feed missed)", "slave", name)
	}
	if len(diff) > 0 {
		f.log.Error("scheduler memory drift: the full read of the slaves differs from what the leader remembered; the full read replaces it", "slaves", len(diff))
		if f.onDrift != nil {
			f.onDrift(len(diff))
		}
	}
	return len(diff)
}

// slaveDocs are a slave's inventory and GPU capacity decoded: 5,000 slaves' inventories decoded
// at every pass cost a second, and they change only when a slave registers again.
type slaveDocs struct {
	inventory protocol.Inventory
	capacity  []protocol.GPU
}

// decodeSlaveDocs decodes a slave's documents. Plan never changes its snapshot, so passes may
// share what was decoded.
func decodeSlaveDocs(s store.SchedSlave) (*slaveDocs, error) {
	out := &slaveDocs{}
	if len(s.Inventory) > 0 {
		if err := json.Unmarshal(s.Inventory, &out.inventory); err != nil {
			return nil, fmt.Errorf("inventory of slave %s: %w", s.Name, err)
		}
	}
	if len(s.CapacityGPUs) > 0 {
		if err := json.Unmarshal(s.CapacityGPUs, &out.capacity); err != nil {
			return nil, fmt.Errorf("capacity of slave %s: %w", s.Name, err)
		}
	}
	return out, nil
}
