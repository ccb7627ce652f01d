package web

import (
	"context"
	"log/slog"
	"net/http"
	"regexp"
	"time"

	"github.com/google/uuid"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/store"
)

// RequestIDHeader carries a request's id: taken from the client (a proxy's) when sane, made
// otherwise, and always echoed in the response, so a user's report finds the log line.
const RequestIDHeader = "X-Request-Id"

// saneRequestID is what a client's request id may look like: short, without spaces or
// anything a log reader would trip on.
var saneRequestID = regexp.MustCompile(`^[A-Za-z0-9._:+/=-]{1,128}$`)

// requestID is the client's id when sane, else a fresh one.
func requestID(given string) string {
	if saneRequestID.MatchString(given) {
		return given
	}
	return uuid.NewString()
}

// requestInfo is what the layers inside the request log learn of a request (the route that
// served it, who called) for its log line and its metrics. The log puts it in the context;
// inner layers fill it in, since their context and request are copies the log never sees.
type requestInfo struct {
	id     string
	route  string
	caller *handlers.Caller
	// bodyRead is when the request's body was read to its end (limitRequests), zero when it
	// was not: the line's body_ms, so that a slow sender is told from a slow handler.
	bodyRead time.Time
}

type requestInfoKey struct{}

func infoFrom(ctx context.Context) *requestInfo {
	ri, _ := ctx.Value(requestInfoKey{}).(*requestInfo)
	return ri
}

// RequestID is the id of the request being served (empty outside one).
func RequestID(ctx context.Context) string {
	if ri := infoFrom(ctx); ri != nil {
		return ri.id
	}
	return ""
}

// noteRoute records, after a mux served the request, the pattern it chose and the caller
// authentication found; an outer mux does not overwrite what an inner one recorded.
func noteRoute(mux http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mux.ServeHTTP(w, r)
		if ri := infoFrom(r.Context()); ri != nil {
			if ri.route == "" && r.Pattern != "" && r.Pattern != "/" {
				ri.route = r.Pattern
			}
			if c := handlers.CallerFrom(r.Context()); c != nil {
				ri.caller = c
			}
		}
	})
}

// callerAttrs describe a caller for the log: who (user, slave or service) and how
// authenticated; a service acting for a user names both.
func callerAttrs(attrs []slog.Attr, c *handlers.Caller) []slog.Attr {
	if c == nil {
		return append(attrs, slog.String("caller", "-"))
	}
	switch {
	case c.Kind == pki.KindSlave:
		return append(attrs, slog.String("caller", "slave:"+c.SlaveName), slog.String("via", c.Via))
	case c.Service != "" && c.Kind == pki.KindService:
		return append(attrs, slog.String("caller", "service:"+c.Service), slog.String("via", c.Via))
	case c.Service != "":
		return append(attrs, slog.String("caller", "user:"+c.User.Name), slog.String("service", c.Service), slog.String("via", c.Via))
	default:
		return append(attrs, slog.String("caller", "user:"+c.User.Name), slog.String("via", c.Via))
	}
}

// statusRecorder remembers the status a handler wrote and the bytes of its body, for the
// request log.
type statusRecorder struct {
	http.ResponseWriter
	status int
	bytes  int64
	// pieces: the response goes out over HTTP/2, in writes of at most pieceSize bytes.
	pieces bool
}

// pieceSize bounds one write of an HTTP/2 response: net/http's HTTP/2 handler buffer
// (http2handlerChunkWriteSize). A larger write becomes a DATA frame of up to 16 KiB, and each
// connection's frame writer keeps a buffer the size of the largest frame it ever wrote for as
// long as the connection lives: 5,000 slaves' connections kept 69 MB of such buffers (bench/
// B8x, grown once by the fill's long-poll answers of eight assignments each). Written in
// pieces, every write goes through the stream's own 4 KiB buffer and frames stay within 4 KiB.
// (Over HTTP/1.1 the pieces would each be a chunk, a TLS record and a system call: written so,
// a list of 50 jobs spent 28 % of the master's CPU in write system calls, bench B4.)
const pieceSize = 4 << 10

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(p []byte) (int, error) {
	if !r.pieces {
		n, err := r.ResponseWriter.Write(p)
		r.bytes += int64(n)
		return n, err
	}
	n := 0
	for len(p) > 0 {
		k, err := r.ResponseWriter.Write(p[:min(len(p), pieceSize)])
		n += k
		r.bytes += int64(k)
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// logRequests logs one line per request: its id, method, route pattern (the path without its
// query string, which may hold tokens, when no route matched), status, duration, bytes written,
// the statements it sent to the database, the caller, and the client address; no header is
// logged. It also times the request for
// /metrics by route pattern and code.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ri := &requestInfo{id: requestID(r.Header.Get(RequestIDHeader))}
		w.Header().Set(RequestIDHeader, ri.id)
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK, pieces: r.ProtoMajor == 2}
		ctx, statements := store.CountStatements(context.WithValue(r.Context(), requestInfoKey{}, ri))
		next.ServeHTTP(rec, r.WithContext(ctx))
		took := time.Since(start)
		route := ri.route
		if route == "" {
			route = "unmatched"
		}
		s.cfg.Metrics.ObserveRequest(route, r.Method, rec.status, took)
		level := slog.LevelInfo
		switch {
		case route == "GET /healthz" || route == "GET /readyz" || route == "GET /metrics":
			level = slog.LevelDebug // probes and scrapers every few seconds
		case routineSlaveCall(route) && rec.status < 400:
			// Every slave's heartbeats and long polls: 1,000 lines a second from 5,000 slaves
			// (bench/ B8x), which would drown what people and the scheduler do. Their failures
			// stay at info, and gpulab_http_request_duration_seconds counts them all.
			level = slog.LevelDebug
		}
		if !s.log.Enabled(r.Context(), level) {
			return // the heartbeats and long polls at info: their line is not built at all
		}
		// Typed attributes, in an array of the stack: LogAttrs boxes nothing (Log's key-value
		// pairs did, a value at a time).
		var buf [15]slog.Attr
		attrs := append(buf[:0], slog.String("request_id", ri.id), slog.String("method", r.Method), slog.String("route", route),
			slog.Int("status", rec.status), slog.Float64("duration_ms", float64(took.Microseconds())/1000), slog.Int64("bytes", rec.bytes),
			slog.Int64("db_statements", statements()), slog.Float64("db_ms", float64(store.StatementTime(ctx).Microseconds())/1000),
			slog.String("remote", r.RemoteAddr))
		if !ri.bodyRead.IsZero() {
			attrs = append(attrs, slog.Float64("body_ms", float64(ri.bodyRead.Sub(start).Microseconds())/1000))
		}
		if ri.route == "" {
			attrs = append(attrs, slog.String("path", r.URL.Path))
		}
		s.log.LogAttrs(r.Context(), level, "request", callerAttrs(attrs, ri.caller)...)
	})
}

// WithRequestID wraps a log handler so that every record logged with a request's context
// carries its request_id: handlers' lines join the request's own line.
func WithRequestID(h slog.Handler) slog.Handler { return requestIDHandler{h} }

type requestIDHandler struct{ slog.Handler }

func (h requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestID(ctx); id != "" {
		r.AddAttrs(slog.String("request_id", id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h requestIDHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return requestIDHandler{h.Handler.WithAttrs(as)}
}

func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{h.Handler.WithGroup(name)}
}

// routineSlaveCall says whether route is a call every slave makes every few seconds.
func routineSlaveCall(route string) bool {
	return route == "POST "+protocol.HeartbeatPath || route == "POST "+protocol.NextPath
}
