// Package gpu is the slave's view of its GPUs: what it has (Discover through NVML, or simulated
// ones declared with --fake-gpus) and how busy they are (Sampler). NVML is reached only through the
// small Library interface, which go-nvml's real library and its mocks both satisfy, so everything
// here is tested without GPU hardware.
package gpu

import (
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/opengpulab/gpulab/protocol"
)

// Status values of Inventory.Status (and protocol.Inventory.GPUStatus): the master and the CLI
// show them, so an empty GPU list always comes with its reason.
const (
	StatusNVML = "nvml"
	StatusFake = "fake"
	// StatusNoDriver is what a machine without the NVIDIA driver reports: a normal, CPU-only
	// slave, not a fault.
	StatusNoDriver = "none: NVIDIA driver not found"
)

// Library is the part of nvml.Interface the slave uses. Declaring it keeps the NVML surface the
// slave depends on visible in one place; nvml.New() and go-nvml's mocks (pkg/nvml/mock,
// pkg/nvml/mock/dgxa100) satisfy it as they are.
type Library interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	SystemGetDriverVersion() (string, nvml.Return)
	SystemGetCudaDriverVersion() (int, nvml.Return)
	DeviceGetCount() (int, nvml.Return)
	DeviceGetHandleByIndex(index int) (nvml.Device, nvml.Return)
	DeviceGetHandleByUUID(uuid string) (nvml.Device, nvml.Return)
}

var _ Library = nvml.Interface(nil)

// Real returns the machine's NVML. It loads libnvidia-ml with dlopen only when Init is called, so
// a slave binary builds and starts on machines without the NVIDIA driver; Discover then reports
// StatusNoDriver.
func Real() nvml.Interface { return nvml.New() }

// Inventory is the GPU part of a slave's inventory, filled into protocol.Inventory at
// registration (GPUs, DriverVersion, CudaVersion, GPUStatus).
type Inventory struct {
	GPUs          []protocol.GPU
	DriverVersion string
	CudaVersion   string
	// Status is StatusNVML, StatusFake or "none: <why>", so users see why a slave has no GPUs.
	Status string
}

// driverMissingLogged makes the "no NVIDIA driver" notice appear once per process: a missing
// driver is a fact about the machine, not news at every re-discovery. It is the package's only
// mutable state.
var driverMissingLogged atomic.Bool

// Discover reads the GPUs through NVML. A machine without the NVIDIA driver
// (ERROR_LIBRARY_NOT_FOUND) is a CPU-only slave: no GPUs, Status StatusNoDriver, logged once at
// info. Any other NVML failure also yields no GPUs (a slave must not offer GPUs it cannot vouch
// for), with Status naming the error and a warning logged. A GPU whose details cannot be read is
// left out with a warning; the others are still offered.
func Discover(lib Library, log *slog.Logger) Inventory {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if lib == nil {
		return Inventory{Status: "none: NVML not available"}
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			if driverMissingLogged.CompareAndSwap(false, true) {
				log.Info("no NVIDIA driver (libnvidia-ml not found): running CPU-only jobs")
			}
			return Inventory{Status: StatusNoDriver}
		}
		return failed(log, "NVML init", ret)
	}
	defer func() {
		if ret := lib.Shutdown(); ret != nvml.SUCCESS {
			log.Warn("NVML shutdown", "error", ret.Error())
		}
	}()

	inv := Inventory{Status: StatusNVML, GPUs: []protocol.GPU{}}
	if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		inv.DriverVersion = v
	} else {
		log.Warn("NVML driver version", "error", ret.Error())
	}
	if v, ret := lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		inv.CudaVersion = CudaVersion(v)
	} else {
		log.Warn("NVML CUDA driver version", "error", ret.Error())
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return failed(log, "NVML device count", ret)
	}
	for i := range n {
		g, err := readGPU(lib, i)
		if err != nil {
			log.Warn("GPU left out of the inventory", "index", i, "error", err)
			continue
		}
		inv.GPUs = append(inv.GPUs, g)
	}
	return inv
}

func failed(log *slog.Logger, what string, ret nvml.Return) Inventory {
	log.Warn("no GPUs offered: "+what+" failed", "error", ret.Error())
	return Inventory{Status: fmt.Sprintf("none: %s: %s", what, ret.Error())}
}

func readGPU(lib Library, i int) (protocol.GPU, error) {
	d, ret := lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return protocol.GPU{}, fmt.Errorf("device handle: %w", ret)
	}
	uuid, ret := d.GetUUID()
	if ret != nvml.SUCCESS {
		return protocol.GPU{}, fmt.Errorf("UUID: %w", ret)
	}
	name, ret := d.GetName()
	if ret != nvml.SUCCESS {
		return protocol.GPU{}, fmt.Errorf("name: %w", ret)
	}
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return protocol.GPU{}, fmt.Errorf("memory info: %w", ret)
	}
	return protocol.GPU{Index: i, UUID: uuid, Model: name, MemoryMiB: int64(mem.Total >> 20)}, nil
}

// CudaVersion formats NVML's CUDA driver version (1000*major + 10*minor, e.g. 12040) the way
// users write it ("12.4"), the form protocol.Inventory.CudaVersion and minCudaVersion expect.
func CudaVersion(v int) string {
	if v <= 0 {
		return ""
	}
	return fmt.Sprintf("%d.%d", v/1000, v%1000/10)
}
