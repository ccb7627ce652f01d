package gpu

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseFakeUtil(t *testing.T) {
	tests := []struct {
		spec    string
		n       int
		want    []float64
		wantErr string
	}{
		{spec: "", n: 2, want: nil},
		{spec: "0,85", n: 2, want: []float64{0, 85}},
		{spec: "50", n: 3, want: []float64{50, 50, 50}},
		{spec: " 10 , 20% ", n: 3, want: []float64{10, 20, 20}},
		{spec: "0,85,3", n: 2, wantErr: "3 values for 2 fake GPUs"},
		{spec: "101", n: 1, wantErr: "percentages 0 to 100"},
		{spec: "-1", n: 1, wantErr: "percentages 0 to 100"},
		{spec: "busy", n: 1, wantErr: "percentages 0 to 100"},
		{spec: "0,", n: 2, wantErr: "percentages 0 to 100"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			got, err := ParseFakeUtil(tt.spec, tt.n)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestSamplerFakeUtil(t *testing.T) {
	gpus, err := ParseFake("2xV100-32GB")
	if err != nil {
		t.Fatal(err)
	}
	s := NewSampler(nil, gpus)
	if got := s.Sample(); got[0].UtilPercent != 0 || got[1].UtilPercent != 0 {
		t.Errorf("unscripted fake GPUs read %+v, want 0 %%", got)
	}
	s.SetFakeUtil([]float64{0, 85})
	got := s.Sample()
	if len(got) != 2 || got[0].UtilPercent != 0 || got[0].MemoryUsedMiB != 0 || got[1].UtilPercent != 85 || got[1].MemoryUsedMiB != 27853 {
		t.Errorf("scripted 0,85: got %+v, want GPU 0 at 0 %% and GPU 1 at 85 %% with 27853 MiB", got)
	}
	if got := s.Sample(1); len(got) != 1 || got[0].UtilPercent != 85 {
		t.Errorf("Sample(1) = %+v", got)
	}
}
