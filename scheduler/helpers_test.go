package scheduler

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
)

// t0 is the planning clock of every test snapshot.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const (
	v100 = "Tesla V100-PCIE-32GB"
	a100 = "NVIDIA A100-SXM4-80GB"
	t4   = "Tesla T4"
)

// gpuList makes n GPUs of one model with indices from..from+n-1.
func gpuList(model string, memGb int64, from, n int) []protocol.GPU {
	out := make([]protocol.GPU, n)
	for i := range out {
		out[i] = protocol.GPU{Index: from + i, UUID: fmt.Sprintf("GPU-%s-%d", strings.Fields(model)[0], from+i), Model: model, MemoryMiB: memGb * 1024}
	}
	return out
}

// slaveOpt changes a test slave.
type slaveOpt func(*Slave)

func inCluster(id int) slaveOpt       { return func(s *Slave) { s.ClusterID = id } }
func cuda(major int) slaveOpt         { return func(s *Slave) { s.CudaMajor = major } }
func cpus(n int) slaveOpt             { return func(s *Slave) { s.CPUs = n } }
func memory(gb int) slaveOpt          { return func(s *Slave) { s.MemoryGb = gb } }
func offline() slaveOpt               { return func(s *Slave) { s.Online = false } }
func draining() slaveOpt              { return func(s *Slave) { s.Accepting = false } }
func gpus(g ...protocol.GPU) slaveOpt { return func(s *Slave) { s.GPUs = g } }

// hadGPUs sets the slave's capacity: the GPUs it had at most (some dropped out since).
func hadGPUs(g ...protocol.GPU) slaveOpt { return func(s *Slave) { s.CapacityGPUs = g } }

// mkSlave is an online, accepting slave in cluster 1 with CUDA 12, 32 CPUs, 256 GB and no GPUs
// unless told otherwise.
func mkSlave(name string, opts ...slaveOpt) Slave {
	s := Slave{Name: name, InstanceID: "inst-" + name, ClusterID: 1, Online: true, Accepting: true,
		CPUs: 32, MemoryGb: 256, CudaMajor: 12}
	for _, o := range opts {
		o(&s)
	}
	return s
}

// jobOpt changes a test job.
type jobOpt func(*Job)

func model(m ...string) jobOpt         { return func(j *Job) { j.Request.Resources.GPUModel = m } }
func gpuMem(gb int) jobOpt             { return func(j *Job) { j.Request.Resources.GPUMemoryGb = gb } }
func minCuda(v int) jobOpt             { return func(j *Job) { j.Request.Resources.MinCudaVersion = v } }
func cluster(id int) jobOpt            { return func(j *Job) { j.Request.Resources.ClusterID = id } }
func onSlave(name string) jobOpt       { return func(j *Job) { j.Request.Resources.SlaveName = name } }
func onInstance(id string) jobOpt      { return func(j *Job) { j.Request.Resources.SlaveInstanceID = id } }
func interactive() jobOpt              { return func(j *Job) { j.Request.Scheduling.Interactive = true } }
func project(id int64) jobOpt          { return func(j *Job) { j.ProjectID = id } }
func submitted(d time.Duration) jobOpt { return func(j *Job) { j.Submitted = t0.Add(d) } }
func minDur(d time.Duration) jobOpt {
	return func(j *Job) { j.Request.Scheduling.MinDuration = job.Duration(d) }
}
func notBefore(d time.Duration) jobOpt {
	return func(j *Job) { t := t0.Add(d); j.Request.Scheduling.NotBefore = &t }
}
func notAfter(d time.Duration) jobOpt {
	return func(j *Job) { t := t0.Add(d); j.Request.Scheduling.NotAfter = &t }
}
func tmpfs(gb int) jobOpt {
	return func(j *Job) {
		j.Request.Docker.Storage = append(j.Request.Docker.Storage, job.Storage{HostPath: job.TmpfsHostPath, ContainerPath: "/ram", SizeGb: gb})
	}
}

// seq numbers test jobs so that their submission order is the order they are written in.
var seq int

// mkJob is a job needing g GPUs, c CPUs and m GB, submitted after the jobs made before it,
// with the default durations of a stored job (1 week minimum, 2 weeks maximum).
func mkJob(uuid string, g, c, m int, opts ...jobOpt) Job {
	seq++
	j := Job{UUID: uuid, Submitted: t0.Add(-time.Hour + time.Duration(seq)*time.Second), UserID: 1, ProjectID: 1,
		Request: job.Request{
			Resources:  job.Resources{GPUs: g, CPUs: c, CPUMemoryGb: m},
			Docker:     job.Docker{Image: "ubuntu"},
			Scheduling: job.Scheduling{MinDuration: job.Duration(7 * 24 * time.Hour), MaxDuration: job.Duration(14 * 24 * time.Hour)},
		}}
	for _, o := range opts {
		o(&j)
	}
	return j
}

// outcome renders what a plan decided for every job, one string per job uuid, so that a table
// row states its expectations in the words a user would read:
//
//	"gpu1 gpus=[0 1] cpus=[0 1 2 3] mem=16"   assigned
//	"FAIL notAfter ... passed"                 failed
//	"WAIT line 1 | line 2"                     waiting
func outcome(p Plan) map[string]string {
	out := map[string]string{}
	for _, a := range p.Assignments {
		idx := make([]int, len(a.GPUs))
		for i, g := range a.GPUs {
			idx[i] = g.Index
		}
		out[a.JobUUID] = fmt.Sprintf("%s gpus=%v cpus=%v mem=%d", a.SlaveName, idx, a.CPUIDs, a.MemoryGb)
	}
	for _, f := range p.Failures {
		out[f.JobUUID] = "FAIL " + f.Reason
	}
	for uuid, lines := range p.Explanations {
		out[uuid] = "WAIT " + strings.Join(lines, " | ")
	}
	return out
}

// checkPlan asserts what must hold for any plan: every queued job gets exactly one outcome,
// waiting jobs have 1 to 3 non-empty lines, and assignments fit in what was free.
func checkPlan(t *testing.T, s Snapshot, p Plan) {
	t.Helper()
	seen := map[string]int{}
	for _, a := range p.Assignments {
		seen[a.JobUUID]++
	}
	for _, f := range p.Failures {
		seen[f.JobUUID]++
		if f.Reason == "" {
			t.Errorf("job %s failed without a reason", f.JobUUID)
		}
	}
	for uuid, lines := range p.Explanations {
		seen[uuid]++
		if len(lines) < 1 || len(lines) > 3 || slices.Contains(lines, "") {
			t.Errorf("job %s: explanation %q: want 1-3 non-empty lines", uuid, lines)
		}
	}
	for _, j := range s.Queued {
		if seen[j.UUID] != 1 {
			t.Errorf("job %s has %d outcomes, want exactly 1", j.UUID, seen[j.UUID])
		}
	}
	if len(seen) != len(s.Queued) {
		t.Errorf("plan has %d jobs, snapshot queued %d", len(seen), len(s.Queued))
	}

	// Resources: nothing used twice, nothing beyond the slave, requests honoured.
	type key struct {
		slave string
		id    int
	}
	usedGPU, usedCPU, usedMem := map[key]bool{}, map[key]bool{}, map[string]int{}
	for _, r := range s.Running {
		for _, g := range r.GPUIndices {
			usedGPU[key{r.SlaveName, g}] = true
		}
		for _, c := range r.CPUIDs {
			usedCPU[key{r.SlaveName, c}] = true
		}
		usedMem[r.SlaveName] += r.MemoryGb
	}
	slaves := map[string]Slave{}
	for _, sl := range s.Slaves {
		slaves[sl.Name] = sl
	}
	jobs := map[string]Job{}
	for _, j := range s.Queued {
		jobs[j.UUID] = j
	}
	for _, a := range p.Assignments {
		sl, j := slaves[a.SlaveName], jobs[a.JobUUID]
		res := j.Request.Resources
		if !sl.Online || !sl.Accepting || a.SlaveInstanceID != sl.InstanceID || a.ClusterID != sl.ClusterID {
			t.Errorf("job %s assigned to unusable slave %+v", a.JobUUID, sl)
		}
		if len(a.GPUs) != res.GPUs || len(a.CPUIDs) != res.CPUs || a.MemoryGb != j.Request.TotalMemoryGb() {
			t.Errorf("job %s got %d GPUs, %d CPUs, %d GB; asked %d, %d, %d", a.JobUUID, len(a.GPUs), len(a.CPUIDs), a.MemoryGb, res.GPUs, res.CPUs, j.Request.TotalMemoryGb())
		}
		if sl.CudaMajor < res.MinCudaVersion {
			t.Errorf("job %s needs CUDA %d, slave %s has %d", a.JobUUID, res.MinCudaVersion, sl.Name, sl.CudaMajor)
		}
		for _, g := range a.GPUs {
			if usedGPU[key{sl.Name, g.Index}] {
				t.Errorf("GPU %d of %s used twice", g.Index, sl.Name)
			}
			usedGPU[key{sl.Name, g.Index}] = true
			if !slices.Contains(sl.GPUs, g) || g.MemoryMiB < int64(res.GPUMemoryGb)*1024 {
				t.Errorf("job %s got GPU %+v", a.JobUUID, g)
			}
			if len(res.GPUModel) > 0 && !slices.ContainsFunc(res.GPUModel, func(m string) bool {
				return strings.Contains(strings.ToLower(g.Model), strings.ToLower(m))
			}) {
				t.Errorf("job %s wants %v, got %s", a.JobUUID, res.GPUModel, g.Model)
			}
		}
		for _, c := range a.CPUIDs {
			if c < 0 || c >= sl.CPUs || usedCPU[key{sl.Name, c}] {
				t.Errorf("CPU %d of %s out of range or used twice", c, sl.Name)
			}
			usedCPU[key{sl.Name, c}] = true
		}
		usedMem[sl.Name] += a.MemoryGb
		if usedMem[sl.Name] > sl.MemoryGb {
			t.Errorf("slave %s memory over-committed: %d > %d", sl.Name, usedMem[sl.Name], sl.MemoryGb)
		}
	}
}

// fixedSeeds are the seeds 0 to n-1, the same at every run (a failing one is replayed by
// name), and one more from GPULAB_TEST_SEED when it is set, to explore or replay.
func fixedSeeds(t *testing.T, n int) []uint64 {
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = uint64(i)
	}
	if os.Getenv(testenv.SeedEnv) != "" {
		seeds = append(seeds, testenv.Seed(t))
	}
	return seeds
}
