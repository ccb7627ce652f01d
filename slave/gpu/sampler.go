package gpu

import (
	"math"
	"slices"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/opengpulab/gpulab/protocol"
)

// Sampler reads per-GPU utilisation and memory use while jobs run, for the jobs' usage statistics
// and the idle-GPU warnings. It holds NVML open from NewSampler to Close, so a sample costs two
// NVML calls per GPU rather than an Init. A nil Sampler, or one without NVML, samples nothing for
// real GPUs: an unknown reading must not look like an idle GPU. Fake GPUs read the utilisation
// scripted with SetFakeUtil (--fake-gpu-util), 0 % when none is. Safe for concurrent use.
type Sampler struct {
	mu      sync.Mutex
	lib     Library // nil when NVML is absent or closed
	gpus    []protocol.GPU
	devices map[int]nvml.Device // by GPU index; only the real GPUs NVML found
	fake    []float64           // scripted utilisation of the fake GPUs, by index
}

// SetFakeUtil scripts the utilisation the fake GPUs report (percent, by GPU index; see
// ParseFakeUtil); their memory use follows it (85 % busy: 85 % of its memory used), so demos
// and tests show real charts and idle warnings.
func (s *Sampler) SetFakeUtil(util []float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fake = slices.Clone(util)
}

// NewSampler prepares sampling of gpus (the slave's inventory). lib may be nil (no NVML, or only
// fake GPUs); when NVML cannot be initialised, or a GPU's UUID is no longer known to it, those
// GPUs are simply left out of the samples.
func NewSampler(lib Library, gpus []protocol.GPU) *Sampler {
	s := &Sampler{gpus: slices.Clone(gpus), devices: map[int]nvml.Device{}}
	if lib == nil || !slices.ContainsFunc(gpus, func(g protocol.GPU) bool { return !g.Fake }) {
		return s
	}
	if lib.Init() != nvml.SUCCESS {
		return s
	}
	s.lib = lib
	for _, g := range gpus {
		if g.Fake {
			continue
		}
		// By UUID, not index: the UUID is what the job was given, and indices can move.
		if d, ret := lib.DeviceGetHandleByUUID(g.UUID); ret == nvml.SUCCESS {
			s.devices[g.Index] = d
		}
	}
	return s
}

// Sample reads the GPUs with the given indices, or all of the sampler's GPUs when none are given
// (a job's usage is the sample of its own GPUs). GPUs that cannot be read are left out.
func (s *Sampler) Sample(indices ...int) []protocol.GPUUsage {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []protocol.GPUUsage
	for _, g := range s.gpus {
		if len(indices) > 0 && !slices.Contains(indices, g.Index) {
			continue
		}
		if g.Fake {
			u := protocol.GPUUsage{Index: g.Index}
			if g.Index < len(s.fake) {
				u.UtilPercent = s.fake[g.Index]
				u.MemoryUsedMiB = int64(math.Round(float64(g.MemoryMiB) * s.fake[g.Index] / 100))
			}
			out = append(out, u)
			continue
		}
		d, ok := s.devices[g.Index]
		if !ok || s.lib == nil {
			continue
		}
		util, ret := d.GetUtilizationRates()
		if ret != nvml.SUCCESS {
			continue
		}
		mem, ret := d.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			continue
		}
		out = append(out, protocol.GPUUsage{
			Index:         g.Index,
			UtilPercent:   float64(util.Gpu),
			MemoryUsedMiB: int64(mem.Used >> 20),
		})
	}
	return out
}

// Close releases NVML; later samples hold only the fake GPUs. Safe on a nil Sampler and to call
// twice, so the daemon can defer it unconditionally.
func (s *Sampler) Close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lib != nil {
		_ = s.lib.Shutdown() // nothing to do about a failed release at shutdown
		s.lib = nil
	}
	clear(s.devices)
}
