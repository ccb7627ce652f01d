package views

import (
	"context"
	"io"
	"time"

	"github.com/a-h/templ"
	templruntime "github.com/a-h/templ/runtime"

	"github.com/opengpulab/gpulab/job"
)

// The job list's row and what it is made of (the state badge, the relative time, the job's
// actions) are written in Go, not templ, because they are rendered 25 times a page and the
// page is the portal's most frequent read: templ passes every interpolated value through
// fmt.Sprint (templ.JoinStringErrs, in v0.3.960 as in v0.3.1100) and every class list through
// a CSS-class processor, which were a third of the rows' CPU and over half of their
// allocations (bench/ B4, views BenchmarkJobsPage). The markup is byte for byte what the templ
// components wrote (TestJobRowsGolden compares it with their output); values are escaped with
// templ's own escaper and URLs sanitized with templ.URL, as the generated code does.

// markup writes literal markup and escaped values to a templ buffer, keeping the first error
// so that a component writes straight on and checks once.
type markup struct {
	b   *templruntime.Buffer
	err error
}

// raw writes markup as it is: only literals and values that need no escaping.
func (m *markup) raw(ss ...string) {
	for _, s := range ss {
		if m.err != nil {
			return
		}
		_, m.err = m.b.WriteString(s)
	}
}

// text writes a value escaped for an attribute or an element's text.
func (m *markup) text(s string) { m.raw(templ.EscapeString(s)) }

// url writes a URL sanitized (a scheme other than http(s), mailto, tel or ftp(s) is refused)
// and escaped, as templ writes an href or action.
func (m *markup) url(s string) { m.text(string(templ.URL(s))) }

// component gives a component written with markup the buffer templ's components share: the
// parent's when it renders inside one, a pooled one flushed at the end otherwise.
func component(write func(m *markup)) templ.Component {
	return templ.ComponentFunc(func(ctx context.Context, w io.Writer) (err error) {
		if err := ctx.Err(); err != nil {
			return err
		}
		b, isBuffer := templruntime.GetBuffer(w)
		if !isBuffer {
			defer func() {
				if rerr := templruntime.ReleaseBuffer(b); err == nil {
					err = rerr
				}
			}()
		}
		m := markup{b: b}
		write(&m)
		return m.err
	})
}

// StatusBadge shows a job's current state in its family's colour.
func StatusBadge(s job.Status) templ.Component {
	return component(func(m *markup) { m.statusBadge(s) })
}

func (m *markup) statusBadge(s job.Status) {
	m.raw(`<span class="badge state-`)
	m.text(stateFamily(s))
	m.raw(`" data-testid="job-status" data-status="`)
	m.text(string(s))
	m.raw(`">`)
	m.text(string(s))
	m.raw(`</span>`)
}

// TimeAgo shows a time relative to now, with the absolute time on hover and in datetime.
func TimeAgo(t, now time.Time) templ.Component {
	return component(func(m *markup) { m.timeAgo(t, now) })
}

func (m *markup) timeAgo(t, now time.Time) {
	m.raw(`<time datetime="`)
	m.text(isoTime(t))
	m.raw(`" title="`)
	m.text(absTime(t))
	m.raw(`">`)
	m.text(ago(now, t))
	m.raw(`</time>`)
}

// JobRowView is one row of the job list (#job-row-<uuid>); an action answers with it.
func JobRowView(r JobRow, c Chrome) templ.Component {
	return component(func(m *markup) { m.jobRow(r, c) })
}

func (m *markup) jobRow(r JobRow, c Chrome) {
	j := r.Job
	id := "job-row-" + j.UUID
	m.raw(`<tr id="`)
	m.text(id)
	m.raw(`" data-testid="`)
	m.text(id)
	m.raw(`" data-status="`)
	m.text(string(j.State.Status))
	m.raw(`"><td data-label="Job">`)
	if r.Full {
		m.raw(`<a id="job-link-`)
		m.text(j.UUID)
		m.raw(`" href="`)
		m.url(jobURL(j.UUID))
		m.raw(`" class="job-name" data-testid="job-link">`)
		m.text(j.Name)
		m.raw(`</a>`)
	} else {
		m.raw(`<span class="job-name muted" title="another project's job">`)
		m.text(j.Name)
		m.raw(`</span>`)
	}
	m.raw(`<div class="sub mono" title="`)
	m.text(j.UUID)
	m.raw(`">`)
	m.text(shortID(j.UUID))
	m.raw(`</div></td><td data-label="State">`)
	m.statusBadge(j.State.Status)
	if len(j.State.IdleGPUs) > 0 {
		m.raw(`<span class="badge idle" data-testid="idle-badge" title="GPU `)
		m.text(intList(j.State.IdleGPUs))
		m.raw(` under the idle threshold">idle GPUs</span> `)
	}
	if rg := queuedRange(j); rg != "" {
		m.raw(`<div class="sub" data-testid="job-row-estimate" title="expected start (UTC)">`)
		m.text(rg)
		m.raw(`</div>`)
	}
	m.raw(`</td><td data-label="User">`)
	m.text(r.User)
	m.raw(`</td><td data-label="Project">`)
	m.text(r.Project)
	m.raw(`</td><td data-label="Resources">`)
	m.text(resources(j.Request.Resources))
	m.raw(`</td><td data-label="Slave">`)
	if slave := j.State.Scheduling.AssignedSlaveName; slave != "" {
		m.text(slave)
	} else {
		m.raw(`<span class="muted">–</span>`)
	}
	m.raw(`</td><td data-label="Created">`)
	m.timeAgo(j.State.Created, c.Now)
	m.raw(`</td><td class="actions">`)
	m.jobActions(r, c, "#"+id, "/jobs")
	m.raw(`</td></tr>`)
}

// JobActionsView is the action buttons of a job: each a real form (it works without
// JavaScript, then redirects to next), enhanced by htmx to replace target in place. Each
// control has an id of its own (action and job), the same after every live refresh of the
// list or the job page: htmx then gives the focus back to it, where a keyboard user would
// otherwise be sent back to the top of the page every few seconds.
func JobActionsView(r JobRow, c Chrome, target, next string) templ.Component {
	return component(func(m *markup) { m.jobActions(r, c, target, next) })
}

func (m *markup) jobActions(r JobRow, c Chrome, target, next string) {
	j := r.Job
	m.raw(`<div class="action-group" data-testid="job-actions">`)
	if r.CanTouch {
		for _, a := range JobActions(j.State.Status) {
			u := actionURL(j.UUID, a.Name)
			m.raw(`<form method="post" action="`)
			m.url(u)
			m.raw(`" class="inline" hx-post="`)
			m.text(u)
			m.raw(`" hx-target="`)
			m.text(target)
			m.raw(`" hx-swap="outerHTML"`)
			if a.Confirm {
				m.raw(` hx-confirm="`)
				m.text(a.Label)
				m.raw(` job `)
				m.text(j.Name)
				m.raw(`?"`)
			}
			m.raw(`><input type="hidden" name="csrf_token" value="`)
			m.text(c.CSRFToken)
			m.raw(`"><input type="hidden" name="next" value="`)
			m.text(next)
			m.raw(`"> <button id="action-`)
			m.text(a.Name)
			m.raw(`-`)
			m.text(j.UUID)
			m.raw(`" type="submit" class="button small action-`)
			m.text(a.Name)
			m.raw(`" data-testid="action-`)
			m.text(a.Name)
			m.raw(`" aria-label="`)
			m.text(a.Label)
			m.raw(` job `)
			m.text(j.Name)
			m.raw(`">`)
			m.text(a.Label)
			m.raw(`</button></form>`)
		}
	}
	if r.Full {
		m.raw(`<a id="action-clone-`)
		m.text(j.UUID)
		m.raw(`" class="button small ghost" href="`)
		m.url("/jobs/new?clone=" + j.UUID)
		m.raw(`" data-testid="action-clone" aria-label="Clone job `)
		m.text(j.Name)
		m.raw(`">Clone</a>`)
	}
	m.raw(`</div>`)
}
