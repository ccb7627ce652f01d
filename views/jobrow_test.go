package views

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a-h/templ"

	"github.com/opengpulab/gpulab/job"
)

var updateGolden = flag.Bool("update", false, "write the views' golden files anew from what they render now")

// TestJobRowsGolden renders the job list's row, the job's actions (as the job page has them),
// the state badge and the relative time for every state, for an owner, a project member and
// another project's viewer, with a name that needs escaping, idle GPUs and no slave, and
// compares the markup byte for byte with testdata/jobrows.golden.html. The golden file was
// written by the templ version of these components: the hand-written ones must match it.
// go test ./views -run TestJobRowsGolden -update writes it anew after a deliberate change.
func TestJobRowsGolden(t *testing.T) {
	ctx := context.Background()
	c := Chrome{UserName: "alice", CSRFToken: "tok+/=&\"<1>", Active: NavJobs, Now: now}
	var out bytes.Buffer
	emit := func(what string, comp templ.Component) {
		t.Helper()
		fmt.Fprintf(&out, "<!-- %s -->\n", what)
		if err := comp.Render(ctx, &out); err != nil {
			t.Fatalf("render %s: %v", what, err)
		}
		out.WriteString("\n")
	}
	for i, st := range job.AllStatuses {
		id := fmt.Sprintf("%08d-2222-4333-8444-555555555555", i)
		j := testJob(id, "train-"+strings.ToLower(string(st)), st)
		switch i % 3 {
		case 0:
			j.Name = `<b>"O'Neil" & co</b>`
		case 1:
			j.State.Scheduling.AssignedSlaveName = "node-7"
			j.Request.Resources.GPUs = 0
		}
		if st == job.StatusRunning {
			j.State.IdleGPUs = []int{0, 3}
		}
		if st == job.StatusQueued { // a day that is never today: the range reads the same every day
			a, b := now.Add(time.Hour), now.Add(3*time.Hour)
			j.State.Scheduling.EstimatedStartEarliest, j.State.Scheduling.EstimatedStartLatest = &a, &b
		}
		j.State.Created = now.Add(-time.Duration(i*i) * 37 * time.Minute)
		emit(string(st)+" owner", JobRowView(JobRow{Job: j, Full: true, CanTouch: true, User: "alice", Project: "demo & co"}, c))
		emit(string(st)+" member", JobRowView(JobRow{Job: j, Full: true, User: "bob", Project: "demo"}, c))
		emit(string(st)+" other project", JobRowView(JobRow{Job: j.Sanitized(), User: "hidden", Project: "hidden"}, c))
		emit(string(st)+" job page actions", JobActionsView(JobRow{Job: j, Full: true, CanTouch: true}, c, "#job-live", jobURL(id)))
		emit(string(st)+" badge", StatusBadge(st))
	}
	for _, d := range []time.Duration{0, 5 * time.Second, 42 * time.Second, 59 * time.Minute, 3 * time.Hour, 50 * time.Hour, -90 * time.Minute} {
		emit("time "+d.String(), TimeAgo(now.Add(-d), now))
	}
	path := filepath.Join("testdata", "jobrows.golden.html")
	if *updateGolden {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the golden file (go test ./views -run TestJobRowsGolden -update writes it): %v", err)
	}
	got := out.Bytes()
	if bytes.Equal(got, want) {
		return
	}
	gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(gl), len(wl)) {
		g, w := "", ""
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			t.Fatalf("line %d differs from %s:\ngot  %s\nwant %s", i+1, path, g, w)
		}
	}
}
