package scheduler

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
)

// hold is a running job holding GPUs, CPU ids and memory on a slave.
func hold(slave string, gpuIdx []int, cpuIDs []int, mem int) Placed {
	return Placed{JobUUID: "running-" + slave, SlaveName: slave, GPUIndices: gpuIdx, CPUIDs: cpuIDs, MemoryGb: mem}
}

// ids is 0..n-1 shifted by from.
func ids(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

func TestPlan(t *testing.T) {
	privateClusters := map[int]Cluster{1: {ID: 1}, 5: {ID: 5, Private: true, Projects: []int64{7}}}
	tests := []struct {
		name     string
		clusters map[int]Cluster // default: clusters 1, 2 and 3
		slaves   []Slave
		running  []Placed
		queued   []Job
		want     map[string]string
	}{
		// Feasibility filters.
		{
			name:   "offline slave is skipped",
			slaves: []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 1)...), offline()), mkSlave("gpu2", gpus(gpuList(v100, 32, 0, 8)...))},
			queued: []Job{mkJob("j1", 1, 4, 16)},
			want:   map[string]string{"j1": "gpu2 gpus=[0] cpus=[0 1 2 3] mem=16"},
		},
		{
			name:   "draining slave is skipped",
			slaves: []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 1)...), draining()), mkSlave("gpu2", gpus(gpuList(v100, 32, 0, 8)...))},
			queued: []Job{mkJob("j1", 1, 4, 16)},
			want:   map[string]string{"j1": "gpu2 gpus=[0] cpus=[0 1 2 3] mem=16"},
		},
		{
			name:   "clusterId",
			slaves: []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 1)...)), mkSlave("gpu2", inCluster(2), gpus(gpuList(v100, 32, 0, 8)...))},
			queued: []Job{mkJob("j1", 1, 1, 1, cluster(2)), mkJob("j2", 1, 1, 1)},
			want: map[string]string{
				"j1": "gpu2 gpus=[0] cpus=[0] mem=1",
				"j2": "gpu1 gpus=[0] cpus=[0] mem=1",
			},
		},
		{
			name:   "slaveName pin",
			slaves: []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 1)...)), mkSlave("gpu2", gpus(gpuList(v100, 32, 0, 8)...))},
			queued: []Job{mkJob("j1", 1, 1, 1, onSlave("gpu2"))},
			want:   map[string]string{"j1": "gpu2 gpus=[0] cpus=[0] mem=1"},
		},
		{
			name:   "slaveInstanceId pin",
			slaves: []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 1)...)), mkSlave("gpu2", gpus(gpuList(v100, 32, 0, 8)...))},
			queued: []Job{mkJob("j1", 1, 1, 1, onInstance("inst-gpu2")), mkJob("j2", 1, 1, 1, onSlave("gpu2"), onInstance("inst-gpu2"))},
			want: map[string]string{
				"j1": "gpu2 gpus=[0] cpus=[0] mem=1",
				"j2": "gpu2 gpus=[1] cpus=[1] mem=1",
			},
		},
		{
			name:   "minCudaVersion",
			slaves: []Slave{mkSlave("gpu1", cuda(10), gpus(gpuList(v100, 32, 0, 1)...)), mkSlave("gpu2", gpus(gpuList(v100, 32, 0, 8)...))},
			queued: []Job{mkJob("j1", 1, 1, 1, minCuda(11)), mkJob("j2", 0, 1, 1, minCuda(12))},
			want: map[string]string{
				"j1": "gpu2 gpus=[0] cpus=[0] mem=1",
				"j2": "gpu2 gpus=[] cpus=[1] mem=1",
			},
		},
		{
			name:   "gpuModel is a case-insensitive substring",
			slaves: []Slave{mkSlave("gpu1", gpus(gpuList(t4, 16, 0, 2)...)), mkSlave("gpu2", gpus(gpuList(v100, 32, 0, 4)...))},
			queued: []Job{mkJob("j1", 1, 1, 1, model("v100")), mkJob("j2", 1, 1, 1, model("TESLA t"))},
			want: map[string]string{
				"j1": "gpu2 gpus=[0] cpus=[0] mem=1",
				"j2": "gpu1 gpus=[0] cpus=[0] mem=1",
			},
		},
		{
			name: "gpuModel list: any entry matches",
			slaves: []Slave{mkSlave("gpu1", gpus(gpuList(t4, 16, 0, 2)...)), mkSlave("gpu2", gpus(gpuList(v100, 32, 0, 4)...)),
				mkSlave("gpu3", gpus(gpuList(a100, 80, 0, 8)...))},
			queued: []Job{mkJob("j1", 2, 1, 1, model("A100", "t4")), mkJob("j2", 4, 1, 1, model("A100", "t4"))},
			want: map[string]string{
				"j1": "gpu1 gpus=[0 1] cpus=[0] mem=1",
				"j2": "gpu3 gpus=[0 1 2 3] cpus=[0] mem=1",
			},
		},
		{
			name:   "gpuModel picks the matching indices of a mixed slave",
			slaves: []Slave{mkSlave("gpu1", gpus(append(gpuList(t4, 16, 0, 2), gpuList(v100, 32, 2, 2)...)...))},
			queued: []Job{mkJob("j1", 1, 1, 1, model("V100")), mkJob("j2", 2, 1, 1)},
			want: map[string]string{
				"j1": "gpu1 gpus=[2] cpus=[0] mem=1",
				"j2": "gpu1 gpus=[0 1] cpus=[1] mem=1",
			},
		},
		{
			name:   "gpuMemoryGb",
			slaves: []Slave{mkSlave("gpu1", gpus(append(gpuList(t4, 16, 0, 2), gpuList(v100, 32, 2, 2)...)...))},
			queued: []Job{mkJob("j1", 1, 1, 1, gpuMem(20)), mkJob("j2", 1, 1, 1, gpuMem(32)), mkJob("j3", 1, 1, 1, gpuMem(16))},
			want: map[string]string{
				"j1": "gpu1 gpus=[2] cpus=[0] mem=1",
				"j2": "gpu1 gpus=[3] cpus=[1] mem=1",
				"j3": "gpu1 gpus=[0] cpus=[2] mem=1",
			},
		},
		{
			name:   "CPUs",
			slaves: []Slave{mkSlave("gpu1", cpus(8)), mkSlave("gpu2", cpus(32))},
			queued: []Job{mkJob("j1", 0, 16, 1)},
			want:   map[string]string{"j1": "gpu2 gpus=[] cpus=[0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15] mem=1"},
		},
		{
			name:   "memory counts tmpfs",
			slaves: []Slave{mkSlave("gpu1", memory(64)), mkSlave("gpu2", memory(256))},
			queued: []Job{mkJob("j1", 0, 1, 60, tmpfs(8))},
			want:   map[string]string{"j1": "gpu2 gpus=[] cpus=[0] mem=68"},
		},

		// Ranking.
		{
			name:   "best fit: a 1-GPU job takes the slave with 1 free GPU, not the one with 8",
			slaves: []Slave{mkSlave("a-big", gpus(gpuList(v100, 32, 0, 8)...)), mkSlave("b-small", gpus(gpuList(v100, 32, 0, 1)...))},
			queued: []Job{mkJob("j1", 1, 1, 1)},
			want:   map[string]string{"j1": "b-small gpus=[0] cpus=[0] mem=1"},
		},
		{
			name:    "best fit counts free GPUs, not installed ones",
			slaves:  []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 8)...)), mkSlave("gpu2", gpus(gpuList(v100, 32, 0, 2)...))},
			running: []Placed{hold("gpu1", ids(0, 7), ids(0, 7), 70)},
			queued:  []Job{mkJob("j1", 1, 1, 1)},
			want:    map[string]string{"j1": "gpu1 gpus=[7] cpus=[7] mem=1"},
		},
		{
			name:    "then least loaded: CPU share",
			slaves:  []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 2)...)), mkSlave("gpu2", gpus(gpuList(v100, 32, 0, 2)...))},
			running: []Placed{hold("gpu1", nil, ids(0, 16), 0)},
			queued:  []Job{mkJob("j1", 1, 1, 1)},
			want:    map[string]string{"j1": "gpu2 gpus=[0] cpus=[0] mem=1"},
		},
		{
			name:    "then least loaded: memory share",
			slaves:  []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 2)...)), mkSlave("gpu2", gpus(gpuList(v100, 32, 0, 2)...))},
			running: []Placed{hold("gpu1", nil, ids(0, 4), 10), hold("gpu2", nil, ids(0, 4), 200)},
			queued:  []Job{mkJob("j1", 1, 1, 1)},
			want:    map[string]string{"j1": "gpu1 gpus=[0] cpus=[4] mem=1"},
		},
		{
			name:    "least loaded compares shares, not counts",
			slaves:  []Slave{mkSlave("big", cpus(64)), mkSlave("small", cpus(16))},
			running: []Placed{hold("big", nil, ids(0, 16), 0), hold("small", nil, ids(0, 2), 0)},
			queued:  []Job{mkJob("j1", 0, 4, 1)},
			want:    map[string]string{"j1": "big gpus=[] cpus=[16 17 18 19] mem=1"},
		},
		{
			name:   "ties go to the first name whatever the snapshot order",
			slaves: []Slave{mkSlave("gpu3", gpus(gpuList(v100, 32, 0, 2)...)), mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 2)...)), mkSlave("gpu2", gpus(gpuList(v100, 32, 0, 2)...))},
			queued: []Job{mkJob("j1", 2, 1, 1)},
			want:   map[string]string{"j1": "gpu1 gpus=[0 1] cpus=[0] mem=1"},
		},

		// Consumption.
		{
			name:    "running jobs hold GPUs, CPUs and memory",
			slaves:  []Slave{mkSlave("gpu1", cpus(8), memory(64), gpus(gpuList(v100, 32, 0, 4)...))},
			running: []Placed{hold("gpu1", []int{0, 2}, ids(0, 4), 40), hold("ghost", []int{1}, ids(0, 8), 64)},
			queued:  []Job{mkJob("j1", 2, 2, 16), mkJob("j2", 0, 1, 16)},
			want: map[string]string{
				"j1": "gpu1 gpus=[1 3] cpus=[4 5] mem=16",
				"j2": "WAIT needs 16 GB memory, at most 8 GB free (gpu1)",
			},
		},
		{
			name:   "earlier assignments of the same plan hold resources",
			slaves: []Slave{mkSlave("gpu1", cpus(8), gpus(gpuList(v100, 32, 0, 4)...))},
			queued: []Job{mkJob("j1", 2, 4, 8), mkJob("j2", 2, 4, 8), mkJob("j3", 1, 1, 1)},
			want: map[string]string{
				"j1": "gpu1 gpus=[0 1] cpus=[0 1 2 3] mem=8",
				"j2": "gpu1 gpus=[2 3] cpus=[4 5 6 7] mem=8",
				"j3": "WAIT needs 1 GPU, none free (gpu1)",
			},
		},
		{
			name:    "GPU indices follow protocol.GPU.Index, not list position",
			slaves:  []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 4, 1)[0], gpuList(v100, 32, 2, 1)[0], gpuList(v100, 32, 7, 1)[0]))},
			running: []Placed{hold("gpu1", []int{2}, nil, 0)},
			queued:  []Job{mkJob("j1", 2, 1, 1)},
			want:    map[string]string{"j1": "gpu1 gpus=[4 7] cpus=[0] mem=1"},
		},

		// Order.
		{
			name:    "FIFO greedy: a big job that does not fit does not block a small one",
			slaves:  []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 4)...))},
			running: []Placed{hold("gpu1", []int{0, 1}, ids(0, 2), 2)},
			queued:  []Job{mkJob("big", 4, 1, 1), mkJob("small", 1, 1, 1)},
			want: map[string]string{
				"big":   "WAIT needs 4 GPUs, at most 2 free on a slave (gpu1)",
				"small": "gpu1 gpus=[2] cpus=[2] mem=1",
			},
		},
		{
			// Named, the slave would change with every GPU that comes and goes.
			name:    "several slaves as close: none named",
			slaves:  []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 2)...)), mkSlave("gpu2", gpus(gpuList(v100, 32, 0, 2)...))},
			running: []Placed{hold("gpu1", []int{0}, ids(0, 1), 1), hold("gpu2", []int{1}, ids(0, 1), 1)},
			queued:  []Job{mkJob("big", 2, 1, 1)},
			want:    map[string]string{"big": "WAIT needs 2 GPUs, at most 1 free on a slave (2 slaves have 1)"},
		},
		{
			name:   "oldest submission first, whatever the snapshot order",
			slaves: []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 1)...))},
			queued: []Job{mkJob("late", 1, 1, 1, submitted(-time.Minute)), mkJob("early", 1, 1, 1, submitted(-time.Hour))},
			want: map[string]string{
				"early": "gpu1 gpus=[0] cpus=[0] mem=1",
				"late":  "WAIT needs 1 GPU, none free (gpu1)",
			},
		},

		// Timing.
		{
			name:   "notBefore",
			slaves: []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 2)...))},
			queued: []Job{mkJob("future", 1, 1, 1, notBefore(time.Hour)), mkJob("past", 1, 1, 1, notBefore(-time.Minute))},
			want: map[string]string{
				"future": "WAIT waiting for notBefore 2026-03-01T13:00:00Z",
				"past":   "gpu1 gpus=[0] cpus=[0] mem=1",
			},
		},
		{
			name:   "notAfter",
			slaves: []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 2)...))},
			queued: []Job{mkJob("passed", 1, 1, 1, notAfter(-time.Hour)), mkJob("later", 1, 1, 1, notAfter(time.Hour))},
			want: map[string]string{
				"passed": "FAIL notAfter 2026-03-01T11:00:00Z passed while the job was queued",
				"later":  "gpu1 gpus=[0] cpus=[0] mem=1",
			},
		},
		{
			name:    "interactive jobs start now or fail",
			slaves:  []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 2)...))},
			running: []Placed{hold("gpu1", []int{0}, nil, 0)},
			queued: []Job{mkJob("fits", 1, 1, 1, interactive()), mkJob("busy", 1, 1, 1, interactive()),
				mkJob("nowhere", 1, 1, 1, interactive(), cluster(3)), mkJob("batch", 1, 1, 1)},
			want: map[string]string{
				"fits":    "gpu1 gpus=[1] cpus=[0] mem=1",
				"busy":    "FAIL interactive job cannot start now: needs 1 GPU, none free (gpu1)",
				"nowhere": "FAIL interactive job cannot start now: no slave in cluster 3 yet",
				"batch":   "WAIT needs 1 GPU, none free (gpu1)",
			},
		},

		// A GPU that dropped out of a slave's inventory (an Xid error) makes jobs needing it
		// wait, not fail: a request is impossible only against what the slave has had.
		{
			name:   "a GPU missing for a while makes jobs wait",
			slaves: []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 7)...), hadGPUs(gpuList(v100, 32, 0, 8)...))},
			queued: []Job{mkJob("whole", 8, 1, 1), mkJob("more", 9, 1, 1), mkJob("now", 8, 1, 1, interactive())},
			want: map[string]string{
				"whole": "WAIT slave gpu1 has 7 of its 8 GPUs now: waiting for them to come back",
				"more":  "FAIL no slave has 9 GPUs (the most is 7 on gpu1)",
				"now":   "FAIL interactive job cannot start now: slave gpu1 has 7 of its 8 GPUs now: waiting for them to come back",
			},
		},

		// Requests no slave could ever satisfy fail; an empty scope waits.
		{
			name: "impossible requests fail",
			slaves: []Slave{
				mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 2)...)),
				mkSlave("gpu2", offline(), gpus(gpuList(v100, 32, 0, 1)...)),
				mkSlave("gpu3", inCluster(2), cpus(64), memory(512), cuda(11), gpus(gpuList(t4, 16, 0, 4)...)),
			},
			running: []Placed{hold("gpu1", []int{0, 1}, ids(0, 32), 256)},
			queued: []Job{
				mkJob("cluster99", 1, 1, 1, cluster(99)),
				mkJob("eight", 8, 1, 1, model("V100"), cluster(1)),
				mkJob("h100", 1, 1, 1, model("H100", "h200")),
				mkJob("cuda13", 1, 1, 1, model("V100"), minCuda(13)),
				mkJob("cpu-cuda13", 0, 1, 1, minCuda(13)),
				mkJob("cpus", 0, 128, 1),
				mkJob("memory", 0, 1, 1024),
				mkJob("gpumem", 1, 1, 1, gpuMem(64)),
				mkJob("cpus-with-gpus", 2, 64, 1, model("v100")),
				mkJob("mem-with-cpus", 0, 64, 300, tmpfs(300)),
				mkJob("pinned", 4, 1, 1, onSlave("gpu1")),
				mkJob("pinned-cuda", 0, 1, 1, onSlave("gpu3"), minCuda(12)),
			},
			want: map[string]string{
				"cluster99":      "FAIL cluster 99 does not exist",
				"eight":          "FAIL no slave in cluster 1 has 8 GPUs matching V100 (the most is 2 on gpu1)",
				"h100":           "FAIL no slave has a GPU matching H100 or h200",
				"cuda13":         "FAIL no slave has a GPU matching V100 with CUDA ≥ 13",
				"cpu-cuda13":     "FAIL no slave has CUDA ≥ 13 (the newest is CUDA 12 on gpu1)",
				"cpus":           "FAIL no slave has 128 CPUs (the most is 64 on gpu3)",
				"memory":         "FAIL no slave has 1024 GB memory (the most is 512 GB on gpu3)",
				"gpumem":         "FAIL no slave has a GPU with ≥ 64 GB memory",
				"cpus-with-gpus": "FAIL no slave has 64 CPUs (the most where the GPUs fit is 32 on gpu1)",
				"mem-with-cpus":  "FAIL no slave has 600 GB memory (the most is 512 GB on gpu3)",
				"pinned":         "FAIL slave gpu1 does not have 4 GPUs (it has 2)",
				"pinned-cuda":    "FAIL slave gpu3 does not have CUDA ≥ 12 (it has CUDA 11)",
			},
		},
		{
			name:   "no CUDA at all",
			slaves: []Slave{mkSlave("cpu1", cuda(0)), mkSlave("cpu2", cuda(0))},
			queued: []Job{mkJob("j1", 0, 1, 1, minCuda(11)), mkJob("j2", 1, 1, 1)},
			want: map[string]string{
				"j1": "FAIL no slave has CUDA ≥ 11 (none has CUDA)",
				"j2": "FAIL no slave has a GPU",
			},
		},
		{
			name:   "no slave in scope: wait, unless an instance id can never come back",
			slaves: []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 2)...)), mkSlave("gpu2", inCluster(2))},
			queued: []Job{
				mkJob("empty-cluster", 1, 1, 1, cluster(3)),
				mkJob("unknown-name", 1, 1, 1, onSlave("gpu9")),
				mkJob("other-cluster", 0, 1, 1, onSlave("gpu2"), cluster(1)),
				mkJob("unknown-instance", 1, 1, 1, onInstance("nope")),
				mkJob("instance-of-other", 1, 1, 1, onInstance("inst-gpu2"), onSlave("gpu1")),
				mkJob("instance-other-cluster", 0, 1, 1, onInstance("inst-gpu2"), cluster(1)),
			},
			want: map[string]string{
				"empty-cluster":          "WAIT no slave in cluster 3 yet",
				"unknown-name":           "WAIT slave gpu9 is not registered",
				"other-cluster":          "WAIT slave gpu2 is in cluster 2, not cluster 1",
				"unknown-instance":       "FAIL slave instance nope is not registered (a slave gets a new instance id at every start)",
				"instance-of-other":      "FAIL slave instance inst-gpu2 is slave gpu2, not gpu1",
				"instance-other-cluster": "FAIL slave instance inst-gpu2 (slave gpu2) is in cluster 2, not cluster 1",
			},
		},
		{
			name:   "no slave at all",
			queued: []Job{mkJob("j1", 0, 1, 1)},
			want:   map[string]string{"j1": "WAIT no slave registered yet"},
		},

		// Explanations.
		{
			name: "all matching slaves offline or draining",
			slaves: []Slave{
				mkSlave("a1", inCluster(1), offline(), gpus(gpuList(v100, 32, 0, 2)...)),
				mkSlave("a2", inCluster(1), offline(), gpus(gpuList(v100, 32, 0, 2)...)),
				mkSlave("b1", inCluster(2), offline(), gpus(gpuList(v100, 32, 0, 2)...)),
				mkSlave("c1", inCluster(3), draining(), gpus(gpuList(v100, 32, 0, 2)...)),
				mkSlave("c2", inCluster(3), draining(), gpus(gpuList(v100, 32, 0, 2)...)),
				mkSlave("d1", inCluster(4), offline(), gpus(gpuList(v100, 32, 0, 2)...)),
				mkSlave("d2", inCluster(4), draining(), gpus(gpuList(v100, 32, 0, 2)...)),
				mkSlave("d3", inCluster(4), gpus(gpuList(t4, 32, 0, 2)...)),
			},
			queued: []Job{
				mkJob("two-offline", 1, 1, 1, cluster(1)),
				mkJob("one-offline", 1, 1, 1, cluster(2)),
				mkJob("pinned-offline", 1, 1, 1, onSlave("b1")),
				mkJob("draining", 1, 1, 1, onSlave("c1")),
				mkJob("two-draining", 1, 1, 1, cluster(3)),
				mkJob("mixed", 1, 1, 1, cluster(4), model("v100")),
			},
			want: map[string]string{
				"two-offline":    "WAIT all 2 matching slaves are offline",
				"one-offline":    "WAIT the only matching slave, b1, is offline",
				"pinned-offline": "WAIT slave b1 is offline",
				"draining":       "WAIT slave c1 does not accept jobs (draining)",
				"two-draining":   "WAIT all 2 matching slaves do not accept jobs (draining)",
				"mixed":          "WAIT all 2 matching slaves are offline (1) or draining (1)",
			},
		},
		{
			name: "the closest slave's blocker, then the unavailable matching slaves",
			slaves: []Slave{
				mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 2)...)),
				mkSlave("gpu2", gpus(gpuList(v100, 32, 0, 4)...)),
				mkSlave("gpu3", offline(), gpus(gpuList(v100, 32, 0, 4)...)),
				mkSlave("gpu4", offline(), gpus(gpuList(v100, 32, 0, 4)...)),
				mkSlave("gpu5", draining(), gpus(gpuList(v100, 32, 0, 4)...)),
			},
			running: []Placed{hold("gpu2", []int{0, 1}, nil, 0)},
			queued:  []Job{mkJob("j1", 4, 1, 1, model("V100"))},
			want: map[string]string{
				"j1": "WAIT needs 4 GPUs matching V100, at most 2 free on a matching slave (gpu2) | " +
					"2 more matching slaves are offline (gpu3, gpu4) | 1 more matching slave is draining (gpu5)",
			},
		},
		{
			name:    "no GPU free on several slaves",
			slaves:  []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 1)...)), mkSlave("gpu2", gpus(gpuList(v100, 32, 0, 1)...))},
			running: []Placed{hold("gpu1", []int{0}, nil, 0), hold("gpu2", []int{0}, nil, 0)},
			queued:  []Job{mkJob("j1", 1, 1, 1, model("V100"), gpuMem(16), minCuda(11))},
			want:    map[string]string{"j1": "WAIT needs 1 GPU matching V100 with ≥ 16 GB memory and CUDA ≥ 11, none free on the 2 matching slaves"},
		},
		{
			name:    "CPUs and memory",
			slaves:  []Slave{mkSlave("gpu1"), mkSlave("gpu2", cpus(64))},
			running: []Placed{hold("gpu1", nil, ids(0, 28), 226), hold("gpu2", nil, ids(0, 60), 10)},
			queued:  []Job{mkJob("cpus", 0, 8, 1), mkJob("memory", 0, 4, 64), mkJob("nocpu", 0, 5, 1)},
			want: map[string]string{
				"cpus":   "WAIT needs 8 CPUs, at most 4 free (gpu1)",
				"memory": "gpu2 gpus=[] cpus=[60 61 62 63] mem=64",
				"nocpu":  "WAIT needs 5 CPUs, at most 4 free (gpu1)",
			},
		},
		{
			name:    "memory blocker",
			slaves:  []Slave{mkSlave("gpu1")},
			running: []Placed{hold("gpu1", nil, nil, 226)},
			queued:  []Job{mkJob("j1", 0, 1, 64), mkJob("j2", 0, 1, 31)},
			want: map[string]string{
				"j1": "WAIT needs 64 GB memory, at most 30 GB free (gpu1)",
				"j2": "WAIT needs 31 GB memory, at most 30 GB free (gpu1)",
			},
		},
		{
			name:    "at most N says where, when a slave without the GPUs has more",
			slaves:  []Slave{mkSlave("gpu1", gpus(gpuList(v100, 32, 0, 2)...)), mkSlave("gpu2", gpus(gpuList(v100, 32, 0, 2)...))},
			running: []Placed{hold("gpu1", nil, ids(0, 28), 0), hold("gpu2", []int{0, 1}, nil, 0)},
			queued:  []Job{mkJob("j1", 2, 8, 1)},
			want:    map[string]string{"j1": "WAIT needs 8 CPUs, at most 4 free where the GPUs fit (gpu1)"},
		},

		// Private clusters (SPEC 7.3).
		{
			name:     "private cluster: owners anyhow, others only as short guests",
			clusters: privateClusters,
			slaves:   []Slave{mkSlave("p1", inCluster(5), gpus(gpuList(a100, 80, 0, 8)...))},
			queued: []Job{
				mkJob("owner-named", 1, 1, 1, project(7), cluster(5)),
				mkJob("owner-any", 1, 1, 1, project(7)),
				mkJob("guest-named", 1, 1, 1, project(8), cluster(5)),
				mkJob("guest-short", 1, 1, 1, project(8), minDur(30*time.Minute)),
				mkJob("guest-long", 1, 1, 1, project(8)),
				mkJob("guest-pinned", 1, 1, 1, project(8), onSlave("p1")),
			},
			want: map[string]string{
				"owner-named":  "p1 gpus=[0] cpus=[0] mem=1",
				"owner-any":    "p1 gpus=[1] cpus=[1] mem=1",
				"guest-named":  "FAIL cluster 5 is private to other projects; leave clusterId out to run there as a guest (minDuration ≤ 1 hour)",
				"guest-short":  "p1 gpus=[2] cpus=[2] mem=1",
				"guest-long":   "WAIT every slave is in a private cluster of other projects; guests need minDuration ≤ 1 hour (the job has 1 week)",
				"guest-pinned": "WAIT slave p1 is in private cluster 5; guests need minDuration ≤ 1 hour (the job has 1 week)",
			},
		},
		{
			name:     "private cluster: a long guest job goes to a public slave",
			clusters: privateClusters,
			slaves:   []Slave{mkSlave("p1", inCluster(5), gpus(gpuList(a100, 80, 0, 1)...)), mkSlave("pub", gpus(gpuList(a100, 80, 0, 8)...))},
			queued:   []Job{mkJob("guest-long", 1, 1, 1, project(8))},
			want:     map[string]string{"guest-long": "pub gpus=[0] cpus=[0] mem=1"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clusters := tc.clusters
			if clusters == nil {
				clusters = map[int]Cluster{1: {ID: 1}, 2: {ID: 2}, 3: {ID: 3}}
			}
			s := Snapshot{Now: t0, Clusters: clusters, Slaves: tc.slaves, Queued: tc.queued, Running: tc.running}
			p := s.Plan()
			checkPlan(t, s, p)
			got := outcome(p)
			for uuid, w := range tc.want {
				if got[uuid] != w {
					t.Errorf("job %s:\n got %s\nwant %s", uuid, got[uuid], w)
				}
			}
			for uuid, g := range got {
				if _, ok := tc.want[uuid]; !ok {
					t.Errorf("job %s: unexpected %s", uuid, g)
				}
			}
		})
	}
}

// TestPlanEmpty: nothing queued gives an empty plan with a usable map, so the loop can range
// over it and clear stale explanations.
func TestPlanEmpty(t *testing.T) {
	p := Snapshot{Now: t0, Slaves: []Slave{mkSlave("gpu1")}}.Plan()
	if len(p.Assignments) != 0 || len(p.Failures) != 0 || p.Explanations == nil || len(p.Explanations) != 0 {
		t.Fatalf("plan = %+v, want empty with a non-nil map", p)
	}
	if !maps.Equal(outcome(p), map[string]string{}) {
		t.Fatal("outcome of an empty plan is not empty")
	}
}

// TestPlanDecidesByPlace: a narrowed plan whose sweep is spent still decides (explains) the jobs
// whose places Decide gives, and no others it could not start.
func TestPlanDecidesByPlace(t *testing.T) {
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	gpus := make([]protocol.GPU, 1)
	gpus[0] = protocol.GPU{Index: 0, UUID: "GPU-s1-0", Model: "A100-80GB", MemoryMiB: 80 << 10}
	snap := Snapshot{Now: now, Policy: PolicyFair, Clusters: map[int]Cluster{1: {ID: 1}}, Tallies: map[int64]float64{},
		Slaves: []Slave{{Name: "s1", InstanceID: "i-s1", ClusterID: 1, Online: true, Accepting: true, CPUs: 8, MemoryGb: 64, CudaMajor: 12, GPUs: gpus}},
		Running: []Placed{{JobUUID: "run", SlaveName: "s1", UserID: 2, ProjectID: 1, GPUIndices: []int{0}, CPUIDs: []int{0},
			MemoryGb: 4, Started: now.Add(-time.Hour), Ends: now.Add(24 * time.Hour)}},
		NoRanges: true, Sweep: 1}
	for i := range 6 {
		snap.Queued = append(snap.Queued, Job{UUID: fmt.Sprintf("q%d", i), UserID: 1, ProjectID: 1, Submitted: now.Add(time.Duration(i) * time.Second),
			Request: job.Request{Resources: job.Resources{GPUs: 1, CPUs: 1, CPUMemoryGb: 4}, Scheduling: job.Scheduling{MaxDuration: job.Duration(time.Hour)}}})
	}
	snap.Decide = []int{4, -1, 99}
	plan := snap.Plan()
	decided := slices.Sorted(maps.Keys(plan.Explanations))
	if want := []string{"q0", "q4"}; !slices.Equal(decided, want) {
		t.Errorf("explained %v, want %v (the sweep's one and the one named by place)", decided, want)
	}
	if want := []string{"q1", "q2", "q3", "q5"}; !slices.Equal(plan.Skipped, want) {
		t.Errorf("skipped %v, want %v", plan.Skipped, want)
	}
}

// A running job's slave hint is trusted only where it names the first slave of the job's name:
// a hint left from another index (a slave came or went since), one out of range, or one at a
// second slave of the same name (a new instance) is looked up by name instead, so the job's
// GPU stays taken on its own slave whatever the hint says.
func TestPlanChecksSlaveHints(t *testing.T) {
	one := func(name, instance string) Slave {
		s := mkSlave(name, gpus(gpuList(a100, 80, 0, 1)...))
		s.InstanceID = instance
		return s
	}
	three := []Slave{one("s1", "i1"), one("s2", "i2"), one("s3", "i3")}
	twins := []Slave{one("s1", "i1"), one("s2", "i2"), one("s2", "i2-new")}
	for _, tc := range []struct {
		name   string
		slaves []Slave
		hint   int    // the job on s2's
		taken  string // the slave another job, without hint, holds
		want   string // the instance the queued job goes to: the one left free
	}{
		{"right", three, 2, "s3", "i1"},
		{"none", three, 0, "s3", "i1"},
		{"another slave's place", three, 1, "s3", "i1"},
		{"past the end", three, 9, "s3", "i1"},
		{"negative", three, -3, "s3", "i1"},
		{"the second of its name", twins, 3, "s1", "i2-new"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := Snapshot{Now: t0, Policy: PolicyFair, Clusters: map[int]Cluster{1: {ID: 1}}, Slaves: tc.slaves,
				Running: []Placed{
					{JobUUID: "on-s2", SlaveName: "s2", UserID: 2, ProjectID: 1, GPUIndices: []int{0}, CPUIDs: []int{0}, MemoryGb: 4, Started: t0.Add(-time.Hour), SlaveHint: tc.hint},
					{JobUUID: "other", SlaveName: tc.taken, UserID: 2, ProjectID: 1, GPUIndices: []int{0}, CPUIDs: []int{0}, MemoryGb: 4, Started: t0.Add(-time.Hour)},
				},
				Queued: []Job{mkJob("q", 1, 1, 4)}}
			snap.Index = NewSlaveIndex(snap.Slaves, snap.Clusters)
			plan := snap.Plan()
			if len(plan.Assignments) != 1 || plan.Assignments[0].SlaveInstanceID != tc.want {
				t.Fatalf("assignments %+v, want the job on instance %s", plan.Assignments, tc.want)
			}
		})
	}
}
