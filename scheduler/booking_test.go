package scheduler

import (
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"
)

func uses(ids ...string) jobOpt {
	return func(j *Job) { j.Request.Scheduling.ReservationIDs = ids }
}

func usingRes(ids ...string) runningOpt { return func(pl *Placed) { pl.Reservations = ids } }

// TestReservations covers SPEC 7.3's reservation rules: who may use booked resources, from
// when other jobs keep off them, and halts for holders.
func TestReservations(t *testing.T) {
	const h = time.Hour
	// Two slaves with two GPUs each in cluster 1.
	slaves := []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 2)...)), mkSlave("gpu2", gpus(gpuList(v100, 32, 0, 2)...))}
	// Whole slave gpu1, for user 7, active now.
	wholeNow := Reservation{ID: "r-whole", Name: "course", SlaveNames: []string{"gpu1"}, Start: t0.Add(-h), End: t0.Add(3 * h), Users: []int64{7}}
	// Whole slave gpu1, for project 70, from two hours on.
	wholeLater := Reservation{ID: "r-later", Name: "demo", SlaveNames: []string{"gpu1"}, Start: t0.Add(2 * h), End: t0.Add(4 * h), Projects: []int64{70}}
	// Two GPUs of cluster 1, for user 7, active now.
	twoNow := Reservation{ID: "r-two", Name: "paper", ClusterID: 1, GPUs: 2, Start: t0.Add(-h), End: t0.Add(3 * h), Users: []int64{7}}
	holder := func(uuid string, g int, opts ...jobOpt) Job {
		return mkJob(uuid, g, 1, 1, append([]jobOpt{user(7), project(70)}, opts...)...)
	}
	tests := []struct {
		name         string
		slaves       []Slave
		reservations []Reservation
		running      []Placed
		queued       []Job
		want         map[string]string
		halts        []Halt
		estimates    map[string]time.Time
	}{
		{
			name:         "during a whole-slave reservation others go elsewhere and holders get its slave",
			slaves:       slaves,
			reservations: []Reservation{wholeNow},
			queued:       []Job{mkJob("other", 1, 1, 1), holder("mine", 1, uses("r-whole"))},
			want: map[string]string{
				"mine":  "gpu1 gpus=[0] cpus=[0] mem=1",
				"other": "gpu2 gpus=[0] cpus=[0] mem=1",
			},
		},
		{
			name:         "a holder's job not naming the reservation is treated like any other",
			slaves:       slaves[:1],
			reservations: []Reservation{wholeNow},
			queued:       []Job{holder("forgot", 1)},
			want:         map[string]string{"forgot": "WAIT slave gpu1 is reserved (reservation \"course\", 2026-03-01T11:00:00Z to 2026-03-01T15:00:00Z)"},
		},
		{
			name:         "a job naming a reservation runs only on its slaves",
			slaves:       slaves,
			reservations: []Reservation{wholeNow},
			running:      []Placed{ran("busy", "gpu1", 0, 7, 2*h, h, usingRes("r-whole")), ran("busy2", "gpu1", 1, 7, 2*h, h, usingRes("r-whole"))},
			queued:       []Job{holder("mine", 1, uses("r-whole"))},
			want:         map[string]string{"mine": "WAIT needs 1 GPU, none free (gpu1)"},
		},
		{
			name:         "before a reservation, only jobs whose maxDuration ends before its start use its slave",
			slaves:       slaves[:1],
			reservations: []Reservation{wholeLater},
			queued:       []Job{mkJob("short", 1, 1, 1, maxDur(h)), mkJob("long", 1, 1, 1, maxDur(3*h))},
			want: map[string]string{
				"short": "gpu1 gpus=[0] cpus=[0] mem=1",
				"long": "WAIT slave gpu1 is reserved (reservation \"demo\", 2026-03-01T14:00:00Z to 2026-03-01T16:00:00Z) " +
					"and the job's maxDuration 3 hours would reach into it",
			},
		},
		{
			name:         "a holder's job waits for the start, with the start as its estimate",
			slaves:       slaves,
			reservations: []Reservation{wholeLater},
			queued:       []Job{holder("early", 1, uses("r-later"))},
			want:         map[string]string{"early": "WAIT waiting for reservation \"demo\" to start at 2026-03-01T14:00:00Z"},
			estimates:    map[string]time.Time{"early": t0.Add(2 * h)},
		},
		{
			name:         "a GPU count keeps that many GPUs of the cluster free for the holders",
			slaves:       slaves,
			reservations: []Reservation{twoNow},
			queued:       []Job{mkJob("a", 1, 1, 1), mkJob("b", 1, 1, 1), mkJob("c", 1, 1, 1), mkJob("cpu-only", 0, 1, 1), holder("mine", 2, uses("r-two"))},
			want: map[string]string{
				"mine":     "gpu1 gpus=[0 1] cpus=[0] mem=1",
				"a":        "gpu2 gpus=[0] cpus=[0] mem=1",
				"b":        "gpu2 gpus=[1] cpus=[1] mem=1",
				"c":        "WAIT needs 1 GPU, none free on the 2 slaves",
				"cpu-only": "gpu1 gpus=[] cpus=[1] mem=1",
			},
		},
		{
			name:         "without the holder, the reserved GPUs stay free",
			slaves:       slaves,
			reservations: []Reservation{twoNow},
			queued:       []Job{mkJob("a", 1, 1, 1), mkJob("b", 1, 1, 1), mkJob("c", 1, 1, 1)},
			want: map[string]string{
				"a": "gpu1 gpus=[0] cpus=[0] mem=1",
				"b": "gpu1 gpus=[1] cpus=[1] mem=1",
				"c": "WAIT 2 GPUs of cluster 1 are reserved (reservation \"paper\", 2026-03-01T11:00:00Z to 2026-03-01T15:00:00Z) | " +
					"needs 1 GPU, none free (gpu1)",
			},
		},
		{
			name:         "GPUs the holders already use count against the reservation",
			slaves:       slaves,
			reservations: []Reservation{twoNow},
			running:      []Placed{ran("held", "gpu1", 0, 7, 2*h, h, usingRes("r-two"))},
			queued:       []Job{mkJob("a", 1, 1, 1), mkJob("b", 1, 1, 1)},
			want: map[string]string{
				"a": "gpu1 gpus=[1] cpus=[1] mem=1",
				"b": "gpu2 gpus=[0] cpus=[0] mem=1",
			},
		},
		{
			name:         "a reservation that does not exist, has ended or is not held fails the job",
			slaves:       slaves,
			reservations: []Reservation{wholeNow, {ID: "r-old", Start: t0.Add(-3 * h), End: t0.Add(-h), Users: []int64{7}}},
			queued: []Job{holder("unknown", 1, uses("r-nope")), holder("ended", 1, uses("r-old")),
				mkJob("stranger", 1, 1, 1, uses("r-whole"))},
			want: map[string]string{
				"unknown":  "FAIL reservation r-nope does not exist or has ended",
				"ended":    "FAIL reservation r-old does not exist or has ended",
				"stranger": "FAIL reservation \"course\" is not held by the job's owner or project",
			},
		},
		{
			name:         "an interactive job of another user fails rather than take a reserved slave",
			slaves:       slaves[:1],
			reservations: []Reservation{wholeNow},
			queued:       []Job{mkJob("notebook", 1, 1, 1, interactive())},
			want: map[string]string{"notebook": "FAIL interactive job cannot start now: slave gpu1 is reserved (reservation \"course\", " +
				"2026-03-01T11:00:00Z to 2026-03-01T15:00:00Z)"},
		},
		{
			name:         "a holder halts a job past its minDuration that does not use the reservation",
			slaves:       slaves[:1],
			reservations: []Reservation{wholeNow},
			running:      []Placed{ran("squatter", "gpu1", 0, 2, 2*h, h), ran("young", "gpu1", 1, 2, 30*time.Minute, h)},
			queued:       []Job{holder("mine", 1, uses("r-whole"))},
			want: map[string]string{"mine": "WAIT halting job squatter (it uses a reservation of this slave; others make room) to make room on gpu1; " +
				"starts when it has stopped | needs 1 GPU, none free (gpu1)"},
			halts: []Halt{{JobUUID: "squatter", Reason: HaltReservation, ForJobUUID: "mine", VictimScore: 0, StarterScore: 0}},
		},
		{
			name:         "a holder does not halt beyond the reserved GPU count",
			slaves:       slaves[:1],
			reservations: []Reservation{{ID: "r-one", ClusterID: 1, GPUs: 1, Start: t0.Add(-h), End: t0.Add(h), Users: []int64{7}}},
			running:      []Placed{ran("x", "gpu1", 0, 7, 2*h, h), ran("y", "gpu1", 1, 7, 2*h, h)},
			queued:       []Job{holder("mine", 2, uses("r-one"))},
			want:         map[string]string{"mine": "WAIT needs 2 GPUs, none free (gpu1)"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Snapshot{Now: t0, Slaves: tc.slaves, Reservations: tc.reservations, Running: tc.running, Queued: tc.queued}
			p := s.Plan()
			checkPlan(t, s, p)
			if got := outcome(p); !maps.Equal(got, tc.want) {
				t.Errorf("outcome:\n got %q\nwant %q", got, tc.want)
			}
			if !reflect.DeepEqual(p.Halts, tc.halts) {
				t.Errorf("halts:\n got %+v\nwant %+v", p.Halts, tc.halts)
			}
			for id, want := range tc.estimates {
				if !p.Estimates[id].Equal(want) {
					t.Errorf("estimate of %s: %s, want %s", id, p.Estimates[id], want)
				}
			}
		})
	}
}

// TestWaitsForTime: the jobs a pass may leave out until their time comes are exactly those
// Plan leaves waiting for notBefore or a reservation not begun; a job Plan would fail or start
// is never one of them.
func TestWaitsForTime(t *testing.T) {
	const h = time.Hour
	later := Reservation{ID: "r-later", Name: "demo", ClusterID: 1, GPUs: 1, Start: t0.Add(2 * h), End: t0.Add(4 * h), Users: []int64{7}}
	now := Reservation{ID: "r-now", Name: "course", ClusterID: 1, GPUs: 1, Start: t0.Add(-h), End: t0.Add(3 * h), Users: []int64{7}}
	cases := []struct {
		job  Job
		want bool
	}{
		{mkJob("plain", 1, 1, 1, user(7)), false},
		{mkJob("not-before-ahead", 1, 1, 1, user(7), notBefore(h)), true},
		{mkJob("not-before-past", 1, 1, 1, user(7), notBefore(-h)), false},
		{mkJob("reservation-ahead", 1, 1, 1, user(7), uses("r-later")), true},
		{mkJob("reservation-now", 1, 1, 1, user(7), uses("r-now")), false},
		{mkJob("one-of-two-begun", 1, 1, 1, user(7), uses("r-later", "r-now")), false},
		{mkJob("reservation-not-held", 1, 1, 1, user(8), uses("r-later")), false},
		{mkJob("reservation-unknown", 1, 1, 1, user(7), uses("r-gone")), false},
	}
	s := Snapshot{Now: t0, Policy: PolicyFair, Slaves: []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 2)...))},
		Reservations: []Reservation{later, now}}
	for _, c := range cases {
		s.Queued = append(s.Queued, c.job)
	}
	plan := s.Plan()
	for _, c := range cases {
		got := s.WaitsForTime(&c.job)
		if got != c.want {
			t.Errorf("%s: WaitsForTime = %v, want %v", c.job.UUID, got, c.want)
		}
		why := plan.Explanations[c.job.UUID]
		if waits := len(why) > 0 && (strings.HasPrefix(why[0], "waiting for notBefore") || strings.HasPrefix(why[0], "waiting for reservation")); got != waits {
			t.Errorf("%s: WaitsForTime = %v but Plan explains %q", c.job.UUID, got, why)
		}
	}
}
