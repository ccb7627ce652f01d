package scheduler

import (
	"fmt"
	"slices"
	"time"
)

// Reservations in placement (SPEC 7.3). A reservation books GPUs (or whole slaves) of a cluster
// or of named slaves for a window, for some users and projects; a job uses it by naming it in
// reservationIds. Inside a pass a reservation is a booking, to keep it apart from backfill's
// planned start (backfill.go), which is a reservation in the scheduling literature's sense.
//
// The rules:
//   - A job naming a reservation runs on its slaves only, and only during its window: before
//     the start it waits, after the end (or when its owner does not hold it) it fails.
//   - Other jobs keep off the booked resources from the moment their maxDuration would reach
//     into the window, so that the holders find them free at the start: whole slaves are not
//     used at all, and of a GPU count, enough GPUs stay free on the reservation's slaves
//     (less what the holders' jobs already use there).
//   - During the window, a holder's job that finds the booked room taken (a job that started
//     before the reservation was made, say) halts jobs that do not use the reservation, past
//     their minDuration, with reason RESERVATION (halt.go).

// HaltReservation is the reason of a halt made for a job using a reservation it holds, of a job
// that does not use it (SPEC 7.3).
const HaltReservation = "RESERVATION"

// booking is a reservation during one pass.
type booking struct {
	r      *Reservation
	slaves []*slaveState
	// keep is how many GPUs must stay free on the slaves for the holders: the reservation's
	// GPUs less those its jobs already hold (running, or assigned earlier in the pass). Unused
	// when the reservation books whole slaves.
	keep int
}

func (b *booking) whole() bool { return b.r.GPUs == 0 }

func (b *booking) name() string {
	if b.r.Name != "" {
		return fmt.Sprintf("%q", b.r.Name)
	}
	return shortID(b.r.ID)
}

// freeGPUs counts the free GPUs on the booking's online, accepting slaves: what the holders
// could start on now. It sums the slaves' counts (nFree, kept with gpuFree by every write to
// it): counting gpuFree itself was 8,000 reads for a booking of a 1,000-slave cluster, at
// every fit check of a job the booking could block.
func (b *booking) freeGPUs() int {
	n := 0
	for _, st := range b.slaves {
		if st.s.Online && st.s.Accepting {
			n += st.nFree
		}
	}
	return n
}

// newBookings makes the pass's bookings from the snapshot's reservations that have not ended,
// and indexes them by slave.
func (p *planner) newBookings(s *Snapshot) {
	for i := range s.Reservations {
		r := &s.Reservations[i]
		if !p.now.Before(r.End) {
			continue
		}
		b := &booking{r: r, keep: r.GPUs}
		for _, st := range p.slaves {
			if r.ClusterID != 0 && st.s.ClusterID != r.ClusterID ||
				len(r.SlaveNames) > 0 && !slices.Contains(r.SlaveNames, st.s.Name) {
				continue
			}
			b.slaves = append(b.slaves, st)
			if r.active(p.now) {
				for _, pl := range st.held {
					if slices.Contains(pl.Reservations, r.ID) {
						b.keep -= len(pl.GPUIndices)
					}
				}
			}
		}
		b.keep = max(b.keep, 0)
		p.bookings = append(p.bookings, b)
		if p.bookedOn == nil {
			p.bookedOn = map[*slaveState][]*booking{}
		}
		for _, st := range b.slaves {
			p.bookedOn[st] = append(p.bookedOn[st], b)
		}
	}
}

// uses resolves the reservations a job names: the active ones it holds (its scope), or why it
// waits (none has started yet; est is the earliest start) or fails (one is unknown or ended, or
// its owner does not hold it). A job naming none gets nothing back.
func (p *planner) uses(j *Job) (active []*booking, wait string, est time.Time, fail string) {
	for _, id := range j.Request.Scheduling.ReservationIDs {
		i := slices.IndexFunc(p.bookings, func(b *booking) bool { return b.r.ID == id })
		if i < 0 {
			return nil, "", time.Time{}, fmt.Sprintf("reservation %s does not exist or has ended", id)
		}
		b := p.bookings[i]
		switch {
		case !b.r.holds(j):
			return nil, "", time.Time{}, fmt.Sprintf("reservation %s is not held by the job's owner or project", b.name())
		case b.r.active(p.now):
			active = append(active, b)
		case est.IsZero() || b.r.Start.Before(est):
			est = b.r.Start
			wait = fmt.Sprintf("waiting for reservation %s to start at %s", b.name(), b.r.Start.UTC().Format(time.RFC3339))
		}
	}
	if len(active) > 0 {
		return active, "", time.Time{}, ""
	}
	return nil, wait, est, ""
}

// onBooked says whether a slave belongs to one of the given bookings.
func (p *planner) onBooked(st *slaveState, bs []*booking) bool {
	for _, b := range p.bookedOn[st] {
		if slices.Contains(bs, b) {
			return true
		}
	}
	return false
}

// blocks returns the booking that keeps a job off a slave, nil when none does. A job is never
// kept off a reservation it names (it holds it: uses checked that).
func (p *planner) blocks(j *Job, st *slaveState, n *need) *booking {
	if p.bookedOn == nil {
		return nil // no reservation covers any slave: the common case, asked for every fit
	}
	for _, b := range p.bookedOn[st] {
		if slices.Contains(j.Request.Scheduling.ReservationIDs, b.r.ID) || !p.reaches(j, b) {
			continue
		}
		if b.whole() || n.gpus > 0 && b.freeGPUs()-n.gpus < b.keep {
			return b
		}
	}
	return nil
}

// reaches says whether a job started now could still hold resources during the booking's
// window: it is active, or the job's maxDuration (unknown: for ever) reaches its start.
func (p *planner) reaches(j *Job, b *booking) bool {
	if b.r.active(p.now) {
		return true
	}
	d := j.Request.Scheduling.MaxDuration.Std()
	return d <= 0 || p.now.Add(d).After(b.r.Start)
}

// tookBooked counts a holder's assignment against the bookings it names on that slave.
func (p *planner) tookBooked(j *Job, st *slaveState, gpus int) {
	for _, b := range p.bookedOn[st] {
		if slices.Contains(j.Request.Scheduling.ReservationIDs, b.r.ID) && b.r.active(p.now) {
			b.keep = max(b.keep-gpus, 0)
			return
		}
	}
}

// bookedWhy explains a slave kept from a job by a booking.
func (p *planner) bookedWhy(j *Job, st *slaveState, b *booking) string {
	what := "slave " + st.s.Name + " is"
	if !b.whole() {
		what = fmt.Sprintf("%d GPUs of %s are", b.r.GPUs, b.where())
	}
	s := fmt.Sprintf("%s reserved (reservation %s, %s to %s)", what, b.name(),
		b.r.Start.UTC().Format(time.RFC3339), b.r.End.UTC().Format(time.RFC3339))
	if !b.r.active(p.now) {
		s += fmt.Sprintf(" and the job's maxDuration %s would reach into it", fmtDuration(j.Request.Scheduling.MaxDuration.Std()))
	}
	return s
}

func (b *booking) where() string {
	if len(b.r.SlaveNames) > 0 {
		return names(b.slaves)
	}
	return fmt.Sprintf("cluster %d", b.r.ClusterID)
}

// bookingVictim says whether a running job may be halted for a starter that uses an active
// reservation on this slave: the victim does not use it, has run its minDuration (and
// antiStorm), is not interactive nor halting already; and the starter stays within what the
// reservation books (a GPU count is not a licence to take more).
func (p *planner) bookingVictim(st *slaveState, starter *Job, n *need, pl *Placed) bool {
	if len(p.bookedOn[st]) == 0 || !p.haltable(pl) || p.victims[pl.JobUUID] {
		return false
	}
	for _, b := range p.bookedOn[st] {
		if !b.r.active(p.now) || !slices.Contains(starter.Request.Scheduling.ReservationIDs, b.r.ID) ||
			slices.Contains(pl.Reservations, b.r.ID) {
			continue
		}
		if b.whole() || n.gpus <= b.keep {
			return true
		}
	}
	return false
}

// activeNamed lists the active bookings a job names.
func (p *planner) activeNamed(j *Job) []*booking {
	var out []*booking
	for _, b := range p.bookings {
		if b.r.active(p.now) && slices.Contains(j.Request.Scheduling.ReservationIDs, b.r.ID) {
			out = append(out, b)
		}
	}
	return out
}
