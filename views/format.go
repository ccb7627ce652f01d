package views

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
)

// htmxConfig is htmx's configuration (the htmx-config meta tag): error answers (4xx, 5xx) are
// swapped too, so a refused action shows its message (the server retargets it to #flash) and a
// form with problems is shown with them; 204 leaves the page as it is.
const htmxConfig = `{"responseHandling":[{"code":"204","swap":false},{"code":"[23]..","swap":true},{"code":"[45]..","swap":true,"error":true}]}`

// csrfHeaders is the hx-headers value of <body>: every htmx request sends the CSRF token.
func csrfHeaders(token string) string {
	b, _ := json.Marshal(map[string]string{"X-CSRF-Token": token})
	return string(b)
}

// rangeHeader is the hx-headers value that asks for a log from byte offset n on, with the
// Range logic of the API's log endpoint.
func rangeHeader(n int64) string {
	b, _ := json.Marshal(map[string]string{"Range": fmt.Sprintf("bytes=%d-", n)})
	return string(b)
}

// isoTime is a <time datetime> value.
func isoTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// absTime is the absolute time shown on hover.
func absTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

// ago says how long ago (or in how long) t is, in the largest sensible unit.
func ago(now, t time.Time) string {
	d := now.Sub(t)
	future := d < 0
	if future {
		d = -d
	}
	var s string
	switch {
	case d < 10*time.Second:
		return "just now"
	case d < time.Minute:
		s = fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		s = fmt.Sprintf("%d min", int(d.Minutes()))
	case d < 48*time.Hour:
		h := int(d.Hours())
		s = fmt.Sprintf("%d h", h)
		if m := int(d.Minutes()) % 60; h < 10 && m > 0 {
			s += fmt.Sprintf(" %d min", m)
		}
	default:
		s = fmt.Sprintf("%d days", int(d.Hours()/24))
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}

// stateFamily groups states by colour: one badge colour per family.
func stateFamily(s job.Status) string {
	switch s {
	case job.StatusOnHold, job.StatusQueued:
		return "pending"
	case job.StatusAssigned, job.StatusStarting, job.StatusRunning:
		return "running"
	case job.StatusMustHalt, job.StatusHalting, job.StatusHalted:
		return "halting"
	case job.StatusFinished:
		return "finished"
	case job.StatusFailed:
		return "failed"
	case job.StatusCancelled:
		return "cancelled"
	case job.StatusDeleted:
		return "deleted"
	}
	return "unknown"
}

// shortID is the first 8 characters of a UUID, as lists show it.
func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// num shows a resource amount without needless decimals.
func num(f float64) string {
	if f == math.Trunc(f) {
		return strconv.FormatFloat(f, 'f', 0, 64)
	}
	return strconv.FormatFloat(f, 'f', 1, 64)
}

// freeTotal is "free / total".
func freeTotal(ft FreeTotal) string { return num(ft.Free) + " / " + num(ft.Total) }

// percentFree is how much of a free/total pair is free, for meters (0–100): the quantity
// their labels say.
func percentFree(ft FreeTotal) int {
	if ft.Total <= 0 {
		return 0
	}
	return int(math.Round(100 * ft.Free / ft.Total))
}

// gib shows MiB as GiB.
func gib(mib int64) string { return num(math.Round(float64(mib)/1024*10)/10) + " GiB" }

// sizeText shows a byte count in the largest fitting binary unit.
func sizeText(n int64) string {
	switch {
	case n >= 1<<30:
		return num(math.Round(float64(n)/(1<<30)*10)/10) + " GiB"
	case n >= 1<<20:
		return num(math.Round(float64(n)/(1<<20)*10)/10) + " MiB"
	case n >= 1<<10:
		return num(math.Round(float64(n)/(1<<10)*10)/10) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// resources summarises a job's request: "2 GPU · 4 CPU · 16 GB".
// Every row of the Jobs page shows one, so it is concatenated rather than formatted.
func resources(r job.Resources) string {
	s := strconv.Itoa(r.CPUs) + " CPU · " + strconv.Itoa(r.CPUMemoryGb) + " GB"
	if r.GPUs > 0 {
		s = strconv.Itoa(r.GPUs) + " GPU · " + s
	}
	return s
}

// jobURL is the detail page of a job.
func jobURL(id string) string { return "/jobs/" + id }

// actionURL is where a job action posts.
func actionURL(id, action string) string { return "/jobs/" + id + "/" + action }

// JobAction is a state change offered on a job.
type JobAction struct {
	Name, Label string
	// Confirm asks before an action that cannot be undone.
	Confirm bool
}

// JobActions lists the actions a job's state allows its owner: the transition table decides,
// so the buttons offered are exactly those the API accepts. The list is shared: not to be
// changed.
func JobActions(s job.Status) []JobAction {
	if a, ok := jobActions[s]; ok {
		return a
	}
	return jobActionsOf(s)
}

// jobActions is jobActionsOf worked out once for every state: the Jobs page asks for every
// row, and each refusal of CanTransition formats its reason.
var jobActions = func() map[job.Status][]JobAction {
	m := make(map[job.Status][]JobAction, len(job.AllStatuses))
	for _, s := range job.AllStatuses {
		m[s] = jobActionsOf(s)
	}
	return m
}()

func jobActionsOf(s job.Status) []JobAction {
	var out []JobAction
	can := func(to job.Status) bool { ok, _ := job.CanTransition(s, to, job.ActorOwner); return ok }
	if can(job.StatusQueued) {
		out = append(out, JobAction{Name: "release", Label: "Release"})
	}
	if can(job.StatusOnHold) {
		out = append(out, JobAction{Name: "hold", Label: "Hold"})
	}
	if can(job.StatusMustHalt) {
		out = append(out, JobAction{Name: "halt", Label: "Halt"})
	}
	if can(job.StatusCancelled) {
		out = append(out, JobAction{Name: "cancel", Label: "Cancel", Confirm: true})
	}
	if can(job.StatusDeleted) {
		out = append(out, JobAction{Name: "delete", Label: "Delete", Confirm: true})
	}
	return out
}

// jobsURL is the Jobs page with a filter.
func jobsURL(q JobsQuery) string {
	v := url.Values{}
	if q.Scope != "" && q.Scope != "mine" {
		v.Set("scope", q.Scope)
	}
	if q.State != "" {
		v.Set("state", q.State)
	}
	if q.Project != "" {
		v.Set("project", q.Project)
	}
	if q.Cluster != "" {
		v.Set("cluster", q.Cluster)
	}
	if q.Page > 1 {
		v.Set("page", strconv.Itoa(q.Page))
	}
	if len(v) == 0 {
		return "/jobs"
	}
	return "/jobs?" + v.Encode()
}

// withScope is q with another scope.
func withScope(q JobsQuery, scope string) JobsQuery { q.Scope, q.Page = scope, 0; return q }

// pageOf is q's page number (1 when none is given).
func pageOf(q JobsQuery) int { return max(q.Page, 1) }

// withPage is q showing another page.
func withPage(q JobsQuery, page int) JobsQuery { q.Page = page; return q }

// scopeOf is the effective scope ("mine" when none is given).
func scopeOf(q JobsQuery) string {
	if q.Scope == "" {
		return "mine"
	}
	return q.Scope
}

// stateChoices are the options of the Jobs page's state filter.
var stateChoices = []Choice{
	{"", "All but deleted"},
	{"pending", "Pending (on hold, queued)"},
	{"running", "Running"},
	{"finished", "Ended"},
	{"deleted", "Deleted"},
}

// timelineOf orders a job's event times.
func timelineOf(times map[job.Status]time.Time) []TimelineEntry {
	out := make([]TimelineEntry, 0, len(times))
	for s, t := range times {
		out = append(out, TimelineEntry{Status: s, At: t})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// Timeline orders a job's event times, oldest first.
func Timeline(times map[job.Status]time.Time) []TimelineEntry { return timelineOf(times) }

// errorText is the title of an error page.
func errorText(status int) string {
	switch status {
	case 400:
		return "That did not work"
	case 401:
		return "Please log in"
	case 403:
		return "Not allowed"
	case 404:
		return "Not found"
	case 409:
		return "Conflict"
	case 503:
		return "Temporarily unavailable"
	}
	if status >= 500 {
		return "Something went wrong"
	}
	return "Error"
}

// fieldID is the id of a Create Job form control.
func fieldID(name string) string { return "field-" + name }

// errorID is the id (and test id) of a form field's error message.
func errorID(name string) string { return "error-" + name }

// describedBy links a control to its hint and its error.
func describedBy(name string, errs map[string][]string, hint bool) string {
	var ids []string
	if hint {
		ids = append(ids, "hint-"+name)
	}
	if len(errs[name]) > 0 {
		ids = append(ids, errorID(name))
	}
	return strings.Join(ids, " ")
}

func boolString(b bool) string { return strconv.FormatBool(b) }

func itoa(n int) string { return strconv.Itoa(n) }

func i64toa(n int64) string { return strconv.FormatInt(n, 10) }

// CalendarDays are n days from the one holding now on, each at midnight UTC: the columns of the
// reservations calendar.
func CalendarDays(now time.Time, n int) []time.Time {
	d := now.UTC().Truncate(24 * time.Hour)
	out := make([]time.Time, n)
	for i := range out {
		out[i] = d.AddDate(0, 0, i)
	}
	return out
}

// covers says whether a window [start, end) overlaps the UTC day starting at day.
func covers(start, end, day time.Time) bool {
	return start.Before(day.AddDate(0, 0, 1)) && end.After(day)
}

// dayLabel is a calendar column's heading: "Mon 7".
func dayLabel(d time.Time) string { return d.Format("Mon 2") }

// queuedRange is a queued job's estimated start range for the job list ("" when none).
func queuedRange(j *job.Job) string {
	if j.State.Status != job.StatusQueued {
		return ""
	}
	return j.State.Scheduling.EstimateRange(time.Now(), time.UTC)
}

// durText says how long d is, in the largest sensible unit: "40 s", "44 min", "3 h 16 min",
// "2 days 5 h".
func durText(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d.Minutes()))
	case d < 48*time.Hour:
		h := int(d.Hours())
		s := fmt.Sprintf("%d h", h)
		if m := int(d.Minutes()) % 60; m > 0 {
			s += fmt.Sprintf(" %d min", m)
		}
		return s
	}
	days := int(d.Hours() / 24)
	s := fmt.Sprintf("%d days", days)
	if h := int(d.Hours()) % 24; h > 0 {
		s += fmt.Sprintf(" %d h", h)
	}
	return s
}

// runClock is how long a started job has run and how much of its maxDuration is left, as the
// job page says them; ok is false for a job that is not running.
func runClock(j *job.Job, now time.Time) (ran, left string, ok bool) {
	started, was := j.State.EventTimes[job.StatusRunning]
	if !was || j.State.Status.Ended() || stateFamily(j.State.Status) == "pending" {
		return "", "", false
	}
	d := max(now.Sub(started), 0)
	ran = durText(d)
	if maxD := time.Duration(j.Request.Scheduling.MaxDuration); maxD > 0 {
		if rest := maxD - d; rest > 0 {
			left = durText(rest)
		} else {
			left = "none (over by " + durText(rest) + ")"
		}
	}
	return ran, left, true
}

// endReason is why an ended job ended, as its last event into that state says it ("" while
// it lives, or when no event says).
func endReason(j *job.Job, events []store.Event) string {
	if !j.State.Status.Ended() {
		return ""
	}
	for i := len(events) - 1; i >= 0; i-- {
		if e := events[i]; e.ToStatus == string(j.State.Status) && e.Message != "" {
			return e.Message
		}
	}
	return ""
}

// slaveText is the Slave fact of a job that has none: "not placed yet" while the scheduler may
// still place it, "never placed" once it ended without.
func slaveText(j *job.Job) string {
	if j.State.Status.Ended() {
		return "never placed"
	}
	return "not placed yet"
}

// TimelineStep is a timeline entry as the job page shows it: the time, and how long the job
// stayed in that state ("queued for 2 min"; "" for the last state of an ended job).
type TimelineStep struct {
	TimelineEntry
	Stay string
}

// stayVerb names the time spent in a state.
func stayVerb(s job.Status, current bool) string {
	switch s {
	case job.StatusQueued:
		return "queued for"
	case job.StatusOnHold:
		return "on hold for"
	case job.StatusAssigned, job.StatusStarting:
		return "starting took"
	case job.StatusRunning:
		if current {
			return "running for"
		}
		return "ran for"
	case job.StatusMustHalt, job.StatusHalting:
		return "halting took"
	}
	return "for"
}

// timelineSteps adds to each timeline entry how long the job stayed in the state: until the
// next entry, or until now for the state it is still in.
func timelineSteps(entries []TimelineEntry, cur job.Status, now time.Time) []TimelineStep {
	out := make([]TimelineStep, len(entries))
	for i, e := range entries {
		out[i].TimelineEntry = e
		switch {
		case i+1 < len(entries):
			out[i].Stay = stayVerb(e.Status, false) + " " + durText(entries[i+1].At.Sub(e.At))
		case !e.Status.Ended() && e.Status == cur:
			out[i].Stay = stayVerb(e.Status, true) + " " + durText(now.Sub(e.At))
		}
	}
	return out
}

// TextPart is a piece of a scheduler explanation: text, or a job the text names (JobID, shown
// as a link to its page).
type TextPart struct {
	Text, JobID string
}

// jobMention is how the scheduler names a job in its explanations: "job " and its short id.
var jobMention = regexp.MustCompile(`\bjob ([0-9a-f]{8}(?:-[0-9a-f-]{4,})?)\b`)

// explainParts splits an explanation so that the jobs it names become links.
func explainParts(s string) []TextPart {
	var out []TextPart
	last := 0
	for _, m := range jobMention.FindAllStringSubmatchIndex(s, -1) {
		out = append(out, TextPart{Text: s[last:m[2]]}, TextPart{Text: s[m[2]:m[3]], JobID: s[m[2]:m[3]]})
		last = m[3]
	}
	if last < len(s) {
		out = append(out, TextPart{Text: s[last:]})
	}
	return out
}

// expectedPrefix starts the scheduler's explanation line that says when a job is expected to
// start; the page shows that start once, in its own line.
const expectedPrefix = "expected start "

// waitReasons are the explanations the "Why it waits" list shows: all but the expected start,
// which the page shows once below them.
func waitReasons(p JobDetailView) []string {
	out := make([]string, 0, len(p.Explanations))
	for _, e := range p.Explanations {
		if p.EstimatedStart != nil && strings.HasPrefix(e, expectedPrefix) {
			continue
		}
		out = append(out, e)
	}
	return out
}

// expectedBecause is the reason part of the scheduler's expected-start line ("when job
// 1234abcd reaches its maxDuration"), "" when it gave none.
func expectedBecause(explanations []string) string {
	for _, e := range explanations {
		if rest, ok := strings.CutPrefix(e, expectedPrefix); ok {
			if _, because, ok := strings.Cut(rest, " "); ok {
				return because
			}
		}
	}
	return ""
}

// expectedStart is the expected start of a queued job, in one format: the likely range (UTC)
// when the scheduler gave one, else the time; with how far off it is.
func expectedStart(p JobDetailView) string {
	at := *p.EstimatedStart
	s := at.UTC().Format("2006-01-02 15:04") + " UTC"
	if p.EstimateRange != "" {
		s = p.EstimateRange + " UTC"
	}
	return s + " (" + ago(p.Now, at) + ")"
}
