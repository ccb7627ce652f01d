package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a-h/templ"
	"github.com/chromedp/chromedp"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/static"
	"github.com/opengpulab/gpulab/store"
	"github.com/opengpulab/gpulab/views"
)

// The portal's pages rendered with fixed data (no master, no slave) in headless Chromium: what
// only a browser can tell, the log tail that follows new lines and the phone layout, plus a
// screenshot of each page at 1280 and 390 px (under GPULAB_SCREENS when set, else the test's
// output folder).

const (
	walkRunning = "11111111-2222-4333-8444-555555555555"
	walkFailed  = "22222222-2222-4333-8444-555555555555"
	walkQueued  = "33333333-2222-4333-8444-555555555555"
)

// walkJob is a job of the fixed data.
func walkJob(id, name string, st job.Status, now time.Time) *job.Job {
	j := &job.Job{UUID: id, Name: name, Request: job.Request{
		Resources:  job.Resources{CPUs: 2, GPUs: 1, CPUMemoryGb: 8},
		Docker:     job.Docker{Image: "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime", Command: job.Command{Text: "python train.py --epochs 500"}},
		Scheduling: job.Scheduling{MinDuration: job.Duration(time.Hour), MaxDuration: job.Duration(4 * time.Hour)},
	}}
	j.State = job.State{Status: st, Created: now.Add(-47 * time.Minute), Updated: now.Add(-2 * time.Minute),
		EventTimes: map[job.Status]time.Time{job.StatusQueued: now.Add(-47 * time.Minute)}}
	switch st {
	case job.StatusRunning:
		j.State.EventTimes[job.StatusAssigned] = now.Add(-45 * time.Minute)
		j.State.EventTimes[job.StatusStarting] = now.Add(-44 * time.Minute)
		j.State.EventTimes[job.StatusRunning] = now.Add(-44 * time.Minute)
		j.State.Scheduling.AssignedSlaveName = "gpu1"
		j.State.Resources = &job.StateResources{SlaveName: "gpu1", SlaveHost: "gpu1.example.org", GPUIDs: []int{0}, CPUIDs: []int{0}}
	case job.StatusFailed:
		j.State.EventTimes[job.StatusFailed] = now.Add(-39 * time.Minute)
	case job.StatusQueued:
		start := now.Add(95 * time.Minute)
		j.State.Scheduling.EstimatedStart = &start
		j.State.Scheduling.QueuedExplanations = []string{
			"no slave has 1 free GPU: gpu1's GPU is held by job " + walkRunning[:8] + " (train-resnet) until at most " + now.Add(3*time.Hour).UTC().Format("15:04") + " UTC",
			"expected start " + start.UTC().Format(time.RFC3339) + " when job " + walkRunning[:8] + " reaches its maxDuration",
		}
	}
	return j
}

// walkSite serves the portal's pages with fixed data, and a log that grows by a line at each
// request of the live tail.
type walkSite struct {
	now  time.Time
	mu   sync.Mutex
	log  strings.Builder
	tail int // lines of the log so far
}

func newWalkSite(now time.Time) *walkSite {
	s := &walkSite{now: now}
	s.addLines(120)
	return s
}

func (s *walkSite) addLines(n int) {
	for range n {
		s.tail++
		fmt.Fprintf(&s.log, "epoch %d: loss %.4f\n", s.tail, 2.0/float64(s.tail))
	}
}

func (s *walkSite) lines() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tail
}

func (s *walkSite) chrome(active string) views.Chrome {
	return views.Chrome{UserName: "alice", Admin: true, CSRFToken: "tok", Active: active, Now: s.now}
}

func (s *walkSite) row(j *job.Job) views.JobRow {
	return views.JobRow{Job: j, Full: true, CanTouch: true, User: "alice", Project: "vision"}
}

func (s *walkSite) detail(j *job.Job, evs []store.Event) views.JobDetailView {
	req, _ := json.MarshalIndent(job.Submission(j), "", "  ")
	v := views.JobDetailView{Chrome: s.chrome(views.NavJobs), Row: s.row(j), Timeline: views.Timeline(j.State.EventTimes),
		Events: evs, RequestJSON: string(req)}
	v.Log = views.LogView{JobUUID: j.UUID, Follow: !j.State.Status.Ended()}
	if j.State.Status == job.StatusQueued {
		v.Explanations = j.State.Scheduling.QueuedExplanations
		v.EstimatedStart = j.State.Scheduling.EstimatedStart
		v.EstimateRange = "likely " + s.now.Add(80*time.Minute).UTC().Format("15:04") + "–" + s.now.Add(3*time.Hour).UTC().Format("15:04")
	}
	return v
}

func (s *walkSite) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(static.Prefix, static.Handler())
	page := func(path string, c func(r *http.Request) templ.Component) {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			if err := c(r).Render(r.Context(), w); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
			}
		})
	}
	running := walkJob(walkRunning, "train-resnet", job.StatusRunning, s.now)
	failed := walkJob(walkFailed, "broken-image", job.StatusFailed, s.now)
	queued := walkJob(walkQueued, "train-vit", job.StatusQueued, s.now)
	page("GET /jobs/"+walkRunning, func(r *http.Request) templ.Component {
		v := s.detail(running, nil)
		if r.Header.Get("HX-Request") != "" {
			return views.JobLive(v)
		}
		s.mu.Lock()
		v.Log = views.LogView{JobUUID: walkRunning, Text: s.log.String(), Offset: int64(s.log.Len()), Follow: true}
		s.mu.Unlock()
		return views.JobPage(v)
	})
	mux.HandleFunc("GET /jobs/"+walkRunning+"/log", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		var from int64
		fmt.Sscanf(r.Header.Get("Range"), "bytes=%d-", &from)
		s.addLines(5)
		text := s.log.String()[from:]
		next := views.LogView{JobUUID: walkRunning, Offset: int64(s.log.Len()), Follow: true}
		s.mu.Unlock()
		_ = views.LogChunk(text, next).Render(r.Context(), w)
	})
	mux.HandleFunc("GET /jobs/{id}/log", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	page("GET /jobs/"+walkFailed, func(*http.Request) templ.Component {
		v := s.detail(failed, []store.Event{
			{Time: s.now.Add(-47 * time.Minute), Kind: "status", ToStatus: "QUEUED", Actor: "alice", Message: "submitted by alice"},
			{Time: s.now.Add(-39 * time.Minute), Kind: "status", FromStatus: "QUEUED", ToStatus: "FAILED", Actor: "scheduler",
				Message: "no cluster can ever run it: it asks 1 GPU of model H100, and no slave has one"},
		})
		return views.JobPage(v)
	})
	page("GET /jobs/"+walkQueued, func(*http.Request) templ.Component { return views.JobPage(s.detail(queued, nil)) })
	page("GET /jobs", func(*http.Request) templ.Component {
		v := views.JobsView{Chrome: s.chrome(views.NavJobs), More: true} // a full page: 25 of 30
		for i := range 25 {
			st := []job.Status{job.StatusFinished, job.StatusRunning, job.StatusQueued, job.StatusFailed}[i%4]
			j := walkJob(fmt.Sprintf("%08d-2222-4333-8444-555555555555", i+10), fmt.Sprintf("experiment-%02d", i), st, s.now)
			v.Rows = append(v.Rows, s.row(j))
		}
		return views.JobsPage(v)
	})
	hb := s.now.Add(-3 * time.Second)
	slaves := views.SlavesView{Chrome: s.chrome(views.NavSlaves), Slaves: []views.SlaveView{{
		Name: "gpu1", Host: "gpu1.example.org", ClusterID: 1, ClusterName: "main", Online: true, Accepting: true, LastHeartbeat: &hb,
		Version: "dev", CudaVersion: "12.4", Fake: true,
		CPUs: views.FreeTotal{Free: 14, Total: 16}, MemoryGb: views.FreeTotal{Free: 21.5, Total: 23.5}, GPUsFree: views.FreeTotal{Free: 1, Total: 2},
		GPUs: []views.GPUView{
			{Index: 0, Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Fake: true, Util: "93 %", Job: &views.JobRef{UUID: walkRunning, Name: "train-resnet-with-a-long-name", Link: true}},
			{Index: 1, Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Fake: true, Util: "0 %"},
		},
	}}}
	page("GET /live/slaves", func(*http.Request) templ.Component { return views.SlavesPage(slaves) })
	page("GET /live/clusters", func(*http.Request) templ.Component {
		return views.ClustersPage(views.ClustersView{Chrome: s.chrome(views.NavClusters), Clusters: []views.ClusterView{{
			ID: 1, Name: "main", Description: "the lab's GPU machines", Slaves: 2, OnlineSlaves: 2,
			Workers: views.FreeTotal{Free: 6, Total: 8}, GPUs: views.FreeTotal{Free: 1, Total: 4}, CPUs: views.FreeTotal{Free: 28, Total: 32},
			MemoryGb: views.FreeTotal{Free: 21.5, Total: 23.5}, GPUModels: []string{"NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-32GB"},
		}}})
	})
	page("GET /jobs/new", func(*http.Request) templ.Component {
		return views.JobFormPage(views.JobFormView{Chrome: s.chrome(views.NavCreate),
			Form:     views.JobForm{CPUs: "1", GPUs: walkGPUDefault, CPUMemoryGb: "2"},
			JSON:     walkEditor,
			Projects: []views.Choice{{Value: "urn:publicid:IDN+gpulab+project+vision", Label: "vision"}},
			Clusters: []views.Choice{{Value: "1", Label: "1 – main"}}})
	})
	page("GET /reservations", func(*http.Request) templ.Component {
		return views.ReservationsPage(views.ReservationsView{Chrome: s.chrome(views.NavReservations), Days: views.CalendarDays(s.now, 14),
			CanCreate: true, Clusters: []int{1},
			Rows: []views.ReservationRow{{ID: "44444444-2222-4333-8444-555555555555", Name: "thesis deadline", Resources: "2 GPUs of cluster 1",
				Holders: "users alice", Start: s.now.Add(24 * time.Hour), End: s.now.Add(72 * time.Hour), Mine: true, CanDelete: true}}})
	})
	page("GET /admin", func(*http.Request) templ.Component {
		return views.AdminPage(views.AdminView{Chrome: s.chrome(views.NavAdmin), SelfID: 1,
			Users: []store.User{{ID: 1, Name: "alice", URN: "urn:publicid:IDN+gpulab+user+alice", Email: "alice@example.org", IsAdmin: true, CreatedAt: s.now.Add(-48 * time.Hour)},
				{ID: 2, Name: "bob", URN: "urn:publicid:IDN+gpulab+user+bob", Email: "bob@example.org", CreatedAt: s.now.Add(-24 * time.Hour)}},
			Clusters: []views.AdminCluster{{Cluster: store.Cluster{ID: 1, Name: "main"}}},
			Slaves:   []views.AdminSlave{{Name: "gpu1-with-a-long-host-name", ClusterID: 1, Online: true, Accepting: true, LastHeartbeat: &hb}},
		})
	})
	for _, extra := range walkExtras {
		page("GET "+extra.path, func(*http.Request) templ.Component { return extra.page(s) })
	}
	return mux
}

// walkExtras are pages a later change added to the walk (in files of their own, so that the
// walk still runs against the portal before them, for "before" screenshots).
var walkExtras []walkExtra

type walkExtra struct {
	name, path string
	page       func(*walkSite) templ.Component
}

// What the Create Job page shows at first: one GPU, the editor laid out (as the handler
// gives them since issue 17).
const (
	walkGPUDefault = "1"
	walkEditor     = `{
  "name": "",
  "request": {
    "resources": {
      "cpus": 1,
      "gpus": 1,
      "cpuMemoryGb": 2
    },
    "docker": {
      "image": "",
      "command": ""
    }
  }
}`
)

// walkPages are the pages the walk visits, by screenshot name.
var walkPages = []struct{ name, path string }{
	{"job-running", "/jobs/" + walkRunning},
	{"job-failed", "/jobs/" + walkFailed},
	{"job-queued", "/jobs/" + walkQueued},
	{"jobs", "/jobs"},
	{"live-slaves", "/live/slaves"},
	{"live-clusters", "/live/clusters"},
	{"create-job", "/jobs/new"},
	{"reservations", "/reservations"},
	{"admin", "/admin"},
}

// screensDir is where the walk's screenshots go.
func screensDir(t *testing.T) string {
	if d := os.Getenv("GPULAB_SCREENS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return testenv.OutputDir(t)
}

func screenshot(t *testing.T, ctx context.Context, file string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", file, err)
	}
	if err := os.WriteFile(file, png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPortalWalkScreens loads every page at 1280 and 390 px and saves a screenshot of each.
func TestPortalWalkScreens(t *testing.T) {
	srv := httptest.NewServer(newWalkSite(time.Now()).handler())
	t.Cleanup(srv.Close)
	ctx := testenv.Browser(t)
	dir := screensDir(t)
	pages := walkPages
	for _, x := range walkExtras {
		pages = append(pages, struct{ name, path string }{x.name, x.path})
	}
	for _, width := range []int64{1280, 390} {
		for _, pg := range pages {
			run(t, ctx, viewport(width), testenv.Navigate(srv.URL+pg.path), chromedp.WaitVisible(chromedp.CSS("main")))
			screenshot(t, ctx, filepath.Join(dir, fmt.Sprintf("%s-%d.png", pg.name, width)))
		}
	}
}

// viewport emulates a desktop window of the width, or a phone under 600 px.
func viewport(width int64) chromedp.Action[chromedp.Void] {
	if width < 600 {
		return chromedp.EmulateViewport(width, 844, chromedp.EmulateMobile)
	}
	return chromedp.EmulateViewport(width, 900)
}

// run runs browser steps with the tests' time limit.
func run(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, testenv.WaitTimeout)
	defer cancel()
	if err := chromedp.Do(c, steps...); err != nil {
		t.Fatalf("browser: %v", err)
	}
}

// evalBool evaluates a JavaScript expression that yields a boolean.
func evalBool(t *testing.T, ctx context.Context, js string) bool {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, testenv.WaitTimeout)
	defer cancel()
	ok, err := chromedp.Run(c, chromedp.Evaluate[bool](js))
	if err != nil {
		t.Fatalf("eval %s: %v", js, err)
	}
	return ok
}

// waitTrue waits until a JavaScript expression is true.
func waitTrue(t *testing.T, ctx context.Context, what, js string) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for time.Now().Before(deadline) {
		if evalBool(t, ctx, js) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	testenv.Screenshot(t, ctx, "failure")
	t.Fatalf("%s: not within %s (%s)", what, waitLimit, js)
}

// TestPortalLogFollowsTail: a running job's log opens at its last line and stays there as
// lines arrive, until the reader scrolls up; then it stays where he is.
func TestPortalLogFollowsTail(t *testing.T) {
	site := newWalkSite(time.Now())
	srv := httptest.NewServer(site.handler())
	t.Cleanup(srv.Close)
	ctx := testenv.Browser(t)
	run(t, ctx, viewport(1280), testenv.Navigate(srv.URL+"/jobs/"+walkRunning), chromedp.WaitVisible(chromedp.ID("job-log")))
	const box = `document.getElementById("job-log-box")`
	const bottom = `(b => b.scrollHeight - b.scrollTop - b.clientHeight <= 30)(` + box + `)`
	if !evalBool(t, ctx, box+`.scrollHeight > `+box+`.clientHeight + 100`) {
		t.Fatal("the log does not overflow its box: the test shows nothing")
	}
	waitTrue(t, ctx, "log opens at its tail", bottom)
	waitTrue(t, ctx, "new lines arrive", `document.getElementById("job-log").textContent.includes("epoch 130:")`)
	waitTrue(t, ctx, "the log follows the new lines", bottom)
	if !evalBool(t, ctx, `document.getElementById("job-log").textContent.trimEnd().split("\n").pop().startsWith("epoch ")`) {
		t.Error("log's last line is not a log line")
	}

	// The reader scrolls up: new lines arrive, the view stays where he put it.
	evalBool(t, ctx, `(b => { b.scrollTop = 0; b.dispatchEvent(new Event("scroll")); return true })(`+box+`)`)
	waitTrue(t, ctx, "scrolled up", box+`.dataset.following === "false"`)
	waitTrue(t, ctx, "more lines arrive", `document.getElementById("job-log").textContent.includes("epoch 145:")`)
	if !evalBool(t, ctx, box+`.scrollTop < 5`) {
		t.Error("the log jumped to its tail although the reader had scrolled up")
	}
	// Back at the bottom, it follows again.
	evalBool(t, ctx, `(b => { b.scrollTop = b.scrollHeight; b.dispatchEvent(new Event("scroll")); return true })(`+box+`)`)
	waitTrue(t, ctx, "following again", box+`.dataset.following === "true"`)
	n := site.lines()
	waitTrue(t, ctx, "lines after the return", fmt.Sprintf(`document.getElementById("job-log").textContent.includes("epoch %d:")`, n+5))
	waitTrue(t, ctx, "the log follows again", bottom)
	if got := evalBool(t, ctx, `document.querySelector('[data-testid="job-running-for"]') !== null && document.querySelector('[data-testid="job-time-left"]') !== null`); !got {
		t.Error("the running job shows no running-for or time-left")
	}
}

// TestPortalPhoneNoSidewaysScroll: at 390 px no page is wider than the screen, and no table
// is cut off at the right edge of its wrapper (they stack; the calendar keeps its names in view).
func TestPortalPhoneNoSidewaysScroll(t *testing.T) {
	srv := httptest.NewServer(newWalkSite(time.Now()).handler())
	t.Cleanup(srv.Close)
	ctx := testenv.Browser(t)
	for _, pg := range walkPages {
		run(t, ctx, viewport(390), testenv.Navigate(srv.URL+pg.path), chromedp.WaitVisible(chromedp.CSS("main")))
		c, cancel := context.WithTimeout(ctx, testenv.WaitTimeout)
		wide, err := chromedp.Run(c, chromedp.Evaluate[string](`(() => {
			const w = document.documentElement.clientWidth;
			const cut = [];
			for (const wrap of document.querySelectorAll(".table-wrap")) {
				if (wrap.querySelector("table.calendar")) continue; // scrolls its days, its first column sticky
				if (wrap.scrollWidth > wrap.clientWidth + 1) cut.push((wrap.querySelector("table").dataset.testid || wrap.querySelector("table").className) + " " + wrap.scrollWidth + ">" + wrap.clientWidth);
			}
			if (cut.length) return "tables cut off (scroll inside): " + cut.join("; ");
			if (document.documentElement.scrollWidth <= w) return "";
			const out = [];
			for (const el of document.querySelectorAll("body *")) {
				const r = el.getBoundingClientRect();
				if (r.right > w + 1 && !el.closest(".table-wrap, .log-box, pre")) out.push(el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") + "." + el.className + " right=" + Math.round(r.right));
			}
			return "page " + document.documentElement.scrollWidth + " px wide: " + out.slice(0, 8).join("; ");
		})()`))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if wide != "" {
			t.Errorf("%s at 390 px: %s", pg.name, wide)
		}
	}
}
