package web_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/store"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testmaster.RemoveBuilds()
	os.Exit(code)
}

// cookieRecorder remembers every gpulab_session cookie the master sets, with its attributes
// (a cookie jar keeps only names and values).
type cookieRecorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	set  []*http.Cookie
}

func (c *cookieRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	if err == nil {
		c.mu.Lock()
		for _, ck := range resp.Cookies() {
			if ck.Name == "gpulab_session" {
				c.set = append(c.set, ck)
			}
		}
		c.mu.Unlock()
	}
	return resp, err
}

func (c *cookieRecorder) last(t *testing.T) *http.Cookie {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.set) == 0 {
		t.Fatal("the master set no session cookie")
	}
	return c.set[len(c.set)-1]
}

// browser is a cookie-keeping client without a certificate, as a person's browser.
type browser struct {
	t   *testing.T
	m   *testmaster.Master
	c   *http.Client
	rec *cookieRecorder
}

func newBrowser(t *testing.T, m *testmaster.Master) *browser {
	c := m.BrowserClient()
	rec := &cookieRecorder{next: c.Transport}
	c.Transport = rec
	return &browser{t: t, m: m, c: c, rec: rec}
}

func (b *browser) do(method, path string, body io.Reader, header ...string) (int, string, *http.Response) {
	b.t.Helper()
	req, err := http.NewRequest(method, b.m.URL+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data), resp
}

type sessionInfo struct {
	User      store.User `json:"user"`
	Via       string     `json:"via"`
	CSRFToken string     `json:"csrfToken"`
}

// The whole browser login against a real provider (Dex) and a real master: the login form,
// the callback, the session cookie, the API with the cookie, CSRF protection, logout.
func TestBrowserLogin(t *testing.T) {
	m := testmaster.Start(t, testmaster.Options{Admins: []string{"alice@example.org"}, DevIdP: []testmaster.IdPUser{
		{Name: "alice", Email: "alice@example.org", Password: "alice-secret-1"},
		{Name: "Bad Name", Email: "bad+name@example.org", Password: "bad-secret-1"},
	}})
	b := newBrowser(t, m)
	ctx := context.Background()

	// Without a session, the API still answers 401 JSON, also to a browser.
	if status, body, _ := b.do("GET", v31+"/jobs", nil, "Accept", "text/html"); status != 401 || !strings.Contains(body, `"error"`) {
		t.Fatalf("API without credentials: %d %s", status, body)
	}

	// GET /login leads to the provider's real login form; posting it leads back through the
	// callback to the page asked for.
	status, body, resp := b.do("GET", "/login?next="+url.QueryEscape("/jobs?state=running"), nil)
	if status != 200 || !strings.Contains(body, `name="login"`) || !strings.Contains(body, `name="password"`) {
		t.Fatalf("GET /login ended at %s with %d: %.300s", resp.Request.URL, status, body)
	}
	if !strings.HasPrefix(resp.Request.URL.String(), m.IdP.Issuer) {
		t.Fatalf("login form served by %s, not the provider %s", resp.Request.URL, m.IdP.Issuer)
	}
	// A wrong password stays at the provider.
	action := formActionOf(t, body, resp.Request.URL)
	status, body, resp = b.doForm(action, url.Values{"login": {"alice@example.org"}, "password": {"wrong"}})
	if !strings.Contains(body, `id="login-error"`) || strings.HasPrefix(resp.Request.URL.String(), m.URL) {
		t.Fatalf("wrong password: %d at %s: %.300s", status, resp.Request.URL, body)
	}
	status, _, resp = b.doForm(action, url.Values{"login": {"alice@example.org"}, "password": {"alice-secret-1"}})
	if got := resp.Request.URL; got.Host != strings.TrimPrefix(m.URL, "https://") || got.Path != "/jobs" || got.RawQuery != "state=running" {
		t.Fatalf("after the login the browser is at %s (%d), want %s/jobs?state=running", got, status, m.URL)
	}
	c := b.rec.last(t)
	if !c.HttpOnly || !c.Secure || c.SameSite != http.SameSiteLaxMode || c.Path != "/" || c.MaxAge != 12*3600 {
		t.Errorf("session cookie attributes: %+v", c)
	}

	// The first login made the user, with the e-mail from the provider and admin from the
	// configuration.
	urn := pki.UserURN(testmaster.Authority, "alice")
	u, err := m.Store.GetUserByURN(ctx, urn)
	if err != nil || u.Email != "alice@example.org" || !u.IsAdmin || u.Name != "alice" {
		t.Fatalf("user after login: %+v %v", u, err)
	}

	// The session works on the API, and tells the CSRF token.
	if status, body, _ := b.do("GET", v31+"/jobs", nil); status != 200 {
		t.Fatalf("jobs with the session: %d %s", status, body)
	}
	status, body, resp = b.do("GET", v31+"/session", nil)
	info := decode[sessionInfo](t, []byte(body))
	if status != 200 || info.User.URN != urn || info.Via != "session" || len(info.CSRFToken) < 40 || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("session: %d %v %s", status, resp.Header, body)
	}

	// State changes need the token; a forged cross-site request is refused even with it.
	p, err := m.Store.CreateProject(ctx, pki.ProjectURN(testmaster.Authority, "vision"), "vision", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Store.AddMember(ctx, p.ID, u.ID); err != nil {
		t.Fatal(err)
	}
	submit := func(header ...string) (int, string) {
		status, body, _ := b.do("POST", v31+"/jobs?hold=true", strings.NewReader(helloWorld), header...)
		return status, body
	}
	if status, body := submit(); status != 403 || !strings.Contains(body, "CSRF") {
		t.Fatalf("submit without token: %d %s", status, body)
	}
	if status, body := submit("X-CSRF-Token", "forged"); status != 403 {
		t.Fatalf("submit with a wrong token: %d %s", status, body)
	}
	if status, body := submit("X-CSRF-Token", info.CSRFToken, "Origin", "https://evil.example"); status != 403 || !strings.Contains(body, "cross-site") {
		t.Fatalf("forged cross-site submit: %d %s", status, body)
	}
	if status, body := submit("Origin", "https://evil.example", "Content-Type", "application/x-www-form-urlencoded"); status != 403 {
		t.Fatalf("forged cross-site form: %d %s", status, body)
	}
	if status, body := submit("X-CSRF-Token", info.CSRFToken, "Origin", m.URL); status != 201 {
		t.Fatalf("submit with the token: %d %s", status, body)
	}
	// A client certificate needs no token; from a browser (Origin), it must be same-origin.
	bob := m.AddUser("bob", false, "", "vision")
	if status, body, _ := m.Do(bob, "POST", v31+"/jobs?hold=true", strings.NewReader(helloWorld)); status != 201 {
		t.Fatalf("certificate submit: %d %s", status, body)
	}
	if status, body, _ := m.Do(bob, "POST", v31+"/jobs?hold=true", strings.NewReader(helloWorld), "Origin", "https://evil.example"); status != 403 {
		t.Fatalf("cross-site certificate submit: %d %s", status, body)
	}

	// Logout is a CSRF-protected POST, then the session is gone.
	if status, _, _ := b.do("POST", "/logout", nil); status != 403 {
		t.Fatalf("logout without token: %d", status)
	}
	status, body, resp = b.do("POST", "/logout", strings.NewReader(url.Values{"csrf_token": {info.CSRFToken}}.Encode()),
		"Content-Type", "application/x-www-form-urlencoded", "Accept", "text/html")
	if status != 200 || resp.Request.URL.Path != "/logged-out" || !strings.Contains(body, "logged out") {
		t.Fatalf("logout: %d at %s: %s", status, resp.Request.URL, body)
	}
	if c := b.rec.last(t); c.MaxAge >= 0 {
		t.Errorf("logout left the cookie: %+v", c)
	}
	if status, _, _ := b.do("GET", v31+"/jobs", nil); status != 401 {
		t.Fatalf("jobs after logout: %d", status)
	}
}

func (b *browser) doForm(action *url.URL, v url.Values) (int, string, *http.Response) {
	b.t.Helper()
	resp, err := b.c.PostForm(action.String(), v)
	if err != nil {
		b.t.Fatalf("post %s: %v", action, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data), resp
}

func formActionOf(t *testing.T, page string, base *url.URL) *url.URL {
	t.Helper()
	_, rest, ok := strings.Cut(page, `<form method="post" action="`)
	action, _, ok2 := strings.Cut(rest, `"`)
	if !ok || !ok2 {
		t.Fatalf("no login form in %.500s", page)
	}
	u, err := base.Parse(strings.ReplaceAll(action, "&amp;", "&"))
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// The callback refuses answers that do not belong to the browser's own login.
func TestLoginCallbackRefusals(t *testing.T) {
	m := testmaster.Start(t, testmaster.Options{DevIdP: []testmaster.IdPUser{
		{Name: "alice", Email: "alice@example.org", Password: "alice-secret-1"},
		{Name: "Bad Name", Email: "bad+name@example.org", Password: "bad-secret-1"},
	}})

	// No login in progress in this browser.
	b := newBrowser(t, m)
	status, body, _ := b.do("GET", "/auth/callback?state=x&code=y", nil, "Accept", "text/html")
	if status != 400 || !strings.Contains(body, "No login is in progress") {
		t.Fatalf("callback without login: %d %s", status, body)
	}

	// A login in progress, then a callback with another state (an attacker's code).
	noFollow := m.BrowserClient()
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := noFollow.Get(m.URL + "/login")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusSeeOther || err != nil || !strings.HasPrefix(loc.String(), m.IdP.Issuer) {
		t.Fatalf("/login: %d to %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	q := loc.Query()
	if q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("nonce") == "" || len(q.Get("state")) < 40 {
		t.Fatalf("authorization request lacks PKCE, nonce or state: %s", loc)
	}
	resp, err = noFollow.Get(m.URL + "/auth/callback?code=stolen&state=" + url.QueryEscape(q.Get("state")+"x"))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(data), "state mismatch") {
		t.Fatalf("callback with a wrong state: %d %s", resp.StatusCode, data)
	}
	// The failed callback used up the login: the right state no longer works either.
	resp, err = noFollow.Get(m.URL + "/auth/callback?code=stolen&state=" + url.QueryEscape(q.Get("state")))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("callback replayed: %d", resp.StatusCode)
	}
	if _, err := m.Store.GetUserByURN(context.Background(), pki.UserURN(testmaster.Authority, "alice")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused login made the user: %v", err)
	}

	// A provider account whose name cannot be a GPULab name is refused with a clear page.
	b = newBrowser(t, m)
	_, body, resp = b.do("GET", "/login", nil)
	status, body, resp = b.doForm(formActionOf(t, body, resp.Request.URL), url.Values{"login": {"bad+name@example.org"}, "password": {"bad-secret-1"}})
	if status != 403 || !strings.Contains(body, "cannot be a GPULab user name") {
		t.Fatalf("unfit user name: %d at %s: %.400s", status, resp.Request.URL, body)
	}

	// The happy path still works with the helper the portal tests use.
	b = newBrowser(t, m)
	if _, _, _, err := m.Login(b.c, "alice", "alice-secret-1"); err != nil {
		t.Fatal(err)
	}
	if status, body, _ := b.do("GET", v31+"/session", nil); status != 200 || !strings.Contains(body, "alice") {
		t.Fatalf("session after Login: %d %s", status, body)
	}
}
