package handlers

import (
	"database/sql"
	"encoding/json"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/store"
)

// imec's ResourceInfo must add up (acquired - used = available) whatever state a slave is in,
// and its CUDA major version is given only when imec can derive it from the full version.
func TestImecSlaveEdgeCases(t *testing.T) {
	inv := func(cuda string) json.RawMessage {
		b, _ := json.Marshal(protocol.Inventory{CPUs: 8, MemoryMiB: 4096, CudaVersion: cuda,
			GPUs: []protocol.GPU{{Model: "A100", MemoryMiB: 40960}, {Model: "A100", MemoryMiB: 40960}}})
		return b
	}
	hb := sql.NullTime{Time: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Valid: true}
	tests := []struct {
		name      string
		s         store.Slave
		use       slaveUse
		wantGPU   ImecResourceInfo
		wantMajor *int
	}{
		{"online", store.Slave{Name: "a", Online: true, AcceptingJobs: true, Inventory: inv("12.4"), LastHeartbeat: hb},
			slaveUse{jobs: 1, gpus: 1, cpus: 2, memGb: 1}, ImecResourceInfo{2, 2, 1, 1}, new(12)},
		{"offline with a job still held", store.Slave{Name: "b", Inventory: inv("12")},
			slaveUse{jobs: 1, gpus: 2, cpus: 2, memGb: 1}, ImecResourceInfo{2, 2, 2, 0}, nil},
		{"offline without inventory", store.Slave{Name: "c"}, slaveUse{gpus: 1}, ImecResourceInfo{0, 1, 1, 0}, nil},
		{"no CUDA", store.Slave{Name: "d", Online: true, Inventory: inv("")}, slaveUse{}, ImecResourceInfo{2, 2, 0, 2}, nil},
	}
	for _, tt := range tests {
		si := imecSlave(tt.s, tt.use)
		if si.GPU != tt.wantGPU {
			t.Errorf("%s: gpu = %+v, want %+v", tt.name, si.GPU, tt.wantGPU)
		}
		for what, r := range map[string]ImecResourceInfo{"worker": si.Worker, "cpu": si.CPU, "gpu": si.GPU, "cpuMemoryMb": si.CPUMemoryMb} {
			if r.Acquired-r.Used != r.Available {
				t.Errorf("%s: %s %+v does not add up", tt.name, what, r)
			}
		}
		if (si.CudaVersionMajor == nil) != (tt.wantMajor == nil) || (si.CudaVersionMajor != nil && *si.CudaVersionMajor != *tt.wantMajor) {
			t.Errorf("%s: cudaVersionMajor = %v, want %v", tt.name, si.CudaVersionMajor, tt.wantMajor)
		}
		if si.LastUpdate == "" || si.Aliases == nil || si.CPUModel == nil || si.GpuModel == nil {
			t.Errorf("%s: a field imec requires is empty: %+v", tt.name, si)
		}
		if tt.s.Online != si.AcceptingJobs && tt.s.AcceptingJobs {
			t.Errorf("%s: acceptingJobs = %v", tt.name, si.AcceptingJobs)
		}
	}
	if si := imecSlave(tests[0].s, tests[0].use); si.LastUpdate != "2025-01-02T03:04:05Z" || len(si.GpuModel) != 1 || si.CPUMemoryMb.Used != 1024 {
		t.Errorf("online slave: lastUpdate %s, gpuModel %+v, memory %+v", si.LastUpdate, si.GpuModel, si.CPUMemoryMb)
	}
}

func TestImecEventTypes(t *testing.T) {
	evs := imecJobEvents([]store.Event{
		{JobUUID: "j", Kind: store.EventStatus, ToStatus: "RUNNING", Message: "started"},
		{JobUUID: "j", Kind: store.EventWarning, ToStatus: "x", Message: "careful"},
		{JobUUID: "j", Kind: store.EventScheduler, Message: "waits"},
		{JobUUID: "j", Kind: store.EventInfo, Message: "fyi"},
		{JobUUID: "j", Kind: "something new", Message: "?"},
	})
	want := []ImecJobEvent{
		{JobID: "j", Type: "STATUS_CHANGE", NewState: "RUNNING", Msg: "started"},
		{JobID: "j", Type: "WARN", Msg: "careful"},
		{JobID: "j", Type: "DEBUG", Msg: "waits"},
		{JobID: "j", Type: "INFO", Msg: "fyi"},
		{JobID: "j", Type: "INFO", Msg: "?"},
	}
	for i := range want {
		want[i].Time = "0001-01-01T00:00:00Z"
		if evs[i] != want[i] {
			t.Errorf("event %d = %+v, want %+v", i, evs[i], want[i])
		}
	}
}
