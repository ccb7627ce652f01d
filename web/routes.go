package web

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"strings"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/store"
)

// Route is one entry of the route table. Public routes answer without credentials; all others
// get 401 from their handler when the request carries none.
type Route struct {
	Method  string
	Path    string // below the API base for API routes ("jobs/{id}"), from the root otherwise
	Public  bool
	Handler handlers.Func
}

// APIRoutes is the route table of the JSON API, served under every version in
// handlers.APIVersions. The OpenAPI document is checked against it by a test.
func APIRoutes(h *handlers.Handlers) []Route {
	return []Route{
		{"GET", "version", true, h.Version},
		{"POST", "jobs", false, h.SubmitJob},
		{"GET", "jobs", false, h.ListJobs},
		{"GET", "jobs/{id}", false, h.GetJob},
		{"PUT", "jobs/{id}/state/status", false, h.SetJobStatus},
		{"DELETE", "jobs/{id}", false, h.DeleteJob},
		{"GET", "jobs/{id}/debug", false, h.JobEvents},
		{"GET", "jobs/{id}/log", false, h.JobLog},
		{"GET", "jobs/{id}/explain", false, h.ExplainJob},
		{"GET", "jobs/{id}/usage", false, h.GetJobUsage},
		{"POST", "convert", true, h.Convert},
		{"GET", "clusters", true, h.Clusters},
		{"GET", "slaves", true, h.Slaves},
		{"GET", "usage", false, h.GetUsage},
		{"GET", "reservations", false, h.ListReservations},
		{"POST", "reservations", false, h.CreateReservation},
		{"DELETE", "reservations/{rid}", false, h.DeleteReservation},
		// Identities, disabling and revocation (issue 10).
		{"GET", "users", false, h.ListUsers},
		{"PUT", "users/{name}/disabled", false, h.SetUserDisabled},
		{"PUT", "users/{name}/login", false, h.LinkUserLogin},
		{"GET", "certificates", false, h.ListCertificates},
		{"POST", "certificates/{serial}/revoke", false, h.RevokeCertificate},
		{"PUT", "slaves/{name}/disabled", false, h.SetSlaveDisabled},
		// SSH into jobs (issue 12): the host keys clients trust.
		{"GET", "ssh/known_hosts", true, h.SSHKnownHosts},
	}
}

// SlaveRoutes is the route table of the slave protocol (package protocol), below the root.
func SlaveRoutes(h *handlers.Handlers) []Route {
	return []Route{
		{"POST", protocol.JoinPath, true, h.SlaveJoin},
		{"POST", protocol.RegisterPath, false, h.SlaveRegister},
		{"POST", protocol.HeartbeatPath, false, h.SlaveHeartbeat},
		{"POST", protocol.NextPath, false, h.SlaveNext},
		{"POST", protocol.UpdatePath, false, h.SlaveUpdate},
		{"POST", protocol.LogPath, false, h.SlaveLog},
		{"POST", protocol.LogStatePath, false, h.SlaveLogState},
		{"POST", protocol.DonePath, false, h.SlaveDone},
		{"POST", protocol.SSHAuthPath, false, h.SlaveSSHAuth},
	}
}

// slaveRetries says whether a call of the slave protocol is the slave agent's own, which it
// retries with back-off when it fails: under load its statements take turns with people's
// requests instead of waiting among them (store.Retried). A join is run by an operator, an
// SSH authorization made while a person logs in: those wait like people's requests.
func slaveRetries(path string) bool {
	return strings.HasPrefix(path, protocol.BasePath) && path != protocol.JoinPath && path != protocol.SSHAuthPath
}

// markCalls marks the slave agents' own calls (slaveRetries) store.Retried before anything
// else runs: the certificate check of authenticate is a statement too, and in people's line
// it put every slave call there once (B8x's fill). Everyone else's requests are marked with
// who sent them (store.WithSender, sender), in whose turn their statements wait for a
// connection when the master is busy: one user's script cannot crowd out the others.
func markCalls(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slaveRetries(r.URL.Path) {
			r = r.WithContext(store.Retried(r.Context()))
		} else {
			r = r.WithContext(store.WithSender(r.Context(), sender(r)))
		}
		next.ServeHTTP(w, r)
	})
}

// sender names who sent a request, before authentication: its client certificate, else its
// session (a digest of the cookie, not the secret itself), else its address (behind a proxy,
// the proxy's: anonymous requests, the login pages and static files, are one sender there).
func sender(r *http.Request) string {
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		return "cert:" + r.TLS.PeerCertificates[0].SerialNumber.Text(16)
	}
	if c, err := r.Cookie(sessionCookie); err == nil && c.Value != "" {
		sum := sha256.Sum256([]byte(c.Value))
		return "session:" + hex.EncodeToString(sum[:12])
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "addr:" + host
}

// pageRoutes is the route table of the portal's pages, below the root (Path is a full
// pattern path such as "/jobs/{id}" or "/{$}"). THE PORTAL'S PAGES GO HERE.
//
// How they are served (see routes): every page route goes through
//   - authenticate: the caller (client certificate, else session cookie) is in the context,
//     and for a session also its CSRF token (handlers.CSRFToken(ctx), to put in every form as
//     the hidden field handlers.CSRFFieldName and in htmx's hx-headers as
//     handlers.CSRFHeaderName);
//   - csrfProtect: a POST, PUT, PATCH or DELETE authenticated by the session is refused (403)
//     without that token or from another origin; one authenticated by a client certificate
//     that comes from a browser (Origin or Sec-Fetch-*) must be same-origin;
//   - requireLogin, unless the route is Public: a browser (GET/HEAD, Accept: text/html) with
//     no caller is redirected (303) to /login?next=<the page>, an htmx request gets 401 with
//     HX-Redirect; anything else reaches the handler, which answers 401 when it needs a caller
//     (handlers.CallerFrom(ctx) == nil);
//   - h.Wrap(Handler): errors are mapped once, as for the API.
//
// Static files and other pages readable without login are Public routes. The login routes
// (LoginPath, CallbackPath, LogoutPath, LoggedOutPath) and GET <api>/session are registered by
// routes itself.
func pageRoutes(h *handlers.Handlers) []Route {
	return PortalRoutes(h)
}

// routes builds the server's handler: the API under each version, the OpenAPI document,
// health checks, the login routes and the portal's pages, each behind the middleware its group
// needs, all behind authentication and CSRF protection.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, v := range handlers.APIVersions {
		for _, rt := range APIRoutes(s.h) {
			version := v
			fn := s.h.Wrap(rt.Handler)
			mux.Handle(rt.Method+" /api/gpulab/"+v+"/"+rt.Path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fn(w, r.WithContext(handlers.WithAPIVersion(r.Context(), version)))
			}))
		}
		// The browser session's user and CSRF token, for the portal's scripts. Not in the
		// OpenAPI document: it is the portal's, not the CLI's.
		mux.Handle("GET /api/gpulab/"+v+"/session", s.h.Wrap(s.sessionInfo))
	}
	for _, rt := range SlaveRoutes(s.h) {
		mux.Handle(rt.Method+" "+rt.Path, s.h.Wrap(rt.Handler))
	}
	mux.Handle("GET /api/gpulab/openapi.json", s.h.Wrap(s.h.OpenAPI))
	mux.Handle("/api/", s.h.Wrap(func(w http.ResponseWriter, r *http.Request) error {
		return &handlers.Error{Status: http.StatusNotFound, Message: "no API endpoint " + r.Method + " " + r.URL.Path}
	}))
	mux.HandleFunc("GET "+LoginPath, s.login)
	mux.HandleFunc("GET "+CallbackPath, s.callback)
	mux.HandleFunc("POST "+LogoutPath, s.logout)
	mux.HandleFunc("GET "+LoggedOutPath, s.loggedOut)
	for _, rt := range pageRoutes(s.h) {
		var hd http.Handler = s.h.Wrap(rt.Handler)
		if !rt.Public {
			hd = s.requireLogin(hd)
		}
		mux.Handle(rt.Method+" "+rt.Path, hd)
	}
	// The health checks answer before authentication: a probe that carries a session cookie
	// must not need the database to learn that the process lives. So does /metrics, for
	// Prometheus, which has no GPULab identity: it holds counts, never a user's data.
	root := http.NewServeMux()
	root.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	root.HandleFunc("GET /readyz", s.ready)
	if s.cfg.Metrics != nil {
		root.Handle("GET /metrics", s.cfg.Metrics.Handler())
	}
	root.Handle("/", markCalls(s.authenticate(s.csrfProtect(noteRoute(mux)))))
	return growStacks(s.recoverer(s.logRequests(s.limitRequests(noteRoute(root)))))
}
