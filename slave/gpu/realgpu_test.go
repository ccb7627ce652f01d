package gpu_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"

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
// shows it none. Where a Docker Engine with the NVIDIA Container Toolkit is named
// (GPULAB_REAL_DOCKER_HOST), jobs started on it see their GPU and only it (handOffInContainers).
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

	host := os.Getenv("GPULAB_REAL_DOCKER_HOST")
	if host == "" {
		t.Log("GPULAB_REAL_DOCKER_HOST not set (a Docker Engine with the NVIDIA Container Toolkit): the container part of the hand-off is not checked here")
		return
	}
	handOffInContainers(t, host, g)
}

// handOffInContainers starts jobs through the slave's own runtime (container.Runtime.Start, as
// gpulab-slave does) on a Docker Engine whose default runtime is the NVIDIA Container
// Toolkit's: a job given the GPU sees that GPU's device, lists exactly that GPU by the UUID NVML
// gave (nvidia-smi, which the toolkit mounts in) and computes on it (gpulab-cudacheck: CUDA's
// driver allocates, fills and reads back GPU memory); a job without GPUs sees no GPU device and
// no CUDA device. The image (GPULAB_REAL_GPU_IMAGE, present on the engine) holds sh, a C library
// and gpulab-cudacheck built from testdata/cudacheck.c, with nvidia/cuda's PATH and
// LD_LIBRARY_PATH (scripts/realgpu.sh makes one); GPULAB_REAL_GPU_NETWORK replaces the jobs'
// bridge network on an engine that has none.
func handOffInContainers(t *testing.T, host string, g protocol.GPU) {
	image := os.Getenv("GPULAB_REAL_GPU_IMAGE")
	if image == "" {
		t.Fatal("GPULAB_REAL_DOCKER_HOST is set but GPULAB_REAL_GPU_IMAGE (an image on that engine: see scripts/realgpu.sh) is not")
	}
	cli, err := client.NewClientWithOpts(client.WithHost(host), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	h := container.DefaultHardening()
	if n := os.Getenv("GPULAB_REAL_GPU_NETWORK"); n != "" {
		h.Network = n
	}
	if lowered := h.CapUlimits(); len(lowered) > 0 { // as gpulab-slave does at start
		t.Logf("ulimits lowered to this process's: %v", lowered)
	}
	rt := container.New(cli, container.Config{
		SlaveName: fmt.Sprintf("gpu-check-%d", os.Getpid()), ScratchRoot: t.TempDir(), Unpinned: true, Hardening: &h,
	}, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	const probe = `ls /dev; nvidia-smi -L || echo "no nvidia-smi"; gpulab-cudacheck`
	gpuDevice := regexp.MustCompile(`(?m)^nvidia[0-9]+$`)
	listedGPU := regexp.MustCompile(`(?m)^GPU [0-9]+: .*\(UUID: (GPU-[0-9a-f-]+)\)$`)
	for i, tc := range []struct {
		name string
		gpus []protocol.GPU
	}{{"one GPU", []protocol.GPU{g}}, {"no GPU", nil}} {
		a := protocol.Assignment{
			Job: job.Job{
				UUID: fmt.Sprintf("5d7c3f0e-0000-4000-8000-%012d", os.Getpid()*10+i),
				Request: job.Request{
					Resources: job.Resources{GPUs: len(tc.gpus), CPUs: 1, CPUMemoryGb: 2},
					Docker:    job.Docker{Image: image, Command: job.Command{IsList: true, List: []string{"sh", "-c", probe}}},
				},
			},
			GPUs: tc.gpus, CPUIDs: []int{0}, MemoryGb: 2,
			UserName: "alice", Project: "demo",
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		started, err := rt.Start(ctx, a)
		if err != nil {
			cancel()
			t.Fatalf("%s: start: %v", tc.name, err)
		}
		code, werr := rt.Wait(ctx, started.ContainerID)
		var out strings.Builder
		if rc, err := rt.Logs(ctx, started.ContainerID, false); err == nil {
			_, _ = io.Copy(&out, rc)
			_ = rc.Close()
		}
		if err := rt.Remove(ctx, started.ContainerID); err != nil {
			t.Errorf("%s: remove: %v", tc.name, err)
		}
		cancel()
		got := out.String()
		t.Logf("%s: exit %d (%v), output:\n%s", tc.name, code, werr, got)
		devices := gpuDevice.FindAllString(got, -1)
		listed := listedGPU.FindAllStringSubmatch(got, -1)
		computed := strings.Contains(got, "cuda: 1 device(s), "+g.Model+": 256 MiB allocated, filled and read back")
		noCUDA := strings.Contains(got, "cuda: no driver") || strings.Contains(got, "cuda: 0 device(s)")
		switch {
		case werr != nil || code != 0:
			t.Errorf("%s: exit %d (%v)", tc.name, code, werr)
		case len(devices) != len(tc.gpus):
			t.Errorf("%s: GPU devices %v in the container, want %d", tc.name, devices, len(tc.gpus))
		case len(tc.gpus) == 1 && (len(listed) != 1 || listed[0][1] != g.UUID):
			t.Errorf("%s: nvidia-smi listed %v, want exactly %s", tc.name, listed, g.UUID)
		case len(tc.gpus) == 1 && !computed:
			t.Errorf("%s: CUDA did not compute on the GPU (no matching \"cuda:\" line)", tc.name)
		case len(tc.gpus) == 0 && len(listed) != 0:
			t.Errorf("%s: nvidia-smi listed %v in a job without GPUs", tc.name, listed)
		case len(tc.gpus) == 0 && !noCUDA:
			t.Errorf("%s: a job without GPUs reached a CUDA device or gave no \"cuda:\" line", tc.name)
		}
	}
}
