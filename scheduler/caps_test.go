package scheduler

import (
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/job"
)

func bucket(name string, max int) jobOpt {
	return func(j *Job) {
		j.Request.Scheduling.MaxSimultaneousJobs = &job.MaxSimultaneousJobs{BucketName: name, BucketMax: max}
	}
}

func owner(user, project int64) jobOpt {
	return func(j *Job) { j.UserID, j.ProjectID = user, project }
}

func TestCapsAndBuckets(t *testing.T) {
	slave := mkSlave("big", gpus(gpuList(v100, 32, 0, 8)...))
	cases := []struct {
		name    string
		limits  Limits
		running []Placed
		queued  []Job
		want    map[string]string // uuid -> prefix of its outcome
	}{
		{
			name:   "bucket full: the second sweep job waits, another user's job in no bucket starts",
			queued: []Job{mkJob("s1", 1, 1, 1, bucket("sweep", 1)), mkJob("s2", 1, 1, 1, bucket("sweep", 1)), mkJob("x", 1, 1, 1, owner(2, 2))},
			want:   map[string]string{"s1": "big", "s2": `WAIT bucket "sweep" is full (1/1 running)`, "x": "big"},
		},
		{
			name:    "a bucket is shared by name across users, running jobs included",
			running: []Placed{{JobUUID: "r", SlaveName: "big", GPUIndices: []int{0}, CPUIDs: []int{0}, MemoryGb: 1, UserID: 3, ProjectID: 3, Bucket: "sweep"}},
			queued:  []Job{mkJob("s1", 1, 1, 1, bucket("sweep", 2)), mkJob("s2", 1, 1, 1, bucket("sweep", 2), owner(4, 4))},
			want:    map[string]string{"s1": "big", "s2": `WAIT bucket "sweep" is full (2/2 running)`},
		},
		{
			name:    "per-user cap",
			limits:  Limits{PerUser: 2},
			running: []Placed{{JobUUID: "r", SlaveName: "big", GPUIndices: []int{0}, CPUIDs: []int{0}, MemoryGb: 1, UserID: 1, ProjectID: 1}},
			queued:  []Job{mkJob("a", 1, 1, 1), mkJob("b", 1, 1, 1), mkJob("other", 1, 1, 1, owner(2, 1))},
			want:    map[string]string{"a": "big", "b": "WAIT the owner has 2 running jobs", "other": "big"},
		},
		{
			name:   "what an ended job holds until its container is gone is taken, but counts against no cap",
			limits: Limits{PerUser: 1},
			running: []Placed{{JobUUID: "ended", SlaveName: "big", GPUIndices: []int{0, 1, 2, 3, 4, 5, 6}, CPUIDs: []int{0}, MemoryGb: 1,
				UserID: 1, ProjectID: 1, Bucket: "sweep", Releasing: true, Halting: true}},
			queued: []Job{mkJob("a", 1, 1, 1, bucket("sweep", 1)), mkJob("b", 1, 1, 1, owner(2, 2))},
			want:   map[string]string{"a": "big gpus=[7]", "b": "WAIT needs 1 GPU, none free"},
		},
		{
			name:   "per-project cap",
			limits: Limits{PerProject: 1},
			queued: []Job{mkJob("a", 1, 1, 1, owner(1, 9)), mkJob("b", 1, 1, 1, owner(2, 9)), mkJob("c", 1, 1, 1, owner(3, 8))},
			want:   map[string]string{"a": "big", "b": "WAIT the project has 1 running jobs", "c": "big"},
		},
		{
			name:   "an interactive job blocked by a cap fails at once",
			queued: []Job{mkJob("s1", 1, 1, 1, bucket("b", 1)), mkJob("i", 1, 1, 1, bucket("b", 1), func(j *Job) { j.Request.Scheduling.Interactive = true })},
			want:   map[string]string{"i": "big", "s1": `WAIT bucket "b" is full`},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := Snapshot{Now: t0, Clusters: map[int]Cluster{1: {ID: 1}}, Slaves: []Slave{slave}, Queued: c.queued, Running: c.running, Limits: c.limits, Policy: PolicyFIFO}
			if c.name == "an interactive job blocked by a cap fails at once" {
				s.Policy = PolicyFair // interactive first: it takes the bucket, the other waits
			}
			p := s.Plan()
			checkPlan(t, s, p)
			got := outcome(p)
			for id, want := range c.want {
				if !strings.HasPrefix(got[id], want) {
					t.Errorf("%s: %q, want %q…", id, got[id], want)
				}
			}
		})
	}
	// With FIFO order the non-interactive job takes the bucket first and the interactive one fails.
	s := Snapshot{Now: t0, Clusters: map[int]Cluster{1: {ID: 1}}, Slaves: []Slave{slave}, Policy: PolicyFIFO,
		Queued: []Job{mkJob("s1", 1, 1, 1, bucket("b", 1)), mkJob("i", 1, 1, 1, bucket("b", 1), func(j *Job) { j.Request.Scheduling.Interactive = true })}}
	if got := outcome(s.Plan())["i"]; !strings.HasPrefix(got, `FAIL interactive job cannot start now: bucket "b" is full`) {
		t.Errorf("interactive job behind a full bucket: %q", got)
	}
}
