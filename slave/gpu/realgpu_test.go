package gpu_test

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/slave/container"
	"github.com/opengpulab/gpulab/slave/gpu"
)

// The tests in this file need a machine with an NVIDIA GPU, its driver and PyTorch (python3 with
// torch, used to load the GPU); they run only with GPULAB_REAL_GPU=1, since no CI machine has a
// GPU. Everything else in this package is tested with go-nvml's mocks.
func realGPU(t *testing.T) gpu.Inventory {
	t.Helper()
	if os.Getenv("GPULAB_REAL_GPU") != "1" {
		t.Skip("set GPULAB_REAL_GPU=1 on a machine with an NVIDIA GPU")
	}
	inv := gpu.Discover(gpu.Real(), slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if inv.Status != gpu.StatusNVML || len(inv.GPUs) == 0 {
		t.Fatalf("NVML inventory: status %q, %d GPUs", inv.Status, len(inv.GPUs))
	}
	return inv
}

// TestRealInventory: what the slave offers the master comes from NVML and is complete.
func TestRealInventory(t *testing.T) {
	inv := realGPU(t)
	t.Logf("driver %s, CUDA %s, %d GPU(s)", inv.DriverVersion, inv.CudaVersion, len(inv.GPUs))
	if inv.DriverVersion == "" || inv.CudaVersion == "" {
		t.Errorf("driver %q / CUDA %q missing", inv.DriverVersion, inv.CudaVersion)
	}
	for _, g := range inv.GPUs {
		t.Logf("GPU %d: %s %s, %d MiB", g.Index, g.UUID, g.Model, g.MemoryMiB)
		if !strings.HasPrefix(g.UUID, "GPU-") || g.Model == "" || g.MemoryMiB < 1024 || g.Fake {
			t.Errorf("GPU %d incomplete: %+v", g.Index, g)
		}
	}
}

// gpuLoad is a PyTorch program that keeps GPU CUDA_VISIBLE_DEVICES busy with matrix products
// for the given seconds while holding about 2 GiB.
const gpuLoad = `import sys, time, torch
a = torch.randn(16384, 16384, device="cuda")
end = time.time() + float(sys.argv[1])
while time.time() < end:
    a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
`

// TestRealSampling: the Sampler reads a busy GPU as busy (utilisation and memory) and an idle one
// as idle, which is what the usage statistics and idle-GPU warnings rest on.
func TestRealSampling(t *testing.T) {
	inv := realGPU(t)
	g := inv.GPUs[0]
	s := gpu.NewSampler(gpu.Real(), inv.GPUs)
	defer s.Close()

	idle := s.Sample(g.Index)
	if len(idle) != 1 {
		t.Fatalf("idle sample: %+v", idle)
	}
	t.Logf("before the load: util %.0f %%, memory used %d MiB", idle[0].UtilPercent, idle[0].MemoryUsedMiB)

	prog := filepath.Join(t.TempDir(), "load.py")
	if err := os.WriteFile(prog, []byte(gpuLoad), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	load := exec.CommandContext(ctx, "python3", prog, "60")
	load.Env = append(os.Environ(), "CUDA_VISIBLE_DEVICES="+g.UUID)
	load.Stderr = os.Stderr
	if err := load.Start(); err != nil {
		t.Fatalf("start the load: %v", err)
	}
	var busy protocol.GPUUsage
	for deadline := time.Now().Add(50 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		got := s.Sample(g.Index)
		if len(got) == 1 {
			busy = got[0]
		}
		if busy.UtilPercent >= 50 && busy.MemoryUsedMiB >= idle[0].MemoryUsedMiB+1024 {
			break
		}
	}
	t.Logf("under the load: util %.0f %%, memory used %d MiB", busy.UtilPercent, busy.MemoryUsedMiB)
	if busy.UtilPercent < 50 || busy.MemoryUsedMiB < idle[0].MemoryUsedMiB+1024 {
		t.Errorf("the sampler never saw the load: last %+v", busy)
	}
	cancel()
	_ = load.Wait()
	var after protocol.GPUUsage
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if got := s.Sample(g.Index); len(got) == 1 {
			after = got[0]
			if after.UtilPercent == 0 {
				break
			}
		}
	}
	t.Logf("after the load: util %.0f %%, memory used %d MiB", after.UtilPercent, after.MemoryUsedMiB)
	if after.UtilPercent != 0 {
		t.Errorf("the GPU still reads busy after the load ended: %+v", after)
	}
}

// TestRealHandOff: the container the slave makes for a one-GPU job asks Docker's NVIDIA driver
// for exactly the assigned GPU, by the UUID NVML gave, and NVIDIA_VISIBLE_DEVICES names it; the
// CUDA runtime accepts that UUID as the name of that very GPU, and "void" (a job without GPUs)
// shows it none. Where a Docker Engine with the NVIDIA runtime exists, a container started from
// the spec sees the GPU too.
func TestRealHandOff(t *testing.T) {
	inv := realGPU(t)
	g := inv.GPUs[0]
	a := protocol.Assignment{
		Job: job.Job{
			UUID: "5d7c3f0e-0000-4000-8000-00000000a001",
			Request: job.Request{
				Resources: job.Resources{GPUs: 1, CPUs: 1, CPUMemoryGb: 2},
				Docker:    job.Docker{Image: "debian:stable", Command: job.Command{Text: "nvidia-smi -L"}},
			},
		},
		GPUs: []protocol.GPU{g}, CPUIDs: []int{0}, MemoryGb: 2,
		UserName: "alice", Project: "demo",
	}
	cc, hc, err := container.Spec(a, container.Config{SlaveName: "gpu-check", Unpinned: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(hc.DeviceRequests) != 1 || hc.DeviceRequests[0].Driver != container.NvidiaDriver ||
		!slices.Equal(hc.DeviceRequests[0].DeviceIDs, []string{g.UUID}) {
		t.Fatalf("device requests %+v, want the nvidia driver with [%s]", hc.DeviceRequests, g.UUID)
	}
	if !slices.Contains(cc.Env, "NVIDIA_VISIBLE_DEVICES="+g.UUID) {
		t.Fatalf("NVIDIA_VISIBLE_DEVICES is not %s in %v", g.UUID, cc.Env)
	}
	t.Logf("spec: DeviceRequests %+v, NVIDIA_VISIBLE_DEVICES=%s", hc.DeviceRequests, g.UUID)

	probe := `import torch; print(torch.cuda.device_count(), torch.cuda.get_device_name(0) if torch.cuda.device_count() else "-")`
	for _, tc := range []struct{ devices, want string }{{g.UUID, "1 " + g.Model}, {"void", "0 -"}} {
		cmd := exec.Command("python3", "-c", probe)
		cmd.Env = append(os.Environ(), "CUDA_VISIBLE_DEVICES="+tc.devices)
		out, err := cmd.CombinedOutput()
		got := strings.TrimSpace(string(out))
		t.Logf("CUDA_VISIBLE_DEVICES=%s: %s", tc.devices, got)
		if err != nil || !strings.HasSuffix(got, tc.want) {
			t.Errorf("CUDA_VISIBLE_DEVICES=%s: got %q (%v), want %q", tc.devices, got, err, tc.want)
		}
	}

	if _, err := exec.LookPath("docker"); err != nil {
		t.Log("no Docker Engine on this machine: the container part of the hand-off is not checked here")
		return
	}
	out, err := exec.Command("docker", "run", "--rm", "--gpus", "device="+g.UUID, "-e", "NVIDIA_VISIBLE_DEVICES="+g.UUID,
		"debian:stable", "sh", "-c", "ls /dev/nvidia*").CombinedOutput()
	t.Logf("docker run --gpus device=%s: %s (%v)", g.UUID, out, err)
}
