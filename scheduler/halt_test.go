package scheduler

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
)

// runningOpt changes a test running job.
type runningOpt func(*Placed)

func restartable() runningOpt    { return func(pl *Placed) { pl.Restartable = true } }
func interactiveRun() runningOpt { return func(pl *Placed) { pl.Interactive = true } }
func halting() runningOpt        { return func(pl *Placed) { pl.Halting = true } }

// ran is a job of user that holds GPU gpu, CPU gpu and 1 GB on a slave, RUNNING since ago
// before t0, with minDuration minD.
func ran(uuid, slave string, gpu int, user int64, ago, minD time.Duration, opts ...runningOpt) Placed {
	pl := Placed{JobUUID: uuid, SlaveName: slave, UserID: user, ProjectID: 1, GPUIndices: []int{gpu}, CPUIDs: []int{gpu},
		MemoryGb: 1, Started: t0.Add(-ago), MinDuration: minD}
	for _, o := range opts {
		o(&pl)
	}
	return pl
}

func user(id int64) jobOpt { return func(j *Job) { j.UserID = id } }

func TestHalts(t *testing.T) {
	const h = time.Hour
	one := []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 1)...))}
	two := []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 2)...))}
	tallies := map[int64]float64{1: 1, 2: 10, 3: 1}
	light := func(opts ...jobOpt) []Job {
		return []Job{mkJob("light", 1, 1, 1, append([]jobOpt{user(1)}, opts...)...)}
	}
	const none = "WAIT needs 1 GPU, none free (gpu1)"
	tests := []struct {
		name    string
		policy  Policy
		slaves  []Slave
		running []Placed
		queued  []Job
		want    map[string]string
		halts   []Halt
	}{
		{
			name:    "a light user's job halts a heavy user's job past its minDuration",
			slaves:  one,
			running: []Placed{ran("heavy-1", "gpu1", 0, 2, 2*h, h)},
			queued:  light(),
			want: map[string]string{"light": "WAIT halting job heavy-1 (its owner's usage 1 is below theirs) to make room on gpu1; starts when it has stopped | " +
				"needs 1 GPU, none free (gpu1)"},
			halts: []Halt{{JobUUID: "heavy-1", Reason: "SCORE", ForJobUUID: "light", VictimScore: 10, StarterScore: 1}},
		},
		{
			name:    "no halt before minDuration",
			slaves:  one,
			running: []Placed{ran("heavy-1", "gpu1", 0, 2, 30*time.Minute, h)},
			queued:  light(),
			want:    map[string]string{"light": none},
		},
		{
			name:    "no halt of a job that started less than a minute ago",
			slaves:  one,
			running: []Placed{ran("heavy-1", "gpu1", 0, 2, 30*time.Second, 0)},
			queued:  light(),
			want:    map[string]string{"light": none},
		},
		{
			name:    "no halt of a job not yet running",
			slaves:  one,
			running: []Placed{{JobUUID: "heavy-1", SlaveName: "gpu1", UserID: 2, GPUIndices: []int{0}}},
			queued:  light(),
			want:    map[string]string{"light": none},
		},
		{
			name:    "no halt for a user with an equal or higher tally",
			slaves:  one,
			running: []Placed{ran("peer-1", "gpu1", 0, 3, 2*h, h)},
			queued:  light(),
			want:    map[string]string{"light": none},
		},
		{
			name:    "a restartable victim is preferred",
			slaves:  two,
			running: []Placed{ran("hard-1", "gpu1", 0, 2, 2*h, h), ran("soft-1", "gpu1", 1, 2, 5*h, h, restartable())},
			queued:  light(),
			want: map[string]string{"light": "WAIT halting job soft-1 (its owner's usage 1 is below theirs) to make room on gpu1; starts when it has stopped | " +
				"needs 1 GPU, none free (gpu1)"},
			halts: []Halt{{JobUUID: "soft-1", Reason: "SCORE", ForJobUUID: "light", VictimScore: 10, StarterScore: 1}},
		},
		{
			name:    "the victim with the least run time is preferred",
			slaves:  two,
			running: []Placed{ran("long-1", "gpu1", 0, 2, 5*h, h), ran("short-1", "gpu1", 1, 2, 2*h, h)},
			queued:  light(),
			want: map[string]string{"light": "WAIT halting job short-1 (its owner's usage 1 is below theirs) to make room on gpu1; starts when it has stopped | " +
				"needs 1 GPU, none free (gpu1)"},
			halts: []Halt{{JobUUID: "short-1", Reason: "SCORE", ForJobUUID: "light", VictimScore: 10, StarterScore: 1}},
		},
		{
			name:   "the fewest victims are halted, however long they ran",
			slaves: []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 4)...))},
			running: []Placed{ran("small-1", "gpu1", 0, 2, 2*h, h), ran("small-2", "gpu1", 1, 2, 2*h, h),
				{JobUUID: "big-1", SlaveName: "gpu1", UserID: 2, GPUIndices: []int{2, 3}, CPUIDs: []int{2}, MemoryGb: 1, Started: t0.Add(-9 * h), MinDuration: h}},
			queued: []Job{mkJob("light", 2, 1, 1, user(1))},
			want: map[string]string{"light": "WAIT halting job big-1 (its owner's usage 1 is below theirs) to make room on gpu1; starts when it has stopped | " +
				"needs 2 GPUs, none free (gpu1)"},
			halts: []Halt{{JobUUID: "big-1", Reason: "SCORE", ForJobUUID: "light", VictimScore: 10, StarterScore: 1}},
		},
		{
			name:    "an interactive job halts a batch job of an equal tally instead of failing",
			slaves:  one,
			running: []Placed{ran("peer-1", "gpu1", 0, 3, 2*h, h)},
			queued:  light(interactive()),
			want: map[string]string{"light": "WAIT halting job peer-1 (interactive jobs go first) to make room on gpu1; starts when it has stopped | " +
				"needs 1 GPU, none free (gpu1)"},
			halts: []Halt{{JobUUID: "peer-1", Reason: "SCORE", ForJobUUID: "light", VictimScore: 1, StarterScore: 1}},
		},
		{
			name:    "interactive jobs are never victims",
			slaves:  one,
			running: []Placed{ran("heavy-1", "gpu1", 0, 2, 2*h, h, interactiveRun())},
			queued:  []Job{mkJob("light", 1, 1, 1, user(1)), mkJob("notebook", 1, 1, 1, user(1), interactive())},
			want: map[string]string{"light": none,
				"notebook": "FAIL interactive job cannot start now: needs 1 GPU, none free (gpu1)"},
		},
		{
			name:    "FIFO never halts",
			policy:  PolicyFIFO,
			slaves:  one,
			running: []Placed{ran("heavy-1", "gpu1", 0, 2, 2*h, h)},
			queued:  light(),
			want:    map[string]string{"light": none},
		},
		{
			name:    "a halting job is not halted again; the starter waits for it",
			slaves:  two,
			running: []Placed{ran("going-1", "gpu1", 0, 2, 2*h, h, halting()), ran("heavy-2", "gpu1", 1, 2, 2*h, h)},
			queued:  light(),
			want: map[string]string{"light": "WAIT waiting for job going-1 to halt on gpu1 | " +
				"needs 1 GPU, none free (gpu1)"},
		},
		{
			name:    "one starter per slave per pass; later jobs do not take the victims' room",
			slaves:  two,
			running: []Placed{ran("heavy-1", "gpu1", 0, 2, 2*h, h), ran("heavy-2", "gpu1", 1, 2, 3*h, h)},
			queued:  []Job{mkJob("light", 1, 1, 1, user(1)), mkJob("light-2", 1, 1, 1, user(1))},
			want: map[string]string{"light": "WAIT halting job heavy-1 (its owner's usage 1 is below theirs) to make room on gpu1; starts when it has stopped | " +
				"needs 1 GPU, none free (gpu1)",
				"light-2": none},
			halts: []Halt{{JobUUID: "heavy-1", Reason: "SCORE", ForJobUUID: "light", VictimScore: 10, StarterScore: 1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			policy := tt.policy
			if policy == "" {
				policy = PolicyFair
			}
			// Factor 1 and any victim: these cases are about the choice of victims; the
			// defaults' restraints have TestHaltOptions.
			s := Snapshot{Now: t0, Policy: policy, Tallies: tallies, Slaves: tt.slaves, Running: tt.running, Queued: tt.queued,
				HaltFactor: 1, HaltNonRestartable: true}
			before := deepCopy(s)
			p := s.Plan()
			checkPlan(t, s, p)
			if got := outcome(p); !maps.Equal(got, tt.want) {
				for k, w := range tt.want {
					if got[k] != w {
						t.Errorf("%s:\n got  %q\n want %q", k, got[k], w)
					}
				}
			}
			if !slices.Equal(p.Halts, tt.halts) {
				t.Errorf("halts %+v, want %+v", p.Halts, tt.halts)
			}
			if !reflect.DeepEqual(s, before) {
				t.Errorf("Plan changed the snapshot")
			}
			if again := s.Plan(); !reflect.DeepEqual(again, p) {
				t.Errorf("second plan differs:\n%+v\n%+v", again, p)
			}
		})
	}
}

// withStarts makes the random snapshot's running jobs halting candidates: started between 0 and
// 10 hours ago, minDuration up to 4 hours, some restartable, interactive or already halting,
// owned by users whose tallies spread widely.
func withStarts(s Snapshot) Snapshot {
	s.Tallies = map[int64]float64{}
	for u := int64(1); u <= 20; u++ {
		s.Tallies[u] = float64((u * 7) % 13)
	}
	for i := range s.Running {
		pl := &s.Running[i]
		pl.UserID = int64(1 + (i*11)%20)
		pl.Started = s.Now.Add(-time.Duration((i*53)%600) * time.Minute)
		pl.MinDuration = time.Duration((i*17)%240) * time.Minute
		pl.Restartable = i%3 == 0
		pl.Interactive = i%17 == 0
		pl.Halting = i%23 == 0
	}
	return s
}

func TestHaltsRandom(t *testing.T) {
	for seed := range uint64(20) {
		s, twin := withStarts(randomSnapshot(seed, 40, 300)), withStarts(randomSnapshot(seed, 40, 300))
		s.Policy, twin.Policy = PolicyFair, PolicyFair
		p := s.Plan()
		checkPlan(t, s, p)
		if !reflect.DeepEqual(s, twin) {
			t.Fatal("Plan modified its snapshot")
		}
		if again := s.Plan(); !reflect.DeepEqual(p, again) {
			t.Fatal("planning the same snapshot twice gave different plans")
		}
		running := map[string]Placed{}
		for _, pl := range s.Running {
			running[pl.JobUUID] = pl
		}
		queued := map[string]Job{}
		for _, j := range s.Queued {
			queued[j.UUID] = j
		}
		victims, starterSlave := map[string]bool{}, map[string]string{}
		for _, h := range p.Halts {
			v, j := running[h.JobUUID], queued[h.ForJobUUID]
			ran := s.Now.Sub(v.Started)
			switch {
			case victims[h.JobUUID]:
				t.Errorf("seed %d: %s halted twice", seed, h.JobUUID)
			case v.Started.IsZero() || ran < v.MinDuration || ran < time.Minute || v.Interactive || v.Halting:
				t.Errorf("seed %d: %+v may not be halted", seed, v)
			case h.Reason == HaltCluster && !guestOf(s, v, j):
				t.Errorf("seed %d: CLUSTER halt of %s, which is no guest of a cluster %s's project owns", seed, v.JobUUID, j.UUID)
			case h.Reason == HaltScore && !j.Request.Scheduling.Interactive && s.Tallies[j.UserID] >= s.Tallies[v.UserID]:
				t.Errorf("seed %d: %s (tally %g) may not halt %s (tally %g)", seed, j.UUID, s.Tallies[j.UserID], v.JobUUID, s.Tallies[v.UserID])
			case (h.Reason != HaltScore && h.Reason != HaltCluster) || h.StarterScore != s.Tallies[j.UserID] || h.VictimScore != s.Tallies[v.UserID]:
				t.Errorf("seed %d: halt %+v", seed, h)
			}
			victims[h.JobUUID] = true
			if other, ok := starterSlave[v.SlaveName]; ok && other != j.UUID {
				t.Errorf("seed %d: two starters on %s", seed, v.SlaveName)
			}
			starterSlave[v.SlaveName] = j.UUID
			if _, waits := p.Explanations[j.UUID]; !waits {
				t.Errorf("seed %d: starter %s does not wait", seed, j.UUID)
			}
		}
		if seed == 0 && len(p.Halts) == 0 {
			t.Errorf("seed 0: no halts; the generator should give some")
		}
		slices.Reverse(twin.Running)
		slices.Reverse(twin.Slaves)
		if shuffled := twin.Plan(); !reflect.DeepEqual(p, shuffled) {
			t.Fatalf("seed %d: the order of the snapshot's lists changed the plan", seed)
		}
	}
}

// BenchmarkPlanHalts is BenchmarkPlan with running jobs that may be halted: every job that
// does not fit now looks for victims on the busy slaves.
func BenchmarkPlanHalts(b *testing.B) {
	s := withStarts(randomSnapshot(42, 200, 2000))
	s.Policy = PolicyFair
	var p Plan
	b.ReportAllocs()
	for b.Loop() {
		p = s.Plan()
	}
	b.ReportMetric(float64(len(p.Assignments)), "assigned")
	b.ReportMetric(float64(len(p.Halts)), "halts")
}

// guestOf says whether v runs as a guest on a private cluster owned by j's project.
func guestOf(s Snapshot, v Placed, j Job) bool {
	for _, sl := range s.Slaves {
		if sl.Name != v.SlaveName {
			continue
		}
		c, ok := s.Clusters[sl.ClusterID]
		return ok && c.Private && slices.Contains(c.Projects, j.ProjectID) && !slices.Contains(c.Projects, v.ProjectID)
	}
	return false
}

// An owner's job on a private cluster halts a guest past its minDuration, whatever the tallies
// (reason CLUSTER); a guest still within its minDuration is left alone.
func TestClusterHaltsGuests(t *testing.T) {
	slave := mkSlave("priv", inCluster(5), gpus(gpuList(v100, 32, 0, 1)...))
	clusters := map[int]Cluster{5: {ID: 5, Private: true, Projects: []int64{1}}}
	owner := mkJob("owner-job", 1, 1, 1, owner(1, 1), func(j *Job) { j.Request.Resources.ClusterID = 5 })
	guest := func(ran time.Duration) Placed {
		return Placed{JobUUID: "guest-job", SlaveName: "priv", GPUIndices: []int{0}, CPUIDs: []int{0}, MemoryGb: 1,
			UserID: 2, ProjectID: 2, Started: t0.Add(-ran), MinDuration: 30 * time.Minute}
	}
	tallies := map[int64]float64{1: 100, 2: 0} // the owner has used far more: SCORE alone would not halt
	s := Snapshot{Now: t0, Clusters: clusters, Slaves: []Slave{slave}, Queued: []Job{owner}, Running: []Placed{guest(time.Hour)}, Tallies: tallies}
	p := s.Plan()
	checkPlan(t, s, p)
	if len(p.Halts) != 1 || p.Halts[0].JobUUID != "guest-job" || p.Halts[0].Reason != HaltCluster {
		t.Fatalf("halts: %+v", p.Halts)
	}
	if got := outcome(p)["owner-job"]; !strings.Contains(got, "halting job guest-jo") {
		t.Errorf("owner's job: %q", got)
	}
	s.Running = []Placed{guest(10 * time.Minute)}
	if p := s.Plan(); len(p.Halts) != 0 {
		t.Fatalf("a guest within its minDuration was halted: %+v", p.Halts)
	}
}

// TestMayHaltIsNecessary plans random busy public clusters under the halting policies and
// checks that whenever Plan halts something, MayHalt said it might: the simulator skips the
// passes MayHalt rules out, so a false "no" would change decisions. It also checks that MayHalt
// does say no often (else it skips nothing) and that interactive starters, private clusters and
// reservations always get a yes. The 2,000 seeds are fixed; GPULAB_TEST_SEED adds one.
func TestMayHaltIsNecessary(t *testing.T) {
	seeds := fixedSeeds(t, 2000)
	halted, ruledOut := 0, 0
	for _, seed := range seeds {
		s := haltingSnapshot(seed)
		p := s.Plan()
		may := s.MayHalt()
		if len(p.Halts) > 0 {
			halted++
			if !may {
				t.Fatalf("seed %d (%s, factor %g): Plan halts %v but MayHalt says no", seed, s.Policy, s.HaltFactor, p.Halts)
			}
		}
		if !may {
			ruledOut++
		}
		indexed := s
		indexed.Index = NewSlaveIndex(s.Slaves, s.Clusters)
		if indexed.MayHalt() != may {
			t.Fatalf("seed %d: MayHalt says %v, with the slaves' index %v", seed, may, !may)
		}
		withInteractive := s
		withInteractive.Queued = append(slices.Clone(s.Queued), mkJob("inter", 1, 1, 1, interactive()))
		if len(s.Running) > 0 && !withInteractive.MayHalt() {
			t.Fatalf("seed %d: an interactive starter may halt anything, MayHalt says no", seed)
		}
		private := s
		private.Clusters = map[int]Cluster{9: {ID: 9, Private: true, Projects: []int64{2}}}
		if !private.MayHalt() {
			t.Fatalf("seed %d: a private cluster's owners may halt guests, MayHalt says no", seed)
		}
		booked := s
		booked.Reservations = []Reservation{{ID: "r1", GPUs: 1, Start: t0, End: t0.Add(time.Hour), Users: []int64{1}}}
		if !booked.MayHalt() {
			t.Fatalf("seed %d: a reservation's holders may halt others, MayHalt says no", seed)
		}
		noHalts := s
		noHalts.NoHalts = true
		if noHalts.MayHalt() {
			t.Fatalf("seed %d: NoHalts, yet MayHalt says yes", seed)
		}
	}
	t.Logf("%d seeds: %d plans halted, MayHalt ruled out %d", len(seeds), halted, ruledOut)
	if halted < len(seeds)/10 || ruledOut < len(seeds)/10 {
		t.Fatalf("the random snapshots test too little: %d of %d halt, %d ruled out", halted, len(seeds), ruledOut)
	}
}

// haltingSnapshot is a full public cluster of a few slaves of 8 GPUs, its jobs of a few users
// with random tallies, ages, minDurations, maxDurations and restartability, and a short queue
// of jobs of 1 to 8 GPUs; the policy (fair or las) and the halt options vary with the seed.
func haltingSnapshot(seed uint64) Snapshot {
	r := rand.New(rand.NewPCG(seed, 2))
	s := Snapshot{Now: t0, Policy: []Policy{PolicyFair, PolicyLAS}[r.IntN(2)], HaltFactor: []float64{0, 1, 2, 4}[r.IntN(4)],
		HaltNonRestartable: r.IntN(3) == 0, Tallies: map[int64]float64{}}
	for u := int64(1); u <= 5; u++ {
		s.Tallies[u] = float64(r.IntN(4)) * float64(r.IntN(200))
	}
	for i := range 1 + r.IntN(4) {
		name := fmt.Sprintf("gpu%d", i)
		s.Slaves = append(s.Slaves, mkSlave(name, gpus(gpuList(v100, 32, 0, 8)...), cpus(64), memory(512)))
		for g := 0; g < 8; {
			n := min(8-g, 1<<r.IntN(4))
			if r.IntN(6) == 0 { // a GPU or more left free
				g += n
				continue
			}
			pl := Placed{JobUUID: fmt.Sprintf("run%d-%d", i, g), SlaveName: name, UserID: int64(1 + r.IntN(5)), ProjectID: 1,
				MemoryGb: 1, Started: t0.Add(-time.Duration(r.IntN(48*60)) * time.Minute),
				MinDuration: time.Duration(r.IntN(12)) * time.Hour, Restartable: r.IntN(2) == 0,
				Attained: time.Duration(r.IntN(100)) * time.Hour, Halting: r.IntN(15) == 0}
			pl.Ends = pl.Started.Add(time.Duration(1+r.IntN(96)) * time.Hour)
			for k := range n {
				pl.GPUIndices = append(pl.GPUIndices, g+k)
				pl.CPUIDs = append(pl.CPUIDs, g+k)
			}
			s.Running = append(s.Running, pl)
			g += n
		}
	}
	for i := range 1 + r.IntN(6) {
		j := mkJob(fmt.Sprintf("q%d", i), []int{1, 1, 2, 4, 8}[r.IntN(5)], 1, 1, user(int64(1+r.IntN(5))), minDur(10*time.Minute))
		j.Request.Scheduling.MaxDuration = job.Duration(time.Duration(1+r.IntN(72)) * time.Hour)
		j.Attained = time.Duration(r.IntN(50)) * time.Hour
		s.Queued = append(s.Queued, j)
	}
	return s
}
