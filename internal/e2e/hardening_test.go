package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/job"
	slavecontainer "github.com/opengpulab/gpulab/slave/container"
)

// A job with a RAM disk gets as container memory exactly what the scheduler booked for it
// (cpuMemoryGb plus the RAM disk, once), GPULAB_MEM_RESERVED its cpuMemoryGb, and the slave's
// hardening.
func TestHardenedContainerWithBookedMemory(t *testing.T) {
	e := newEnv(t)
	e.startSlave(slaveOpts{name: "s1", cluster: 1})
	id := e.submit(e.jobFile("booked", "echo MEM=$GPULAB_MEM_RESERVED; echo ready; sleep 60", func(r map[string]any) {
		r["resources"].(map[string]any)["cpuMemoryGb"] = 2
		r["docker"].(map[string]any)["storage"] = []any{map[string]any{"hostPath": "tmpfs", "containerPath": "/ram", "sizeGb": 1}}
	}))
	j := e.waitFor(id, job.StatusRunning)
	l := e.waitLog(id, "ready")
	if !strings.Contains(l, "MEM=2048m\n") {
		t.Errorf("log %q, want GPULAB_MEM_RESERVED=2048m (cpuMemoryGb, without the RAM disk)", l)
	}
	booked := j.State.Resources.CPUMemoryGb
	if booked != 3 {
		t.Errorf("the scheduler booked %d GB, want 3 (2 + the 1 GB RAM disk)", booked)
	}
	info, err := e.docker.ContainerInspect(context.Background(), slavecontainer.ContainerName(id))
	if err != nil {
		t.Fatal(err)
	}
	hc := info.HostConfig
	t.Logf("booked %d GB; container Memory %d MemorySwap %d", booked, hc.Memory, hc.MemorySwap)
	if hc.Memory != int64(booked)<<30 || hc.MemorySwap != hc.Memory {
		t.Errorf("container Memory %d MemorySwap %d, want %d (what was booked, the RAM disk counted once)", hc.Memory, hc.MemorySwap, int64(booked)<<30)
	}
	if hc.Privileged || hc.NetworkMode.IsHost() || string(hc.NetworkMode) != testenv.JobNetwork() ||
		!slices.Equal(hc.CapDrop, []string{"ALL"}) || len(hc.CapAdd) != len(slavecontainer.DefaultCapabilities) ||
		!slices.Equal(hc.SecurityOpt, []string{"no-new-privileges"}) || hc.PidsLimit == nil || *hc.PidsLimit != slavecontainer.DefaultPidsLimit ||
		len(hc.Ulimits) != 2 || hc.LogConfig.Type != "local" {
		t.Errorf("not hardened: %+v", hc)
	}
	for _, m := range info.Mounts {
		if strings.Contains(m.Source, "docker.sock") || strings.Contains(m.Destination, "docker.sock") {
			t.Errorf("the Docker socket is mounted: %+v", m)
		}
	}
	e.put(id, "CANCELLED")
}
