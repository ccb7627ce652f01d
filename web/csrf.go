package web

import (
	"crypto/subtle"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/opengpulab/gpulab/handlers"
)

// Cross-site request forgery: a browser attaches the session cookie to any request to the
// master, also one another site makes it send. So every state-changing request authenticated
// by the session must prove it comes from the portal itself: it carries the session's secret
// token (form field handlers.CSRFFieldName, or header handlers.CSRFHeaderName for htmx and
// scripts), and its Origin (or Referer), when the browser sends one, is the master's own.
//
// A client certificate installed in a browser is sent ambiently too: the browser presents it
// to any request for the master, also one a hostile page makes it send. Such a request has no
// session token to show, so a certificate request that comes from a browser (it carries Origin
// or a Sec-Fetch-* header, which scripts do not send) must be same-origin instead: Sec-Fetch-Site
// same-origin or none (typed in, a bookmark) and, when given, an Origin that is the master's own.
// Scripts, gpulab-cli and imec's gpulab-cli send neither header and keep working.

// viaSession is Caller.Via of a caller identified by the session cookie.
const viaSession = "session"

// stateChanging reports whether a method may change state (RFC 9110 unsafe methods).
func stateChanging(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return false
	}
	return true
}

// csrfProtect refuses a state-changing session request without the right token or from
// another origin, with 403 and the reason.
func (s *Server) csrfProtect(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := handlers.CallerFrom(r.Context())
		if !stateChanging(r.Method) || c == nil {
			next.ServeHTTP(w, r)
			return
		}
		var err *handlers.Error
		switch {
		case c.Via == viaSession:
			err = s.checkCSRF(r)
		case fromBrowser(r):
			err = s.checkBrowserOrigin(r)
		}
		if err != nil {
			s.log.Warn("request refused as cross-site forgery", "method", r.Method, "path", r.URL.Path,
				"user", c.User.URN, "slave", c.SlaveName, "via", c.Via, "reason", err.Message, "remote", r.RemoteAddr)
			s.problem(w, r, err.Status, "Request refused", err.Message, "", "")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// fromBrowser reports whether a request was sent by a browser: browsers add Origin to every
// unsafe request and Sec-Fetch-* to every request; scripts and the CLIs send neither.
func fromBrowser(r *http.Request) bool {
	return r.Header.Get("Origin") != "" || r.Header.Get("Sec-Fetch-Site") != "" ||
		r.Header.Get("Sec-Fetch-Mode") != "" || r.Header.Get("Sec-Fetch-Dest") != ""
}

// checkBrowserOrigin is the CSRF check of a browser request authenticated by a client
// certificate: it has no session token, so it must be provably same-origin.
func (s *Server) checkBrowserOrigin(r *http.Request) *handlers.Error {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return &handlers.Error{Status: http.StatusForbidden, Message: fmt.Sprintf(
			"cross-site request refused: the browser says it comes from a %s page, and a client certificate is sent to any page that asks", site)}
	}
	if origin := r.Header.Get("Origin"); origin != "" && !s.ownOrigin(r, origin) {
		return &handlers.Error{Status: http.StatusForbidden, Message: fmt.Sprintf("cross-site request refused: it comes from %s, not from this master", origin)}
	}
	if r.Header.Get("Sec-Fetch-Site") == "" && r.Header.Get("Origin") == "" {
		// Sec-Fetch-Mode or -Dest alone: a browser that names neither the site nor the
		// origin cannot prove where the request comes from.
		return &handlers.Error{Status: http.StatusForbidden, Message: "cross-site request refused: a browser request with a client certificate must carry Sec-Fetch-Site or Origin"}
	}
	return nil
}

func (s *Server) checkCSRF(r *http.Request) *handlers.Error {
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return &handlers.Error{Status: http.StatusForbidden, Message: "cross-site request refused: another site made the browser send it"}
	}
	if origin, ok := requestOrigin(r); ok && !s.ownOrigin(r, origin) {
		return &handlers.Error{Status: http.StatusForbidden, Message: fmt.Sprintf("cross-site request refused: it comes from %s, not from this master", origin)}
	}
	want := handlers.CSRFToken(r.Context())
	got := r.Header.Get(handlers.CSRFHeaderName)
	if got == "" && isForm(r) {
		got = r.PostFormValue(handlers.CSRFFieldName)
	}
	if want == "" || got == "" {
		return &handlers.Error{Status: http.StatusForbidden, Message: fmt.Sprintf(
			"missing CSRF token: a change made with the browser session must carry the session's token in the %s form field or the %s header (reload the page and try again)",
			handlers.CSRFFieldName, handlers.CSRFHeaderName)}
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return &handlers.Error{Status: http.StatusForbidden, Message: "invalid CSRF token: it does not belong to this session (reload the page and try again)"}
	}
	return nil
}

// requestOrigin is the origin the browser says the request comes from: the Origin header, else
// the scheme and host of the Referer. ok is false when the browser sent neither.
func requestOrigin(r *http.Request) (origin string, ok bool) {
	if o := r.Header.Get("Origin"); o != "" {
		return o, true
	}
	if ref := r.Header.Get("Referer"); ref != "" {
		u, err := url.Parse(ref)
		if err != nil || u.Host == "" {
			return "invalid Referer", true
		}
		return u.Scheme + "://" + u.Host, true
	}
	return "", false
}

// ownOrigin reports whether origin is this master: the host the browser addressed (the
// browser, not the attacker, sets Host) or the host of the configured login callback (the
// public name behind a proxy).
func (s *Server) ownOrigin(r *http.Request, origin string) bool {
	if strings.EqualFold(origin, "https://"+r.Host) {
		return true
	}
	if s.oidc != nil && s.oidc.cfg.RedirectURL != "" {
		if u, err := url.Parse(s.oidc.cfg.RedirectURL); err == nil && strings.EqualFold(origin, u.Scheme+"://"+u.Host) {
			return true
		}
	}
	return false
}

// isForm reports whether the body is an HTML form, the only body that carries a form field.
func isForm(r *http.Request) bool {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return ct == "application/x-www-form-urlencoded" || ct == "multipart/form-data"
}

// requireLogin sends a browser that asks for a portal page without being logged in to the
// login, which brings it back afterwards. It is mounted on the portal's page routes only: API
// calls without credentials keep their 401 JSON answer, so scripts see what happened. htmx
// requests get 401 with HX-Redirect (htmx then loads the login page as a whole).
func (s *Server) requireLogin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if handlers.CallerFrom(r.Context()) != nil || strings.HasPrefix(r.URL.Path, "/api/") {
			next.ServeHTTP(w, r)
			return
		}
		if r.Header.Get("HX-Request") == "true" {
			back := "/"
			if u, err := url.Parse(r.Header.Get("HX-Current-URL")); err == nil && strings.EqualFold(u.Host, r.Host) {
				back = u.RequestURI()
			}
			w.Header().Set("HX-Redirect", LoginPath+"?next="+url.QueryEscape(safeNext(back)))
			s.h.WriteError(w, r, handlers.ErrUnauthenticated)
			return
		}
		if (r.Method == http.MethodGet || r.Method == http.MethodHead) && wantsHTML(r) {
			http.Redirect(w, r, LoginPath+"?next="+url.QueryEscape(safeNext(r.URL.RequestURI())), http.StatusSeeOther)
			return
		}
		next.ServeHTTP(w, r)
	})
}
