package gpu

import (
	"reflect"
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/opengpulab/gpulab/protocol"
)

// mockNVML serves devices by UUID with fixed readings; a UUID in broken fails its utilisation read.
func mockNVML(readings map[string]nvml.Utilization, used map[string]uint64, broken string) *mock.Interface {
	return &mock.Interface{
		InitFunc:     func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc: func() nvml.Return { return nvml.SUCCESS },
		DeviceGetHandleByUUIDFunc: func(uuid string) (nvml.Device, nvml.Return) {
			u, ok := readings[uuid]
			if !ok {
				return nil, nvml.ERROR_NOT_FOUND
			}
			return &mock.Device{
				GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
					if uuid == broken {
						return nvml.Utilization{}, nvml.ERROR_GPU_IS_LOST
					}
					return u, nvml.SUCCESS
				},
				GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
					return nvml.Memory{Total: 32 << 30, Used: used[uuid], Free: 32<<30 - used[uuid]}, nvml.SUCCESS
				},
			}, nvml.SUCCESS
		},
	}
}

func TestSampler(t *testing.T) {
	gpus := []protocol.GPU{
		{Index: 0, UUID: "GPU-a"},
		{Index: 1, UUID: "GPU-b"},
		{Index: 2, UUID: "GPU-gone"}, // NVML no longer knows it
		{Index: 3, UUID: "GPU-lost"}, // its reads fail
	}
	lib := mockNVML(
		map[string]nvml.Utilization{"GPU-a": {Gpu: 87}, "GPU-b": {Gpu: 0}, "GPU-lost": {Gpu: 50}},
		map[string]uint64{"GPU-a": 1536 << 20, "GPU-b": 0},
		"GPU-lost",
	)
	s := NewSampler(lib, gpus)

	all := []protocol.GPUUsage{{Index: 0, UtilPercent: 87, MemoryUsedMiB: 1536}, {Index: 1}}
	if got := s.Sample(); !reflect.DeepEqual(got, all) {
		t.Errorf("Sample() = %+v, want %+v", got, all)
	}
	if got, want := s.Sample(1, 2), []protocol.GPUUsage{{Index: 1}}; !reflect.DeepEqual(got, want) {
		t.Errorf("Sample(1, 2) = %+v, want %+v", got, want)
	}
	if n := len(lib.InitCalls()); n != 1 {
		t.Errorf("Init called %d times, want once for the sampler's life", n)
	}
	s.Close()
	s.Close()
	if n := len(lib.ShutdownCalls()); n != 1 {
		t.Errorf("Shutdown called %d times, want 1", n)
	}
	if got := s.Sample(); len(got) != 0 {
		t.Errorf("after Close: %+v, want nothing", got)
	}
}

func TestSamplerWithoutNVML(t *testing.T) {
	fake, err := ParseFake("2xV100-32GB")
	if err != nil {
		t.Fatal(err)
	}
	realGPU := protocol.GPU{Index: 2, UUID: "GPU-real"}
	want := []protocol.GPUUsage{{Index: 0}, {Index: 1}}

	tests := []struct {
		name string
		s    *Sampler
		want []protocol.GPUUsage
	}{
		{"nil sampler", nil, nil},
		{"no library, fake GPUs read 0 %", NewSampler(nil, fake), want},
		{"no library, a real GPU is unknown", NewSampler(nil, slices.Concat(fake, []protocol.GPU{realGPU})), want},
		{"init fails", NewSampler(&mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }}, slices.Concat(fake, []protocol.GPU{realGPU})), want},
		// Only fake GPUs: NVML is never touched (an unset mock func would panic).
		{"fake only never calls NVML", NewSampler(&mock.Interface{}, fake), want},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.Sample(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Sample() = %+v, want %+v", got, tt.want)
			}
			tt.s.Close()
		})
	}
}
