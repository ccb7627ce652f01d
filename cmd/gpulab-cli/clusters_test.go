package main

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// seedClustersShort is `gpulab-cli clusters --short` as imec's documentation prints it.
const seedClustersShort = `+---------+---------+----------------------+---------+---------+---------+-----------------+
| Cluster | Version | Host                 | Workers | GPUs    | CPUs    | Memory (GB)     |
+---------+---------+----------------------+---------+---------+---------+-----------------+
| 1       | stable  | gpu2                 |   2/2   |   2/2   |  16/16  |   31.18/31.18   |
| 1       | stable  | gpu1                 |   2/2   |   2/2   |  16/16  |   31.18/31.18   |
+---------+---------+----------------------+---------+---------+---------+-----------------+
`

const seedClusters = `[{"id": 1, "name": "main", "private": false, "slaves": [
  {"name": "gpu2", "host": "gpu2.example.org", "clusterId": 1, "version": "stable", "online": true,
   "workers": {"free": 2, "total": 2}, "gpus": {"free": 2, "total": 2}, "cpus": {"free": 16, "total": 16},
   "memoryGb": {"free": 31.18, "total": 31.18}, "gpuModels": ["Tesla V100-PCIE-32GB"], "cudaVersion": "12.2"},
  {"name": "gpu1", "host": "gpu1.example.org", "clusterId": 1, "version": "stable", "online": true,
   "workers": {"free": 2, "total": 2}, "gpus": {"free": 2, "total": 2}, "cpus": {"free": 16, "total": 16},
   "memoryGb": {"free": 31.18, "total": 31.18}, "gpuModels": ["GeForce GTX 1080 Ti"], "cudaVersion": "11.4"}
]},
{"id": 2, "name": "lab", "private": true, "slaves": [
  {"name": "fake7", "clusterId": 2, "version": "0.1.0", "fake": true, "online": true,
   "workers": {"free": 1, "total": 4}, "gpus": {"free": 0, "total": 2}, "cpus": {"free": 3, "total": 8},
   "memoryGb": {"free": 1.5, "total": 15.5}, "gpuModels": ["V100-32GB"], "cudaVersion": "12.0"},
  {"name": "gone", "clusterId": 2, "version": "0.1.0", "online": false,
   "workers": {"free": 0, "total": 1}, "gpus": {"free": 0, "total": 1}, "cpus": {"free": 0, "total": 4},
   "memoryGb": {"free": 0, "total": 8}, "futureField": [1, 2]}
]}]`

func TestClustersShortMatchesImecLayout(t *testing.T) {
	e := newTestEnv(t)
	e.m.set(func(m *fakeMaster) { m.clusters = seedClusters })
	delete(e.vars, "GPULAB_CERT") // clusters needs no certificate
	r := e.run("clusters", "--short", "1")
	if r.code != exitOK {
		t.Fatalf("clusters --short 1:\n%s", r)
	}
	if r.stdout != seedClustersShort {
		t.Errorf("clusters --short differs from imec's layout.\ngot:\n%s\nwant:\n%s", r.stdout, seedClustersShort)
	}
}

func TestClustersShortAllClusters(t *testing.T) {
	e := newTestEnv(t)
	e.m.set(func(m *fakeMaster) { m.clusters = seedClusters })
	r := e.run("cl", "-s")
	if r.code != exitOK {
		t.Fatalf("cl -s:\n%s", r)
	}
	assertTable(t, r.stdout, 3)
	if !strings.Contains(r.stdout, "| 2       | 0.1.0   | fake7                |   1/4   | 0/2 (fake) |   3/8   |    1.50/15.50   |") {
		t.Errorf("fake slave row missing or misformatted:\n%s", r.stdout)
	}
	if strings.Contains(r.stdout, "gone") {
		t.Errorf("offline slave shown without --all:\n%s", r.stdout)
	}
	r = e.run("clusters", "--short", "--all")
	if !strings.Contains(r.stdout, "gone (offline)") {
		t.Errorf("offline slave not shown with --all:\n%s", r)
	}
	r = e.run("clusters", "--short", "--no-lines", "1")
	if strings.Contains(r.stdout, "|") || strings.Contains(r.stdout, "+--") {
		t.Errorf("--no-lines still draws lines:\n%s", r.stdout)
	}
	if !strings.HasPrefix(r.stdout, "Cluster  Version  Host                  Workers  GPUs     CPUs     Memory (GB)\n") {
		t.Errorf("--no-lines header:\n%s", r.stdout)
	}
}

func TestClustersLong(t *testing.T) {
	e := newTestEnv(t)
	e.m.set(func(m *fakeMaster) { m.clusters = seedClusters })
	r := e.run("clusters")
	if r.code != exitOK {
		t.Fatalf("clusters:\n%s", r)
	}
	for _, want := range []string{
		"Cluster 1 (main)", "Cluster 2 (lab, private)",
		"Slave: gpu2", "Host: gpu2.example.org", "GPU model: Tesla V100-PCIE-32GB", "CUDA version: 12.2",
		"Memory (GB): 31.18/31.18 free", "GPUs: 0/2 free (fake GPUs", "GPU model: V100-32GB (fake)",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("clusters output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "gone") {
		t.Errorf("offline slave shown without --all:\n%s", r.stdout)
	}
}

func TestClustersFallsBackToSlaves(t *testing.T) {
	e := newTestEnv(t)
	e.m.set(func(m *fakeMaster) { m.clusters = `[{"id": 3, "name": "c3", "private": false, "slaves": []}]` })
	e.m.set(func(m *fakeMaster) {
		m.slaves = `[{"name": "s1", "clusterId": 3, "version": "1", "workers": {"free": 1, "total": 1},
		  "gpus": {"free": 1, "total": 1}, "cpus": {"free": 2, "total": 2}, "memoryGb": {"free": 4, "total": 4}}]`
	})
	r := e.run("clusters", "--short")
	if r.code != exitOK || !strings.Contains(r.stdout, "| 3       | 1       | s1 ") {
		t.Errorf("slaves from GET slaves not shown:\n%s", r)
	}
}

func TestClustersEmpty(t *testing.T) {
	e := newTestEnv(t)
	r := e.run("clusters", "--short")
	if r.code != exitOK {
		t.Fatalf("clusters --short with no slaves:\n%s", r)
	}
	assertTable(t, r.stdout, 0)
	r = e.run("clusters")
	if r.code != exitOK || !strings.Contains(r.stderr, "no clusters") {
		t.Errorf("clusters with none:\n%s", r)
	}
}

func TestClustersRaw(t *testing.T) {
	e := newTestEnv(t)
	e.m.set(func(m *fakeMaster) { m.clusters = seedClusters })
	r := e.run("clusters", "-r", "2")
	if r.code != exitOK || !strings.Contains(r.stdout, `"futureField"`) || strings.Contains(r.stdout, `"gpu1"`) {
		t.Errorf("clusters -r 2 must print cluster 2's JSON as sent:\n%s", r)
	}
}

// assertTable checks the structure of a bordered table: borders, header, rows, every line the
// same width with the column separators at the same places.
func assertTable(t *testing.T, out string, wantRows int) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != wantRows+4 {
		t.Fatalf("table has %d lines, want %d (3 borders, a header, %d rows):\n%s", len(lines), wantRows+4, wantRows, out)
	}
	border := lines[0]
	if !strings.HasPrefix(border, "+-") || lines[2] != border || lines[len(lines)-1] != border {
		t.Errorf("borders wrong:\n%s", out)
	}
	var seps []int
	for i, c := range border {
		if c == '+' {
			seps = append(seps, i)
		}
	}
	for _, l := range append([]string{lines[1]}, lines[3:len(lines)-1]...) {
		if utf8.RuneCountInString(l) != utf8.RuneCountInString(border) {
			t.Errorf("line width %d differs from border width %d:\n%s\n%s", utf8.RuneCountInString(l), utf8.RuneCountInString(border), l, border)
			continue
		}
		runes := []rune(l)
		for _, s := range seps {
			if runes[s] != '|' {
				t.Errorf("column separator missing at %d:\n%s\n%s", s, l, border)
			}
		}
	}
}

func TestPad(t *testing.T) {
	tests := []struct {
		s     string
		width int
		a     align
		want  string
	}{
		{"2/2", 7, alignCenter, "  2/2  "},
		{"16/16", 7, alignCenter, " 16/16 "},
		{"31.18/31.18", 15, alignCenter, "  31.18/31.18  "},
		{"ab", 5, alignCenter, "  ab "}, // as Python's "ab".center(5)
		{"abc", 6, alignCenter, " abc  "},
		{"x", 3, alignLeft, "x  "},
		{"toolong", 3, alignLeft, "toolong"},
	}
	for _, tt := range tests {
		if got := pad(tt.s, tt.width, tt.a); got != tt.want {
			t.Errorf("pad(%q, %d) = %q, want %q", tt.s, tt.width, got, tt.want)
		}
	}
}
