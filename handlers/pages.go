package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/a-h/templ"

	"github.com/opengpulab/gpulab/views"
)

// The portal's pages. They run over the API's own handlers and helpers: where a page shows
// what an API call returns, it computes the same data (jobFilter, clusterInfos, findJob) and
// renders it three ways — JSON for `Accept: application/json` (exactly the API's answer), a
// partial for htmx (`HX-Request`), a full page otherwise. State changes call the API handlers
// in-process (apiCall), so a page can never allow what the API refuses. Errors are mapped once,
// by WriteError; pages show the same status and message as an error page, or in #flash for
// htmx.

// maxFormBody bounds a portal form (the Create Job form carries a whole job).
const maxFormBody = 2 << 20

// isHTMX reports whether htmx made the request (and so wants a partial).
func isHTMX(r *http.Request) bool { return r.Header.Get("HX-Request") == "true" }

// Page adapts a page handler to the route table: an error it returns is shown as an error
// page (or, for htmx, in #flash) with the status and message the API would give; a request
// for JSON gets the API's JSON error.
func (h *Handlers) Page(fn Func) Func {
	return func(w http.ResponseWriter, r *http.Request) error {
		err := fn(w, r)
		if err == nil {
			return nil
		}
		if wantsJSON(r) {
			h.WriteError(w, r, err)
			return nil
		}
		h.WriteErrorPage(w, r, err)
		return nil
	}
}

// WriteErrorPage shows an error to a browser, mapped exactly as WriteError maps it for the
// API: the portal's error page, or for htmx the message in #flash. Middleware that fails
// before a page handler runs (authentication reading the user while the database is down)
// uses it for page requests, so the browser shows a readable page with the right status.
func (h *Handlers) WriteErrorPage(w http.ResponseWriter, r *http.Request, err error) {
	ev := h.errorView(w, r, err)
	var rerr error
	if isHTMX(r) {
		// htmx swaps error answers too (see the htmx-config meta tag): show the message in
		// #flash instead of the target the request meant to replace.
		w.Header().Set("HX-Retarget", "#flash")
		w.Header().Set("HX-Reswap", "innerHTML")
		rerr = h.render(w, r, ev.Status, views.ErrorFlash(ev))
	} else {
		rerr = h.render(w, r, ev.Status, views.ErrorPage(h.chrome(r, ""), ev))
	}
	if rerr != nil {
		w.Header().Del("HX-Retarget")
		w.Header().Del("HX-Reswap")
		h.WriteError(w, r, rerr)
	}
}

// errorView maps an error exactly as the API does (WriteError is the one mapping), reads back
// the status, message and field problems it chose, and passes on the headers a client acts on
// (Retry-After).
func (h *Handlers) errorView(w http.ResponseWriter, r *http.Request, err error) views.ErrorView {
	cw := newCapture()
	h.WriteError(cw, r, err)
	if ra := cw.header.Get("Retry-After"); ra != "" {
		w.Header().Set("Retry-After", ra)
	}
	var body errorBody
	_ = json.Unmarshal(cw.body.Bytes(), &body)
	return views.ErrorView{Status: cw.status, Message: body.Error, Details: body.Details}
}

// render writes a component as HTML with a status. It renders into a buffer first, so a
// failure is a clean 500 and never half a page.
func (h *Handlers) render(w http.ResponseWriter, r *http.Request, status int, c templ.Component) error {
	// Made in a buffer kept from page to page: grown anew for each, a Jobs page's buffer
	// (~45 kB) was copied as it doubled, 7 % of the master's CPU a page (bench B4).
	buf := bodyBuffers.Get().(*bytes.Buffer)
	defer putBodyBuffer(buf)
	if err := c.Render(r.Context(), buf); err != nil {
		return err
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	// One URL answers a full page or a partial, depending on HX-Request.
	hd.Add("Vary", "HX-Request")
	hd.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
	return nil
}

// chrome is what the layout needs: the caller, the CSRF token, the menu entry and the clock.
func (h *Handlers) chrome(r *http.Request, active string) views.Chrome {
	ch := views.Chrome{CSRFToken: CSRFToken(r.Context()), Active: active, Now: time.Now()}
	if c := CallerFrom(r.Context()); c != nil {
		ch.UserName, ch.Admin = c.User.Name, c.Admin()
	}
	return ch
}

// seeOther ends a successful form post: a 303 to the page to show next (Post/Redirect/Get),
// or for htmx an HX-Redirect that htmx follows.
func seeOther(w http.ResponseWriter, r *http.Request, to string) error {
	if isHTMX(r) {
		w.Header().Set("HX-Redirect", to)
		w.WriteHeader(http.StatusOK)
		return nil
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
	return nil
}

// localPath returns p if it is a path on this site (so a form's `next` cannot send the user
// elsewhere), else fallback.
func localPath(p, fallback string) string {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.ContainsAny(p, "\\\r\n") {
		return fallback
	}
	u, err := url.Parse(p)
	if err != nil || u.Scheme != "" || u.Host != "" {
		return fallback
	}
	return p
}

// parseForm reads a posted form, bounded.
func parseForm(w http.ResponseWriter, r *http.Request) error {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBody)
	if err := r.ParseForm(); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) || errors.Is(err, os.ErrDeadlineExceeded) {
			return bodyError(err)
		}
		return errorf(http.StatusBadRequest, "read form: %v", err)
	}
	return checkForm(r)
}

// capture is a ResponseWriter that keeps what a handler wrote, for handlers called in-process.
type capture struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func newCapture() *capture { return &capture{header: http.Header{}, status: http.StatusOK} }

func (c *capture) Header() http.Header         { return c.header }
func (c *capture) Write(b []byte) (int, error) { return c.body.Write(b) }
func (c *capture) WriteHeader(status int)      { c.status = status }

// apiCall runs an API handler in-process on behalf of a page request: same caller, same
// checks, same transitions and events as the JSON API, so the portal cannot drift from it.
// id becomes the {id} path value; query and body are what the API call would carry.
func apiCall(r *http.Request, fn Func, method, id, query string, body []byte) (*capture, error) {
	r2 := r.Clone(r.Context())
	r2.Method = method
	r2.URL = &url.URL{Path: r.URL.Path, RawQuery: query}
	r2.Header = http.Header{}
	r2.Body = io.NopCloser(bytes.NewReader(body))
	r2.ContentLength = int64(len(body))
	r2.Form, r2.PostForm, r2.MultipartForm = nil, nil, nil
	if id != "" {
		r2.SetPathValue("id", id)
	}
	cw := newCapture()
	return cw, fn(cw, r2)
}

// Home sends the portal's root to the Jobs page.
func (h *Handlers) Home(w http.ResponseWriter, r *http.Request) error {
	http.Redirect(w, r, "/jobs", http.StatusFound)
	return nil
}
