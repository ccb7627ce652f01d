package handlers

import (
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/store"
	"github.com/opengpulab/gpulab/views"
)

// jobsPageSize is how many jobs a page of the Jobs list shows (a phone scrolls through them
// all); older ones are on the next pages.
const jobsPageSize = 25

// initialLogBytes is how much of a log the detail page shows at first; the raw log has all.
const initialLogBytes = 256 << 10

// logFollowGrace is how long after a job ended its log tail keeps polling: the slave may ship
// the last chunks after it reported the end.
const logFollowGrace = time.Minute

// jobsQuery reads the Jobs page's filter from its URL.
func jobsQuery(r *http.Request) (views.JobsQuery, error) {
	q := r.URL.Query()
	jq := views.JobsQuery{Scope: q.Get("scope"), State: q.Get("state"), Project: q.Get("project"), Cluster: q.Get("cluster")}
	switch jq.Scope {
	case "", "mine", "projects", "running":
	default:
		return jq, fieldError("scope", "must be mine, projects or running, not %q", jq.Scope)
	}
	switch jq.State {
	case "", "pending", "running", "finished", "deleted":
	default:
		if _, err := job.ParseStatus(jq.State); err != nil {
			return jq, fieldError("state", "%v", err)
		}
	}
	if jq.Cluster != "" {
		if n, err := strconv.Atoi(jq.Cluster); err != nil || n < 1 {
			return jq, fieldError("cluster", "must be a cluster id (a positive integer), not %q", jq.Cluster)
		}
	}
	if p := q.Get("page"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			return jq, fieldError("page", "must be a page number (1 or more), not %q", p)
		}
		jq.Page = n
	}
	return jq, nil
}

// listPageJobs is the data of the Jobs page: the API's own filter (jobFilter, over the query
// the page's filter stands for) narrowed to the page's scope, and the store's answer. The
// JSON face of the page and the page itself show exactly these jobs.
func (h *Handlers) listPageJobs(r *http.Request, c *Caller, jq views.JobsQuery) ([]*store.JobRecord, error) {
	api := url.Values{}
	switch jq.State {
	case "":
	case "pending", "running", "finished", "deleted":
		api.Set(jq.State, "true")
	default:
		api.Set("allowed_states", jq.State)
	}
	if jq.Project != "" {
		api.Set("project_name", jq.Project)
	}
	if jq.Cluster != "" {
		api.Set("cluster_id", jq.Cluster)
	}
	api.Set("page_size", strconv.Itoa(jobsPageSize))
	if jq.Page > 1 {
		api.Set("page", strconv.Itoa(jq.Page))
	}
	switch jq.Scope {
	case "", "mine":
		api.Set("user_name", c.User.Name)
	case "running":
		api.Del("pending")
		api.Del("finished")
		api.Del("deleted")
		api.Del("allowed_states")
		api.Set("running", "true")
		api.Set("other_user_running", "true")
	}
	r2 := r.Clone(r.Context())
	r2.URL = &url.URL{Path: r.URL.Path, RawQuery: api.Encode()}
	f, _, err := h.jobFilter(r2, c)
	if err != nil {
		return nil, err
	}
	if jq.Scope == "projects" {
		// The caller's jobs and those of his projects, admins included.
		f.UserIDs = nil
		f.Visible = &store.Visibility{UserID: c.User.ID, ProjectIDs: c.ProjectIDs}
	}
	f.Shared = true // presentJobs and listRow only read them
	return h.store.ListJobs(r.Context(), f)
}

// pageRow is a job as its page shows it to the caller: redacted always, sanitized outside his
// projects (the same rule as the API's present). rec is not changed (see presentJobs).
func pageRow(c *Caller, rec *store.JobRecord) views.JobRow {
	return shownRow(c, rec, rec.Job.Redacted())
}

// listRow is a job as a list's row (views.JobRowView) shows it: only what a row shows
// (job.Listed), sanitized outside the caller's projects. It shares memory with rec.
func listRow(c *Caller, rec *store.JobRecord) views.JobRow {
	return shownRow(c, rec, rec.Job.Listed())
}

// shownRow is the row of rec showing j, its job as shown (a redacted copy, or job.Listed's
// view of it); j is sanitized further outside the caller's projects.
func shownRow(c *Caller, rec *store.JobRecord, j *job.Job) views.JobRow {
	row := views.JobRow{Job: j, Full: c != nil && canSee(c, rec), User: rec.UserName, Project: rec.ProjectName}
	if !row.Full {
		row.Job = row.Job.Sanitized()
		row.User, row.Project = "hidden", "hidden"
		return row
	}
	row.CanTouch = canTouch(c, rec)
	return row
}

// JobsPage is GET /jobs: the caller's jobs, his projects' or everybody's running ones, with
// filters; htmx gets the list alone (#job-list), for its live refresh.
func (h *Handlers) JobsPage(w http.ResponseWriter, r *http.Request) error {
	c, err := requireUser(r)
	if err != nil {
		return err
	}
	jq, err := jobsQuery(r)
	if err != nil {
		return err
	}
	recs, err := h.listPageJobs(r, c, jq)
	if err != nil {
		return err
	}
	if wantsJSON(r) {
		items, err := h.presentJobs(r.Context(), c, apiVersion(r.Context()), recs)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, items)
		return nil
	}
	v := views.JobsView{Chrome: h.chrome(r, views.NavJobs), Query: jq, Rows: make([]views.JobRow, len(recs)), More: len(recs) == jobsPageSize}
	for i, rec := range recs {
		v.Rows[i] = listRow(c, rec)
	}
	if isHTMX(r) {
		return h.render(w, r, http.StatusOK, views.JobList(v))
	}
	if v.Projects, err = h.projectChoices(r, c, false); err != nil {
		return err
	}
	if v.Clusters, err = h.clusterChoices(r); err != nil {
		return err
	}
	return h.render(w, r, http.StatusOK, views.JobsPage(v))
}

// projectChoices are the projects a filter or form offers: the caller's (admins filtering:
// all). byURN picks the URN as the value (the job form), else the name (the list filter).
func (h *Handlers) projectChoices(r *http.Request, c *Caller, byURN bool) ([]views.Choice, error) {
	var ps []store.Project
	var err error
	switch {
	case c.Admin() && !byURN:
		ps, err = h.store.ListProjects(r.Context())
	case c.Service == "":
		// A user's ProjectIDs are his projects by name (store.GetUserWithProjects).
		ps, err = h.store.ProjectsByID(r.Context(), c.ProjectIDs)
	default:
		ps, err = h.store.ListUserProjects(r.Context(), c.User.ID)
	}
	if err != nil {
		return nil, err
	}
	out := make([]views.Choice, len(ps))
	for i, p := range ps {
		out[i] = views.Choice{Value: p.Name, Label: p.Name}
		if byURN {
			out[i].Value = p.URN
		}
	}
	return out, nil
}

// clusterChoices are the clusters a filter or form offers.
func (h *Handlers) clusterChoices(r *http.Request) ([]views.Choice, error) {
	cs, err := h.store.RecentClusters(r.Context())
	if err != nil {
		return nil, err
	}
	out := make([]views.Choice, len(cs))
	for i, cl := range cs {
		label := strconv.Itoa(cl.ID)
		if cl.Name != "" {
			label += " – " + cl.Name
		}
		out[i] = views.Choice{Value: strconv.Itoa(cl.ID), Label: label}
	}
	return out, nil
}

// JobPage is GET /jobs/{id}: the job detail page. JSON is the API's GET jobs/{id}; htmx gets
// the live part (#job-live) for its refresh.
func (h *Handlers) JobPage(w http.ResponseWriter, r *http.Request) error {
	if wantsJSON(r) {
		return h.GetJob(w, r)
	}
	c, rec, err := h.userAndJob(r)
	if err != nil {
		return err
	}
	v, err := h.jobDetail(r, c, rec, !isHTMX(r))
	if err != nil {
		return err
	}
	if isHTMX(r) {
		return h.render(w, r, http.StatusOK, views.JobLive(v))
	}
	return h.render(w, r, http.StatusOK, views.JobPage(v))
}

// jobDetail gathers what the detail page shows; withLog reads the log too (the live refresh
// leaves the log to its own tail).
func (h *Handlers) jobDetail(r *http.Request, c *Caller, rec *store.JobRecord, withLog bool) (views.JobDetailView, error) {
	ctx := r.Context()
	row := pageRow(c, rec)
	j := row.Job
	v := views.JobDetailView{Chrome: h.chrome(r, views.NavJobs), Row: row, Timeline: views.Timeline(j.State.EventTimes)}
	evs, err := h.store.ListJobEvents(ctx, j.UUID)
	if err != nil {
		return v, err
	}
	v.Events = evs
	if j.State.Status == job.StatusQueued {
		v.Explanations = j.State.Scheduling.QueuedExplanations
		v.EstimatedStart = j.State.Scheduling.EstimatedStart
		v.EstimateRange = j.State.Scheduling.EstimateRange(time.Now(), time.UTC)
	}
	if id := j.State.Scheduling.AssignedClusterID; id > 0 {
		if cs, err := h.store.RecentClusters(ctx); err == nil {
			for _, cl := range cs {
				if cl.ID == id {
					v.ClusterName = cl.Name
				}
			}
		}
	}
	v.Ports = portLinks(j)
	v.GPUs = jobGPUs(j)
	if _, ran := j.State.EventTimes[job.StatusRunning]; ran {
		u, err := h.jobUsage(r, rec)
		if err != nil {
			return v, err
		}
		v.Usage = usageView(u, j, v.GPUs)
	}
	if v.SSH, err = h.jobSSHView(ctx, c, rec); err != nil {
		return v, err
	}
	req, err := json.MarshalIndent(job.Submission(j), "", "  ")
	if err != nil {
		return v, err
	}
	v.RequestJSON = string(req)
	if withLog {
		if v.Log, err = h.initialLog(r, j); err != nil {
			return v, err
		}
	}
	return v, nil
}

// portLinks are a job's published ports as links (http://slaveHost:hostPort/), or the
// requested ports while the job is not running yet.
func portLinks(j *job.Job) []views.PortLink {
	res := j.State.Resources
	if res != nil && len(res.PortMappings) > 0 {
		host := res.SlaveHost
		if host == "" {
			host = res.SlaveName
		}
		out := make([]views.PortLink, 0, len(res.PortMappings))
		for _, pm := range res.PortMappings {
			l := views.PortLink{ContainerPort: pm.ContainerPort, HostPort: pm.HostPort}
			if pm.HostPort > 0 && host != "" {
				l.URL = "http://" + net.JoinHostPort(host, strconv.Itoa(pm.HostPort)) + "/"
			}
			out = append(out, l)
		}
		return out
	}
	if j.State.Status.Ended() {
		return nil
	}
	out := make([]views.PortLink, 0, len(j.Request.Docker.PortMappings))
	for _, pm := range j.Request.Docker.PortMappings {
		out = append(out, views.PortLink{ContainerPort: pm.ContainerPort, HostPort: pm.HostPort})
	}
	return out
}

// jobGPUs are the GPUs a job was given, with model and memory when the scheduler recorded them.
func jobGPUs(j *job.Job) []views.GPUView {
	res := j.State.Resources
	if res == nil {
		return nil
	}
	var details []protocol.GPU
	if len(res.GPUDetails) > 0 && json.Unmarshal(res.GPUDetails, &details) == nil && len(details) > 0 {
		out := make([]views.GPUView, len(details))
		for i, g := range details {
			out[i] = views.GPUView{Index: g.Index, UUID: g.UUID, Model: g.Model, MemoryMiB: g.MemoryMiB, Fake: g.Fake}
		}
		return out
	}
	out := make([]views.GPUView, len(res.GPUIDs))
	for i, idx := range res.GPUIDs {
		out[i] = views.GPUView{Index: idx}
	}
	return out
}

// following reports whether a job's log may still grow.
func following(j *job.Job) bool {
	return !j.State.Status.Ended() || time.Since(j.State.Updated) < logFollowGrace
}

// initialLog reads the end of a job's log for the detail page: at most initialLogBytes,
// starting at a line, ending at a whole character.
func (h *Handlers) initialLog(r *http.Request, j *job.Job) (views.LogView, error) {
	lv := views.LogView{JobUUID: j.UUID, Follow: following(j)}
	_, size, err := h.store.JobLogState(r.Context(), j.UUID)
	if err != nil {
		return lv, err
	}
	from := max(size-initialLogBytes, 0)
	data, _, err := h.store.ReadJobLog(r.Context(), j.UUID, from)
	if err != nil {
		return lv, err
	}
	if from > 0 {
		if i := strings.IndexByte(string(data), '\n'); i >= 0 {
			data, from = data[i+1:], from+int64(i+1)
		}
		lv.Skipped = from
	}
	data = data[:completeUTF8(data)]
	lv.Text, lv.Offset = string(data), from+int64(len(data))
	return lv, nil
}

// completeUTF8 is the length of the longest prefix of b that does not end inside a UTF-8
// character, so the live tail never splits one between two answers.
func completeUTF8(b []byte) int {
	n := len(b)
	for i := n - 1; i >= 0 && i >= n-utf8.UTFMax; i-- {
		if !utf8.RuneStart(b[i]) {
			continue
		}
		if !utf8.FullRune(b[i:]) {
			return i
		}
		return n
	}
	return n
}

// JobLogPage is GET /jobs/{id}/log. Without htmx it is the API's log (plain text, Range
// supported): the "Raw log" link. For htmx it is the live tail: the bytes after the
// `Range: bytes=N-` offset (the API's Range logic) as HTML to append to #job-log, with the
// poller for the next offset; 204 when nothing is new.
func (h *Handlers) JobLogPage(w http.ResponseWriter, r *http.Request) error {
	if !isHTMX(r) {
		return h.JobLog(w, r)
	}
	_, rec, err := h.userAndJob(r)
	if err != nil {
		return err
	}
	data, _, from, _, err := h.readLog(w, r, rec)
	if err != nil {
		return err
	}
	data = data[:completeUTF8(data)]
	next := views.LogView{JobUUID: rec.Job.UUID, Offset: from + int64(len(data)), Follow: following(rec.Job)}
	if len(data) == 0 && next.Follow {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	return h.render(w, r, http.StatusOK, views.LogChunk(string(data), next))
}

// jobActions maps the actions of the job pages to the API call each one is.
var jobActions = map[string]job.Status{
	"cancel":  job.StatusCancelled,
	"halt":    job.StatusMustHalt,
	"hold":    job.StatusOnHold,
	"release": job.StatusQueued,
	"delete":  job.StatusDeleted,
}

// JobAction is POST /jobs/{id}/{action} (cancel, halt, hold, release, delete), the buttons of
// the job list and detail page. It runs the API's own PUT jobs/{id}/state/status or DELETE
// jobs/{id}. htmx gets the replaced row (#job-row-<uuid>) or live part (#job-live); a plain
// form is redirected to `next`.
func (h *Handlers) JobAction(w http.ResponseWriter, r *http.Request) error {
	c, err := requireUser(r)
	if err != nil {
		return err
	}
	to, ok := jobActions[r.PathValue("action")]
	if !ok {
		return errorf(http.StatusNotFound, "no job action %q (one of cancel, halt, hold, release, delete)", r.PathValue("action"))
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	id := r.PathValue("id")
	if to == job.StatusDeleted {
		_, err = apiCall(r, h.DeleteJob, http.MethodDelete, id, "", nil)
	} else {
		_, err = apiCall(r, h.SetJobStatus, http.MethodPut, id, "", []byte(to))
	}
	if err != nil {
		return err
	}
	rec, err := h.findJob(r, c)
	if err != nil {
		return err
	}
	if wantsJSON(r) {
		out, err := h.presentOne(r, c, rec)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	if isHTMX(r) {
		switch r.Header.Get("HX-Target") {
		case "job-row-" + rec.Job.UUID:
			return h.render(w, r, http.StatusOK, views.JobRowView(listRow(c, rec), h.chrome(r, views.NavJobs)))
		case "job-live":
			v, err := h.jobDetail(r, c, rec, false)
			if err != nil {
				return err
			}
			return h.render(w, r, http.StatusOK, views.JobLive(v))
		}
	}
	return seeOther(w, r, localPath(r.PostForm.Get("next"), "/jobs/"+rec.Job.UUID))
}
