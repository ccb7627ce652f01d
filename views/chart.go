package views

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/opengpulab/gpulab/store"
)

// Chart geometry: the plot area inside the SVG's viewBox, room left for the axis labels.
const (
	chartW, chartH       = 640.0, 150.0
	plotX0, plotY0       = 56.0, 8.0
	plotX1, plotY1       = chartW - 8, chartH - 22
	chartMaxVerticesHint = 600 // more points than this are thinned to one per pixel column
)

// seriesColors are the colours of a chart's lines, in order (GPU 0, GPU 1, …).
var seriesColors = []string{"#2563eb", "#16a34a", "#db2777", "#ea580c", "#7c3aed", "#0891b2", "#ca8a04", "#475569"}

// JobUsageView is the Usage card of the job page: the verdict and the charts.
type JobUsageView struct {
	Verdict string
	// IdleGPUs are the GPUs the master flagged idle (the card then shows a warning).
	IdleGPUs []int
	Charts   []ChartView
}

// ChartView is one chart ready to draw: SVG paths in viewBox coordinates and the labels.
type ChartView struct {
	ID     string // stable, for tests: chart-gpu-util, chart-gpu-mem, chart-cpu, chart-mem
	Title  string
	Series []SeriesView
	YTicks []Tick
	XTicks []Tick
}

// SeriesView is one line of a chart.
type SeriesView struct {
	Label string
	Color string
	Path  string // SVG path data; empty when the series has no point
	Last  string // the latest value as shown in the legend
}

// Tick is an axis label at a position in viewBox coordinates.
type Tick struct {
	Pos   float64
	Label string
}

// ChartPoint is one value of a series at a time.
type ChartPoint struct {
	T    time.Time
	V    float64
	Secs float64 // the time the point stands for: a longer silence than a few of these is a gap
}

// Scale maps times and values into the plot area.
type Scale struct {
	Start, End time.Time
	Max        float64
}

// X is the horizontal position of t.
func (s Scale) X(t time.Time) float64 {
	span := s.End.Sub(s.Start).Seconds()
	if span <= 0 {
		return plotX1
	}
	f := t.Sub(s.Start).Seconds() / span
	return plotX0 + math.Max(0, math.Min(1, f))*(plotX1-plotX0)
}

// Y is the vertical position of v (0 at the bottom, Max at the top; clamped).
func (s Scale) Y(v float64) float64 {
	if s.Max <= 0 {
		return plotY1
	}
	f := math.Max(0, math.Min(1, v/s.Max))
	return plotY1 - f*(plotY1-plotY0)
}

// ChartPath is the SVG path of pts on scale s: a line through the points, broken where the
// series has a gap (a silence longer than three of its points: the job was halted, the slave
// lost), a single point drawn as a short tick so it shows.
func ChartPath(pts []ChartPoint, s Scale) string {
	var b strings.Builder
	for i, p := range pts {
		x, y := s.X(p.T), s.Y(p.V)
		gap := i == 0
		if i > 0 {
			prev := pts[i-1]
			gap = p.T.Sub(prev.T).Seconds() > 3*math.Max(math.Max(prev.Secs, p.Secs), 1)
		}
		if gap {
			fmt.Fprintf(&b, "M%s %s", cnum(x), cnum(y))
			// A lone point gets a stub of a pixel to be visible.
			if i == len(pts)-1 || pts[i+1].T.Sub(p.T).Seconds() > 3*math.Max(math.Max(p.Secs, pts[i+1].Secs), 1) {
				fmt.Fprintf(&b, "h1")
			}
			continue
		}
		fmt.Fprintf(&b, "L%s %s", cnum(x), cnum(y))
	}
	return b.String()
}

func cnum(v float64) string { return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) }

// NiceMax is the top of an axis for values up to v: 1, 2 or 5 times a power of ten, at least v
// (0 for nothing becomes 1, so an all-zero series lies on the bottom axis).
func NiceMax(v float64) float64 {
	if v <= 0 || math.IsNaN(v) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// Thin keeps at most n points, averaging runs of neighbours (weighted by what they stand for),
// so a long series draws as at most one vertex per pixel column.
func Thin(pts []ChartPoint, n int) []ChartPoint {
	if n <= 0 || len(pts) <= n {
		return pts
	}
	per := int(math.Ceil(float64(len(pts)) / float64(n)))
	out := make([]ChartPoint, 0, n)
	for i := 0; i < len(pts); i += per {
		run := pts[i:min(i+per, len(pts))]
		var sum, secs float64
		for _, p := range run {
			w := math.Max(p.Secs, 1e-9)
			sum += p.V * w
			secs += w
		}
		out = append(out, ChartPoint{T: run[len(run)-1].T, V: sum / secs, Secs: secs})
	}
	return out
}

// yTicks are the labels of the value axis: 0, half and the top.
func yTicks(s Scale, format func(float64) string) []Tick {
	return []Tick{{Pos: s.Y(0), Label: format(0)}, {Pos: s.Y(s.Max / 2), Label: format(s.Max / 2)}, {Pos: s.Y(s.Max), Label: format(s.Max)}}
}

// xTicks label the start and the end of the time axis, and the middle.
func xTicks(s Scale) []Tick {
	f := "15:04"
	if s.End.Sub(s.Start) > 24*time.Hour {
		f = "Jan 2 15:04"
	} else if s.End.Sub(s.Start) < 10*time.Minute {
		f = "15:04:05"
	}
	mid := s.Start.Add(s.End.Sub(s.Start) / 2)
	return []Tick{{Pos: s.X(s.Start), Label: s.Start.UTC().Format(f)}, {Pos: s.X(mid), Label: mid.UTC().Format(f)},
		{Pos: s.X(s.End), Label: s.End.UTC().Format(f) + " UTC"}}
}

// ChartLimits are the tops of the axes that the job's resources give (0: scale to the data).
type ChartLimits struct {
	CPUPercent   float64         // the job's CPUs × 100
	MemoryMiB    float64         // the job's memory
	GPUMemoryMiB map[int]float64 // each GPU's memory
}

// UsageCharts builds the four charts of a job's usage series: GPU utilisation per GPU (0-100 %),
// GPU memory per GPU, CPU and memory.
func UsageCharts(pts []store.UsagePoint, lim ChartLimits) []ChartView {
	if len(pts) == 0 {
		return nil
	}
	s := Scale{Start: pts[0].Time.Add(-time.Duration(pts[0].Secs * float64(time.Second))), End: pts[len(pts)-1].Time}
	var gpus []int
	util, gmem := map[int][]ChartPoint{}, map[int][]ChartPoint{}
	var cpu, mem []ChartPoint
	for _, p := range pts {
		cpu = append(cpu, ChartPoint{T: p.Time, V: p.CPUPercent, Secs: p.Secs})
		mem = append(mem, ChartPoint{T: p.Time, V: float64(p.MemoryMiB), Secs: p.Secs})
		for _, g := range p.GPUs {
			if _, ok := util[g.Index]; !ok {
				gpus = append(gpus, g.Index)
			}
			util[g.Index] = append(util[g.Index], ChartPoint{T: p.Time, V: g.UtilPercent, Secs: p.Secs})
			gmem[g.Index] = append(gmem[g.Index], ChartPoint{T: p.Time, V: float64(g.MemoryUsedMiB), Secs: p.Secs})
		}
	}
	pct := func(v float64) string { return strconv.FormatFloat(math.Round(v), 'f', -1, 64) + " %" }
	var out []ChartView
	if len(gpus) > 0 {
		us := s
		us.Max = 100
		var gmMax float64
		for _, i := range gpus {
			gmMax = math.Max(gmMax, maxV(gmem[i]))
		}
		ms := s
		ms.Max = axisMax(maxLimit(lim.GPUMemoryMiB), gmMax)
		u := ChartView{ID: "chart-gpu-util", Title: "GPU utilisation", YTicks: yTicks(us, pct), XTicks: xTicks(s)}
		m := ChartView{ID: "chart-gpu-mem", Title: "GPU memory", YTicks: yTicks(ms, mib), XTicks: xTicks(s)}
		for k, i := range gpus {
			color := seriesColors[k%len(seriesColors)]
			label := "GPU " + strconv.Itoa(i)
			u.Series = append(u.Series, SeriesView{Label: label, Color: color, Path: ChartPath(Thin(util[i], chartMaxVerticesHint), us),
				Last: pct(util[i][len(util[i])-1].V)})
			m.Series = append(m.Series, SeriesView{Label: label, Color: color, Path: ChartPath(Thin(gmem[i], chartMaxVerticesHint), ms),
				Last: mib(gmem[i][len(gmem[i])-1].V)})
		}
		out = append(out, u, m)
	}
	cs := s
	cs.Max = axisMax(lim.CPUPercent, maxV(cpu))
	out = append(out, ChartView{ID: "chart-cpu", Title: "CPU (100 % = one CPU)", YTicks: yTicks(cs, pct), XTicks: xTicks(s),
		Series: []SeriesView{{Label: "CPU", Color: seriesColors[0], Path: ChartPath(Thin(cpu, chartMaxVerticesHint), cs), Last: pct(cpu[len(cpu)-1].V)}}})
	mm := s
	mm.Max = axisMax(lim.MemoryMiB, maxV(mem))
	out = append(out, ChartView{ID: "chart-mem", Title: "Memory", YTicks: yTicks(mm, mib), XTicks: xTicks(s),
		Series: []SeriesView{{Label: "Memory", Color: seriesColors[1], Path: ChartPath(Thin(mem, chartMaxVerticesHint), mm), Last: mib(mem[len(mem)-1].V)}}})
	return out
}

func maxV(pts []ChartPoint) float64 {
	m := 0.0
	for _, p := range pts {
		m = math.Max(m, p.V)
	}
	return m
}

// mib writes a memory size given in MiB: "512 MiB", "27.2 GiB".
func mib(v float64) string {
	if v >= 1024 {
		return strconv.FormatFloat(math.Round(v/1024*10)/10, 'f', -1, 64) + " GiB"
	}
	return strconv.FormatFloat(math.Round(v), 'f', -1, 64) + " MiB"
}

// chartViewBox is the SVG viewBox of every chart.
func chartViewBox() string { return fmt.Sprintf("0 0 %d %d", int(chartW), int(chartH)) }

func fpos(v float64) string { return cnum(v) }

// xAnchor keeps the first and last time labels inside the chart.
func xAnchor(i, n int) string {
	switch i {
	case 0:
		return "start"
	case n - 1:
		return "end"
	}
	return "middle"
}

func idleVerb(gpus []int) string {
	if len(gpus) == 1 {
		return "is"
	}
	return "are"
}

func idlePronoun(gpus []int) string {
	if len(gpus) == 1 {
		return "it"
	}
	return "them"
}

// axisMax is the top of an axis: what the job holds (limit) when the data stays within it, so a
// full line means a full GPU or all its memory; else a nice number above the data.
func axisMax(limit, data float64) float64 {
	if limit > 0 && data <= limit {
		return limit
	}
	return NiceMax(math.Max(limit, data))
}

func maxLimit(m map[int]float64) float64 {
	v := 0.0
	for _, x := range m {
		v = math.Max(v, x)
	}
	return v
}
