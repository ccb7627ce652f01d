package scheduler

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/job"
)

func TestQueueOrderPolicies(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func(id string, user int64, submitted int, interactive bool, maxHours int, oracle time.Duration) Job {
		j := Job{UUID: id, UserID: user, Submitted: base.Add(time.Duration(submitted) * time.Minute), OracleDuration: oracle}
		j.Request.Scheduling.Interactive = interactive
		j.Request.Scheduling.MaxDuration = job.Duration(time.Duration(maxHours) * time.Hour)
		return j
	}
	queued := []Job{
		mk("a-old-heavy-user", 1, 0, false, 10, 5*time.Hour),
		mk("b-light-user", 2, 1, false, 10, 1*time.Hour),
		mk("c-interactive", 1, 2, true, 10, 3*time.Hour),
		mk("d-light-user-short", 2, 3, false, 1, 2*time.Hour),
	}
	tallies := map[int64]float64{1: 100, 2: 5}
	cases := []struct {
		policy Policy
		want   []string
	}{
		{PolicyFIFO, []string{"a-old-heavy-user", "b-light-user", "c-interactive", "d-light-user-short"}},
		{PolicyFair, []string{"c-interactive", "d-light-user-short", "b-light-user", "a-old-heavy-user"}},
		{"", []string{"c-interactive", "d-light-user-short", "b-light-user", "a-old-heavy-user"}},
		{PolicySJFOracle, []string{"b-light-user", "d-light-user-short", "c-interactive", "a-old-heavy-user"}},
	}
	for _, c := range cases {
		t.Run(string(c.policy), func(t *testing.T) {
			got := queueOrder(Snapshot{Policy: c.policy, Tallies: tallies, Queued: queued}, nil)
			for i, j := range got {
				if j.UUID != c.want[i] {
					t.Fatalf("position %d: %s, want order %v", i, j.UUID, c.want)
				}
			}
		})
	}
	if _, err := ParsePolicy("lottery"); err == nil {
		t.Fatal("unknown policy accepted")
	}
}

// Under the fair policy, jobs naming an active reservation their owner holds come right after
// interactive jobs; a reservation not yet active, or not held, gives no priority.
func TestQueueOrderReservationHolders(t *testing.T) {
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	mk := func(id string, user int64, submitted int, res ...string) Job {
		j := Job{UUID: id, UserID: user, ProjectID: user * 10, Submitted: base.Add(time.Duration(submitted) * time.Minute)}
		j.Request.Scheduling.ReservationIDs = res
		j.Request.Scheduling.MaxDuration = job.Duration(time.Hour)
		return j
	}
	s := Snapshot{Now: base.Add(time.Hour), Policy: PolicyFair, Tallies: map[int64]float64{1: 100, 2: 0, 3: 0},
		Reservations: []Reservation{
			{ID: "active", Start: base, End: base.Add(3 * time.Hour), Users: []int64{1}},
			{ID: "future", Start: base.Add(2 * time.Hour), End: base.Add(3 * time.Hour), Projects: []int64{20}},
		},
		Queued: []Job{
			mk("light", 2, 0),
			mk("future-holder", 2, 1, "future"),
			mk("not-a-holder", 3, 2, "active"),
			mk("heavy-holder", 1, 3, "active"),
		}}
	want := []string{"heavy-holder", "light", "future-holder", "not-a-holder"}
	for i, j := range queueOrder(s, nil) {
		if j.UUID != want[i] {
			t.Fatalf("position %d: %s, want %v", i, j.UUID, want)
		}
	}
}

// TestFairRank: the fair order weighs the owner's tally by the job's maxDuration (Smith's rule):
// a heavy user's short job goes before a lighter user's long one, until the tallies differ by
// more than the lengths.
func TestFairRank(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func(id string, user int64, maxHours int) Job {
		j := Job{UUID: id, UserID: user, Submitted: base}
		j.Request.Scheduling.MaxDuration = job.Duration(time.Duration(maxHours) * time.Hour)
		return j
	}
	queued := []Job{mk("light-week", 1, 168), mk("heavy-hour", 2, 1), mk("heavier-hour", 3, 1), mk("light-hour", 1, 1)}
	// Ranks: light-week 168 × 2 = 336, heavy-hour 100, heavier-hour 401, light-hour 2.
	s := Snapshot{Policy: PolicyFair, Tallies: map[int64]float64{1: 1, 2: 99, 3: 400}, Queued: queued}
	want := []string{"light-hour", "heavy-hour", "light-week", "heavier-hour"}
	for i, j := range queueOrder(s, nil) {
		if j.UUID != want[i] {
			t.Fatalf("position %d: %s, want %v", i, j.UUID, want)
		}
	}
	if r := FairRank(-5, 0); r != 14*24 {
		t.Fatalf("rank of a negative tally and no maxDuration: %v, want %v", r, 14*24)
	}
}

// A queue key orders by submission as the jobs' times do (time.Time.Compare), whatever the
// times: before 1970, the zero time, the same second with other nanoseconds, other locations.
func TestQueueKeyOrdersBySubmission(t *testing.T) {
	seed := testenv.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 1))
	base := []time.Time{{}, time.Date(1969, 12, 31, 23, 59, 59, 999_999_999, time.UTC), time.Unix(0, 0), t0, t0.Add(time.Nanosecond),
		t0.In(time.FixedZone("x", 3600)), time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := Snapshot{Now: t0, Policy: PolicyFIFO}
	for range 20000 {
		a := Job{UUID: fmt.Sprint(rng.IntN(3)), Submitted: base[rng.IntN(len(base))].Add(time.Duration(rng.IntN(3)-1) * time.Duration(rng.Int64N(int64(time.Hour))))}
		b := Job{UUID: fmt.Sprint(rng.IntN(3)), Submitted: base[rng.IntN(len(base))]}
		if rng.IntN(4) == 0 {
			b.Submitted = a.Submitted.Add(time.Duration(rng.IntN(3) - 1))
		}
		want := a.Submitted.Compare(b.Submitted)
		if want == 0 {
			want = cmp.Compare(a.UUID, b.UUID)
		}
		if got := s.QueueKey(&a).Compare(s.QueueKey(&b)); got != want {
			t.Fatalf("seed %d: %v (%s) against %v (%s): key order %d, want %d", seed, a.Submitted, a.UUID, b.Submitted, b.UUID, got, want)
		}
	}
}

// The queue order of jobs given in submission order (sorted by their places: sortByPlaces) is
// the order of QueueKey.Compare, under every policy, with ties of rank and maxDuration, jobs
// submitted at the same instant, interactive ones and a tally that is NaN; and so it is for the
// same jobs given in another order (sorted by Compare itself).
func TestQueueOrderByPlacesIsCompare(t *testing.T) {
	seed := testenv.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 2))
	durs := []time.Duration{0, time.Hour, 3 * time.Hour, 14 * 24 * time.Hour}
	for round := range 200 {
		s := Snapshot{Now: t0, Policy: []Policy{PolicyFair, PolicyFIFO, PolicySJFOracle, PolicyLAS}[round%4],
			Tallies: map[int64]float64{1: 0, 2: 10, 3: 10, 4: math.NaN(), 5: 1e9}}
		n := 1 + rng.IntN(300)
		queued := make([]Job, n)
		ids := rng.Perm(n) // uuids in another order than their submission
		for i := range queued {
			j := &queued[i]
			j.UUID = fmt.Sprintf("job%03d", ids[i])
			j.UserID = 1 + rng.Int64N(6)
			j.Submitted = t0.Add(time.Duration(rng.IntN(20)) * time.Second)
			j.Request.Scheduling.MaxDuration = job.Duration(durs[rng.IntN(len(durs))])
			j.Request.Scheduling.Interactive = rng.IntN(10) == 0
			j.OracleDuration = durs[rng.IntN(len(durs))]
			j.Attained = time.Duration(rng.IntN(3)) * time.Hour
		}
		ptrs := func(jobs []Job) []*Job {
			out := make([]*Job, len(jobs))
			for i := range jobs {
				out[i] = &jobs[i]
			}
			return out
		}
		want := ptrs(slices.Clone(queued))
		keys := make([]QueueKey, n)
		for i, j := range want {
			keys[i] = s.QueueKey(j)
		}
		slices.SortFunc(keys, QueueKey.Compare)
		for i := range keys {
			want[i] = keys[i].Job
		}
		// In submission order (many at one instant, then by uuid), and in another.
		slices.SortFunc(queued, func(a, b Job) int { return compareSubmission(&a, &b) })
		for _, shuffled := range []bool{false, true} {
			if shuffled {
				rng.Shuffle(n, func(a, b int) { queued[a], queued[b] = queued[b], queued[a] })
			}
			got := ptrs(queued)
			sortQueue(s, got)
			for i := range got {
				if c := s.QueueKey(got[i]).Compare(s.QueueKey(want[i])); c != 0 || got[i].UserID != want[i].UserID {
					t.Fatalf("seed %d, round %d (%s, shuffled %v): place %d is %s of user %d, want %s of user %d", seed, round, s.Policy, shuffled, i,
						got[i].UUID, got[i].UserID, want[i].UUID, want[i].UserID)
				}
			}
		}
	}
}
