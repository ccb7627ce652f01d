package handlers

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/store"
)

// maxJobBody bounds a submitted job document.
const maxJobBody = 1 << 20

// maxIntParam bounds every integer query parameter (a page of 2^63 overflows the offset), and
// maxHoursParam max_hours (as a duration it must not overflow).
const (
	maxIntParam   = 1<<31 - 1
	maxHoursParam = 100 * 365 * 24
	// maxNameParam bounds a name or URN in a query.
	maxNameParam = 1024
)

// maxPageSize is the largest page GET jobs serves.
const maxPageSize = 200

// imecDefaultPageSize is v4.0's page without page_size or max_count: imec's `jobs` sends
// neither and shows, by its own help, 10 jobs.
const imecDefaultPageSize = 10

func boolParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fieldError(name, "must be true or false, not %q", v)
	}
	return b, nil
}

func intParam(r *http.Request, name string, min int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min || n > maxIntParam {
		return 0, fieldError(name, "must be an integer from %d to %d, not %.64q", min, maxIntParam, v)
	}
	return n, nil
}

// SubmitJob is POST jobs: validate, resolve the project, store as QUEUED (or ONHOLD with
// ?hold=true) and answer 201 with the UUID as text (or the job as JSON when asked).
func (h *Handlers) SubmitJob(w http.ResponseWriter, r *http.Request) error {
	c, err := requireUser(r)
	if err != nil {
		return err
	}
	hold, err := boolParam(r, "hold")
	if err != nil {
		return err
	}
	key, err := submitKey(r)
	if err != nil {
		return err
	}
	body, err := readBody(w, r, maxJobBody)
	if err != nil {
		return err
	}
	j, err := job.Parse(body, h.jobOptionsFor(c))
	if err != nil {
		return err
	}
	if err := h.checkCapacity(r.Context(), j); err != nil {
		return err
	}
	project, err := h.resolveProject(r, c, j.Owner.ProjectURN)
	if err != nil {
		return err
	}
	if err := h.checkReservations(r, c, project, j.Request.Scheduling.ReservationIDs); err != nil {
		return err
	}
	j.UUID = uuid.NewString()
	j.Owner = job.Owner{UserURN: c.User.URN, UserEmail: c.User.Email, ProjectURN: project.URN}
	j.State = job.State{Status: job.StatusQueued}
	msg := "submitted"
	if hold {
		j.State.Status = job.StatusOnHold
		msg = "submitted on hold"
	}
	existing, err := h.store.SubmitJobWithin(r.Context(), j, c.User.ID, project.ID, msg+" by "+c.Actor(), key, h.notebookLimit())
	var limit *store.LimitError
	if errors.As(err, &limit) {
		return errorf(http.StatusConflict, "user %s already has %d notebook jobs (limit --max-notebooks-per-user %d): stop one first", c.User.Name, limit.Count, limit.Max)
	}
	if err != nil {
		return fmt.Errorf("submit job: %w", err)
	}
	if existing != "" {
		// A repeat of a submission whose answer was lost: the same answer, nothing new.
		h.log.InfoContext(r.Context(), "submission repeated", "job", existing, "user", c.User.Name)
		rec, err := h.store.GetJob(r.Context(), existing)
		if err != nil {
			return err
		}
		j = rec.Job
	}
	h.sched.Wake()
	h.log.InfoContext(r.Context(), "job submitted", "job", j.UUID, "user", c.User.Name, "service", c.Service, "project", project.Name, "status", j.State.Status)
	if wantsJSON(r) {
		out, err := h.presentOne(r, c, &store.JobRecord{Job: j, UserID: c.User.ID, ProjectID: project.ID})
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, out)
		return nil
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Location", r.URL.Path+"/"+j.UUID)
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, j.UUID)
	return nil
}

// NotebookJobName is the name JupyterHub's spawner gives every notebook job: the fair-use limit
// MaxNotebooksPerUser counts jobs by it.
const NotebookJobName = job.JupyterHubJobName

// DefaultMaxNotebooksPerUser is the master's default limit of notebooks per user.
const DefaultMaxNotebooksPerUser = 2

// notebookLimit is the fair-use limit of notebooks per user, for the store. A submission over
// it is refused with 409 Conflict, not 429: it conflicts with the state of the user's jobs, and
// waiting and retrying (what 429 invites clients to do) does not help until he stops one.
func (h *Handlers) notebookLimit() store.NameLimit {
	return store.NameLimit{Name: NotebookJobName, Max: h.cfg.MaxNotebooksPerUser}
}

// maxSubmitKey bounds the Idempotency-Key header of a submission.
const maxSubmitKey = 128

// submitKey reads the optional Idempotency-Key of a submission: a client that repeats a submit
// whose answer it lost sends the same key, and gets the job the first attempt made. Keys are
// per user.
func submitKey(r *http.Request) (string, error) {
	key := r.Header.Get("Idempotency-Key")
	if len(key) > maxSubmitKey {
		return "", fieldError("Idempotency-Key", "must be at most %d characters, not %d", maxSubmitKey, len(key))
	}
	for _, ch := range key {
		if ch < 0x21 || ch > 0x7e {
			return "", fieldError("Idempotency-Key", "must be printable ASCII without spaces")
		}
	}
	return key, nil
}

// resolveProject finds the project a job goes into: the one named by owner.projectUrn (a URN
// or a bare name), or the caller's only project. 403 when the caller is not a member.
func (h *Handlers) resolveProject(r *http.Request, c *Caller, given string) (store.Project, error) {
	ctx := r.Context()
	if given == "" && len(c.ProjectIDs) == 1 {
		// The common case, by the caller's own record: the project kept by id (a project's
		// URN and name never change), read only the first time; a submission's statement
		// less (bench/ B5). The caller's identity, read at this request, says he is a member.
		if ps, err := h.store.ProjectsByID(ctx, c.ProjectIDs[:1]); err == nil && len(ps) == 1 {
			return ps[0], nil
		}
		return h.store.GetProject(ctx, c.ProjectIDs[0])
	}
	if given == "" {
		ps, err := h.store.ListUserProjects(ctx, c.User.ID)
		if err != nil {
			return store.Project{}, err
		}
		switch len(ps) {
		case 0:
			return store.Project{}, errorf(http.StatusForbidden, "you are not a member of any project: ask an admin to add you to one")
		case 1:
			return ps[0], nil
		}
		names := make([]string, len(ps))
		for i, p := range ps {
			names[i] = p.Name
		}
		return store.Project{}, fieldError("owner.projectUrn", "is required: you are a member of several projects (%s); choose one (gpulab-cli --project NAME)", strings.Join(names, ", "))
	}
	var p store.Project
	var err error
	if strings.HasPrefix(given, "urn:") {
		p, err = h.store.GetProjectByURN(ctx, given)
	} else {
		p, err = h.store.GetProjectByName(ctx, given)
	}
	if errors.Is(err, store.ErrNotFound) {
		return store.Project{}, fieldError("owner.projectUrn", "no project %q exists", given)
	}
	if err != nil {
		return store.Project{}, err
	}
	if !c.InProject(p.ID) {
		return store.Project{}, errorf(http.StatusForbidden, "you are not a member of project %s", p.Name)
	}
	return p, nil
}

// checkReservations refuses a job naming a reservation that does not exist, has ended, or that
// neither the caller nor the job's project holds: the scheduler would only fail it later. The
// parser has checked that the ids are UUIDs.
func (h *Handlers) checkReservations(r *http.Request, c *Caller, project store.Project, ids []string) error {
	for i, id := range ids {
		field := fmt.Sprintf("request.scheduling.reservationIds[%d]", i)
		res, err := h.store.GetReservation(r.Context(), id)
		if errors.Is(err, store.ErrNotFound) {
			return fieldError(field, "no reservation %s exists", id)
		}
		if err != nil {
			return err
		}
		now, err := h.store.Now(r.Context())
		if err != nil {
			return err
		}
		if !res.End.After(now) {
			return fieldError(field, "reservation %s ended at %s", id, res.End.UTC().Format(time.RFC3339))
		}
		if !slices.Contains(res.UserIDs, c.User.ID) && !slices.Contains(res.ProjectIDs, project.ID) {
			return fieldError(field, "reservation %s is held neither by you nor by project %s", id, project.Name)
		}
	}
	return nil
}

// idPattern is what a job id or id prefix may look like.
var idPattern = regexp.MustCompile(`^[0-9a-fA-F-]{6,36}$`)

// findJob resolves {id} (a UUID or a unique prefix of at least 6 characters) to a job the
// caller may see in full. A job the caller may not see is 404, exactly like a missing one, so
// ids cannot be probed.
func (h *Handlers) findJob(r *http.Request, c *Caller) (*store.JobRecord, error) {
	id := r.PathValue("id")
	rec := c.Job
	var err error
	// The job read with the caller (GetUserAndJob) is the one of this id, which is then a UUID:
	// the pattern is not matched again (a regular expression was 2 % of a GET, bench B4).
	if rec == nil || rec.Job.UUID != strings.ToLower(id) {
		if !idPattern.MatchString(id) {
			return nil, fieldError("id", "must be a job UUID or a unique prefix of at least 6 characters, not %q", id)
		}
		rec, err = h.store.FindJob(r.Context(), id)
	}
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, errorf(http.StatusNotFound, "no job %s", id)
		}
		return nil, err
	}
	if !canSee(c, rec) {
		return nil, errorf(http.StatusNotFound, "no job %s", id)
	}
	return rec, nil
}

// userAndJob authenticates a user and resolves {id} to a job he may see.
func (h *Handlers) userAndJob(r *http.Request) (*Caller, *store.JobRecord, error) {
	c, err := requireUser(r)
	if err != nil {
		return nil, nil, err
	}
	rec, err := h.findJob(r, c)
	return c, rec, err
}

// canSee: owners, members of the job's project and admins see a job in full.
func canSee(c *Caller, rec *store.JobRecord) bool {
	if c.Confined && !c.InProject(rec.ProjectID) {
		return false
	}
	return c.Admin() || rec.UserID == c.User.ID || c.InProject(rec.ProjectID)
}

// canTouch: only the owner and admins change a job.
func canTouch(c *Caller, rec *store.JobRecord) bool {
	if c.Confined && !c.InProject(rec.ProjectID) {
		return false
	}
	return c.Admin() || rec.UserID == c.User.ID
}

func actorOf(c *Caller, rec *store.JobRecord) job.Actor {
	if rec.UserID == c.User.ID {
		return job.ActorOwner
	}
	return job.ActorAdmin
}

// presentOne is presentJobs for one job.
func (h *Handlers) presentOne(r *http.Request, c *Caller, rec *store.JobRecord) (any, error) {
	out, err := h.presentJobs(r.Context(), c, apiVersion(r.Context()), []*store.JobRecord{rec})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// presentV3 prepares a copy of a job for a v3.x answer (rec is not changed, see presentJobs):
// credentials always hidden, other users' jobs
// outside the caller's projects sanitized, v3.0 without what came with v3.1; SSH access as
// withSSH shows it.
func presentV3(c *Caller, rec *store.JobRecord, version string, ssh map[string]sshEndpoint, jump *SSHJumpHost) any {
	j := rec.Job.Redacted()
	if c == nil || !canSee(c, rec) {
		j = j.Sanitized()
	}
	withSSH(j, ssh, jump, rec.UserName, c != nil && canTouch(c, rec))
	if version != V30 {
		return j
	}
	return v30Job(j)
}

// v30Job drops what imec's v3.0 API did not have: restart information and the scheduler's
// state (both came with the halt/restart scheduler of v3.1).
func v30Job(j *job.Job) map[string]any {
	b, _ := json.Marshal(j)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	delete(m, "restartInfo")
	if st, ok := m["state"].(map[string]any); ok {
		delete(st, "scheduling")
	}
	return m
}

// GetJob is GET jobs/{id}.
func (h *Handlers) GetJob(w http.ResponseWriter, r *http.Request) error {
	c, rec, err := h.userAndJob(r)
	if err != nil {
		return err
	}
	out, err := h.presentOne(r, c, rec)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// listGroups maps the list filters to state groups.
var listGroups = []struct {
	param    string
	statuses []job.Status
}{
	{"pending", job.PendingStatuses},
	{"running", job.RunningStatuses},
	{"finished", job.FinishedStatuses},
	{"deleted", job.DeletedStatuses},
}

// jobFilter reads GET jobs' query into a store filter, naming the parameter on bad input.
func (h *Handlers) jobFilter(r *http.Request, c *Caller) (store.JobFilter, int, error) {
	q := r.URL.Query()
	var f store.JobFilter
	for _, g := range listGroups {
		on, err := boolParam(r, g.param)
		if err != nil {
			return f, 0, err
		}
		if on {
			f.Statuses = append(f.Statuses, g.statuses...)
		}
	}
	if v := q.Get("allowed_states"); v != "" {
		for _, s := range strings.Split(v, ",") {
			st, err := job.ParseStatus(s)
			if err != nil {
				return f, 0, fieldError("allowed_states", "%v", err)
			}
			f.Statuses = append(f.Statuses, st)
		}
	}
	if len(f.Statuses) == 0 {
		// imec's default: everything but deleted jobs.
		f.Statuses = append(append(append([]job.Status{}, job.PendingStatuses...), job.RunningStatuses...), job.FinishedStatuses...)
	}
	f.UserURN, f.UserName = q.Get("user_urn"), q.Get("user_name")
	f.ProjectURN, f.ProjectName = q.Get("project_urn"), q.Get("project_name")
	f.AssignedSlaveName, f.ReservationID = q.Get("assigned_slave_name"), q.Get("reservation_id")
	for _, name := range []string{"user_urn", "user_name", "project_urn", "project_name", "assigned_slave_name"} {
		if v := q.Get(name); len(v) > maxNameParam {
			return f, 0, fieldError(name, "is %d bytes long: at most %d bytes are accepted", len(v), maxNameParam)
		}
	}
	if f.ReservationID != "" {
		if _, err := uuid.Parse(f.ReservationID); err != nil || len(f.ReservationID) != 36 {
			return f, 0, fieldError("reservation_id", "must be a reservation UUID, not %.64q", f.ReservationID)
		}
	}
	var err error
	if f.ClusterID, err = intParam(r, "cluster_id", 1); err != nil {
		return f, 0, err
	}
	if q.Get("interactive") != "" {
		b, err := boolParam(r, "interactive")
		if err != nil {
			return f, 0, err
		}
		f.Interactive = &b
	}
	maxHours, err := intParam(r, "max_hours", 1)
	if err != nil {
		return f, 0, err
	}
	if maxHours > maxHoursParam {
		return f, 0, fieldError("max_hours", "must be at most %d (100 years), not %d", maxHoursParam, maxHours)
	}
	if maxHours > 0 {
		f.CreatedWithin = time.Duration(maxHours) * time.Hour
	}
	maxCount, err := intParam(r, "max_count", 1)
	if err != nil {
		return f, 0, err
	}
	page, err := intParam(r, "page", 1)
	if err != nil {
		return f, 0, err
	}
	pageSize, err := intParam(r, "page_size", 1)
	if err != nil {
		return f, 0, err
	}
	if pageSize > maxPageSize {
		return f, 0, fieldError("page_size", "must be at most %d, not %d", maxPageSize, pageSize)
	}
	switch {
	case pageSize > 0:
		f.Limit = pageSize
	case maxCount > 0:
		f.Limit = min(maxCount, 10*maxPageSize)
	case imecShape(r.Context()):
		f.Limit = imecDefaultPageSize
	default:
		f.Limit = maxPageSize
	}
	if maxCount > 0 && maxCount < f.Limit {
		f.Limit = maxCount
	}
	if page > 1 {
		f.Offset = (page - 1) * f.Limit
	}
	if s := q.Get("sort"); s != "" {
		if _, ok := store.SortKeys[strings.TrimPrefix(s, "-")]; !ok {
			keys := make([]string, 0, len(store.SortKeys))
			for k := range store.SortKeys {
				keys = append(keys, k)
			}
			return f, 0, fieldError("sort", "unknown sort key %q (one of %s, with - for descending)", s, strings.Join(sortedStrings(keys), ", "))
		}
		f.Sort = s
	}
	othersRunning, err := boolParam(r, "other_user_running")
	if err != nil {
		return f, 0, err
	}
	if (f.UserURN != "" || f.UserName != "") && (f.UserURN == "" || f.UserURN == c.User.URN) && (f.UserName == "" || f.UserName == c.User.Name) {
		// The caller's own jobs (the portal's "mine"): by id, which the store can use an
		// index for in order, instead of a join on the user's name or URN.
		f.UserURN, f.UserName = "", ""
		f.UserIDs = []int64{c.User.ID}
	}
	filtersWho := f.UserURN != "" || f.UserName != "" || f.ProjectURN != "" || f.ProjectName != "" || len(f.UserIDs) > 0
	// imec's `jobs` without -u asks v4.0 with no filter on who: imec's master answers the whole
	// queue, everybody's jobs, sanitized outside the caller's projects (presentJobs does that).
	wholeQueue := !filtersWho && imecShape(r.Context())
	if !filtersWho && !c.Admin() && !wholeQueue {
		f.UserIDs = []int64{c.User.ID}
	}
	// Everybody's running jobs on top (sanitized when outside the caller's projects).
	f.AlsoOthersRunning = othersRunning
	if !c.Admin() && !wholeQueue {
		f.Visible = &store.Visibility{UserID: c.User.ID, ProjectIDs: c.ProjectIDs, OthersRunning: othersRunning}
	}
	if page < 1 {
		page = 1
	}
	return f, page, nil
}

// jobList is the v4.0 list shape.
type jobList struct {
	Items    []any `json:"items"`
	Page     int   `json:"page"`
	PageSize int   `json:"pageSize"`
}

// ListJobs is GET jobs with imec's filters, paging and sort. Without filters on user or
// project it lists the caller's own jobs (admins: everybody's); v4.0, imec's, lists the whole
// queue then, 10 jobs unless page_size says otherwise, as imec's `jobs` expects.
func (h *Handlers) ListJobs(w http.ResponseWriter, r *http.Request) error {
	c, err := requireUser(r)
	if err != nil {
		return err
	}
	f, page, err := h.jobFilter(r, c)
	if err != nil {
		return err
	}
	f.Shared = true // presentJobs only reads them
	recs, err := h.store.ListJobs(r.Context(), f)
	if err != nil {
		return err
	}
	items, err := h.presentJobs(r.Context(), c, apiVersion(r.Context()), recs)
	if err != nil {
		return err
	}
	if apiVersion(r.Context()) == V40 {
		writeJSON(w, http.StatusOK, jobList{Items: items, Page: page, PageSize: f.Limit})
		return nil
	}
	writeJSON(w, http.StatusOK, items)
	return nil
}

// settableStatuses are the states a user may ask for with PUT jobs/{id}/state/status.
var settableStatuses = []job.Status{job.StatusCancelled, job.StatusMustHalt, job.StatusOnHold, job.StatusQueued}

// SetJobStatus is PUT jobs/{id}/state/status with a text body (CANCELLED, MUSTHALT, ONHOLD,
// QUEUED). The change is conditional on the state read, so a job that moved meanwhile gives
// 409 instead of a lost update.
func (h *Handlers) SetJobStatus(w http.ResponseWriter, r *http.Request) error {
	c, err := requireUser(r)
	if err != nil {
		return err
	}
	body, err := readBody(w, r, 1024)
	if err != nil {
		return err
	}
	text := strings.TrimSpace(string(body))
	var quoted string
	if json.Unmarshal(body, &quoted) == nil {
		text = quoted
	}
	to, err := job.ParseStatus(text)
	if err != nil || !containsStatus(settableStatuses, to) {
		return fieldError("status", "must be one of CANCELLED, MUSTHALT, ONHOLD or QUEUED, not %q", text)
	}
	rec, err := h.findJob(r, c)
	if err != nil {
		return err
	}
	if !canTouch(c, rec) {
		return errorf(http.StatusForbidden, "only the owner of job %s or an admin may change its state", rec.Job.UUID)
	}
	actor := actorOf(c, rec)
	from := rec.Job.State.Status
	if ok, why := job.CanTransition(from, to, actor); !ok {
		return errorf(http.StatusConflict, "%s", why)
	}
	// The write is conditional on the states from which this actor may ask for `to`, not only
	// on the one read: a job that moved on meanwhile (QUEUED → ASSIGNED → STARTING) can be
	// cancelled all the same, instead of the user getting a 409 for the scheduler's progress.
	from, err = h.store.TransitionJob(r.Context(), rec.Job.UUID, job.SourcesOf(to, actor), to,
		store.Event{Actor: string(actor), Message: fmt.Sprintf("%s by %s", strings.ToLower(string(to)), c.Actor())})
	if err != nil {
		return err
	}
	if to == job.StatusMustHalt {
		h.cfg.Metrics.ObserveHalt("USER")
	}
	h.wakeScheduler()
	updated, err := h.store.GetJob(r.Context(), rec.Job.UUID)
	if err != nil {
		return err
	}
	if slave := cmp.Or(updated.Job.State.Scheduling.AssignedSlaveName, rec.Job.State.Scheduling.AssignedSlaveName); slave != "" {
		h.wakeSlaves(r.Context(), slave) // a job to stop or halt
	}
	h.log.InfoContext(r.Context(), "job state changed", "job", rec.Job.UUID, "from", from, "to", to, "by", c.Actor())
	out, err := h.presentOne(r, c, updated)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func containsStatus(ss []job.Status, s job.Status) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// DeleteJob is DELETE jobs/{id}. An ended job becomes DELETED (hidden from default lists).
// force=true cancels a job that has not ended first; real=true (admins) removes the row with
// its events and log; finished=true only ever deletes ended jobs (409 otherwise, even with
// force), for scripts that clean up. v4.0 is imec's client's: there a QUEUED or ON HOLD job is
// cancelled and deleted without force, as imec's `rm` (with or without -f) expects.
func (h *Handlers) DeleteJob(w http.ResponseWriter, r *http.Request) error {
	c, err := requireUser(r)
	if err != nil {
		return err
	}
	var force, real, finished bool
	for name, dst := range map[string]*bool{"force": &force, "real": &real, "finished": &finished} {
		if *dst, err = boolParam(r, name); err != nil {
			return err
		}
	}
	rec, err := h.findJob(r, c)
	if err != nil {
		return err
	}
	if !canTouch(c, rec) {
		return errorf(http.StatusForbidden, "only the owner of job %s or an admin may delete it", rec.Job.UUID)
	}
	if real && !c.Admin() {
		return errorf(http.StatusForbidden, "real=true (removing the job for good) is for admins only")
	}
	ctx, id, actor := r.Context(), rec.Job.UUID, actorOf(c, rec)
	st := rec.Job.State.Status
	if !st.Ended() {
		// imec's rm (v4.0) removes a job that has not started without a flag: its -f only adds
		// ended jobs, and its force is for running ones.
		pendingImec := imecShape(ctx) && (st == job.StatusQueued || st == job.StatusOnHold)
		if !pendingImec && (finished || !force) {
			return errorf(http.StatusConflict, "job %s is %s: only ended jobs can be deleted (cancel it first, or use force=true)", id, st)
		}
		if _, err := h.store.TransitionJob(ctx, id, job.SourcesOf(job.StatusCancelled, actor), job.StatusCancelled,
			store.Event{Actor: string(actor), Message: "cancelled by " + c.Actor() + " to delete it"}); err != nil {
			return err
		}
		st = job.StatusCancelled
		h.wakeScheduler()
		if slave := rec.Job.State.Scheduling.AssignedSlaveName; slave != "" {
			h.wakeSlaves(ctx, slave)
		}
	}
	if real {
		if err := h.store.DeleteJobRow(ctx, id); err != nil {
			return err
		}
		h.log.InfoContext(ctx, "job removed", "job", id, "by", c.Actor())
		writeJSON(w, http.StatusOK, map[string]any{"uuid": id, "removed": true})
		return nil
	}
	if st != job.StatusDeleted {
		if _, err := h.store.TransitionJob(ctx, id, []job.Status{st}, job.StatusDeleted,
			store.Event{Actor: string(actor), Message: "deleted by " + c.Actor()}); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"uuid": id, "status": job.StatusDeleted})
	return nil
}

// JobEvents is GET jobs/{id}/debug: every event of the job, oldest first; for v4.0 a JSON
// list of imec's JobEvent (imec's client reads a bare list here, not {"items": ...}).
func (h *Handlers) JobEvents(w http.ResponseWriter, r *http.Request) error {
	_, rec, err := h.userAndJob(r)
	if err != nil {
		return err
	}
	evs, err := h.store.ListJobEvents(r.Context(), rec.Job.UUID)
	if err != nil {
		return err
	}
	if imecShape(r.Context()) {
		writeJSON(w, http.StatusOK, imecJobEvents(evs))
		return nil
	}
	writeList(w, r, evs)
	return nil
}

var rangePattern = regexp.MustCompile(`^bytes=(\d+)-$`)

// JobLog is GET jobs/{id}/log: the container's output. `Range: bytes=N-` answers 206 with the
// rest from byte N; an empty log is 204, so a follower knows to wait.
func (h *Handlers) JobLog(w http.ResponseWriter, r *http.Request) error {
	_, rec, err := h.userAndJob(r)
	if err != nil {
		return err
	}
	data, size, from, ranged, err := h.readLog(w, r, rec)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Accept-Ranges", "bytes")
	switch {
	case size == 0 && !ranged && imecShape(r.Context()):
		// imec's client (v4.0) without -f asks again on a 204 until it is given an end, so an
		// empty log is an empty 200 for it: the end is 0, and it stops.
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(http.StatusOK)
	case size == 0 || (ranged && from == size):
		w.WriteHeader(http.StatusNoContent)
	case ranged:
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", from, logRangeEnd(r.Context(), size), size))
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.WriteHeader(http.StatusPartialContent)
		_, _ = w.Write(data)
	default:
		// Always with its length: a log larger than the server's buffer would otherwise go
		// chunked, and imec's `log -f` takes the next offset from Content-Length (0 without one,
		// printing the whole log again every second).
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		_, _ = w.Write(data)
	}
	return nil
}

// logRangeEnd is the end written in the Content-Range of a partial log answer. HTTP's is the
// last byte sent (size-1), which v3.x and our CLI use. imec's gpulab-cli (v4.0) asks for its
// next piece from the end it was given (`log -f`), so with HTTP's end it would get and print the
// last byte again every second; v4.0 gives it the size, where the next piece starts.
func logRangeEnd(ctx context.Context, size int64) int64 {
	if imecShape(ctx) {
		return size
	}
	return size - 1
}

// readLog reads a job's log from the offset of a `Range: bytes=N-` header (0 without one), for
// the API's log and the portal's live tail alike. A range past the end is 416.
func (h *Handlers) readLog(w http.ResponseWriter, r *http.Request, rec *store.JobRecord) (data []byte, size, from int64, ranged bool, err error) {
	if rg := r.Header.Get("Range"); rg != "" {
		m := rangePattern.FindStringSubmatch(rg)
		if m == nil {
			return nil, 0, 0, false, fieldError("Range", "only `bytes=N-` is supported, not %q", rg)
		}
		from, _ = strconv.ParseInt(m[1], 10, 64)
		ranged = true
	}
	data, size, err = h.store.ReadJobLog(r.Context(), rec.Job.UUID, from)
	if err != nil {
		return nil, 0, 0, false, err
	}
	if from > size {
		w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", size))
		return nil, 0, 0, false, &Error{Status: http.StatusRequestedRangeNotSatisfiable, Message: fmt.Sprintf("log has only %d bytes", size)}
	}
	return data, size, from, ranged, nil
}

// jobOptionsFor is the job parsing options for a caller: a version 1 file's `email_run: true`
// means the caller's address (none without a caller: then it is refused, naming the key).
func (h *Handlers) jobOptionsFor(c *Caller) job.Options {
	opts := h.cfg.JobOptions
	if c != nil && c.Kind == pki.KindUser {
		opts.SubmitterEmail = c.User.Email
	}
	return opts
}

// Convert is POST convert: a v1 (or v2) document in, the normalised v2 request out.
func (h *Handlers) Convert(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(w, r, maxJobBody)
	if err != nil {
		return err
	}
	j, err := job.Parse(body, h.jobOptionsFor(CallerFrom(r.Context())))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, job.Submission(j.Redacted()))
	return nil
}

func sortedStrings(ss []string) []string {
	sort.Strings(ss)
	return ss
}
