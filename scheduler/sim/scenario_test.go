package sim

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/scheduler"
)

// synthetic is a seeded workload over days days for the example scenario's users: a job every
// 20 minutes, 1 to 8 GPUs, running 1 minute to 10 hours.
func synthetic(seed uint64, days int) []TraceJob {
	rng := rand.New(rand.NewPCG(seed, 1))
	users := []string{"6214e9", "11cb48", "b436b2", "103959", "ee9e8c"}
	var out []TraceJob
	for at := time.Duration(0); at < time.Duration(days)*24*time.Hour; at += 20 * time.Minute {
		d := time.Duration(float64(time.Minute) * (1 + rng.Float64()*rng.Float64()*599)).Round(time.Second)
		out = append(out, tj(at, d, []int{1, 1, 1, 2, 4, 8}[rng.IntN(6)], users[rng.IntN(len(users))]))
	}
	return out
}

// TestExampleScenario runs bench/scenarios/philly-example.toml on a synthetic workload: the
// private cluster's slaves run only its owners' jobs and guests within the guest limit,
// reservation holders start within their reservation, no job starts before its notBefore,
// jobs expire at their notAfter rather than fail otherwise, and nothing is left queued.
func TestExampleScenario(t *testing.T) {
	sc, err := ReadScenario("../../bench/scenarios/philly-example.toml")
	if err != nil {
		t.Fatal(err)
	}
	rules := sc.Apply(DefaultRules)
	if len(rules.MaxDurationSteps) != 8 || rules.MinFloor != 10*time.Minute {
		t.Fatalf("rules %+v", rules)
	}
	jobs := sc.ApplyJobs(Assign(synthetic(3, 24), rules), rules.Seed)
	r := Run(Config{Policy: scheduler.PolicyFair, Slaves: 20, GPUsPerSlave: 8, Scenario: sc, NoEstimates: true}, jobs)
	s := r.Scenario
	t.Logf("%d jobs; scenario %+v; avg wait %s", len(r.Outcomes), s, r.Metrics.AvgWait)
	if r.Failed != 0 || r.Stuck != 0 {
		t.Fatalf("%d failed, %d stuck", r.Failed, r.Stuck)
	}
	if s.Holders == 0 || s.HolderOutside != 0 {
		t.Errorf("%d holders' jobs, %d started outside their reservation", s.Holders, s.HolderOutside)
	}
	if s.GuestsTooLong != 0 || s.EarlyStarts != 0 {
		t.Errorf("%d guests past the guest limit, %d starts before notBefore", s.GuestsTooLong, s.EarlyStarts)
	}
	if s.Expired == 0 {
		t.Errorf("no job expired at its notAfter: the windows were not applied")
	}
	if len(r.Outcomes)+s.Expired+s.ReservationFailed+r.InteractiveFailed != len(jobs)-r.Dropped {
		t.Errorf("%d completed + %d expired + %d reservation failed + %d interactive failed != %d jobs",
			len(r.Outcomes), s.Expired, s.ReservationFailed, r.InteractiveFailed, len(jobs)-r.Dropped)
	}
}

// TestPrivateClusterOwnersOnly: with a guest limit below every minDuration, a private cluster's
// slaves run its owner's jobs and nobody else's, and do run them.
func TestPrivateClusterOwnersOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sc.toml")
	if err := os.WriteFile(path, []byte(`
[[cluster]]
id = 7
slaves = 2
projects = ["b436b2"]
guestLimit = "1s"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	sc, err := ReadScenario(path)
	if err != nil {
		t.Fatal(err)
	}
	jobs := sc.ApplyJobs(Assign(synthetic(5, 4), DefaultRules), 1)
	r := Run(Config{Policy: scheduler.PolicyFIFO, Slaves: 4, GPUsPerSlave: 8, Scenario: sc, NoEstimates: true}, jobs)
	owners := 0
	for _, o := range r.Outcomes {
		if o.Slave == "sim-0002" || o.Slave == "sim-0003" {
			if o.Job.User != "b436b2" {
				t.Fatalf("%s's job ran on private slave %s", o.Job.User, o.Slave)
			}
			owners++
		}
	}
	if owners == 0 || r.Scenario.Guests != 0 || r.Failed+r.Stuck != 0 {
		t.Fatalf("%d owner jobs on the private slaves, %d guests, %d failed, %d stuck", owners, r.Scenario.Guests, r.Failed, r.Stuck)
	}
}

// TestScenarioErrors: a bad scenario is refused, naming the field.
func TestScenarioErrors(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"[rules]\nrestartable = 2", "rules.restartable"},
		{"[[reservation]]\nid = \"a\"\nusers = [\"u\"]\nfrom = \"1h\"\nuntil = \"2h\"", "either gpus or slaves"},
		{"[[reservation]]\nid = \"a\"\nusers = [\"u\"]\ngpus = 2\nfrom = \"3h\"\nuntil = \"2h\"", "until"},
		{"[[cluster]]\nid = 1\nslaves = 1\nprojects = [\"u\"]", "cluster[0].id"},
		{"[windows]\nnotAfterShare = 0.1", "notAfterMax"},
		{"[rules]\nseeed = 3", "unknown key"},
		{"[rules]\nminFloor = \"ten\"", "minFloor"},
	} {
		path := filepath.Join(t.TempDir(), "sc.toml")
		if err := os.WriteFile(path, []byte(c.text), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadScenario(path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one naming %q", c.text, err, c.want)
		}
	}
}

// TestScenarioDraws: the windows are drawn on a stream of their own (the rules' draws do not
// change), reproducibly, and notAfter follows notBefore.
func TestScenarioDraws(t *testing.T) {
	sc := &Scenario{Windows: ScenarioWindows{NotBeforeShare: 0.5, NotBeforeMax: Duration{time.Hour}, NotAfterShare: 0.5,
		NotAfterMin: Duration{time.Hour}, NotAfterMax: Duration{2 * time.Hour}}}
	base := Assign(synthetic(1, 2), DefaultRules)
	a, b := sc.ApplyJobs(base, 9), sc.ApplyJobs(base, 9)
	nb, na := 0, 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("job %d drawn differently", i)
		}
		if a[i].Restartable != base[i].Restartable || a[i].MinDuration != base[i].MinDuration {
			t.Fatalf("job %d: the rules' draws changed", i)
		}
		from := a[i].Submit
		if !a[i].NotBefore.IsZero() {
			nb++
			from = a[i].NotBefore
		}
		if !a[i].NotAfter.IsZero() {
			na++
			if d := a[i].NotAfter.Sub(from); d < time.Hour || d > 2*time.Hour {
				t.Fatalf("job %d: notAfter %s after it may start", i, d)
			}
		}
	}
	if nb == 0 || na == 0 || nb == len(a) || na == len(a) {
		t.Fatalf("%d notBefore, %d notAfter of %d", nb, na, len(a))
	}
}
