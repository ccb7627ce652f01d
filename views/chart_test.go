package views

import (
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/store"
)

func TestScaleAndPath(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	s := Scale{Start: t0, End: t0.Add(100 * time.Second), Max: 100}
	if x := s.X(t0); x != plotX0 {
		t.Errorf("X(start) = %v, want %v", x, plotX0)
	}
	if x := s.X(t0.Add(200 * time.Second)); x != plotX1 {
		t.Errorf("X past the end = %v, want clamped to %v", x, plotX1)
	}
	if y := s.Y(0); y != plotY1 {
		t.Errorf("Y(0) = %v, want the bottom %v", y, plotY1)
	}
	if y := s.Y(100); y != plotY0 {
		t.Errorf("Y(max) = %v, want the top %v", y, plotY0)
	}
	if y := s.Y(150); y != plotY0 {
		t.Errorf("Y above max = %v, want clamped", y)
	}
	pt := func(sec int, v float64) ChartPoint {
		return ChartPoint{T: t0.Add(time.Duration(sec) * time.Second), V: v, Secs: 5}
	}
	tests := []struct {
		name string
		pts  []ChartPoint
		want string
	}{
		{"empty", nil, ""},
		{"one point gets a stub", []ChartPoint{pt(50, 50)}, "M344 68h1"},
		{"a line", []ChartPoint{pt(0, 0), pt(5, 100), pt(10, 50)}, "M56 128L84.8 8L113.6 68"},
		{"a gap breaks the line", []ChartPoint{pt(0, 0), pt(5, 0), pt(60, 100), pt(65, 100)}, "M56 128L84.8 128M401.6 8L430.4 8"},
	}
	for _, tt := range tests {
		if got := ChartPath(tt.pts, s); got != tt.want {
			t.Errorf("%s: path %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestNiceMaxAndThin(t *testing.T) {
	for in, want := range map[float64]float64{0: 1, 0.3: 0.5, 1: 1, 7: 10, 101: 200, 150: 200, 32768: 50000, 1900: 2000} {
		if got := NiceMax(in); got != want {
			t.Errorf("NiceMax(%v) = %v, want %v", in, got, want)
		}
	}
	t0 := time.Now()
	var pts []ChartPoint
	for i := range 3000 {
		pts = append(pts, ChartPoint{T: t0.Add(time.Duration(i) * 5 * time.Second), V: float64(i % 2 * 100), Secs: 5})
	}
	th := Thin(pts, 600)
	if len(th) != 600 {
		t.Fatalf("Thin kept %d points, want 600", len(th))
	}
	if th[0].V != 40 || th[1].V != 60 || th[0].Secs != 25 || !th[599].T.Equal(pts[2999].T) {
		t.Errorf("Thin averaged %+v … %+v, want 40 then 60 over 25 s each, ending at the last point", th[0], th[599])
	}
}

func TestUsageCharts(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	var pts []store.UsagePoint
	for i := range 10 {
		pts = append(pts, store.UsagePoint{Time: t0.Add(time.Duration(i) * 5 * time.Second), Secs: 5, CPUPercent: 150, MemoryMiB: 900,
			GPUs: []store.GPUSample{{Index: 0, UtilPercent: 0}, {Index: 1, UtilPercent: 85, MemoryUsedMiB: 27853}}})
	}
	cs := UsageCharts(pts, ChartLimits{CPUPercent: 200, MemoryMiB: 1024, GPUMemoryMiB: map[int]float64{0: 32768, 1: 32768}})
	if len(cs) != 4 || cs[0].ID != "chart-gpu-util" || cs[1].ID != "chart-gpu-mem" || cs[2].ID != "chart-cpu" || cs[3].ID != "chart-mem" {
		t.Fatalf("charts %+v", cs)
	}
	util := cs[0]
	if len(util.Series) != 2 || util.Series[0].Label != "GPU 0" || util.Series[0].Last != "0 %" || util.Series[1].Last != "85 %" {
		t.Errorf("utilisation series %+v", util.Series)
	}
	// GPU 0 lies flat on the bottom axis; GPU 1 flat at 85 %.
	if !strings.HasSuffix(util.Series[0].Path, " 128") || strings.Count(util.Series[0].Path, " 128") != 10 {
		t.Errorf("idle GPU path %q, want flat at y=128", util.Series[0].Path)
	}
	if y := cnum(Scale{Max: 100}.Y(85)); !strings.HasSuffix(util.Series[1].Path, " "+y) {
		t.Errorf("busy GPU path %q, want flat at y=%s", util.Series[1].Path, y)
	}
	if cs[1].YTicks[2].Label != "32 GiB" || cs[2].YTicks[2].Label != "200 %" || cs[3].Series[0].Last != "900 MiB" {
		t.Errorf("axes: GPU memory top %q, CPU top %q, memory last %q", cs[1].YTicks[2].Label, cs[2].YTicks[2].Label, cs[3].Series[0].Last)
	}
	if UsageCharts(nil, ChartLimits{}) != nil {
		t.Error("charts of no points")
	}
}
