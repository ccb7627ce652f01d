package chaos

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/faults"
	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/store"
)

// size is how much a scenario does: GPULAB_CHAOS=full (make chaos) or the small default that
// make test runs.
type size struct {
	name       string
	jobs       int           // short jobs per scenario
	kills      int           // master kills
	pgOutage   time.Duration // how long Postgres stays stopped
	slowDelay  time.Duration // how long the slow engine holds each call
	slowJobs   int           // containers on the slow slave
	leaderRuns int           // leader kills with two masters
}

func chaosSize() size {
	if os.Getenv("GPULAB_CHAOS") == "full" {
		return size{name: "full", jobs: 40, kills: 5, pgOutage: 20 * time.Second, slowDelay: 2 * time.Second, slowJobs: 20, leaderRuns: 3}
	}
	return size{name: "small", jobs: 6, kills: 2, pgOutage: 8 * time.Second, slowDelay: time.Second, slowJobs: 10, leaderRuns: 1}
}

// TestChaos runs every scenario (in parallel: each has its own database, masters and slaves)
// and writes the table of figures.
func TestChaos(t *testing.T) {
	sz := chaosSize()
	runs := 1
	if n, err := strconv.Atoi(os.Getenv("GPULAB_CHAOS_RUNS")); err == nil && n > 1 {
		runs = n
	}
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("GPULAB_TEST_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("chaos size %s, %d run(s), seed %d (GPULAB_TEST_SEED replays it)", sz.name, runs, seed)
	var rs results
	t.Cleanup(func() { rs.write(t, sz.name) })
	scenarios := []struct {
		name string
		run  func(t *testing.T, sz size, rng *rand.Rand) result
	}{
		{"lost-replies", lostReplies},
		{"master-kill", masterKill},
		{"postgres-outage", postgresOutage},
		{"slave-kill", slaveKill},
		{"slave-pause", slavePause},
		{"slave-partition", slavePartition},
		{"two-masters", twoMasters},
		{"slow-docker", slowDocker},
		{"clock-behind", func(t *testing.T, sz size, rng *rand.Rand) result { return clockSkew(t, sz, "-10m") }},
		{"clock-ahead", func(t *testing.T, sz size, rng *rand.Rand) result { return clockSkew(t, sz, "+10m") }},
	}
	for run := range runs {
		for i, sc := range scenarios {
			t.Run(fmt.Sprintf("%s/%d", sc.name, run+1), func(t *testing.T) {
				t.Parallel()
				rng := rand.New(rand.NewPCG(seed, uint64(run*100+i)))
				r := sc.run(t, sz, rng)
				r.scenario = fmt.Sprintf("%s (run %d)", sc.name, run+1)
				rs.add(r)
			})
		}
	}
}

// Replies lost after the master acted, at random, at every kind of call: a quarter of the
// replies between a slave and the master never arrive.
func lostReplies(t *testing.T, sz size, rng *rand.Rand) result {
	c := newCluster(t, clusterOpts{})
	s := c.addSlave("s1", 4, true, "")
	s.proxy.DropRepliesPerRequest(0.25, rand.New(rand.NewPCG(rng.Uint64(), 3)))
	var halts, cancels []string
	for i := range 2 {
		halts = append(halts, c.submit(longJob(i, true)))
		cancels = append(cancels, c.submit(longJob(10+i, false)))
	}
	var short []string
	for i := range sz.jobs {
		short = append(short, c.submit(shortJob(i)))
	}
	for _, id := range append(halts, cancels...) {
		c.waitStatus(id, 3*time.Minute, job.StatusRunning)
	}
	for _, id := range halts {
		c.setStatus(id, job.StatusMustHalt)
	}
	for _, id := range cancels {
		c.setStatus(id, job.StatusCancelled)
	}
	for _, id := range halts {
		c.waitStatus(id, 3*time.Minute, job.StatusHalted, job.StatusFailed)
	}
	for _, id := range short {
		c.waitStatus(id, 3*time.Minute, job.StatusFinished, job.StatusFailed)
	}
	c.endAll(2 * time.Minute)
	drops := s.proxy.Stats().DroppedReplies
	s.proxy.Pass()
	r := result{faults: fmt.Sprintf("%d replies dropped", drops), recovery: "-"}
	c.check(&r, false)
	for _, id := range short {
		if st := c.job(id).Job.State.Status; st != job.StatusFinished {
			t.Errorf("short job %s ended %s with replies lost, want FINISHED", id, st)
		}
	}
	return r
}

// The master is killed with SIGKILL at random moments while jobs are submitted, assigned,
// started and ended, and restarted at once.
func masterKill(t *testing.T, sz size, rng *rand.Rand) result {
	c := newCluster(t, clusterOpts{})
	c.addSlave("s1", 4, false, "")
	c.addSlave("s2", 4, false, "")
	var wg sync.WaitGroup
	wg.Add(1)
	pace := rand.New(rand.NewPCG(rng.Uint64(), 1)) // the submitter's own: rng is the test's
	go func() {
		defer wg.Done()
		for i := range sz.jobs {
			if _, err := c.trySubmit(shortJob(i)); err != nil {
				t.Error(err)
			}
			time.Sleep(time.Duration(pace.IntN(400)) * time.Millisecond)
		}
	}()
	m := c.masters[0]
	var worst time.Duration
	for k := range sz.kills {
		time.Sleep(time.Duration(500+rng.IntN(2500)) * time.Millisecond)
		killed := time.Now()
		if err := m.Restart(context.Background()); err != nil { // SIGKILL, then start again
			t.Fatal(err)
		}
		c.waitReady(m)
		// Recovered: a job changed state after the restart. A job submitted now makes sure
		// there is one to change: the submitter's jobs may all have ended before this kill
		// (it happened at the small size, and the test waited for a change that could not
		// come). A submit alone (from no state) does not count.
		if _, err := c.trySubmit(shortJob(1000 + k)); err != nil {
			t.Error(err)
		}
		var last time.Time
		waitUntil(t, 2*time.Minute, "a job state change after the master restarted", func() bool {
			err := c.st.DB().QueryRowContext(context.Background(),
				`SELECT COALESCE(max(at), 'epoch') FROM job_events WHERE kind = 'status' AND from_status IS NOT NULL`).Scan(&last)
			return err == nil && last.After(killed)
		})
		worst = max(worst, last.Sub(killed))
	}
	wg.Wait()
	c.endAll(3 * time.Minute)
	r := result{faults: fmt.Sprintf("%d × SIGKILL of the master", sz.kills), recovery: "next state change ≤ " + secs(worst)}
	c.check(&r, false)
	return r
}

// The slave agent is killed with SIGKILL at random moments while jobs start, run and end (a
// crash: its containers live on) and started again, as a supervisor would: every other time
// at once, the others only after the master marked it offline (within the job grace). It
// reattaches what still runs, reports what ended while it was away, and nothing runs twice.
func slaveKill(t *testing.T, sz size, rng *rand.Rand) result {
	c := newCluster(t, clusterOpts{})
	s := c.addSlave("s1", 4, false, "")
	long := []string{c.submit(longJob(0, true)), c.submit(longJob(1, false))}
	for _, id := range long {
		c.waitStatus(id, 3*time.Minute, job.StatusRunning)
	}
	var short []string
	index := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Add(1)
	pace := rand.New(rand.NewPCG(rng.Uint64(), 1))
	go func() {
		defer wg.Done()
		for i := range sz.jobs {
			id, err := c.trySubmit(shortJob(i))
			if err != nil {
				t.Error(err)
				continue
			}
			mu.Lock()
			short = append(short, id)
			index[id] = i
			mu.Unlock()
			time.Sleep(time.Duration(pace.IntN(400)) * time.Millisecond)
		}
	}()
	ctx := context.Background()
	var worst time.Duration
	for k := range sz.kills {
		time.Sleep(time.Duration(500+rng.IntN(2500)) * time.Millisecond)
		before, err := c.st.GetSlave(ctx, s.name)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := s.Wait(ctx); err == nil {
			t.Fatal("the killed slave exited with status 0")
		}
		if k%2 == 1 {
			waitUntil(t, time.Minute, "the killed slave marked offline", func() bool {
				sl, err := c.st.GetSlave(ctx, s.name)
				return err == nil && !sl.Online
			})
		}
		started := time.Now()
		if err := s.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		// Recovered: the new agent registered (a new instance) and heartbeats.
		var seen time.Time
		waitUntil(t, 2*time.Minute, "the restarted slave online", func() bool {
			sl, err := c.st.GetSlave(ctx, s.name)
			if err != nil || !sl.Online || sl.InstanceID == before.InstanceID {
				return false
			}
			seen = time.Now()
			return true
		})
		worst = max(worst, seen.Sub(started))
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for _, id := range short {
		c.waitStatus(id, 3*time.Minute, job.StatusFinished, job.StatusFailed, job.StatusCancelled)
		if st := c.job(id).Job.State.Status; st != job.StatusFinished {
			t.Errorf("short job %s ended %s across the slave's restarts, want FINISHED", id, st)
		}
		// FINISHED means it ran to its end: its last line is in its log.
		if l, _, err := c.st.ReadJobLog(ctx, id, 0); err != nil || !strings.Contains(string(l), fmt.Sprintf("done %d\n", index[id])) {
			t.Errorf("short job %s is FINISHED without its last line in its log (%v): %q", id, err, l)
		}
	}
	for _, id := range long {
		if st := c.job(id).Job.State.Status; st != job.StatusRunning {
			t.Errorf("long job %s is %s after the slave's restarts, want RUNNING (reattached)", id, st)
		}
	}
	c.endAll(3 * time.Minute)
	r := result{faults: fmt.Sprintf("%d × SIGKILL of the slave agent, restarted (half of them after it was marked offline)", sz.kills),
		recovery: "online again ≤ " + secs(worst) + " after the restart"}
	c.check(&r, false)
	return r
}

// Postgres is restarted, then stopped for a while, under a steady submit load: every request
// answers 503 (never another 5xx), every accepted submission exists, the cluster carries on.
func postgresOutage(t *testing.T, sz size, rng *rand.Rand) result {
	c := newCluster(t, clusterOpts{})
	c.addSlave("s1", 4, false, "")
	hc := c.rawClient()
	var ok, unavailable, other, neterr atomic.Int64
	var firstAfter atomic.Int64 // unix nanos of the first 201 after the outage ended
	var outageEnd atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(300 * time.Millisecond):
				}
				tiny := spec{name: fmt.Sprintf("tiny-%d-%d", w, i), script: "echo hi"}
				resp, err := hc.Post(c.masters[0].url()+"/api/gpulab/v3.1/jobs", "application/json", bytes.NewReader(c.body(tiny)))
				if err != nil {
					neterr.Add(1)
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				switch {
				case resp.StatusCode == http.StatusCreated:
					ok.Add(1)
					c.accept(strings.TrimSpace(string(body)))
					if end := outageEnd.Load(); end > 0 {
						firstAfter.CompareAndSwap(0, time.Now().UnixNano())
					}
				case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "":
					unavailable.Add(1)
				default:
					other.Add(1)
					t.Errorf("submit during a database outage: %d %s", resp.StatusCode, body)
				}
			}
		}()
	}
	ctx := context.Background()
	time.Sleep(2 * time.Second)
	if err := c.pg.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if err := c.pg.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(sz.pgOutage)
	if err := c.pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	outageEnd.Store(time.Now().UnixNano())
	waitUntil(t, 2*time.Minute, "a submission accepted after the outage", func() bool { return firstAfter.Load() > 0 })
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	r := result{faults: fmt.Sprintf("restart + %s stop: %d accepted, %d×503, %d other 5xx, %d refused connections",
		sz.pgOutage, ok.Load(), unavailable.Load(), other.Load(), neterr.Load()),
		recovery: "first submit " + secs(time.Duration(firstAfter.Load()-outageEnd.Load())) + " after the start"}
	c.check(&r, false)
	return r
}

// rawClient is alice's HTTPS client without retries: to count the answers themselves.
func (c *cluster) rawClient() *http.Client {
	c.t.Helper()
	cert, err := pki.LoadClientPEM(c.alicePEM, "")
	if err != nil {
		c.t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(c.dir, "data", "ca.pem"))
	if err != nil {
		c.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}}
}

// runningOn waits until n of the given jobs (or their restarts) run on slave short, and
// returns those jobs.
func (c *cluster) runningOn(short string, want int, limit time.Duration, of func(r *store.JobRecord) bool) []string {
	c.t.Helper()
	var ids []string
	waitUntil(c.t, limit, fmt.Sprintf("%d jobs running on %s", want, short), func() bool {
		ids = ids[:0]
		for id, r := range c.jobs() {
			if r.Job.State.Status == job.StatusRunning && r.Job.State.Scheduling.AssignedSlaveName == c.name+short && of(r) {
				ids = append(ids, id)
			}
		}
		return len(ids) >= want
	})
	return ids
}

// cutOff runs restartable jobs on slave a, then cuts a off (cut), waits until their restarts
// run on slave b, heals (heal), and waits until a's old copies are gone.
func cutOff(t *testing.T, cut, heal func(c *cluster, a *slaveProc), useProxy bool) (*cluster, time.Duration, time.Duration) {
	c := newCluster(t, clusterOpts{})
	a := c.addSlave("a", 2, useProxy, "")
	var first []string
	for i := range 2 {
		first = append(first, c.submit(longJob(i, true)))
	}
	for _, id := range first {
		c.waitStatus(id, 3*time.Minute, job.StatusRunning)
	}
	c.addSlave("b", 2, false, "")
	cutAt := time.Now()
	cut(c, a)
	isRestart := func(r *store.JobRecord) bool { return r.Job.RestartInfo != nil }
	c.runningOn("b", len(first), 3*time.Minute, isRestart)
	restarted := time.Since(cutAt)
	healAt := time.Now()
	heal(c, a)
	waitUntil(t, 2*time.Minute, "slave a's old containers gone", func() bool {
		for _, ct := range c.tl.Alive() {
			if ct.Slave == a.name {
				return false
			}
		}
		return true
	})
	return c, restarted, time.Since(healAt)
}

// A slave frozen (SIGSTOP) past the job grace while its jobs run, then resumed.
func slavePause(t *testing.T, sz size, rng *rand.Rand) result {
	c, restarted, stopped := cutOff(t, func(c *cluster, a *slaveProc) { _ = a.Stop() }, func(c *cluster, a *slaveProc) { _ = a.Cont() }, false)
	c.endAll(2 * time.Minute)
	r := result{faults: "slave SIGSTOP past the job grace, then SIGCONT",
		recovery: fmt.Sprintf("restarts running %s after the freeze; old copies stopped %s after the resume", secs(restarted), secs(stopped))}
	c.check(&r, true)
	return r
}

// A slave cut off from the master (its traffic swallowed) while its jobs run, then healed.
func slavePartition(t *testing.T, sz size, rng *rand.Rand) result {
	c, restarted, _ := cutOff(t, func(c *cluster, a *slaveProc) { a.proxy.Blackhole() }, func(c *cluster, a *slaveProc) { a.proxy.Pass() }, true)
	c.endAll(2 * time.Minute)
	r := result{faults: "slave partitioned past the job grace, then healed", recovery: "restarts running " + secs(restarted) + " after the cut"}
	c.check(&r, false)
	return r
}

// Two masters share the database; the scheduler's leader is killed, and the other takes over.
func twoMasters(t *testing.T, sz size, rng *rand.Rand) result {
	c := newCluster(t, clusterOpts{masters: 2})
	c.addSlave("s1", 4, false, "")
	for i := range sz.jobs / 2 {
		c.submit(shortJob(i))
	}
	var worst time.Duration
	for round := range sz.leaderRuns {
		var holder string
		var epoch int64
		waitUntil(t, time.Minute, "a scheduler leader", func() bool {
			err := c.st.DB().QueryRowContext(context.Background(), `SELECT holder, epoch FROM scheduler_leader WHERE expires_at > now()`).Scan(&holder, &epoch)
			return err == nil && holder != ""
		})
		var leader *masterProc
		for _, m := range c.masters {
			if strings.HasSuffix(holder, ":"+strconv.Itoa(m.Pid())) {
				leader = m
			}
		}
		if leader == nil {
			t.Fatalf("leader %q is none of the masters", holder)
		}
		killed := time.Now()
		if err := leader.Kill(); err != nil {
			t.Fatal(err)
		}
		id := c.submit(shortJob(100 + round))
		// Recovered: another master holds the lease (a pass runs at once when it takes it).
		waitUntil(t, 2*time.Minute, "another master taking the scheduler lease", func() bool {
			var e int64
			err := c.st.DB().QueryRowContext(context.Background(), `SELECT epoch FROM scheduler_leader WHERE expires_at > now()`).Scan(&e)
			return err == nil && e > epoch
		})
		worst = max(worst, time.Since(killed))
		c.waitStatus(id, 3*time.Minute, job.StatusAssigned, job.StatusStarting, job.StatusRunning, job.StatusFinished)
		if err := leader.Restart(context.Background()); err != nil {
			t.Fatal(err)
		}
		c.waitReady(leader)
	}
	c.endAll(2 * time.Minute)
	r := result{faults: fmt.Sprintf("%d × SIGKILL of the leader", sz.leaderRuns), recovery: "new leader ≤ " + secs(worst) + " after the kill"}
	c.check(&r, false)
	return r
}

// A slave with many running containers on a slow Docker Engine: its heartbeats still arrive,
// nothing is taken for lost.
func slowDocker(t *testing.T, sz size, rng *rand.Rand) result {
	sd, err := faults.NewSlowDocker("", sz.slowDelay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sd.Close)
	c := newCluster(t, clusterOpts{})
	c.addSlave("slow", 0, false, sd.DockerHost())
	var ids []string
	for i := range sz.slowJobs {
		s := longJob(i, false)
		s.gpus = 0
		ids = append(ids, c.submit(s))
	}
	for _, id := range ids {
		c.waitStatus(id, 5*time.Minute, job.StatusRunning)
	}
	// Three heartbeat graces with every engine call slow: the slave stays online.
	offline := 0
	end := time.Now().Add(3 * heartbeatGrace)
	for time.Now().Before(end) {
		sl, err := c.st.GetSlave(context.Background(), c.name+"slow")
		if err == nil && !sl.Online {
			offline++
		}
		time.Sleep(200 * time.Millisecond)
	}
	if offline > 0 {
		t.Errorf("the slave on a slow engine was seen offline %d times", offline)
	}
	for _, id := range ids {
		if st := c.job(id).Job.State.Status; st != job.StatusRunning {
			t.Errorf("job %s on the slow slave is %s", id, st)
		}
	}
	c.endAll(5 * time.Minute)
	r := result{faults: fmt.Sprintf("every engine call held %s; %d containers", sz.slowDelay, sz.slowJobs), recovery: "-"}
	c.check(&r, false)
	return r
}

// The database's clock 10 minutes off the masters' and slaves' (faketime under Postgres): every
// timeout is measured on the database's clock, so nothing changes. (The master's clock 10
// minutes ahead is the database's 10 minutes behind: a leader comparing its own clock with the
// database's timestamps would have failed every running job as `worker lost` at once.)
func clockSkew(t *testing.T, sz size, offset string) result {
	lib := ""
	for _, p := range []string{"/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1", "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
		"/usr/lib/faketime/libfaketime.so.1"} {
		if _, err := os.Stat(p); err == nil {
			lib = p
		}
	}
	if lib == "" {
		testenv.Missing(t, "libfaketime", "package faketime is not installed (scripts/deps.sh installs it)")
	}
	c := newCluster(t, clusterOpts{pgEnv: []string{"LD_PRELOAD=" + lib, "FAKETIME=" + offset, "FAKETIME_DONT_FAKE_MONOTONIC=1"}})
	dbNow, err := c.st.Now(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	skew := time.Until(dbNow)
	if skew.Abs() < 9*time.Minute {
		t.Fatalf("the database's clock is %s off, want 10 minutes (faketime not in effect)", skew.Round(time.Second))
	}
	c.addSlave("s1", 4, false, "")
	long := c.submit(spec{name: "long", gpus: 1, script: `trap 'exit 0' TERM; echo start; while true; do sleep 0.3; done`})
	var short []string
	for i := range max(sz.jobs/2, 3) {
		short = append(short, c.submit(shortJob(i)))
	}
	for _, id := range short {
		c.waitStatus(id, 3*time.Minute, job.StatusFinished)
	}
	c.waitStatus(long, 3*time.Minute, job.StatusRunning)
	// Past every grace: the slave stays online and the long job runs on (maxDuration 1 hour).
	end := time.Now().Add(heartbeatGrace + jobGrace + 2*time.Second)
	for time.Now().Before(end) {
		if sl, err := c.st.GetSlave(context.Background(), c.name+"s1"); err == nil && !sl.Online {
			t.Fatalf("the slave was marked offline with the database's clock %s off", offset)
		}
		if st := c.job(long).Job.State.Status; st != job.StatusRunning {
			t.Fatalf("the long job became %s with the database's clock %s off", st, offset)
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.endAll(2 * time.Minute)
	r := result{faults: fmt.Sprintf("database clock %s off the masters' and slaves' (%s)", offset, skew.Round(time.Second)), recovery: "-"}
	c.check(&r, false)
	return r
}
