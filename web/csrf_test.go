package web

import (
	"bytes"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/store"
)

// bareServer is a server without store, enough for middleware that needs no database.
func bareServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	return New(cfg, nil, handlers.New(nil, handlers.Config{}, log, nil, nil), log)
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })

func TestCSRFProtect(t *testing.T) {
	const token = "the-session-token"
	sessionUser := &handlers.Caller{User: store.User{URN: "urn:publicid:IDN+test+user+alice"}, Kind: pki.KindUser, Via: viaSession}
	certUser := &handlers.Caller{User: store.User{URN: "urn:publicid:IDN+test+user+bob"}, Kind: pki.KindUser, Via: "certificate"}
	certSlave := &handlers.Caller{Kind: pki.KindSlave, SlaveName: "s1", Via: "certificate"}
	form := func(v url.Values) (io.Reader, string) {
		return strings.NewReader(v.Encode()), "application/x-www-form-urlencoded"
	}
	multipartForm := func(field, value string) (io.Reader, string) {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		_ = mw.WriteField(field, value)
		_ = mw.Close()
		return &buf, mw.FormDataContentType()
	}
	cases := []struct {
		name    string
		method  string
		caller  *handlers.Caller
		header  map[string]string
		body    func() (io.Reader, string)
		want    int
		message string
	}{
		{name: "GET needs no token", method: "GET", caller: sessionUser, want: 200},
		{name: "POST without token", method: "POST", caller: sessionUser, want: 403, message: "missing CSRF token"},
		{name: "PUT without token", method: "PUT", caller: sessionUser, want: 403},
		{name: "PATCH without token", method: "PATCH", caller: sessionUser, want: 403},
		{name: "DELETE without token", method: "DELETE", caller: sessionUser, want: 403},
		{name: "header token", method: "POST", caller: sessionUser, header: map[string]string{"X-CSRF-Token": token}, want: 200},
		{name: "form token", method: "POST", caller: sessionUser,
			body: func() (io.Reader, string) { return form(url.Values{"csrf_token": {token}, "name": {"x"}}) }, want: 200},
		{name: "multipart form token", method: "POST", caller: sessionUser,
			body: func() (io.Reader, string) { return multipartForm("csrf_token", token) }, want: 200},
		{name: "token in a JSON body does not count", method: "POST", caller: sessionUser,
			header: map[string]string{"Content-Type": "application/json"},
			body: func() (io.Reader, string) {
				return strings.NewReader(`{"csrf_token":"` + token + `"}`), "application/json"
			}, want: 403},
		{name: "wrong token", method: "POST", caller: sessionUser, header: map[string]string{"X-CSRF-Token": "guess"}, want: 403, message: "invalid CSRF token"},
		{name: "same origin", method: "POST", caller: sessionUser, header: map[string]string{"X-CSRF-Token": token, "Origin": "https://master.example:8443"}, want: 200},
		{name: "same origin by Referer", method: "POST", caller: sessionUser, header: map[string]string{"X-CSRF-Token": token, "Referer": "https://master.example:8443/jobs"}, want: 200},
		{name: "public name behind a proxy", method: "POST", caller: sessionUser, header: map[string]string{"X-CSRF-Token": token, "Origin": "https://gpulab.example.org"}, want: 200},
		{name: "other origin with token", method: "POST", caller: sessionUser, header: map[string]string{"X-CSRF-Token": token, "Origin": "https://evil.example"}, want: 403, message: "cross-site"},
		{name: "other port", method: "POST", caller: sessionUser, header: map[string]string{"X-CSRF-Token": token, "Origin": "https://master.example:9999"}, want: 403},
		{name: "plain http origin", method: "POST", caller: sessionUser, header: map[string]string{"X-CSRF-Token": token, "Origin": "http://master.example:8443"}, want: 403},
		{name: "null origin", method: "POST", caller: sessionUser, header: map[string]string{"X-CSRF-Token": token, "Origin": "null"}, want: 403},
		{name: "other Referer", method: "POST", caller: sessionUser, header: map[string]string{"X-CSRF-Token": token, "Referer": "https://evil.example/x"}, want: 403},
		{name: "Sec-Fetch-Site cross-site", method: "POST", caller: sessionUser, header: map[string]string{"X-CSRF-Token": token, "Sec-Fetch-Site": "cross-site"}, want: 403},
		{name: "certificate from a script (no browser headers)", method: "POST", caller: certUser, want: 200},
		{name: "certificate script with its own User-Agent", method: "DELETE", caller: certUser, header: map[string]string{"User-Agent": "gpulab-cli/3.1"}, want: 200},
		{name: "certificate cross-site POST", method: "POST", caller: certUser, header: map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}, want: 403, message: "cross-site"},
		{name: "certificate cross-site by Origin only", method: "POST", caller: certUser, header: map[string]string{"Origin": "https://evil.example"}, want: 403, message: "evil.example"},
		{name: "certificate cross-site by Sec-Fetch-Site only", method: "PUT", caller: certUser, header: map[string]string{"Sec-Fetch-Site": "cross-site"}, want: 403, message: "cross-site"},
		{name: "certificate same-site sibling", method: "POST", caller: certUser, header: map[string]string{"Origin": "https://other.master.example:8443", "Sec-Fetch-Site": "same-site"}, want: 403},
		{name: "certificate null origin", method: "POST", caller: certUser, header: map[string]string{"Origin": "null"}, want: 403},
		{name: "certificate same-origin", method: "POST", caller: certUser, header: map[string]string{"Origin": "https://master.example:8443", "Sec-Fetch-Site": "same-origin"}, want: 200},
		{name: "certificate same-origin without Origin", method: "POST", caller: certUser, header: map[string]string{"Sec-Fetch-Site": "same-origin"}, want: 200},
		{name: "certificate typed in (none)", method: "POST", caller: certUser, header: map[string]string{"Sec-Fetch-Site": "none"}, want: 200},
		{name: "certificate same-origin, old browser", method: "POST", caller: certUser, header: map[string]string{"Origin": "https://master.example:8443"}, want: 200},
		{name: "certificate Sec-Fetch-Mode alone", method: "POST", caller: certUser, header: map[string]string{"Sec-Fetch-Mode": "no-cors"}, want: 403},
		{name: "certificate same-origin but forged Origin", method: "POST", caller: certUser, header: map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "same-origin"}, want: 403},
		{name: "certificate cross-site GET reads only", method: "GET", caller: certUser, header: map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}, want: 200},
		{name: "slave certificate cross-site", method: "POST", caller: certSlave, header: map[string]string{"Origin": "https://evil.example"}, want: 403},
		{name: "slave certificate script", method: "POST", caller: certSlave, want: 200},
		{name: "no caller: the handler decides", method: "POST", want: 200},
	}
	srv := bareServer(t, Config{OIDC: OIDCConfig{Issuer: "https://idp.example", ClientID: "c", RedirectURL: "https://gpulab.example.org/auth/callback"}})
	h := srv.csrfProtect(okHandler)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var body io.Reader
			ct := ""
			if c.body != nil {
				body, ct = c.body()
			}
			r := httptest.NewRequest(c.method, "https://master.example:8443/api/gpulab/v3.1/jobs", body)
			if ct != "" {
				r.Header.Set("Content-Type", ct)
			}
			for k, v := range c.header {
				r.Header.Set(k, v)
			}
			ctx := r.Context()
			if c.caller != nil {
				ctx = handlers.WithCaller(ctx, c.caller)
				if c.caller.Via == viaSession {
					ctx = handlers.WithCSRFToken(ctx, token)
				}
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r.WithContext(ctx))
			if w.Code != c.want || !strings.Contains(w.Body.String(), c.message) {
				t.Errorf("%s: %d %s, want %d containing %q", c.name, w.Code, w.Body, c.want, c.message)
			}
		})
	}
}

func TestCSRFRefusalIsAPageForBrowsers(t *testing.T) {
	srv := bareServer(t, Config{})
	r := httptest.NewRequest("POST", "https://master.example/logout", nil)
	r.Header.Set("Accept", "text/html,application/xhtml+xml")
	ctx := handlers.WithCSRFToken(handlers.WithCaller(r.Context(), &handlers.Caller{Kind: pki.KindUser, Via: viaSession}), "t")
	w := httptest.NewRecorder()
	srv.csrfProtect(okHandler).ServeHTTP(w, r.WithContext(ctx))
	if w.Code != 403 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") || !strings.Contains(w.Body.String(), "missing CSRF token") {
		t.Fatalf("got %d %s %s", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
}

func TestSafeNext(t *testing.T) {
	cases := map[string]string{
		"":                            "/",
		"/":                           "/",
		"/jobs":                       "/jobs",
		"/jobs?state=running&page=2":  "/jobs?state=running&page=2",
		"/jobs/abc#log":               "/jobs/abc#log",
		"//evil.com":                  "/",
		"//evil.com/jobs":             "/",
		"///evil.com":                 "/",
		"https://evil.com":            "/",
		"http://evil.com/jobs":        "/",
		"/\\evil.com":                 "/",
		"\\\\evil.com":                "/",
		"/jobs\\..\\x":                "/",
		"/\t/evil.com":                "/",
		"/\n/evil.com":                "/",
		"/%2F%2Fevil.com":             "/",
		"evil.com":                    "/",
		"javascript:alert(1)":         "/",
		"/login":                      "/",
		"/login?next=//evil.com":      "/",
		"/auth/callback?code=x":       "/",
		"/logout":                     "/",
		"/reservations?from=%2Fx%2Fy": "/reservations?from=%2Fx%2Fy",
	}
	for in, want := range cases {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRequireLogin(t *testing.T) {
	srv := bareServer(t, Config{})
	h := srv.requireLogin(okHandler)
	user := &handlers.Caller{Kind: pki.KindUser, Via: viaSession}
	cases := []struct {
		name, method, target string
		header               map[string]string
		caller               *handlers.Caller
		want                 int
		location, hxRedirect string
	}{
		{name: "browser page", method: "GET", target: "/jobs?state=running", header: map[string]string{"Accept": "text/html,*/*"},
			want: 303, location: "/login?next=%2Fjobs%3Fstate%3Drunning"},
		{name: "HEAD", method: "HEAD", target: "/jobs", header: map[string]string{"Accept": "text/html"}, want: 303, location: "/login?next=%2Fjobs"},
		{name: "logged in", method: "GET", target: "/jobs", header: map[string]string{"Accept": "text/html"}, caller: user, want: 200},
		{name: "JSON client", method: "GET", target: "/jobs", header: map[string]string{"Accept": "application/json"}, want: 200},
		{name: "API path", method: "GET", target: "/api/gpulab/v3.1/jobs", header: map[string]string{"Accept": "text/html"}, want: 200},
		{name: "form post", method: "POST", target: "/jobs", header: map[string]string{"Accept": "text/html"}, want: 200},
		{name: "htmx", method: "GET", target: "/jobs/partial", header: map[string]string{"HX-Request": "true", "HX-Current-URL": "https://example.com/jobs?mine=1"},
			want: 401, hxRedirect: "/login?next=%2Fjobs%3Fmine%3D1"},
		{name: "htmx from elsewhere", method: "GET", target: "/jobs/partial", header: map[string]string{"HX-Request": "true", "HX-Current-URL": "https://evil.example/x"},
			want: 401, hxRedirect: "/login?next=%2F"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(c.method, "https://example.com"+c.target, nil)
			for k, v := range c.header {
				r.Header.Set(k, v)
			}
			if c.caller != nil {
				r = r.WithContext(handlers.WithCaller(r.Context(), c.caller))
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != c.want || w.Header().Get("Location") != c.location || w.Header().Get("HX-Redirect") != c.hxRedirect {
				t.Errorf("%d Location %q HX-Redirect %q, want %d %q %q", w.Code, w.Header().Get("Location"), w.Header().Get("HX-Redirect"), c.want, c.location, c.hxRedirect)
			}
		})
	}
}

func TestLoginOffSaysSo(t *testing.T) {
	srv := bareServer(t, Config{})
	for _, accept := range []string{"text/html", "application/json"} {
		r := httptest.NewRequest("GET", "https://example.com/login?next=/jobs", nil)
		r.Header.Set("Accept", accept)
		w := httptest.NewRecorder()
		srv.Handler().ServeHTTP(w, r)
		if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "--oidc-issuer") {
			t.Errorf("Accept %s: %d %s", accept, w.Code, w.Body)
		}
	}
}

func TestUsernameFrom(t *testing.T) {
	cases := []struct {
		name   string
		claims map[string]any
		claim  string
		want   string
		err    string
	}{
		{"preferred_username", map[string]any{"preferred_username": "Alice", "email": "x@example.org"}, "preferred_username", "alice", ""},
		{"e-mail fallback", map[string]any{"email": "bob.smith@example.org", "email_verified": true}, "preferred_username", "bob.smith", ""},
		{"e-mail without verified claim", map[string]any{"email": "carol@example.org"}, "preferred_username", "carol", ""},
		{"unverified e-mail", map[string]any{"email": "mallory@example.org", "email_verified": false}, "preferred_username", "", "no verified e-mail"},
		{"nothing", map[string]any{"sub": "123"}, "preferred_username", "", "no user name"},
		{"upn claim", map[string]any{"upn": "Dave@Corp.Example"}, "upn", "dave", ""},
		{"custom claim", map[string]any{"uid": "erin_01"}, "uid", "erin_01", ""},
		{"unfit name", map[string]any{"preferred_username": "Frank Zappa"}, "preferred_username", "", `"frank zappa" (from the claim preferred_username) cannot be a GPULab user name`},
		{"unfit e-mail", map[string]any{"email": "g+tag@example.org"}, "preferred_username", "", "from the e-mail address"},
		{"too long", map[string]any{"preferred_username": strings.Repeat("a", 64)}, "preferred_username", "", "at most 63"},
	}
	for _, c := range cases {
		got, err := usernameFrom(c.claims, c.claim)
		if got != c.want || (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: %q, %v; want %q, error containing %q", c.name, got, err, c.want, c.err)
		}
	}
}
