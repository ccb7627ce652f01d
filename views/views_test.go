package views

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
)

var now = time.Date(2025, 3, 4, 12, 0, 0, 0, time.UTC)

const (
	uuidRunning = "11111111-2222-4333-8444-555555555555"
	uuidQueued  = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"
	uuidOther   = "99999999-8888-4777-8666-555555555555"
	token       = "tok-123"
)

func chrome(admin bool, active string) Chrome {
	return Chrome{UserName: "alice", Admin: admin, CSRFToken: token, Active: active, Now: now}
}

func testJob(id, name string, st job.Status) *job.Job {
	exit := 0
	j := &job.Job{UUID: id, Name: name, Request: job.Request{
		Resources:  job.Resources{CPUs: 2, GPUs: 1, CPUMemoryGb: 8},
		Docker:     job.Docker{Image: "debian:stable", Command: job.Command{Text: "echo hi"}, PortMappings: []job.PortMapping{{ContainerPort: 8888}}},
		Scheduling: job.Scheduling{Interactive: true, MinDuration: job.Duration(time.Hour), MaxDuration: job.Duration(2 * time.Hour)},
	}}
	j.State = job.State{Status: st, Created: now.Add(-5 * time.Minute), Updated: now.Add(-time.Minute),
		EventTimes: map[job.Status]time.Time{job.StatusQueued: now.Add(-5 * time.Minute)}}
	if st == job.StatusRunning || st == job.StatusFinished {
		j.State.EventTimes[job.StatusAssigned] = now.Add(-4 * time.Minute)
		j.State.EventTimes[job.StatusRunning] = now.Add(-3 * time.Minute)
		j.State.Scheduling.AssignedSlaveName = "node1"
		gpus, _ := json.Marshal([]map[string]any{{"index": 1, "model": "Tesla V100", "memoryMiB": 32768, "fake": true}})
		j.State.Resources = &job.StateResources{SlaveName: "node1", SlaveHost: "node1.example.org", GPUIDs: []int{1}, CPUIDs: []int{0, 1},
			PortMappings: []job.PortMapping{{ContainerPort: 8888, HostPort: 32768}}, GPUDetails: gpus}
		if st == job.StatusFinished {
			j.State.Resources.ExitCode = &exit
		}
	}
	return j
}

func TestLayout(t *testing.T) {
	for _, admin := range []bool{false, true} {
		p := render(t, JobsPage(JobsView{Chrome: chrome(admin, NavJobs)}))
		body := all(p.root, byTag("body"))[0]
		var hdr map[string]string
		if err := json.Unmarshal([]byte(attrOf(body, "hx-headers")), &hdr); err != nil || hdr["X-CSRF-Token"] != token {
			t.Errorf("body hx-headers = %q, want the CSRF token", attrOf(body, "hx-headers"))
		}
		for _, id := range []string{"nav-jobs", "nav-create", "menu-live", "nav-slaves", "nav-clusters", "nav-profile", "user-name", "logout"} {
			p.testID(nil, id)
		}
		if admin {
			p.testID(nil, "nav-admin")
		} else {
			p.none(nil, "data-testid", "nav-admin")
		}
		if v := attrOf(p.testID(nil, "nav-jobs"), "aria-current"); v != "page" {
			t.Errorf("Jobs menu entry aria-current = %q", v)
		}
		if _, ok := attr(p.testID(nil, "nav-profile"), "aria-current"); ok {
			t.Errorf("Profile menu entry is marked current")
		}
		logout := p.id("logout-form")
		if attrOf(logout, "method") != "post" || attrOf(logout, "action") != LogoutPath || hiddenValue(t, logout, "csrf_token") != token {
			t.Errorf("logout form: method %q action %q", attrOf(logout, "method"), attrOf(logout, "action"))
		}
		for _, s := range all(p.root, byTag("script")) {
			if src := attrOf(s, "src"); !strings.HasPrefix(src, "/static/htmx.min.js?v=") && !strings.HasPrefix(src, "/static/gpulab.js?v=") {
				t.Errorf("script src %q", attrOf(s, "src"))
			}
		}
		p.id("flash")
		p.id("main")
	}
}

func TestJobsPage(t *testing.T) {
	running := testJob(uuidRunning, "train", job.StatusRunning)
	other := testJob(uuidOther, "secret", job.StatusRunning).Sanitized()
	queued := testJob(uuidQueued, "sweep", job.StatusQueued)
	v := JobsView{Chrome: chrome(false, NavJobs), Query: JobsQuery{Scope: "running", Project: "demo"},
		Projects: []Choice{{"demo", "demo"}, {"ml", "ml"}}, Clusters: []Choice{{"1", "1 – local"}},
		Rows: []JobRow{
			{Job: running, Full: true, CanTouch: true, User: "alice", Project: "demo"},
			{Job: queued, Full: true, CanTouch: false, User: "bob", Project: "demo"},
			{Job: other, User: "hidden", Project: "hidden"},
		}}
	p := render(t, JobsPage(v))

	list := p.id("job-list")
	if got := attrOf(list, "hx-get"); got != "/jobs?project=demo&scope=running" {
		t.Errorf("job list refreshes from %q", got)
	}
	if attrOf(list, "hx-trigger") != "every 5s" || attrOf(list, "hx-swap") != "outerHTML" {
		t.Errorf("job list polling: %q %q", attrOf(list, "hx-trigger"), attrOf(list, "hx-swap"))
	}
	if v := attrOf(p.testID(nil, "scope-running"), "aria-current"); v != "page" {
		t.Errorf("scope tab running not current")
	}
	selected := func(sel *html.Node) string {
		for _, o := range all(sel, byTag("option")) {
			if _, ok := attr(o, "selected"); ok {
				return attrOf(o, "value")
			}
		}
		return ""
	}
	if got := selected(p.testID(nil, "filter-project")); got != "demo" {
		t.Errorf("project filter shows %q", got)
	}
	if hiddenValue(t, p.id("job-filters"), "scope") != "running" {
		t.Errorf("filter form loses the scope")
	}

	row := p.testID(nil, "job-row-"+uuidRunning)
	if attrOf(row, "id") != "job-row-"+uuidRunning {
		t.Errorf("row id %q", attrOf(row, "id"))
	}
	badge := p.testID(row, "job-status")
	if !hasClass(badge, "state-running") || text(badge) != "RUNNING" {
		t.Errorf("badge %q class %q", text(badge), attrOf(badge, "class"))
	}
	if attrOf(p.testID(row, "job-link"), "href") != "/jobs/"+uuidRunning {
		t.Errorf("row links to %q", attrOf(p.testID(row, "job-link"), "href"))
	}
	halt := p.testID(row, "action-halt")
	form := ancestor(halt, byTag("form"))
	if attrOf(form, "method") != "post" || attrOf(form, "action") != "/jobs/"+uuidRunning+"/halt" ||
		attrOf(form, "hx-post") != "/jobs/"+uuidRunning+"/halt" || attrOf(form, "hx-target") != "#job-row-"+uuidRunning {
		t.Errorf("halt form: %v", form.Attr)
	}
	if hiddenValue(t, form, "csrf_token") != token || hiddenValue(t, form, "next") != "/jobs" {
		t.Errorf("halt form lacks token or next")
	}
	if attrOf(halt, "aria-label") != "Halt job train" {
		t.Errorf("halt button aria-label %q", attrOf(halt, "aria-label"))
	}
	if _, ok := attr(ancestor(p.testID(row, "action-cancel"), byTag("form")), "hx-confirm"); !ok {
		t.Errorf("cancel asks no confirmation")
	}
	p.none(row, "data-testid", "action-hold")
	p.none(row, "data-testid", "action-delete")
	if attrOf(p.testID(row, "action-clone"), "href") != "/jobs/new?clone="+uuidRunning {
		t.Errorf("clone link")
	}

	// Bob's job in alice's project: visible, cloneable, but no state changes for alice.
	q := p.testID(nil, "job-row-"+uuidQueued)
	p.none(q, "data-testid", "action-cancel")
	p.testID(q, "action-clone")

	// Another project's job: sanitized, no link, no actions.
	o := p.testID(nil, "job-row-"+uuidOther)
	p.none(o, "data-testid", "job-link")
	p.none(o, "data-testid", "action-clone")
	p.none(o, "data-testid", "action-cancel")
	if strings.Contains(text(o), "secret") {
		t.Errorf("sanitized row shows the job's name")
	}
}

func TestJobsEmpty(t *testing.T) {
	p := render(t, JobList(JobsView{Chrome: chrome(false, NavJobs)}))
	empty := p.testID(nil, "jobs-empty")
	links := all(empty, byAttr("href", "/jobs/new"))
	if len(links) != 1 || !strings.Contains(text(empty), "No jobs yet") {
		t.Errorf("empty state %q", text(empty))
	}
}

func TestJobActions(t *testing.T) {
	names := func(s job.Status) []string {
		var out []string
		for _, a := range JobActions(s) {
			out = append(out, a.Name)
		}
		return out
	}
	for _, tc := range []struct {
		s    job.Status
		want []string
	}{
		{job.StatusOnHold, []string{"release", "cancel"}},
		{job.StatusQueued, []string{"hold", "cancel"}},
		{job.StatusAssigned, []string{"cancel"}},
		{job.StatusRunning, []string{"halt", "cancel"}},
		{job.StatusHalting, []string{"cancel"}},
		{job.StatusFinished, []string{"delete"}},
		{job.StatusFailed, []string{"delete"}},
		{job.StatusDeleted, nil},
	} {
		if got := names(tc.s); !slices.Equal(got, tc.want) {
			t.Errorf("%s: actions %v, want %v", tc.s, got, tc.want)
		}
	}
}

func TestStateFamilies(t *testing.T) {
	want := map[job.Status]string{
		job.StatusOnHold: "pending", job.StatusQueued: "pending", job.StatusAssigned: "running", job.StatusStarting: "running",
		job.StatusRunning: "running", job.StatusMustHalt: "halting", job.StatusHalting: "halting", job.StatusHalted: "halting",
		job.StatusFinished: "finished", job.StatusFailed: "failed", job.StatusCancelled: "cancelled", job.StatusDeleted: "deleted",
	}
	for _, s := range job.AllStatuses {
		if got := stateFamily(s); got != want[s] {
			t.Errorf("%s: family %q, want %q", s, got, want[s])
		}
	}
}

func TestAgo(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{2 * time.Second, "just now"},
		{42 * time.Second, "42 s ago"},
		{3 * time.Minute, "3 min ago"},
		{2*time.Hour + 5*time.Minute, "2 h 5 min ago"},
		{30 * time.Hour, "30 h ago"},
		{72 * time.Hour, "3 days ago"},
		{-10 * time.Minute, "in 10 min"},
	} {
		if got := ago(now, now.Add(-tc.d)); got != tc.want {
			t.Errorf("ago(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
	p := render(t, TimeAgo(now.Add(-3*time.Minute), now))
	tm := all(p.root, byTag("time"))[0]
	if attrOf(tm, "datetime") != "2025-03-04T11:57:00Z" || attrOf(tm, "title") != "2025-03-04 11:57:00 UTC" || text(tm) != "3 min ago" {
		t.Errorf("time element %v %q", tm.Attr, text(tm))
	}
}

func detailView(st job.Status) JobDetailView {
	j := testJob(uuidRunning, "train", st)
	return JobDetailView{
		Chrome:   chrome(false, NavJobs),
		Row:      JobRow{Job: j, Full: true, CanTouch: true, User: "alice", Project: "demo"},
		Timeline: Timeline(j.State.EventTimes),
		Events: []store.Event{{ID: 1, Time: now.Add(-5 * time.Minute), Kind: "status", ToStatus: "QUEUED", Actor: "owner", Message: "submitted by alice"},
			{ID: 2, Time: now.Add(-4 * time.Minute), Kind: "status", FromStatus: "QUEUED", ToStatus: "ASSIGNED", Actor: "scheduler", Message: "assigned"}},
		Ports:       []PortLink{{ContainerPort: 8888, HostPort: 32768, URL: "http://node1.example.org:32768/"}},
		GPUs:        []GPUView{{Index: 1, Model: "Tesla V100", MemoryMiB: 32768, Fake: true}},
		Log:         LogView{JobUUID: uuidRunning, Text: "line 1\n<b>not html</b>\n", Offset: 26, Follow: !st.Ended()},
		RequestJSON: `{"name": "train"}`,
	}
}

func TestJobPage(t *testing.T) {
	p := render(t, JobPage(detailView(job.StatusRunning)))
	live := p.id("job-live")
	if attrOf(live, "hx-get") != "/jobs/"+uuidRunning || attrOf(live, "hx-trigger") != "every 3s" || attrOf(live, "hx-swap") != "outerHTML" {
		t.Errorf("live part does not poll: %v", live.Attr)
	}
	if !hasClass(p.testID(live, "job-status"), "state-running") {
		t.Errorf("status badge")
	}
	// Actions on the detail page replace the live part.
	form := ancestor(p.testID(live, "action-halt"), byTag("form"))
	if attrOf(form, "hx-target") != "#job-live" || hiddenValue(t, form, "next") != "/jobs/"+uuidRunning {
		t.Errorf("detail action form: %v", form.Attr)
	}
	port := p.testID(nil, "port-8888")
	if attrOf(port, "href") != "http://node1.example.org:32768/" {
		t.Errorf("port link %q", attrOf(port, "href"))
	}
	gpu := p.testID(nil, "job-gpu-1")
	if !strings.Contains(text(gpu), "Tesla V100") || !strings.Contains(text(gpu), "FAKE") {
		t.Errorf("GPU %q", text(gpu))
	}
	var states []string
	for _, li := range all(p.testID(nil, "job-timeline"), byTag("li")) {
		states = append(states, strings.TrimPrefix(attrOf(li, "data-testid"), "timeline-"))
	}
	if !slices.Equal(states, []string{"QUEUED", "ASSIGNED", "RUNNING"}) {
		t.Errorf("timeline %v", states)
	}
	if n := len(all(p.testID(nil, "job-events"), byTag("tr"))); n != 3 {
		t.Errorf("events table has %d rows, want header + 2", n)
	}
	log := p.id("job-log")
	if attrOf(log, "data-testid") != "job-log" || rawText(log) != "line 1\n<b>not html</b>\n" {
		t.Errorf("log shows %q", rawText(log))
	}
	if len(all(log, byTag("b"))) != 0 {
		t.Errorf("log text was not escaped")
	}
	poller := p.id("job-log-poller")
	var hdr map[string]string
	_ = json.Unmarshal([]byte(attrOf(poller, "hx-headers")), &hdr)
	if attrOf(poller, "hx-get") != "/jobs/"+uuidRunning+"/log" || hdr["Range"] != "bytes=26-" ||
		attrOf(poller, "hx-target") != "#job-log" || attrOf(poller, "hx-swap") != "beforeend" || attrOf(poller, "hx-trigger") != "every 2s" {
		t.Errorf("log poller: %v", poller.Attr)
	}
	if attrOf(p.testID(nil, "raw-log"), "href") != "/jobs/"+uuidRunning+"/log" {
		t.Errorf("raw log link")
	}
	if !strings.Contains(text(p.testID(nil, "job-request")), `"train"`) {
		t.Errorf("request not shown")
	}
}

func TestJobPageEnded(t *testing.T) {
	p := render(t, JobPage(detailView(job.StatusFinished)))
	live := p.id("job-live")
	if _, ok := attr(live, "hx-trigger"); ok {
		t.Errorf("an ended job's page still polls")
	}
	if _, ok := attr(p.id("job-log-poller"), "hx-get"); ok {
		t.Errorf("an ended job's log still polls")
	}
	if text(p.testID(nil, "exit-code")) != "exit code 0" {
		t.Errorf("exit code %q", text(p.testID(nil, "exit-code")))
	}
	p.testID(live, "action-delete")
	p.none(live, "data-testid", "action-cancel")
}

func TestLogChunk(t *testing.T) {
	p := render(t, LogChunk("more <output>\n", LogView{JobUUID: uuidRunning, Offset: 40, Follow: true}))
	spans := all(p.root, byTag("span"))
	if len(spans) != 1 || rawText(spans[0]) != "more <output>\n" {
		t.Fatalf("chunk text")
	}
	poller := p.id("job-log-poller")
	if attrOf(poller, "hx-swap-oob") != "true" || !strings.Contains(attrOf(poller, "hx-headers"), "bytes=40-") {
		t.Errorf("next poller: %v", poller.Attr)
	}
	p = render(t, LogChunk("", LogView{JobUUID: uuidRunning, Offset: 40}))
	if _, ok := attr(p.id("job-log-poller"), "hx-trigger"); ok {
		t.Errorf("a finished tail keeps polling")
	}
}

func TestJobFormPage(t *testing.T) {
	v := JobFormView{
		Chrome:      chrome(false, NavCreate),
		Form:        JobForm{Name: "", CPUs: "0", Project: "urn:p:demo", Image: "user:XXXX@reg.example.org/x:1"},
		Base:        `{"name":""}`,
		JSON:        `{"name": ""}`,
		Projects:    []Choice{{"urn:p:demo", "demo"}, {"urn:p:ml", "ml"}},
		Clusters:    []Choice{{"1", "1 – local"}},
		FieldErrors: map[string][]string{"name": {"is required"}, "cpus": {"must be at least 1"}},
		Errors:      []string{"request.extra.foo: Invalid key"},
		CloneOf:     uuidRunning, ImagePasswordHidden: true,
	}
	p := render(t, JobFormPage(v))
	form := p.id("job-form")
	if attrOf(form, "method") != "post" || attrOf(form, "action") != "/jobs/new" {
		t.Errorf("form %v", form.Attr)
	}
	if hiddenValue(t, form, "csrf_token") != token || hiddenValue(t, form, "base") != v.Base || hiddenValue(t, form, "clone") != uuidRunning {
		t.Errorf("hidden fields")
	}
	for field, msg := range map[string]string{"name": "is required", "cpus": "must be at least 1"} {
		e := p.testID(nil, "error-"+field)
		if !strings.Contains(text(e), msg) {
			t.Errorf("error of %s: %q", field, text(e))
		}
		in := p.id("field-" + field)
		if _, ok := attr(in, "aria-invalid"); !ok || !strings.Contains(attrOf(in, "aria-describedby"), "error-"+field) {
			t.Errorf("field %s not marked invalid: %v", field, in.Attr)
		}
		// The error sits next to its field: both in the same .field block.
		if ancestor(e, func(n *html.Node) bool { return hasClass(n, "field") }) != ancestor(in, func(n *html.Node) bool { return hasClass(n, "field") }) {
			t.Errorf("error of %s is not next to its field", field)
		}
	}
	p.none(nil, "data-testid", "error-image")
	if !strings.Contains(text(p.testID(nil, "json-errors")), "request.extra.foo") {
		t.Errorf("other problems are not above the editor")
	}
	p.testID(nil, "image-password-hidden")
	if got := rawText(p.testID(nil, "json-editor")); got != v.JSON {
		t.Errorf("editor holds %q", got)
	}
	var selected string
	for _, o := range all(p.id("field-project"), byTag("option")) {
		if _, ok := attr(o, "selected"); ok {
			selected = attrOf(o, "value")
		}
	}
	if selected != "urn:p:demo" {
		t.Errorf("project select shows %q", selected)
	}
	// Every control has a label.
	for _, in := range append(all(form, byTag("input")), append(all(form, byTag("select")), all(form, byTag("textarea"))...)...) {
		if attrOf(in, "type") == "hidden" {
			continue
		}
		id := attrOf(in, "id")
		labelled := id != "" && len(all(p.root, byAttr("for", id))) > 0
		if !labelled && ancestor(in, byTag("label")) == nil {
			t.Errorf("control %s (%s) has no label", attrOf(in, "name"), id)
		}
	}
	// Enter in a field submits the job (the first submit button), it does not convert.
	var first *html.Node
	for _, b := range all(form, byTag("button")) {
		if attrOf(b, "type") == "submit" {
			first = b
			break
		}
	}
	if attrOf(first, "value") != "submit" {
		t.Errorf("the default button is %q", attrOf(first, "value"))
	}
	for _, id := range []string{"submit-job", "convert-v1", "apply-form"} {
		p.testID(form, id)
	}
}

func TestSlaves(t *testing.T) {
	hb := now.Add(-20 * time.Second)
	v := SlavesView{Chrome: chrome(false, NavSlaves), Slaves: []SlaveView{
		{Name: "node1", ClusterID: 1, ClusterName: "local", Online: true, Accepting: true, LastHeartbeat: &hb, Fake: true,
			CPUs: FreeTotal{6, 8}, MemoryGb: FreeTotal{24, 32}, GPUsFree: FreeTotal{1, 2},
			GPUs: []GPUView{
				{Index: 0, Model: "V100-32GB", MemoryMiB: 32768, Fake: true, Util: "–"},
				{Index: 1, Model: "V100-32GB", MemoryMiB: 32768, Fake: true, Util: "–", Job: &JobRef{UUID: uuidRunning, Name: "train", Link: true}},
			}},
		{Name: "node2", ClusterID: 1, Online: false, Accepting: false},
	}}
	p := render(t, SlavesPage(v))
	list := p.id("slave-list")
	if attrOf(list, "hx-get") != "/live/slaves" || attrOf(list, "hx-trigger") != "every 5s" {
		t.Errorf("slave list polling")
	}
	n1 := p.testID(nil, "slave-node1")
	if text(p.testID(n1, "slave-state")) != "online" {
		t.Errorf("node1 state %q", text(p.testID(n1, "slave-state")))
	}
	p.testID(n1, "slave-fake")
	if !strings.Contains(text(p.testID(n1, "slave-heartbeat")), "20 s ago") {
		t.Errorf("heartbeat %q", text(p.testID(n1, "slave-heartbeat")))
	}
	if !strings.Contains(text(p.testID(n1, "slave-cpus")), "6 / 8") {
		t.Errorf("cpus %q", text(p.testID(n1, "slave-cpus")))
	}
	g1 := p.testID(n1, "gpu-node1-1")
	if a := all(g1, byAttr("href", "/jobs/"+uuidRunning)); len(a) != 1 || !strings.Contains(text(g1), "FAKE") {
		t.Errorf("GPU 1 row %q", text(g1))
	}
	if text(p.testID(p.testID(n1, "gpu-node1-0"), "gpu-util")) != "–" {
		t.Errorf("utilisation of a GPU without samples")
	}
	n2 := p.testID(nil, "slave-node2")
	if text(p.testID(n2, "slave-state")) != "offline" {
		t.Errorf("node2 state")
	}
	p.testID(n2, "slave-drained")
	p.none(n2, "data-testid", "slave-fake")

	p = render(t, SlaveList(SlavesView{Chrome: chrome(false, NavSlaves)}))
	if !strings.Contains(text(p.testID(nil, "slaves-empty")), "gpulab-master slave-token") {
		t.Errorf("empty slaves page does not say what to do")
	}
}

func TestClusters(t *testing.T) {
	v := ClustersView{Chrome: chrome(false, NavClusters), Clusters: []ClusterView{
		{ID: 1, Name: "local", Slaves: 2, OnlineSlaves: 1, GPUs: FreeTotal{1, 2}, CPUs: FreeTotal{6, 8}, MemoryGb: FreeTotal{24, 32}, Workers: FreeTotal{7, 8}, GPUModels: []string{"V100"}},
	}}
	p := render(t, ClustersPage(v))
	row := p.testID(nil, "cluster-1")
	if !strings.Contains(text(p.testID(row, "cluster-gpus")), "1 / 2") || !strings.Contains(text(row), "1 / 2") {
		t.Errorf("cluster row %q", text(row))
	}
	if attrOf(p.id("cluster-list"), "hx-trigger") != "every 5s" {
		t.Errorf("cluster list polling")
	}
}

func TestProfile(t *testing.T) {
	v := ProfileView{Chrome: chrome(false, NavProfile),
		User:     store.User{ID: 1, Name: "alice", URN: "urn:publicid:IDN+test+user+alice", Email: "alice@example.org", CreatedAt: now},
		Projects: []store.Project{{ID: 1, Name: "demo", URN: "urn:p", GID: 20000}},
		SSHKeys:  []store.SSHKey{{ID: 7, Name: "laptop", PublicKey: "ssh-ed25519 AAAA", Fingerprint: "SHA256:abc", CreatedAt: now}},
		KeyError: "unknown key type", KeyText: "bad key"}
	p := render(t, ProfilePage(v))
	cert := p.id("cert-form")
	if attrOf(cert, "action") != "/profile/certificate" || hiddenValue(t, cert, "csrf_token") != token {
		t.Errorf("certificate form")
	}
	p.testID(cert, "download-certificate")
	p.testID(nil, "profile-project-demo")
	key := p.testID(nil, "ssh-key-7")
	del := ancestor(p.testID(key, "remove-ssh-key"), byTag("form"))
	if attrOf(del, "action") != "/profile/ssh-keys/7/delete" || hiddenValue(t, del, "csrf_token") != token {
		t.Errorf("remove key form")
	}
	if !strings.Contains(text(p.testID(nil, "error-public_key")), "unknown key type") || rawText(p.id("ssh-key-text")) != "bad key" {
		t.Errorf("key error not shown with what was typed")
	}
}

func TestAdmin(t *testing.T) {
	v := AdminView{Chrome: chrome(true, NavAdmin), SelfID: 1,
		Users:    []store.User{{ID: 1, Name: "alice", IsAdmin: true}, {ID: 2, Name: "bob"}},
		Projects: []AdminProject{{Project: store.Project{ID: 5, Name: "demo"}, Members: []store.User{{ID: 2, Name: "bob"}}}},
		Clusters: []AdminCluster{{Cluster: store.Cluster{ID: 1, Name: "local", Private: true}, Owners: []store.Project{{ID: 5, Name: "demo"}}}},
		Slaves:   []AdminSlave{{Name: "node1", ClusterID: 1, Online: true, Accepting: true}},
	}
	p := render(t, AdminPage(v))
	if _, ok := attr(p.testID(p.testID(nil, "admin-user-alice"), "toggle-admin"), "disabled"); !ok {
		t.Errorf("an admin can revoke his own rights")
	}
	bob := ancestor(p.testID(p.testID(nil, "admin-user-bob"), "toggle-admin"), byTag("form"))
	if attrOf(bob, "action") != "/admin/users/2/admin" || hiddenValue(t, bob, "admin") != "true" {
		t.Errorf("make bob admin form")
	}
	rm := ancestor(p.testID(p.testID(nil, "member-demo-bob"), "remove-member"), byTag("form"))
	if attrOf(rm, "action") != "/admin/projects/5/members/2/delete" {
		t.Errorf("remove member form %q", attrOf(rm, "action"))
	}
	p.testID(nil, "owner-1-demo")
	drain := ancestor(p.testID(p.testID(nil, "admin-slave-node1"), "drain-slave"), byTag("form"))
	if attrOf(drain, "action") != "/admin/slaves/node1/accepting" || hiddenValue(t, drain, "accepting") != "false" {
		t.Errorf("drain form")
	}
	// Every state-changing form posts with the CSRF token.
	for _, f := range all(p.root, byTag("form")) {
		if attrOf(f, "method") != "post" {
			t.Errorf("form %s is not a POST", attrOf(f, "action"))
		}
		if hiddenValue(t, f, "csrf_token") != token {
			t.Errorf("form %s has no CSRF token", attrOf(f, "action"))
		}
	}
}

func TestErrorViews(t *testing.T) {
	e := ErrorView{Status: 409, Message: "job is FINISHED, cannot become CANCELLED", Details: []job.Problem{{Path: "x", Message: "y"}}}
	p := render(t, ErrorPage(chrome(false, ""), e))
	if attrOf(p.testID(nil, "error-page"), "data-status") != "409" || text(p.testID(nil, "error-message")) != e.Message {
		t.Errorf("error page")
	}
	p = render(t, ErrorFlash(e))
	if !strings.Contains(text(p.testID(nil, "flash-error")), e.Message) {
		t.Errorf("error flash")
	}
}

func TestUsagePageStructure(t *testing.T) {
	v := UsageView{Chrome: Chrome{Active: NavUsage}, Tally: 2.5, Rank: 2, ActiveUsers: 3, HalfLife: "1 week", Explanation: "after one user",
		Queued: []UsageJob{{UUID: "11111111-2222-3333-4444-555555555555", Name: "train", Explanations: []string{"needs 2 GPUs"}}}}
	p := render(t, UsagePage(v))
	if got := text(p.testID(nil, "usage-rank")); got != "2 of 3 active users" {
		t.Errorf("rank: %q", got)
	}
	if got := text(p.testID(nil, "usage-tally")); got != "2.50" {
		t.Errorf("tally: %q", got)
	}
	p.testID(nil, "usage-job-11111111-2222-3333-4444-555555555555")
	empty := render(t, UsagePage(UsageView{Rank: 1, ActiveUsers: 1}))
	empty.testID(nil, "usage-no-queued")
}
