package views

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
)

// The defects a new user's walk through the portal found (issue 17), one check each.

// A running job says how long it has run and how much of its maxDuration is left.
func TestJobPageRunClock(t *testing.T) {
	p := render(t, JobPage(detailView(job.StatusRunning)))
	if got := text(p.testID(nil, "job-running-for")); got != "3 min" {
		t.Errorf("running for %q, want 3 min", got)
	}
	if got := text(p.testID(nil, "job-time-left")); !strings.HasPrefix(got, "1 h 57 min") || !strings.Contains(got, "before maxDuration (2 hours)") {
		t.Errorf("time left %q", got)
	}
	// Its CPUs are ids, not a count.
	if got := text(p.testID(nil, "job-cpu-ids")); got != "#0, #1" {
		t.Errorf("CPU ids %q", got)
	}
	// The timeline: absolute times, and how long each state lasted (so far, for the last).
	steps := map[string]string{}
	for _, li := range all(p.testID(nil, "job-timeline"), byTag("li")) {
		steps[attrOf(li, "data-testid")] = text(li)
	}
	for id, want := range map[string]string{
		"timeline-QUEUED":   "2025-03-04 11:55:00 UTC queued for 1 min",
		"timeline-ASSIGNED": "starting took 1 min",
		"timeline-RUNNING":  "running for 3 min",
	} {
		if !strings.Contains(steps[id], want) {
			t.Errorf("%s says %q, want %q in it", id, steps[id], want)
		}
	}
	p.none(nil, "data-testid", "end-reason")
	if got := attrOf(p.id("job-log"), "data-placeholder"); got != "No output yet." {
		t.Errorf("running job's empty log says %q", got)
	}
}

// An ended job shows why next to its badge, was never placed, and writes no more output.
func TestJobPageEndedNeverPlaced(t *testing.T) {
	v := detailView(job.StatusFailed)
	v.Row.Job.State.EventTimes[job.StatusFailed] = now.Add(-2 * time.Minute)
	v.Events = append(v.Events[:1], store.Event{ID: 3, Time: now.Add(-2 * time.Minute), Kind: "status", FromStatus: "QUEUED", ToStatus: "FAILED",
		Actor: "scheduler", Message: "no cluster can ever run it: no slave has a GPU of model H100"})
	v.Timeline = Timeline(v.Row.Job.State.EventTimes)
	v.Log = LogView{JobUUID: uuidRunning}
	p := render(t, JobPage(v))
	reason := p.testID(nil, "end-reason")
	if !strings.Contains(text(reason), "no slave has a GPU of model H100") {
		t.Errorf("end reason %q", text(reason))
	}
	if ancestor(reason, func(n *html.Node) bool { return hasClass(n, "state-line") }) == nil {
		t.Errorf("the end reason is not next to the badge")
	}
	if got := text(p.testID(nil, "job-slave")); got != "never placed" {
		t.Errorf("slave of an ended, never placed job: %q", got)
	}
	if got := attrOf(p.id("job-log"), "data-placeholder"); got != "No output." {
		t.Errorf("ended job's empty log says %q", got)
	}
	p.none(nil, "data-testid", "job-running-for")
	if got := text(p.testID(nil, "timeline-QUEUED")); !strings.Contains(got, "queued for 3 min") {
		t.Errorf("queued step %q", got)
	}
	if got := text(p.testID(nil, "timeline-FAILED")); strings.Contains(got, " for ") || !strings.Contains(got, "11:58:00 UTC") {
		t.Errorf("failed step %q", got)
	}
	// A queued job not placed yet still says so.
	q := render(t, JobPage(detailView(job.StatusQueued)))
	if got := text(q.testID(nil, "job-slave")); got != "not placed yet" {
		t.Errorf("slave of a queued job: %q", got)
	}
}

// A queued job's expected start appears once, in one format, and the job it waits for is a
// link to that job's page.
func TestJobPageExpectedStartOnce(t *testing.T) {
	v := detailView(job.StatusQueued)
	start := now.Add(95 * time.Minute)
	v.EstimatedStart = &start
	v.EstimateRange = "likely 13:20–15:00"
	v.Explanations = []string{
		"no slave has 1 free GPU: node1's GPUs are held by job 1234abcd and job 5678ef90",
		"expected start " + start.Format(time.RFC3339) + " when job 1234abcd reaches its maxDuration",
	}
	p := render(t, JobPage(v))
	box := p.testID(nil, "job-explanation")
	boxText := text(box)
	if strings.Count(boxText, "xpected start") != 1 || strings.Contains(boxText, start.Format(time.RFC3339)) || strings.Contains(boxText, "13:35") {
		t.Errorf("expected start shown more than once or in two formats: %q", boxText)
	}
	got := text(p.testID(box, "job-estimated-start"))
	if want := "Expected start: likely 13:20–15:00 UTC (in 1 h 35 min) when job 1234abcd reaches its maxDuration"; got != want {
		t.Errorf("expected start\n got %q\nwant %q", got, want)
	}
	var links []string
	for _, a := range all(box, byAttr("data-testid", "explain-job-link")) {
		links = append(links, attrOf(a, "href")+"="+text(a))
	}
	if strings.Join(links, " ") != "/jobs/1234abcd=1234abcd /jobs/5678ef90=5678ef90 /jobs/1234abcd=1234abcd" {
		t.Errorf("job links %v", links)
	}
}

// The memory bar measures what its label says (free), and Job slots are explained.
func TestMetersShowFree(t *testing.T) {
	p := render(t, SlavesPage(SlavesView{Chrome: chrome(false, NavSlaves), Slaves: []SlaveView{{
		Name: "gpu1", Online: true, Accepting: true, MemoryGb: FreeTotal{Free: 21.5, Total: 23.5},
		CPUs: FreeTotal{Free: 4, Total: 16}, GPUsFree: FreeTotal{Free: 0, Total: 2}}}}))
	for id, want := range map[string]string{"slave-memory": "91", "slave-cpus": "25", "slave-gpus": "0"} {
		dd := p.testID(nil, id)
		m := all(dd, byTag("meter"))[0]
		if attrOf(m, "value") != want || !strings.Contains(text(dd), "free") || attrOf(m, "aria-label") != want+"% free" {
			t.Errorf("%s: meter %v with label %q, want %s%% free", id, m.Attr, text(dd), want)
		}
	}
	c := render(t, ClustersPage(ClustersView{Chrome: chrome(false, NavClusters), Clusters: []ClusterView{{ID: 1, Workers: FreeTotal{Free: 6, Total: 8}}}}))
	if !strings.Contains(text(c.testID(nil, "job-slots-legend")), "one job per CPU") {
		t.Errorf("job slots legend %q", text(c.testID(nil, "job-slots-legend")))
	}
	if abbr := all(c.root, byTag("abbr")); len(abbr) != 1 || !strings.Contains(attrOf(abbr[0], "title"), "one job per CPU") {
		t.Errorf("Job slots heading not explained")
	}
}

// The booking form starts from sensible values: one GPU (0, whole slaves, explained), from the
// next full hour for a day.
func TestBookingFormDefaults(t *testing.T) {
	c := chrome(true, NavReservations)
	c.Now = time.Date(2025, 3, 4, 12, 34, 0, 0, time.UTC)
	p := render(t, ReservationsPage(ReservationsView{Chrome: c, CanCreate: true, Clusters: []int{1}}))
	for id, want := range map[string]string{"res-gpus": "1", "res-start": "2025-03-04T13:00", "res-end": "2025-03-05T13:00"} {
		if got := attrOf(p.testID(nil, id), "value"); got != want {
			t.Errorf("%s defaults to %q, want %q", id, got, want)
		}
	}
	// With one GPU asked, a cluster is chosen at first (none, with no slaves named, books nothing).
	if opts := all(p.testID(nil, "res-cluster"), byTag("option")); len(opts) != 2 || attrOf(opts[0], "value") != "1" {
		t.Errorf("the booking form's first cluster choice is not cluster 1")
	}
	if hint := p.testID(nil, "res-gpus-hint"); !strings.Contains(text(hint), "whole slaves") || attrOf(p.testID(nil, "res-gpus"), "aria-describedby") != attrOf(hint, "id") {
		t.Errorf("GPUs hint %q not tied to its input", text(hint))
	}
}

// The job list pages: plain links to the newer and older pages that keep the filter, the live
// refresh keeps the page, and the scope tabs start again at the first page.
func TestJobsPager(t *testing.T) {
	v := JobsView{Chrome: chrome(false, NavJobs), Query: JobsQuery{State: "running", Page: 2}, More: true,
		Rows: []JobRow{{Job: testJob(uuidRunning, "train", job.StatusRunning), Full: true}}}
	p := render(t, JobsPage(v))
	if got := attrOf(p.testID(nil, "jobs-newer"), "href"); got != "/jobs?state=running" {
		t.Errorf("newer page link %q", got)
	}
	if got := attrOf(p.testID(nil, "jobs-older"), "href"); got != "/jobs?page=3&state=running" {
		t.Errorf("older page link %q", got)
	}
	if got := attrOf(p.id("job-list"), "hx-get"); got != "/jobs?page=2&state=running" {
		t.Errorf("the live refresh asks %q, not this page", got)
	}
	if got := attrOf(p.testID(nil, "scope-projects"), "href"); strings.Contains(got, "page=") {
		t.Errorf("scope tab keeps the page: %q", got)
	}
	// The first page, not full: no pager.
	v.Query.Page, v.More = 0, false
	render(t, JobsPage(v)).none(nil, "data-testid", "jobs-pager")
	// Past the end.
	v.Query.Page, v.Rows = 4, nil
	if got := text(render(t, JobsPage(v)).testID(nil, "jobs-empty")); !strings.Contains(got, "No older jobs") {
		t.Errorf("an empty later page says %q", got)
	}
}

// Without JavaScript the log's last line is a link away: the anchor sits after the log, inside
// its scrolling box.
func TestLogEndAnchor(t *testing.T) {
	p := render(t, JobPage(detailView(job.StatusRunning)))
	if got := attrOf(p.testID(nil, "log-end-link"), "href"); got != "#job-log-end" {
		t.Errorf("last line link %q", got)
	}
	if ancestor(p.id("job-log-end"), byAttr("id", "job-log-box")) == nil {
		t.Errorf("the log's end anchor is outside the log box")
	}
}
