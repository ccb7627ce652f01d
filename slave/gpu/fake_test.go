package gpu

import (
	"strings"
	"testing"
)

func TestParseFake(t *testing.T) {
	type gpu struct {
		model  string
		memMiB int64
	}
	tests := []struct {
		spec    string
		want    []gpu
		wantErr string
	}{
		{spec: "2xV100-32GB", want: []gpu{{"Fake V100-32GB", 32768}, {"Fake V100-32GB", 32768}}},
		{spec: "1xA100-40GB,2xRTX2080-8GB", want: []gpu{{"Fake A100-40GB", 40960}, {"Fake RTX2080-8GB", 8192}, {"Fake RTX2080-8GB", 8192}}},
		{spec: "4xH100", want: []gpu{{"Fake H100", 16384}, {"Fake H100", 16384}, {"Fake H100", 16384}, {"Fake H100", 16384}}},
		{spec: " 1xA100-SXM4-80gb , 1XT4 ", want: []gpu{{"Fake A100-SXM4-80gb", 81920}, {"Fake T4", 16384}}},
		{spec: "x", wantErr: `fake GPU spec "x": want COUNTxMODEL[-NNGB], e.g. 2xV100-32GB`},
		{spec: "", wantErr: `fake GPU spec "": want COUNTxMODEL[-NNGB], e.g. 2xV100-32GB`},
		{spec: "V100", wantErr: `fake GPU spec "V100": want COUNTxMODEL[-NNGB]`},
		{spec: "2x", wantErr: `fake GPU spec "2x": want COUNTxMODEL[-NNGB]`},
		{spec: "2xV100-GB", wantErr: `fake GPU spec "2xV100-GB": want COUNTxMODEL[-NNGB]`},
		{spec: "2x-32GB", wantErr: `fake GPU spec "2x-32GB": want COUNTxMODEL[-NNGB]`},
		{spec: "+2xV100", wantErr: `fake GPU spec "+2xV100": want COUNTxMODEL[-NNGB]`},
		{spec: "2xV 100", wantErr: `fake GPU spec "2xV 100": want COUNTxMODEL[-NNGB]`},
		{spec: "2xV100,", wantErr: `fake GPU spec "2xV100,": want COUNTxMODEL[-NNGB]`},
		{spec: "1xA100,V100", wantErr: `fake GPU spec "V100": want COUNTxMODEL[-NNGB]`},
		{spec: "0xV100", wantErr: `fake GPU spec "0xV100": the count must be at least 1`},
		{spec: "2xV100-0GB", wantErr: `fake GPU spec "2xV100-0GB": memory must be 1 to 1024 GB`},
		{spec: "65xV100", wantErr: `fake GPU spec "65xV100": at most 64 fake GPUs per slave`},
		{spec: "60xV100,8xT4", wantErr: `at most 64 fake GPUs per slave`},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			gpus, err := ParseFake(tt.spec)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(gpus) != len(tt.want) {
				t.Fatalf("%d GPUs, want %d: %+v", len(gpus), len(tt.want), gpus)
			}
			for i, g := range gpus {
				if g.Index != i || g.Model != tt.want[i].model || g.MemoryMiB != tt.want[i].memMiB || !g.Fake ||
					!strings.HasPrefix(g.UUID, "GPU-fake-") {
					t.Errorf("GPU %d: %+v, want index %d, %+v, fake, UUID GPU-fake-…", i, g, i, tt.want[i])
				}
			}
		})
	}
}

func TestParseFakeUUIDs(t *testing.T) {
	a, err := ParseFake("2xV100-32GB")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseFake("2xV100-32GB,1xT4")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseFake("2xA100")
	if err != nil {
		t.Fatal(err)
	}
	if a[0].UUID != b[0].UUID || a[1].UUID != b[1].UUID {
		t.Errorf("UUIDs not stable for the same (index, model): %s %s vs %s %s", a[0].UUID, a[1].UUID, b[0].UUID, b[1].UUID)
	}
	if a[0].UUID == a[1].UUID || a[0].UUID == c[0].UUID {
		t.Errorf("UUIDs collide: %s %s %s", a[0].UUID, a[1].UUID, c[0].UUID)
	}
	// Pinned: the UUIDs must not change between releases (recorded job assignments name them).
	if want := "GPU-fake-5d750cbb-13f0-5df2-8e80-83268c22da6f"; a[0].UUID != want {
		t.Errorf("UUID %s, want %s", a[0].UUID, want)
	}
}

func TestFakeInventory(t *testing.T) {
	inv, err := Fake("2xV100-32GB", "")
	if err != nil {
		t.Fatal(err)
	}
	if inv.Status != StatusFake || inv.CudaVersion != DefaultFakeCudaVersion || len(inv.GPUs) != 2 {
		t.Errorf("got %+v", inv)
	}
	inv, err = Fake("1xT4", "11.8")
	if err != nil || inv.CudaVersion != "11.8" {
		t.Errorf("got %+v, %v; want CUDA 11.8", inv, err)
	}
	if _, err := Fake("nonsense", ""); err == nil {
		t.Error("no error for a bad spec")
	}
}
