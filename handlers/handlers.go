// Package handlers holds the master's HTTP handlers, one file per resource: the JSON API, the
// slave protocol and the portal's pages. The portal runs over the API's handlers: a result is
// computed once, and errors are mapped to status codes in one place (WriteError), so the two
// faces cannot disagree.
package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/metrics"
	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/store"
)

// Config is what the handlers need to know about the deployment.
type Config struct {
	// Authority is the URN authority of users and projects (urn:publicid:IDN+<authority>+user+<name>).
	Authority string
	// Version is the master's version; LatestClientVersion the newest gpulab-cli release.
	Version             string
	LatestClientVersion string
	// JobOptions are the defaults and limits of job parsing.
	JobOptions job.Options
	// CA signs the certificates of joining slaves.
	CA *pki.CA
	// HeartbeatInterval is the interval slaves are told to heartbeat at, on average.
	HeartbeatInterval time.Duration
	// HeartbeatJitter spreads the intervals told: each reply names one drawn uniformly within
	// ±HeartbeatJitter (a fraction, 0 to 0.5) of HeartbeatInterval; 0 names it exactly. See
	// jitteredInterval for why a fleet needs it.
	HeartbeatJitter float64
	// MaxLongPoll bounds how long a slave's Next call is held open (default
	// protocol.MaxPollWait).
	MaxLongPoll time.Duration
	// TallyHalfLife is the scheduler's tally half-life (for GET usage).
	TallyHalfLife time.Duration
	// FenceAfter is how long a slave may go without reaching a master before it stops its
	// jobs on its own (the scheduler's job grace: then the master gives them up).
	FenceAfter time.Duration
	// MissingGrace is how long a slave's heartbeats may leave out a job the master has on it
	// before the job is taken as gone (default 3 heartbeat intervals, at least 10 s).
	MissingGrace time.Duration
	// WorkRecheck is how often a waiting long poll looks for work again without being woken;
	// 0 (the default): never, a poll looks when it comes only. No notification is lost while
	// this master listens, and a listener that lost its connection wakes every poll when it is
	// back (store.Listen); what a notification that could not be sent leaves unseen, the
	// slave's next poll (at most MaxLongPoll later) or heartbeat (stop orders) sees. Looking
	// again within a 25-s poll was half of the polls' statements at 5,000 slaves.
	WorkRecheck time.Duration
	// MemoryReserveGb is the memory the scheduler keeps free on every slave: a job asking for
	// more than the largest slave's memory less this is refused at submit.
	MemoryReserveGb int

	// UserCertValidity and SlaveCertValidity are the lifetimes of the certificates issued
	// (0: pki's defaults, 90 days and a year).
	UserCertValidity, SlaveCertValidity time.Duration

	// MaxNotebooksPerUser is how many notebook jobs (named NotebookJobName) one user may have
	// not ended at once; 0: no limit. The master's flag defaults to DefaultMaxNotebooksPerUser.
	MaxNotebooksPerUser int
	// MaxJobLog is the most of one job's log the master keeps (bytes; 0: no limit), beyond
	// what the slave itself keeps (50 MiB), so one slave cannot fill the database.
	MaxJobLog int64

	// SSHJump is the master's SSH jump host as users reach it (nil: the master serves none);
	// the job JSON names it as sshProxyHost/sshProxyPort.
	SSHJump *SSHJumpHost

	// Metrics records queue waits and halts asked for by users (nil: none).
	Metrics *metrics.Master

	// IdleThreshold is the utilisation (percent) under which a GPU counts as idle: the job
	// page's verdict and the Usage page's idle GPU-hours use it (default 5).
	IdleThreshold float64
}

// DefaultHeartbeatJitter is the master's --heartbeat-jitter: the intervals told to slaves are
// spread ±10 % (jitteredInterval says why).
const DefaultHeartbeatJitter = 0.1

// Handlers serves the API. Create it with New.
type Handlers struct {
	store *store.Store
	cfg   Config
	log   *slog.Logger
	// sched wakes the scheduler loop (submit, a slave back online, job end); work wakes slaves' long
	// polls (jobs assigned, jobs to stop).
	sched, work *scheduler.Signal
	// capacity caches the largest slave, for the submit check.
	capacity capacityCache
	// shown keeps the JSON of ended jobs as shown lately.
	shown shownCache
}

// New makes the handlers. sched and work may be nil (a fresh signal is made).
func New(st *store.Store, cfg Config, log *slog.Logger, sched, work *scheduler.Signal) *Handlers {
	if sched == nil {
		sched = scheduler.NewSignal()
	}
	if work == nil {
		work = scheduler.NewSignal()
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = 5 * time.Second
	}
	if cfg.MaxLongPoll == 0 {
		cfg.MaxLongPoll = protocol.MaxPollWait
	}
	if cfg.MissingGrace == 0 {
		cfg.MissingGrace = max(3*cfg.HeartbeatInterval, 10*time.Second)
	}
	return &Handlers{store: st, cfg: cfg, log: log, sched: sched, work: work}
}

// Caller is who makes a request, as established by web's authentication middleware.
type Caller struct {
	User       store.User
	Kind       pki.Kind
	ProjectIDs []int64
	// SlaveName is set for slave callers (Kind == pki.KindSlave).
	SlaveName string
	// Via says how the caller authenticated ("certificate", "session", "service"), for logs.
	Via string
	// Service is the name of the service whose certificate made the request (Kind
	// pki.KindService without ActAsHeader; with it, Kind pki.KindUser and User the user it
	// acts for, ProjectIDs his projects that the service may act in).
	Service string
	// Confined says the service may act only in ProjectIDs (it was given a list of projects):
	// the user's jobs in other projects are not its to see or change.
	Confined bool
	// CertToCheck is the serial of a slave's certificate whose state (revoked, expired) was
	// not read before the handler: the calls of CertCheckedByHandler read it in their own
	// first statement. requireSlave refuses such a caller; only those calls take it.
	CertToCheck string
	// Job, when set, is the job the request names, read with the caller (GET jobs/{id}: one
	// round trip for both). Whether the caller may see it is still for the handler to decide.
	// It shares memory with the store's caches (store.GetUserAndJob): read it, never change it.
	Job *store.JobRecord
}

// ActAsHeader names the user a service certificate acts for: his name or URN.
const ActAsHeader = "X-GPULab-Act-As"

// Admin reports whether the caller is an admin. A service acting for an admin is not: a
// service never has more than a user's rights.
func (c *Caller) Admin() bool { return c != nil && c.Service == "" && c.User.IsAdmin }

// Actor names the caller in job events and logs: the user, or "SERVICE for USER" when a
// service acts for him, so both identities are on record.
func (c *Caller) Actor() string {
	if c.Service != "" {
		return c.Service + " for " + c.User.Name
	}
	return c.User.Name
}

// InProject reports whether the caller is a member of a project.
func (c *Caller) InProject(projectID int64) bool {
	for _, id := range c.ProjectIDs {
		if id == projectID {
			return true
		}
	}
	return false
}

type ctxKey int

const (
	callerKey ctxKey = iota
	apiVersionKey
)

// WithCaller returns a context carrying the authenticated caller.
func WithCaller(ctx context.Context, c *Caller) context.Context {
	return context.WithValue(ctx, callerKey, c)
}

// CallerFrom returns the authenticated caller, or nil.
func CallerFrom(ctx context.Context) *Caller {
	c, _ := ctx.Value(callerKey).(*Caller)
	return c
}

// API versions served. They share handlers; the differences are in the output shape.
const (
	V30 = "v3.0"
	V31 = "v3.1"
	V40 = "v4.0"
)

// APIVersions lists the served API versions.
var APIVersions = []string{V30, V31, V40}

// WithAPIVersion returns a context carrying the API version of the request path.
func WithAPIVersion(ctx context.Context, v string) context.Context {
	return context.WithValue(ctx, apiVersionKey, v)
}

func apiVersion(ctx context.Context) string {
	if v, ok := ctx.Value(apiVersionKey).(string); ok {
		return v
	}
	return V31
}

// Error is an error with an HTTP status and a message fit for the client.
type Error struct {
	Status  int
	Message string
	Details []job.Problem
}

func (e *Error) Error() string { return e.Message }

func errorf(status int, format string, args ...any) *Error {
	return &Error{Status: status, Message: fmt.Sprintf(format, args...)}
}

// fieldError is a 400 naming one field (or query parameter).
func fieldError(path, format string, args ...any) *Error {
	msg := fmt.Sprintf(format, args...)
	return &Error{Status: http.StatusBadRequest, Message: path + ": " + msg, Details: []job.Problem{{Path: path, Message: msg}}}
}

// errorBody is the JSON body of every error response.
type errorBody struct {
	Error   string        `json:"error"`
	Details []job.Problem `json:"details,omitempty"`
}

// Func is a handler that returns its error instead of writing it.
type Func func(w http.ResponseWriter, r *http.Request) error

// Wrap turns a Func into an http.HandlerFunc that maps its error to a status and a JSON body.
func (h *Handlers) Wrap(fn Func) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if WantsPrettyJSON(r) {
			w = prettyWriter{w}
		}
		if err := fn(w, r); err != nil {
			h.WriteError(w, r, err)
		}
	}
}

// RetryAfter is what a 503 asks clients to wait before they try again (the Retry-After
// header), when the database cannot be reached: long enough not to hammer a master whose
// Postgres restarts, short enough that a script notices the end of a short outage at once.
const RetryAfter = 5 * time.Second

// MsgUnavailable is the error message of a 503 for a database that cannot be reached.
const MsgUnavailable = "database unavailable, retry later"

// StatusClientClosedRequest is the status a request gets when its client went away before the
// answer (nginx's 499): it shows in the request log and the request metrics.
const StatusClientClosedRequest = 499

// MsgOverloaded is the error message of a 503 for a request that waited too long for a
// database connection while the master was overloaded (store.ErrOverloaded).
const MsgOverloaded = "the master is overloaded, retry later"

// WriteError maps an error to its status code and JSON body, once for every handler:
// validation → 400 with field paths, not found → 404, conflicts → 409, a database that cannot
// be reached → 503 with Retry-After (logged as a warning: the request was fine, and the
// operator learns of the outage from the database's own alarms), a master too overloaded to
// give it a connection in time → 503 with Retry-After (counted, not logged), anything else →
// 500 (logged, never shown: it may hold internals).
func (h *Handlers) WriteError(w http.ResponseWriter, r *http.Request, err error) {
	body := errorBody{}
	status := http.StatusInternalServerError
	var he *Error
	var ve *job.ValidationError
	var se *job.SyntaxError
	var sc *store.StateConflict
	var ce *conflictError
	switch {
	case errors.As(err, &ce):
		writeJSON(w, http.StatusConflict, ce.Conflict)
		return
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away while the request ran (a slave stopped mid-heartbeat, a
		// browser tab closed): nobody reads the answer, and nothing failed in the master.
		// Not logged as a failure; the request's own line shows 499, as nginx names it.
		status, body.Error = StatusClientClosedRequest, "the client closed the request"
	case errors.As(err, &he):
		status, body.Error, body.Details = he.Status, he.Message, he.Details
	case errors.As(err, &ve):
		status, body.Error, body.Details = http.StatusBadRequest, "invalid job request", ve.Problems
	case errors.As(err, &se):
		status, body.Error = http.StatusBadRequest, se.Error()
	case errors.As(err, &sc):
		status, body.Error = http.StatusConflict, sc.Error()
	case errors.Is(err, store.ErrNotFound):
		status, body.Error = http.StatusNotFound, "not found"
	case errors.Is(err, store.ErrAmbiguous):
		status, body.Error = http.StatusConflict, "ambiguous job id: it is the prefix of several jobs, give more characters"
	case errors.Is(err, store.ErrConflict):
		status, body.Error = http.StatusConflict, "already exists"
	case errors.Is(err, store.ErrOverloaded):
		// Not logged one by one: under overload that would be thousands of lines a second;
		// gpulab_db_connection_shed_total counts them.
		w.Header().Set("Retry-After", strconv.Itoa(int(RetryAfter/time.Second)))
		status, body.Error = http.StatusServiceUnavailable, MsgOverloaded
	case errors.Is(err, store.ErrUnavailable):
		h.log.WarnContext(r.Context(), "database unavailable", "method", r.Method, "path", r.URL.Path, "err", err)
		w.Header().Set("Retry-After", strconv.Itoa(int(RetryAfter/time.Second)))
		status, body.Error = http.StatusServiceUnavailable, MsgUnavailable
	default:
		h.log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		body.Error = "internal error"
	}
	writeJSON(w, status, body)
}

// writeJSON writes v as the JSON body: compact, unless the response is a prettyWriter's.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	_, pretty := w.(prettyWriter)
	if !pretty && writeMadeJSON(w, status, v) {
		return
	}
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	if pretty {
		enc.SetIndent("", "  ")
	}
	_ = enc.Encode(v)
}

// writeMadeJSON writes the compact JSON of v, with its newline, and reports true, when v is
// JSON made already (json.RawMessage, as the shown jobs kept by shownCache are) or a list of
// values: their bytes are copied as they are. encoding/json would check and compact every byte
// of a RawMessage again, which cost as much as making it (a third of a list of 50 jobs, bench
// B4). A RawMessage given here must have been made by json.Marshal. Nothing is written when
// it reports false.
func writeMadeJSON(w http.ResponseWriter, status int, v any) bool {
	switch v := v.(type) {
	case json.RawMessage:
		w.WriteHeader(status)
		_, _ = w.Write(v)
		_, _ = w.Write(newline)
		return true
	case []any:
		if v == nil {
			return false // null, as the encoder writes it
		}
		// Each item's bytes first, then one array of the right size, written at once (in a
		// few TLS records): grown as it went, a list of 50 jobs (~66 kB) was reallocated a
		// dozen times (6 % of its CPU, B4); made anew for each list, the array was 42 % of the
		// bytes the master allocated in B4, so it comes from a pool.
		items := make([][]byte, len(v))
		size := 3
		for i, item := range v {
			if raw, ok := item.(json.RawMessage); ok {
				items[i] = raw
			} else {
				data, err := json.Marshal(item)
				if err != nil {
					return false // the encoder says why
				}
				items[i] = data
			}
			size += len(items[i]) + 1
		}
		buf := bodyBuffers.Get().(*bytes.Buffer)
		defer putBodyBuffer(buf)
		buf.Grow(size)
		buf.WriteByte('[')
		for i, data := range items {
			if i > 0 {
				buf.WriteByte(',')
			}
			buf.Write(data)
		}
		buf.WriteString("]\n")
		w.WriteHeader(status)
		_, _ = w.Write(buf.Bytes())
		return true
	}
	return false
}

var newline = []byte("\n")

// bodyBuffers hold the bodies made whole before they are written: the JSON arrays
// writeMadeJSON makes and the pages render makes. net/http keeps nothing of what a Write is
// given once it returns.
var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBody is the largest body buffer kept for the next (a page of 500 jobs).
const maxPooledBody = 1 << 20

func putBodyBuffer(buf *bytes.Buffer) {
	if buf.Cap() > maxPooledBody {
		return
	}
	buf.Reset()
	bodyBuffers.Put(buf)
}

// prettyWriter marks a response whose JSON is for a person to read, and so indented (Wrap
// puts it around the writer when WantsPrettyJSON). Machine clients get compact JSON:
// indenting was half the master's CPU of a list of 50 jobs (bench B4), and every client
// parses the JSON anyway (ours, imec's gpulab-cli with Python's json, scripts with jq).
type prettyWriter struct{ http.ResponseWriter }

// Unwrap lets http.ResponseController reach the connection's writer (flushes, deadlines).
func (p prettyWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }

// WantsPrettyJSON reports whether a request's JSON answer is to be indented: asked for with
// ?pretty=1 (or any true value), or a browser's request (Accept: text/html), which shows it
// to a person.
func WantsPrettyJSON(r *http.Request) bool {
	if !strings.Contains(r.URL.RawQuery, "pretty") {
		return strings.Contains(r.Header.Get("Accept"), "text/html")
	}
	if v := r.URL.Query().Get("pretty"); v != "" {
		b, err := strconv.ParseBool(v)
		return err == nil && b
	}
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

// writeList writes a list in the shape of the request's API version: a JSON array for v3.x,
// {"items": [...]} for v4.0.
func writeList(w http.ResponseWriter, r *http.Request, items any) {
	if apiVersion(r.Context()) == V40 {
		writeJSON(w, http.StatusOK, map[string]any{"items": items})
		return
	}
	writeJSON(w, http.StatusOK, items)
}

// wantsJSON reports whether the client asked for JSON rather than the default text answer.
func wantsJSON(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/json")
}

// requireUser returns the caller, or 401/403 when there is none or it is not a user.
func requireUser(r *http.Request) (*Caller, error) {
	c := CallerFrom(r.Context())
	if c == nil {
		return nil, ErrUnauthenticated
	}
	if c.Kind == pki.KindService {
		return nil, errorf(http.StatusForbidden, "service %s acts for a user: name him in the header %s (his user name or URN)", c.Service, ActAsHeader)
	}
	if c.Kind != pki.KindUser {
		return nil, errorf(http.StatusForbidden, "%s credentials are not accepted on user endpoints", c.Kind)
	}
	return c, nil
}

// requirePerson is requireUser for what only the user himself does, never a service acting
// for him: managing his credentials.
func requirePerson(r *http.Request) (*Caller, error) {
	c, err := requireUser(r)
	if err != nil {
		return nil, err
	}
	if c.Service != "" {
		return nil, errorf(http.StatusForbidden, "service %s may not manage the credentials of %s", c.Service, c.User.Name)
	}
	return c, nil
}

// ErrUnauthenticated is the 401 of a request without credentials.
var ErrUnauthenticated = &Error{Status: http.StatusUnauthorized,
	Message: "authentication required: present a client certificate issued by this master (gpulab-cli --cert FILE) or log in to the portal"}
