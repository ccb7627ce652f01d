package gpu

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

// recorder is a slog.Handler that keeps every record, to count what Discover logs.
type recorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec)
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func (r *recorder) levels() []slog.Level {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []slog.Level
	for _, rec := range r.records {
		out = append(out, rec.Level)
	}
	return out
}

func TestDiscoverDGXA100(t *testing.T) {
	server := dgxa100.New()
	rec := &recorder{}
	inv := Discover(server, slog.New(rec))

	if inv.Status != StatusNVML {
		t.Fatalf("status %q, want %q", inv.Status, StatusNVML)
	}
	if inv.DriverVersion != "550.54.15" || inv.CudaVersion != "12.4" {
		t.Errorf("driver %q CUDA %q, want 550.54.15 and 12.4", inv.DriverVersion, inv.CudaVersion)
	}
	if len(inv.GPUs) != 8 {
		t.Fatalf("%d GPUs, want 8", len(inv.GPUs))
	}
	seen := map[string]bool{}
	for i, g := range inv.GPUs {
		want := server.Devices[i].(*dgxa100.Device).UUID
		if g.Index != i || g.UUID != want || !strings.HasPrefix(g.UUID, "GPU-") {
			t.Errorf("GPU %d: index %d UUID %q, want index %d UUID %q", i, g.Index, g.UUID, i, want)
		}
		if g.Model != "Mock NVIDIA A100-SXM4-40GB" || g.MemoryMiB != 40960 || g.Fake {
			t.Errorf("GPU %d: %+v, want model Mock NVIDIA A100-SXM4-40GB, 40960 MiB, not fake", i, g)
		}
		if seen[g.UUID] {
			t.Errorf("UUID %s twice", g.UUID)
		}
		seen[g.UUID] = true
	}
	if l := rec.levels(); len(l) != 0 {
		t.Errorf("logged %d records on a healthy machine, want none", len(l))
	}
}

func TestDiscoverNoDriverLogsOnce(t *testing.T) {
	driverMissingLogged.Store(false)
	t.Cleanup(func() { driverMissingLogged.Store(false) })
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	rec := &recorder{}
	log := slog.New(rec)

	for range 2 {
		inv := Discover(lib, log)
		if inv.Status != StatusNoDriver || len(inv.GPUs) != 0 {
			t.Fatalf("got %+v, want no GPUs and status %q", inv, StatusNoDriver)
		}
	}
	if l := rec.levels(); len(l) != 1 || l[0] != slog.LevelInfo {
		t.Fatalf("logged %v, want exactly one info record", l)
	}
	if n := len(lib.InitCalls()); n != 2 {
		t.Errorf("Init called %d times, want 2 (each discovery tries again)", n)
	}
}

func TestDiscoverNVMLErrors(t *testing.T) {
	healthy := func() *mock.Interface {
		return &mock.Interface{
			InitFunc:                       func() nvml.Return { return nvml.SUCCESS },
			ShutdownFunc:                   func() nvml.Return { return nvml.SUCCESS },
			SystemGetDriverVersionFunc:     func() (string, nvml.Return) { return "550.54.15", nvml.SUCCESS },
			SystemGetCudaDriverVersionFunc: func() (int, nvml.Return) { return 12020, nvml.SUCCESS },
			DeviceGetCountFunc:             func() (int, nvml.Return) { return 1, nvml.SUCCESS },
			DeviceGetHandleByIndexFunc: func(int) (nvml.Device, nvml.Return) {
				return &mock.Device{
					GetUUIDFunc:       func() (string, nvml.Return) { return "GPU-1", nvml.SUCCESS },
					GetNameFunc:       func() (string, nvml.Return) { return "Tesla V100-PCIE-32GB", nvml.SUCCESS },
					GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: 34359738368}, nvml.SUCCESS },
				}, nvml.SUCCESS
			},
		}
	}
	tests := []struct {
		name       string
		mutate     func(*mock.Interface)
		wantStatus string
		wantGPUs   int
		wantShut   int
	}{
		{
			name:       "driver not loaded",
			mutate:     func(m *mock.Interface) { m.InitFunc = func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED } },
			wantStatus: "none: NVML init: ERROR_DRIVER_NOT_LOADED",
		},
		{
			name:       "no permission",
			mutate:     func(m *mock.Interface) { m.InitFunc = func() nvml.Return { return nvml.ERROR_NO_PERMISSION } },
			wantStatus: "none: NVML init: ERROR_NO_PERMISSION",
		},
		{
			name: "device count",
			mutate: func(m *mock.Interface) {
				m.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
			},
			wantStatus: "none: NVML device count: ERROR_UNKNOWN",
			wantShut:   1,
		},
		{
			name: "lost GPU is left out",
			mutate: func(m *mock.Interface) {
				m.DeviceGetHandleByIndexFunc = func(int) (nvml.Device, nvml.Return) { return nil, nvml.ERROR_GPU_IS_LOST }
			},
			wantStatus: StatusNVML,
			wantShut:   1,
		},
		{
			name:       "healthy",
			mutate:     func(*mock.Interface) {},
			wantStatus: StatusNVML,
			wantGPUs:   1,
			wantShut:   1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lib := healthy()
			tt.mutate(lib)
			rec := &recorder{}
			inv := Discover(lib, slog.New(rec))
			if inv.Status != tt.wantStatus || len(inv.GPUs) != tt.wantGPUs {
				t.Fatalf("status %q with %d GPUs, want %q with %d", inv.Status, len(inv.GPUs), tt.wantStatus, tt.wantGPUs)
			}
			if n := len(lib.ShutdownCalls()); n != tt.wantShut {
				t.Errorf("Shutdown called %d times, want %d", n, tt.wantShut)
			}
			levels := rec.levels()
			if tt.wantGPUs == 1 {
				if len(levels) != 0 {
					t.Errorf("logged %v on a healthy machine", levels)
				}
				g := inv.GPUs[0]
				if g.UUID != "GPU-1" || g.Model != "Tesla V100-PCIE-32GB" || g.MemoryMiB != 32768 || inv.CudaVersion != "12.2" {
					t.Errorf("got %+v CUDA %q", g, inv.CudaVersion)
				}
				return
			}
			if len(levels) != 1 || levels[0] != slog.LevelWarn {
				t.Errorf("logged %v, want one warning", levels)
			}
		})
	}
}

func TestDiscoverWithoutLibrary(t *testing.T) {
	inv := Discover(nil, nil)
	if !strings.HasPrefix(inv.Status, "none: ") || len(inv.GPUs) != 0 {
		t.Fatalf("got %+v", inv)
	}
}

// TestDiscoverRealNVML runs the real go-nvml on this machine: a binary that imports this package
// must start where libnvidia-ml is absent (dlopen at Init, not at load) and report no driver.
func TestDiscoverRealNVML(t *testing.T) {
	inv := Discover(Real(), slog.New(slog.DiscardHandler))
	t.Logf("this machine: status %q, %d GPUs, driver %q, CUDA %q", inv.Status, len(inv.GPUs), inv.DriverVersion, inv.CudaVersion)
	switch {
	case inv.Status == StatusNVML:
		for _, g := range inv.GPUs {
			if !strings.HasPrefix(g.UUID, "GPU-") || g.MemoryMiB <= 0 || g.Fake {
				t.Errorf("implausible real GPU %+v", g)
			}
		}
	case strings.HasPrefix(inv.Status, "none: "):
		if len(inv.GPUs) != 0 {
			t.Errorf("status %q with GPUs %+v", inv.Status, inv.GPUs)
		}
	default:
		t.Errorf("status %q, want %q or none: ...", inv.Status, StatusNVML)
	}
}

func TestCudaVersion(t *testing.T) {
	for v, want := range map[int]string{12040: "12.4", 11080: "11.8", 12000: "12.0", 10010: "10.1", 0: "", -1: ""} {
		if got := CudaVersion(v); got != want {
			t.Errorf("CudaVersion(%d) = %q, want %q", v, got, want)
		}
	}
}
