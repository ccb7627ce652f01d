package sim

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/opengpulab/gpulab/scheduler"
)

// Scenario declares what a trace does not record (issue 15): reservations, private clusters,
// notBefore/notAfter windows, and the seeded rules that fill the trace's missing columns. It is
// read from a TOML file (simulate --scenario) and reaches Plan through the very Snapshot fields
// the master fills: Reservations, Clusters and slaves' ClusterID, jobs' notBefore, notAfter,
// reservationIds and project. Times are relative to the trace's first submission.
type Scenario struct {
	// Rules override DefaultRules where set.
	Rules ScenarioRules `toml:"rules"`
	// Reservations book GPUs or whole slaves of the public cluster for some trace users.
	Reservations []ScenarioReservation `toml:"reservation"`
	// Clusters are private clusters carved out of the simulated slaves (the last ones).
	Clusters []ScenarioCluster `toml:"cluster"`
	// Windows give a seeded share of jobs a notBefore and a notAfter.
	Windows ScenarioWindows `toml:"windows"`
}

// ScenarioRules are Rules' fields, each optional.
type ScenarioRules struct {
	Seed           *uint64   `toml:"seed"`
	Restartable    *float64  `toml:"restartable"`
	MinFraction    *float64  `toml:"minFraction"`
	MinFloor       *Duration `toml:"minFloor"`
	Interactive    *float64  `toml:"interactive"`
	InteractiveMax *Duration `toml:"interactiveMax"`
	// MaxDurationSteps replace the steps run times are rounded up to for maxDuration (sorted;
	// past the last one, whole weeks).
	MaxDurationSteps []Duration `toml:"maxDurationSteps"`
}

// ScenarioReservation books, from From until Until, GPUs GPUs of the public cluster, or Slaves
// whole slaves (the first ones not booked by an earlier reservation), for Users (trace users,
// each its own project). The holders' jobs submitted in [From − Lead, Until) name it.
type ScenarioReservation struct {
	ID     string   `toml:"id"`
	Users  []string `toml:"users"`
	GPUs   int      `toml:"gpus"`
	Slaves int      `toml:"slaves"`
	From   Duration `toml:"from"`
	Until  Duration `toml:"until"`
	Lead   Duration `toml:"lead"`
}

// ScenarioCluster makes the last Slaves simulated slaves private cluster ID, owned by Projects
// (trace users: each user is its own project); others may run there as guests with a
// minDuration up to GuestLimit (0: scheduler.DefaultGuestLimit).
type ScenarioCluster struct {
	ID         int      `toml:"id"`
	Slaves     int      `toml:"slaves"`
	Projects   []string `toml:"projects"`
	GuestLimit Duration `toml:"guestLimit"`
}

// ScenarioWindows: a NotBeforeShare of jobs may start only NotBefore after submission (drawn
// uniformly up to NotBeforeMax); a NotAfterShare must start within a time drawn uniformly from
// [NotAfterMin, NotAfterMax] after they may first start, or fail (they count as expired).
type ScenarioWindows struct {
	NotBeforeShare float64  `toml:"notBeforeShare"`
	NotBeforeMax   Duration `toml:"notBeforeMax"`
	NotAfterShare  float64  `toml:"notAfterShare"`
	NotAfterMin    Duration `toml:"notAfterMin"`
	NotAfterMax    Duration `toml:"notAfterMax"`
}

// Duration reads "90m" or "2h30m" in a scenario file.
type Duration struct{ time.Duration }

// UnmarshalText parses a Go duration.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// ReadScenario reads and checks a scenario file; unknown keys are errors, so that a misspelt
// setting is not silently ignored.
func ReadScenario(path string) (*Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read scenario: %w", err)
	}
	var sc Scenario
	md, err := toml.Decode(string(b), &sc)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", path, err)
	}
	if un := md.Undecoded(); len(un) > 0 {
		return nil, fmt.Errorf("scenario %s: unknown key %s", path, un[0])
	}
	if err := sc.check(); err != nil {
		return nil, fmt.Errorf("scenario %s: %w", path, err)
	}
	return &sc, nil
}

// check rejects what the simulator cannot honour, naming the field.
func (sc *Scenario) check() error {
	share := func(name string, p *float64) error {
		if p != nil && (*p < 0 || *p > 1) {
			return fmt.Errorf("%s %v: want a share from 0 to 1", name, *p)
		}
		return nil
	}
	r := sc.Rules
	for _, e := range []error{share("rules.restartable", r.Restartable), share("rules.minFraction", r.MinFraction),
		share("rules.interactive", r.Interactive), share("windows.notBeforeShare", &sc.Windows.NotBeforeShare),
		share("windows.notAfterShare", &sc.Windows.NotAfterShare)} {
		if e != nil {
			return e
		}
	}
	if w := sc.Windows; w.NotAfterMax.Duration < w.NotAfterMin.Duration || w.NotAfterShare > 0 && w.NotAfterMax.Duration <= 0 {
		return fmt.Errorf("windows.notAfterMin %s, notAfterMax %s: want 0 ≤ min ≤ max, max > 0", w.NotAfterMin, w.NotAfterMax)
	}
	ids := map[string]bool{}
	for i, rv := range sc.Reservations {
		switch {
		case rv.ID == "" || ids[rv.ID]:
			return fmt.Errorf("reservation[%d].id %q: want a unique, non-empty id", i, rv.ID)
		case len(rv.Users) == 0:
			return fmt.Errorf("reservation[%d].users: want at least one trace user", i)
		case (rv.GPUs > 0) == (rv.Slaves > 0) || rv.GPUs < 0 || rv.Slaves < 0:
			return fmt.Errorf("reservation[%d]: want either gpus or slaves, > 0", i)
		case rv.Until.Duration <= rv.From.Duration:
			return fmt.Errorf("reservation[%d].until %s: want after from %s", i, rv.Until, rv.From)
		}
		ids[rv.ID] = true
	}
	cids := map[int]bool{}
	for i, c := range sc.Clusters {
		switch {
		case c.ID < 2 || cids[c.ID]:
			return fmt.Errorf("cluster[%d].id %d: want a unique id ≥ 2 (1 is the public cluster)", i, c.ID)
		case c.Slaves < 1:
			return fmt.Errorf("cluster[%d].slaves %d: want ≥ 1", i, c.Slaves)
		case len(c.Projects) == 0:
			return fmt.Errorf("cluster[%d].projects: want at least one trace user", i)
		}
		cids[c.ID] = true
	}
	return nil
}

// Apply returns the rules with the scenario's overrides.
func (sc *Scenario) Apply(r Rules) Rules {
	if sc == nil {
		return r
	}
	o := sc.Rules
	if o.Seed != nil {
		r.Seed = *o.Seed
	}
	if o.Restartable != nil {
		r.Restartable = *o.Restartable
	}
	if o.MinFraction != nil {
		r.MinFraction = *o.MinFraction
	}
	if o.MinFloor != nil {
		r.MinFloor = o.MinFloor.Duration
	}
	if o.Interactive != nil {
		r.Interactive = *o.Interactive
	}
	if o.InteractiveMax != nil {
		r.InteractiveMax = o.InteractiveMax.Duration
	}
	for _, s := range o.MaxDurationSteps {
		r.MaxDurationSteps = append(r.MaxDurationSteps, s.Duration)
	}
	slices.Sort(r.MaxDurationSteps)
	return r
}

// String states the scenario in one line, for the simulate command's output.
func (sc *Scenario) String() string {
	var parts []string
	for _, rv := range sc.Reservations {
		what := fmt.Sprintf("%d GPUs", rv.GPUs)
		if rv.Slaves > 0 {
			what = fmt.Sprintf("%d slaves", rv.Slaves)
		}
		parts = append(parts, fmt.Sprintf("reservation %s: %s for %s from +%s until +%s", rv.ID, what, strings.Join(rv.Users, ","), rv.From, rv.Until))
	}
	for _, c := range sc.Clusters {
		parts = append(parts, fmt.Sprintf("private cluster %d: %d slaves for %s", c.ID, c.Slaves, strings.Join(c.Projects, ",")))
	}
	if w := sc.Windows; w.NotBeforeShare > 0 || w.NotAfterShare > 0 {
		parts = append(parts, fmt.Sprintf("%.0f %% of jobs notBefore up to %s after submission; %.0f %% notAfter %s to %s after that",
			100*w.NotBeforeShare, w.NotBeforeMax, 100*w.NotAfterShare, w.NotAfterMin, w.NotAfterMax))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

// ApplyJobs returns a copy of jobs with the scenario's notBefore, notAfter and reservations set
// (see ScenarioWindows and ScenarioReservation), drawn from seed on a stream of their own.
func (sc *Scenario) ApplyJobs(jobs []TraceJob, seed uint64) []TraceJob {
	out := slices.Clone(jobs)
	if sc == nil || len(jobs) == 0 {
		return out
	}
	rng := rand.New(rand.NewPCG(seed, 0x5c3a_710f_c0de_2026))
	t0 := jobs[0].Submit
	w := sc.Windows
	for i := range out {
		j := &out[i]
		pb, db, pa, da := rng.Float64(), rng.Float64(), rng.Float64(), rng.Float64()
		from := j.Submit
		if pb < w.NotBeforeShare && w.NotBeforeMax.Duration > 0 {
			from = j.Submit.Add(time.Duration(db * float64(w.NotBeforeMax.Duration)).Round(time.Second))
			j.NotBefore = from
		}
		if pa < w.NotAfterShare {
			j.NotAfter = from.Add(w.NotAfterMin.Duration + time.Duration(da*float64(w.NotAfterMax.Duration-w.NotAfterMin.Duration)).Round(time.Second))
		}
		for _, rv := range sc.Reservations {
			at := j.Submit.Sub(t0)
			if slices.Contains(rv.Users, j.User) && at >= rv.From.Duration-rv.Lead.Duration && at < rv.Until.Duration {
				j.Reservation = rv.ID
				break
			}
		}
	}
	return out
}

// layout makes the scenario's private clusters of the last slaves and returns its reservations
// as the snapshot takes them; t0 is the trace's first submission, uid the users' ids (each
// trace user is its own project).
func (sc *Scenario) layout(slaves []scheduler.Slave, clusters map[int]scheduler.Cluster, t0 time.Time, uid map[string]int64) []scheduler.Reservation {
	ids := func(names []string) []int64 {
		var out []int64
		for _, n := range names {
			if id, ok := uid[n]; ok {
				out = append(out, id)
			}
		}
		return out
	}
	end := len(slaves)
	for _, c := range sc.Clusters {
		for k := max(0, end-c.Slaves); k < end; k++ {
			slaves[k].ClusterID = c.ID
		}
		end = max(0, end-c.Slaves)
		clusters[c.ID] = scheduler.Cluster{ID: c.ID, Private: true, Projects: ids(c.Projects), GuestLimit: c.GuestLimit.Duration}
	}
	var out []scheduler.Reservation
	next := 0 // the next public slave to book whole
	for _, rv := range sc.Reservations {
		r := scheduler.Reservation{ID: rv.ID, ClusterID: 1, GPUs: rv.GPUs, Start: t0.Add(rv.From.Duration), End: t0.Add(rv.Until.Duration),
			Users: ids(rv.Users), Projects: ids(rv.Users)}
		for n := 0; n < rv.Slaves && next < end; n++ {
			r.SlaveNames = append(r.SlaveNames, slaves[next].Name)
			next++
		}
		out = append(out, r)
	}
	return out
}

// wakes are the instants the scenario needs a pass at although nothing else happens: the
// reservations' starts, and just past each job's notBefore and notAfter (Plan fails a job only
// once its notAfter has passed).
func (sc *Scenario) wakes(jobs []TraceJob, resv []scheduler.Reservation) []time.Time {
	var out []time.Time
	for _, r := range resv {
		out = append(out, r.Start)
	}
	for _, j := range jobs {
		if !j.NotBefore.IsZero() {
			out = append(out, j.NotBefore)
		}
		if !j.NotAfter.IsZero() {
			out = append(out, j.NotAfter.Add(time.Second))
		}
	}
	return out
}

// ScenarioResult is what a scenario's run measured.
type ScenarioResult struct {
	// Holders counts the completed jobs that named a reservation; HolderAvgWait and
	// HolderP99Wait their waits (first start − submission); HolderOutside those that started
	// outside their reservation's window (must be 0).
	Holders                      int
	HolderAvgWait, HolderP99Wait time.Duration
	HolderOutside                int
	// Expired counts jobs failed because their notAfter passed while they were queued;
	// ReservationFailed holders' jobs failed because the reservation ended first.
	Expired, ReservationFailed int
	// Guests counts completed jobs that ran last on a private cluster they do not own;
	// GuestsTooLong those of them whose minDuration exceeds the cluster's guest limit (must be 0).
	Guests, GuestsTooLong int
	// EarlyStarts counts jobs that started before their notBefore (must be 0).
	EarlyStarts int
}

// measure fills the scenario's metrics from the outcomes.
func (sc *Scenario) measure(r *Result, slaves []scheduler.Slave, clusters map[int]scheduler.Cluster, resv []scheduler.Reservation, uid map[string]int64) {
	clusterOf := map[string]int{}
	for _, s := range slaves {
		clusterOf[s.Name] = s.ClusterID
	}
	byID := map[string]scheduler.Reservation{}
	for _, rv := range resv {
		byID[rv.ID] = rv
	}
	var waits []time.Duration
	var sum time.Duration
	for _, o := range r.Outcomes {
		j := o.Job
		if !j.NotBefore.IsZero() && o.Start.Before(j.NotBefore) {
			r.Scenario.EarlyStarts++
		}
		if rv, ok := byID[j.Reservation]; ok {
			w := o.Start.Sub(j.Submit)
			waits = append(waits, w)
			sum += w
			if o.Start.Before(rv.Start) || !o.Start.Before(rv.End) {
				r.Scenario.HolderOutside++
			}
		}
		if c := clusters[clusterOf[o.Slave]]; c.Private && !slices.Contains(c.Projects, uid[j.User]) {
			r.Scenario.Guests++
			limit := c.GuestLimit
			if limit <= 0 {
				limit = scheduler.DefaultGuestLimit
			}
			if j.MinDuration > limit {
				r.Scenario.GuestsTooLong++
			}
		}
	}
	if n := len(waits); n > 0 {
		slices.Sort(waits)
		r.Scenario.Holders, r.Scenario.HolderAvgWait, r.Scenario.HolderP99Wait = n, sum/time.Duration(n), percentile(waits, 99)
	}
}

// withScenario gives a queued job its scenario settings: its user as its project, its window
// and the reservation it names.
func withScenario(q *scheduler.Job, j TraceJob, uid map[string]int64) {
	q.ProjectID = uid[j.User]
	s := &q.Request.Scheduling
	if !j.NotBefore.IsZero() {
		t := j.NotBefore
		s.NotBefore = &t
	}
	if !j.NotAfter.IsZero() {
		t := j.NotAfter
		s.NotAfter = &t
	}
	if j.Reservation != "" {
		s.ReservationIDs = []string{j.Reservation}
	}
}

// expired says whether a queued job's notAfter has passed: Plan must see it to fail it, even
// where it could not start.
func expired(q *scheduler.Job, now time.Time) bool {
	na := q.Request.Scheduling.NotAfter
	return na != nil && now.After(*na)
}

// scenarioFailure counts a failure that the scenario explains (a notAfter passed, a
// reservation ended) and says whether it did.
func scenarioFailure(r *ScenarioResult, j TraceJob, now time.Time) bool {
	switch {
	case !j.NotAfter.IsZero() && now.After(j.NotAfter):
		r.Expired++
	case j.Reservation != "":
		r.ReservationFailed++
	default:
		return false
	}
	return true
}
