package bench

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/store"
)

// b1Fleet is the burst's cluster: 8 GPUs, 32 CPUs and 256 GiB per slave, over 5 clusters, so
// GPUs are what binds.
func b1Fleet(slaves int) fleetSpec {
	return fleetSpec{Slaves: slaves, GPUs: 8, CPUs: 32, MemoryGiB: 256, Clusters: 5}
}

// burstShape is one job of the burst's mix: its GPUs (2 CPUs and 8 GB each), the cluster it is
// pinned to (0: any) and its owner, an index into the burst's users.
type burstShape struct{ GPUs, Cluster, Owner int }

// burstMix draws the burst's n jobs, the same at every run: 70 % one GPU, 20 % 2–8 GPUs (on one
// slave), 10 % one GPU pinned to one of clusters; owners spread over users. B1 and Slurm's S1
// place the same mix.
func burstMix(n, clusters, users int) []burstShape {
	rng := rand.New(rand.NewPCG(6, 1))
	out := make([]burstShape, n)
	for i := range out {
		gpus, cluster := 1, 0
		switch i % 10 {
		case 1, 5:
			gpus = 2 + rng.IntN(7)
		case 9:
			cluster = 1 + rng.IntN(clusters)
		}
		out[i] = burstShape{GPUs: gpus, Cluster: cluster, Owner: rng.IntN(users)}
	}
	return out
}

// burstUsers is how many users own a burst of n jobs.
func burstUsers(n int) int { return min(50, max(n/20, 2)) }

// burstJobs makes n queued jobs of burstMix's mix, owned by users.
func burstJobs(t testing.TB, n, clusters int, users []*user) []bulkJob {
	reqs := map[[2]int]job.Request{}
	req := func(gpus, cluster int) job.Request {
		k := [2]int{gpus, cluster}
		if r, ok := reqs[k]; ok {
			return r
		}
		r := parsedRequest(t, gpus, 2*gpus, 8*gpus, cluster)
		reqs[k] = r
		return r
	}
	base := time.Now().Add(-time.Hour)
	jobs := make([]bulkJob, n)
	for i, sh := range burstMix(n, clusters, len(users)) {
		u := users[sh.Owner]
		jobs[i] = bulkJob{UUID: newUUID(), Name: fmt.Sprintf("burst-%d", i), User: u, Project: u.Projects[0], Status: job.StatusQueued,
			Request: req(sh.GPUs, sh.Cluster), Created: base.Add(time.Duration(i) * time.Millisecond)}
	}
	return jobs
}

// runB1 measures burst placement: slaves registered through the protocol, a queue of jobs
// loaded, then the scheduler started; from the start of its first pass to the commit of the
// last assignment.
func runB1(t *testing.T, rep *report, sz sizes) {
	burst(t, rep, sz, "B1", sz.b1Slaves, sz.b1Jobs)
}

// runB1x is B1 at issue 16's size: 5,000 slaves × 8 GPUs, each registered and heartbeating
// through the real protocol over TLS with its own certificate, and 100,000 queued jobs of the
// same mix. The fleet heartbeats (1,000 a second) and acknowledges its assignments while the
// burst is placed, as a real one would.
func runB1x(t *testing.T, rep *report, sz sizes) {
	burst(t, rep, sz, "B1x", sz.b1xSlaves, sz.b1xJobs)
}

// burst is B1 and B1x: nSlaves simulated slaves, nJobs queued jobs.
func burst(t *testing.T, rep *report, sz sizes, id string, nSlaves, nJobs int) {
	m := startMaster(t, masterOptions{Loop: loopManual, HeartbeatInterval: sz.heartbeat})
	spec := b1Fleet(nSlaves)
	users := make([]*user, burstUsers(nJobs))
	for i := range users {
		users[i] = m.addUser(fmt.Sprintf("u%02d", i), fmt.Sprintf("p%d", i%10))
	}
	f := startFleet(t, m, spec, &fakeHooks{})
	jobs := burstJobs(t, nJobs, spec.Clusters, users)
	bulkInsert(t, m.DBURL, jobs)
	demand := 0
	for _, j := range jobs {
		demand += j.Request.Resources.GPUs
	}
	capacity := spec.Slaves * spec.GPUs

	stopProfile := m.profile(id, 15*time.Second)
	cpu := newCPUMeter(t, m.PID, m.DBURL)
	m.startLoop()
	var passes []passRecord
	deadline := time.Now().Add(5 * time.Minute)
	for {
		passes = m.passes(0)
		if burstDone(passes) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("burst not placed within 5 minutes: %d passes, %d assigned", len(passes), assignedIn(passes))
		}
		time.Sleep(50 * time.Millisecond)
	}
	rep.note(id, "during the burst: %s", cpu)
	stopProfile()
	last := slices.IndexFunc(passes, func(p passRecord) bool { return p.Assigned > 0 })
	for i, p := range passes {
		if p.Assigned > 0 {
			last = i
		}
		if p.Err != "" {
			t.Errorf("pass %d failed: %s", i, p.Err)
		}
	}
	// To the commit of the last assignments, not the end of their pass: what waiting jobs are
	// told is written after it, in a transaction of its own.
	burst := passes[last].Committed.Sub(passes[0].Start)
	assigned := assignedIn(passes)

	var used, overfull int
	var stored int
	db := openDB(t, m.DBURL, 1)
	placed := `status IN ('ASSIGNED', 'STARTING', 'RUNNING')`
	if err := db.QueryRow(`SELECT count(*), COALESCE(sum(gpus), 0) FROM jobs WHERE `+placed).Scan(&stored, &used); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT count(*) FROM (SELECT assigned_slave_name FROM jobs WHERE `+placed+`
GROUP BY assigned_slave_name HAVING sum(gpus) > $1) x`, spec.GPUs).Scan(&overfull); err != nil {
		t.Fatal(err)
	}
	if overfull > 0 || int64(stored) != assigned {
		t.Errorf("%d slaves given more than %d GPUs; %d jobs placed in the database, %d counted in passes", overfull, spec.GPUs, stored, assigned)
	}
	fails := f.fails.Load()
	f.stop() // the floors are measured on a quiet machine
	planDur := planAlone(f, jobs, spec)
	floor := floorUpdates(t, m.DBURL, int(assigned))

	rep.setRef(id+" burst", burst)
	rep.add(result{Scenario: id, Measure: fmt.Sprintf("burst: first pass → last committed assignment (%d slaves × %d GPUs, %d queued jobs)", spec.Slaves, spec.GPUs, len(jobs)),
		Value: secs(burst), Goal: "≤ 5 s", Met: met(burst <= 5*time.Second),
		Floor: fmt.Sprintf("%d single-row UPDATEs in 1 tx: %s", assigned, secs(floor)), Ratio: ratio(burst.Seconds(), floor.Seconds())})
	rep.add(result{Scenario: id, Measure: "first pass (snapshot, Plan, apply, explanations and estimates)", Value: secs(passes[0].Dur),
		Floor: "Plan alone, in memory: " + secs(planDur), Ratio: ratio(passes[0].Dur.Seconds(), planDur.Seconds())})
	rep.note(id, "%d jobs placed in %d pass(es) (%v assigned per pass), %d of %d GPUs used (demand %d GPUs); jobs: 70 %% 1 GPU, 20 %% 2–8 GPUs, 10 %% pinned to one of %d clusters; fake slaves acknowledged (STARTING, RUNNING) while later passes ran; %d failed protocol calls%s",
		assigned, last+1, assignedPerPass(passes[:last+1]), used, capacity, demand, spec.Clusters, fails, failKinds(&f.fails))
}

func assignedIn(ps []passRecord) int64 {
	var n int64
	for _, p := range ps {
		n += p.Assigned
	}
	return n
}

func assignedPerPass(ps []passRecord) []int64 {
	out := make([]int64, len(ps))
	for i, p := range ps {
		out[i] = p.Assigned
	}
	return out
}

// burstDone: something was assigned, and the two passes after the last assignment assigned
// nothing (the fleet's heartbeats keep waking the loop).
func burstDone(ps []passRecord) bool {
	last := -1
	for i, p := range ps {
		if p.Assigned > 0 {
			last = i
		}
	}
	return last >= 0 && len(ps)-1-last >= 2
}

// planAlone times Plan on the burst's snapshot in memory (the best of three): what placement
// costs without the database.
func planAlone(f *fleet, jobs []bulkJob, spec fleetSpec) time.Duration {
	snap := scheduler.Snapshot{Now: time.Now(), Policy: scheduler.PolicyFair, Clusters: map[int]scheduler.Cluster{}}
	for c := 1; c <= spec.Clusters; c++ {
		snap.Clusters[c] = scheduler.Cluster{ID: c}
	}
	for _, s := range f.slaves {
		snap.Slaves = append(snap.Slaves, scheduler.Slave{Name: s.name, InstanceID: s.inv.InstanceID, ClusterID: s.inv.ClusterID, Online: true,
			Accepting: true, CPUs: s.inv.CPUs, MemoryGb: int(s.inv.MemoryMiB >> 10), CudaMajor: s.inv.CudaMajor(), GPUs: s.inv.GPUs})
	}
	for _, j := range jobs {
		snap.Queued = append(snap.Queued, scheduler.Job{UUID: j.UUID, Request: j.Request, Submitted: j.Created, UserID: j.User.ID, ProjectID: j.Project})
	}
	best := time.Duration(1 << 62)
	for range 3 {
		start := time.Now()
		_ = snap.Plan()
		best = min(best, time.Since(start))
	}
	return best
}

// runB2 measures submit → ASSIGNED → RUNNING: jobs submitted through the API at a steady rate
// onto simulated slaves that start containers instantly.
func runB2(t *testing.T, rep *report, sz sizes) {
	submitToRunning(t, rep, sz, "B2", sz.b2Slaves, sz.b2Jobs, sz.b2Rate, 0, "p99 ≤ 500 ms", 500*time.Millisecond)
}

// runB2x is B2 at the rate of a large site with a long queue: 20,000 jobs queued behind the
// submitted ones all the time. They wait for a reservation of 8 GPUs that starts in two days (as
// jobs waiting for a booked window do), so every pass meets them and none takes the submitted
// jobs' GPUs. (Jobs asking for a GPU model no slave has would not do: the master fails those.)
func runB2x(t *testing.T, rep *report, sz sizes) {
	submitToRunning(t, rep, sz, "B2x", sz.b2xSlaves, sz.b2xJobs, sz.b2xRate, sz.b2xBacklog, "p99 ≤ 250 ms", 250*time.Millisecond)
}

// submitToRunning submits jobs at rate onto slaves simulated slaves, with backlog jobs queued
// before the first submission that cannot start, and reports the submit → RUNNING latencies
// against goal.
func submitToRunning(t *testing.T, rep *report, sz sizes, id string, slaves, jobs int, rate float64, backlog int, goalText string, goal time.Duration) {
	m := startMaster(t, masterOptions{Loop: loopAuto, HeartbeatInterval: sz.heartbeat})
	users := make([]*user, 10)
	for i := range users {
		users[i] = m.addUser(fmt.Sprintf("u%02d", i), fmt.Sprintf("p%d", i%5))
	}
	delivered, running := newTimeMap(), newTimeMap()
	spec := b1Fleet(slaves)
	f := startFleet(t, m, spec, &fakeHooks{delivered: delivered.set, running: running.set})
	var backlogIDs []string
	if backlog > 0 {
		ids := make([]int64, len(users))
		for i, u := range users {
			ids[i] = u.ID
		}
		res, err := m.Store.CreateReservation(context.Background(), store.Reservation{ID: uuid.NewString(), Name: "window",
			ClusterID: sql.NullInt64{Int64: 1, Valid: true}, GPUs: 8, Start: time.Now().Add(48 * time.Hour),
			End: time.Now().Add(72 * time.Hour), UserIDs: ids, CreatedBy: users[0].ID})
		if err != nil {
			t.Fatal(err)
		}
		waiting := parsedRequest(t, 1, 2, 8, 1)
		waiting.Scheduling.ReservationIDs = []string{res.ID}
		queued := make([]bulkJob, backlog)
		base := time.Now().Add(-time.Hour)
		for i := range queued {
			u := users[i%len(users)]
			queued[i] = bulkJob{UUID: newUUID(), Name: fmt.Sprintf("waiting-%d", i), User: u, Project: u.Projects[0],
				Status: job.StatusQueued, Request: waiting, Created: base.Add(time.Duration(i) * time.Millisecond)}
		}
		bulkInsert(t, m.DBURL, queued)
		for _, q := range queued {
			backlogIDs = append(backlogIDs, q.UUID)
		}
	}
	rtt := floorHTTPS(t, m, users[0], 1, sz.floorWarm, sz.floorDur)
	commit := floorInsert(t, m.DBURL, 1, sz.floorWarm, sz.floorDur)
	if !sz.smoke {
		time.Sleep(5 * time.Second) // every slave has heartbeated once: the steady state
	}
	clients := make([]*http.Client, len(users))
	for i := range clients {
		clients[i] = m.client(&users[i].TLS, 4)
	}
	submitted := newTimeMap()
	var errs counter
	doc := jobDoc("b2", 1, 2, 8, 0)
	stopProfile := m.profile(id, time.Duration(float64(jobs)/rate*float64(time.Second)))
	cpu := newCPUMeter(t, m.PID, m.DBURL)
	start := time.Now()
	openLoop(rate, jobs, func(i int) {
		t0 := time.Now()
		id, err := submit(context.Background(), clients[i%len(clients)], m.URL, doc)
		if err != nil {
			if errs.Add(1) == 1 {
				t.Errorf("submit: %v", err)
			}
			return
		}
		submitted.set(id, t0)
	})
	stopProfile()
	rep.note(id, "while submitting: %s", cpu)
	deadline := time.Now().Add(2 * time.Minute)
	for running.len() < submitted.len() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(start)
	passes := m.passes(0)
	assignedAt := assignCommits(t, m, passes)
	var toAssigned, toDelivered, toRunning []time.Duration
	submitted.mu.Lock()
	for id, t0 := range submitted.m {
		if at, ok := assignedAt[id]; ok {
			toAssigned = append(toAssigned, at.Sub(t0))
		}
		if at, ok := delivered.get(id); ok {
			toDelivered = append(toDelivered, at.Sub(t0))
		}
		if at, ok := running.get(id); ok {
			toRunning = append(toRunning, at.Sub(t0))
		}
	}
	n := len(submitted.m)
	submitted.mu.Unlock()
	if len(toRunning) < n {
		t.Errorf("%d of %d submitted jobs did not reach RUNNING within 2 minutes", n-len(toRunning), n)
	}
	floor := 3*rtt.P50() + 4*commit.P50()
	floorText := fmt.Sprintf("3 HTTPS round trips + 4 commits: %s", ms(floor))
	rep.add(result{Scenario: id, Measure: fmt.Sprintf("submit → ASSIGNED committed, p50 / p99 (%d jobs at %.0f/s, %d slaves, %d queued behind)", n, rate, spec.Slaves, backlog),
		Value: ms(percentile(toAssigned, 50)) + " / " + ms(percentile(toAssigned, 99))})
	rep.add(result{Scenario: id, Measure: "submit → assignment received by the slave, p50 / p99",
		Value: ms(percentile(toDelivered, 50)) + " / " + ms(percentile(toDelivered, 99))})
	p99 := percentile(toRunning, 99)
	for name, ds := range map[string][]time.Duration{"assigned": toAssigned, "running": toRunning} {
		rep.setRef(fmt.Sprintf("%s %s p50", id, name), percentile(ds, 50))
		rep.setRef(fmt.Sprintf("%s %s p99", id, name), percentile(ds, 99))
	}
	rep.add(result{Scenario: id, Measure: "submit → RUNNING committed, p50 / p99", Value: ms(percentile(toRunning, 50)) + " / " + ms(p99),
		Goal: goalText, Met: met(p99 <= goal && len(toRunning) == n),
		Floor: floorText, Ratio: ratio(percentile(toRunning, 50).Seconds(), floor.Seconds())})
	var busy time.Duration
	var during []passRecord
	for _, p := range passes {
		if !p.Start.Before(start) {
			during = append(during, p)
			busy += p.Dur
		}
	}
	rep.note(id, "%d scheduler passes in %s (mean %s, p99 %s, the loop busy %.0f %% of the time); %d submit errors, %d failed protocol calls%s",
		len(during), secs(took), ms(busy/time.Duration(max(len(during), 1))), ms(percentile(passDurations(during), 99)),
		100*busy.Seconds()/took.Seconds(), errs.Load(), f.fails.Load(), failKinds(&f.fails))
	if len(backlogIDs) > 0 {
		// The backlog must still be queued: a scenario whose backlog the master ended would
		// measure an empty queue.
		var stillQueued int
		if err := m.Store.DB().QueryRow(`SELECT count(*) FROM jobs WHERE uuid = ANY($1::uuid[]) AND status = 'QUEUED'`,
			pq.Array(backlogIDs)).Scan(&stillQueued); err != nil {
			t.Fatal(err)
		}
		if stillQueued != len(backlogIDs) {
			t.Errorf("%d of the %d backlog jobs left the queue: the scenario measured a shorter queue", len(backlogIDs)-stillQueued, len(backlogIDs))
		}
		rep.note(id, "%d backlog jobs queued throughout (each waits for a reservation two days ahead)", stillQueued)
	}
}

func passDurations(ps []passRecord) []time.Duration {
	out := make([]time.Duration, len(ps))
	for i, p := range ps {
		out[i] = p.Dur
	}
	return out
}

// assignCommits says when each job's assignment was committed: the job's ASSIGNED event time is
// the start of the apply transaction (Postgres now()), inside one pass; the transaction commits
// as that pass ends.
func assignCommits(t testing.TB, m *master, passes []passRecord) map[string]time.Time {
	t.Helper()
	db := openDB(t, m.DBURL, 1)
	rows, err := db.Query(`SELECT uuid::text, (event_times->>'ASSIGNED')::timestamptz FROM jobs WHERE event_times ? 'ASSIGNED'`)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rows.Close() }()
	out := map[string]time.Time{}
	for rows.Next() {
		var id string
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			t.Fatal(err)
		}
		i, _ := slices.BinarySearchFunc(passes, at, func(p passRecord, at time.Time) int { return p.End().Compare(at) })
		if i < len(passes) && !passes[i].Start.After(at) {
			out[id] = passes[i].End()
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
