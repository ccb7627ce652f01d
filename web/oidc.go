package web

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/store"
)

// The portal's browser login: the OAuth2 authorization code flow with PKCE against any
// standard OpenID Connect provider, configured by issuer URL, client id and secret alone
// (discovery gives the endpoints and keys). The state, nonce and PKCE verifier of a login in
// progress live in the encrypted session cookie, so any master may finish a login another
// one began. The provider's ID token is verified (signature, issuer, audience, expiry, nonce);
// its user-name claim names the GPULab user, who is created at his first login.
//
//	GET  /login?next=/jobs   start a login (or go straight to next when logged in)
//	GET  /auth/callback      the provider sends the browser back here
//	POST /logout             end the session (CSRF-protected), then /logged-out
//	GET  /logged-out         says so, with a link to log in again

// OIDCConfig configures the portal login. An empty Issuer turns the login off.
type OIDCConfig struct {
	// Issuer is the provider's issuer URL (discovery at Issuer/.well-known/openid-configuration).
	Issuer string
	// ClientID and ClientSecret are the master's registration at the provider. The secret
	// may be empty for a public client (PKCE protects the code); it is never logged.
	ClientID     string
	ClientSecret string
	// RedirectURL is the callback URL registered at the provider
	// (https://<host>:<port>/auth/callback); empty: derived from each request's Host.
	RedirectURL string
	// UsernameClaim is the ID-token claim holding the user name (default preferred_username);
	// when it is absent, the local part of a verified e-mail is used.
	UsernameClaim string
	// Scopes are requested from the provider (default openid, profile, email).
	Scopes []string
	// HTTPClient talks to the provider (nil: a client with a 15 s timeout).
	HTTPClient *http.Client
}

// Paths of the login routes.
const (
	LoginPath     = "/login"
	CallbackPath  = "/auth/callback"
	LogoutPath    = "/logout"
	LoggedOutPath = "/logged-out"
)

// loginTimeout bounds the time between /login and the callback.
const loginTimeout = 15 * time.Minute

// oidcLogin is the configured provider. Discovery happens at the first login and is retried
// until it succeeds, so a master starts even while its provider is briefly unreachable.
type oidcLogin struct {
	cfg    OIDCConfig
	client *http.Client

	mu       sync.Mutex
	oauth    *oauth2.Config
	verifier *oidc.IDTokenVerifier
}

func newOIDCLogin(cfg OIDCConfig) *oidcLogin {
	if cfg.UsernameClaim == "" {
		cfg.UsernameClaim = "preferred_username"
	}
	if len(cfg.Scopes) == 0 {
		cfg.Scopes = []string{oidc.ScopeOpenID, "profile", "email"}
	}
	hasOpenID := false
	for _, sc := range cfg.Scopes {
		hasOpenID = hasOpenID || sc == oidc.ScopeOpenID
	}
	if !hasOpenID {
		cfg.Scopes = append([]string{oidc.ScopeOpenID}, cfg.Scopes...)
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: 15 * time.Second}
	}
	return &oidcLogin{cfg: cfg, client: client}
}

// discover returns the OAuth2 configuration (without redirect URL) and the ID-token verifier.
func (o *oidcLogin) discover(ctx context.Context) (oauth2.Config, *oidc.IDTokenVerifier, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.oauth == nil {
		// The provider keeps the client (not ctx) for later key fetches.
		p, err := oidc.NewProvider(oidc.ClientContext(ctx, o.client), o.cfg.Issuer)
		if err != nil {
			return oauth2.Config{}, nil, fmt.Errorf("discover OpenID provider %s: %w", o.cfg.Issuer, err)
		}
		o.oauth = &oauth2.Config{ClientID: o.cfg.ClientID, ClientSecret: o.cfg.ClientSecret, Endpoint: p.Endpoint(), Scopes: o.cfg.Scopes}
		o.verifier = p.Verifier(&oidc.Config{ClientID: o.cfg.ClientID})
	}
	return *o.oauth, o.verifier, nil
}

// redirectURL is the callback URL for this request.
func (s *Server) redirectURL(r *http.Request) string {
	if s.oidc.cfg.RedirectURL != "" {
		return s.oidc.cfg.RedirectURL
	}
	return "https://" + r.Host + CallbackPath
}

// login starts the authorization code flow: fresh state, nonce and PKCE verifier go into the
// session, the browser goes to the provider.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if s.oidc == nil {
		s.problem(w, r, http.StatusServiceUnavailable, "Portal login is off",
			"This master has no OpenID Connect provider configured (--oidc-issuer), so nobody can log in to the portal. "+
				"The API still works with a client certificate (gpulab-cli --cert FILE).", "", "")
		return
	}
	next := safeNext(r.URL.Query().Get("next"))
	if c := handlers.CallerFrom(r.Context()); c != nil && c.Via == viaSession {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	cfg, _, err := s.oidc.discover(r.Context())
	if err != nil {
		s.log.Error("portal login: identity provider unreachable", "err", err)
		s.problem(w, r, http.StatusBadGateway, "Login unavailable",
			"The identity provider cannot be reached right now. Try again in a moment.", LoginPath+"?next="+url.QueryEscape(next), "Try again")
		return
	}
	cfg.RedirectURL = s.redirectURL(r)
	state, nonce, verifier := randomToken(32), randomToken(32), oauth2.GenerateVerifier()
	sess := s.sessionFrom(r)
	sess.Values[sessState] = state
	sess.Values[sessNonce] = nonce
	sess.Values[sessVerifier] = verifier
	sess.Values[sessNext] = next
	sess.Values[sessStarted] = time.Now().Unix()
	if err := s.sessions.save(w, r, sess); err != nil {
		s.h.WriteError(w, r, err)
		return
	}
	http.Redirect(w, r, cfg.AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier)), http.StatusSeeOther)
}

// loginError is a failed callback: what the user is told, and with which status.
type loginError struct {
	status int
	msg    string
	err    error // the cause, logged only
}

func (e *loginError) Error() string {
	if e.err != nil {
		return e.msg + ": " + e.err.Error()
	}
	return e.msg
}

func (e *loginError) Unwrap() error { return e.err }

// callback finishes the flow: it checks the state, exchanges the code (with the PKCE
// verifier), verifies the ID token and its nonce, creates or updates the user and logs him in.
func (s *Server) callback(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if s.oidc == nil {
		s.login(w, r)
		return
	}
	sess := s.sessionFrom(r)
	state, nonce := sessionString(sess, sessState), sessionString(sess, sessNonce)
	verifier, next := sessionString(sess, sessVerifier), safeNext(sessionString(sess, sessNext))
	started, _ := sess.Values[sessStarted].(int64)
	// A login flow is good for one callback, successful or not.
	for _, k := range []string{sessState, sessNonce, sessVerifier, sessNext, sessStarted} {
		delete(sess.Values, k)
	}
	user, err := s.finishLogin(r, state, nonce, verifier, started)
	if err != nil {
		_ = s.sessions.save(w, r, sess)
		var le *loginError
		if !errors.As(err, &le) {
			s.writeError(w, r, err) // the database, when it cannot store the user: 503
			return
		}
		s.log.Warn("portal login refused", "reason", le.msg, "err", le.err, "remote", r.RemoteAddr)
		s.problem(w, r, le.status, "Login failed", le.msg, LoginPath+"?next="+url.QueryEscape(next), "Log in again")
		return
	}
	// A new login gets a new CSRF token: nothing from before the login stays valid.
	sess.Values[sessUser] = user.URN
	sess.Values[sessCSRF] = randomToken(32)
	if err := s.sessions.save(w, r, sess); err != nil {
		s.h.WriteError(w, r, err)
		return
	}
	s.log.Info("portal login", "user", user.URN, "admin", user.IsAdmin, "remote", r.RemoteAddr)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *Server) finishLogin(r *http.Request, state, nonce, verifier string, started int64) (store.User, error) {
	q := r.URL.Query()
	if state == "" || nonce == "" || verifier == "" {
		return store.User{}, &loginError{status: http.StatusBadRequest,
			msg: "No login is in progress in this browser (it expired, or was started in another browser or tab). Start again."}
	}
	if time.Since(time.Unix(started, 0)) > loginTimeout {
		return store.User{}, &loginError{status: http.StatusBadRequest, msg: "The login took too long. Start again."}
	}
	if subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(state)) != 1 {
		return store.User{}, &loginError{status: http.StatusBadRequest,
			msg: "The identity provider's answer does not belong to the login started in this browser (state mismatch). Start again."}
	}
	if e := q.Get("error"); e != "" {
		msg := "The identity provider refused the login: " + e
		if d := q.Get("error_description"); d != "" {
			msg += " (" + d + ")"
		}
		return store.User{}, &loginError{status: http.StatusForbidden, msg: msg}
	}
	code := q.Get("code")
	if code == "" {
		return store.User{}, &loginError{status: http.StatusBadRequest, msg: "The identity provider sent no authorization code."}
	}
	cfg, idVerifier, err := s.oidc.discover(r.Context())
	if err != nil {
		return store.User{}, &loginError{status: http.StatusBadGateway, msg: "The identity provider cannot be reached right now.", err: err}
	}
	cfg.RedirectURL = s.redirectURL(r)
	ctx := oidc.ClientContext(r.Context(), s.oidc.client)
	tok, err := cfg.Exchange(ctx, code, oauth2.VerifierOption(verifier))
	if err != nil {
		return store.User{}, &loginError{status: http.StatusBadGateway, msg: "The identity provider did not accept the authorization code.", err: err}
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return store.User{}, &loginError{status: http.StatusBadGateway, msg: "The identity provider sent no ID token (is the openid scope allowed?)."}
	}
	idTok, err := idVerifier.Verify(ctx, raw)
	if err != nil {
		return store.User{}, &loginError{status: http.StatusForbidden, msg: "The identity provider's ID token is not valid.", err: err}
	}
	if subtle.ConstantTimeCompare([]byte(idTok.Nonce), []byte(nonce)) != 1 {
		return store.User{}, &loginError{status: http.StatusForbidden, msg: "The ID token was not issued for this login (nonce mismatch)."}
	}
	var claims map[string]any
	if err := idTok.Claims(&claims); err != nil {
		return store.User{}, &loginError{status: http.StatusBadGateway, msg: "The ID token's claims cannot be read.", err: err}
	}
	name, err := usernameFrom(claims, s.oidc.cfg.UsernameClaim)
	if err != nil {
		return store.User{}, &loginError{status: http.StatusForbidden, msg: err.Error()}
	}
	email, _ := claims["email"].(string)
	verified, _ := claims["email_verified"].(bool)
	login := store.LoginUser{Issuer: idTok.Issuer, Subject: idTok.Subject, Name: name, Email: email, EmailVerified: verified && email != ""}
	u, outcome, err := s.store.ResolveLogin(r.Context(), login, pki.UserURN(s.cfg.Authority, name))
	if err != nil {
		return store.User{}, fmt.Errorf("find or create user %s at login: %w", name, err)
	}
	switch outcome {
	case store.LoginNameTaken:
		return store.User{}, &loginError{status: http.StatusForbidden, msg: nameTakenMessage(name, login)}
	case store.LoginCreated:
		s.log.Info("user created at his first login", "user", u.Name, "issuer", login.Issuer, "subject", login.Subject)
	case store.LoginLinkedByEmail:
		s.log.Info("login linked to an account by its verified e-mail", "user", u.Name, "issuer", login.Issuer, "subject", login.Subject)
	}
	if u.Disabled {
		return store.User{}, &loginError{status: http.StatusForbidden, msg: "Your GPULab account " + u.Name + " is disabled. Ask an administrator."}
	}
	if !u.IsAdmin && s.admins.match(u) {
		// Recorded, so the admin page lists him as one (each request matches again anyway).
		if err := s.store.SetAdmin(r.Context(), u.ID, true); err != nil {
			return store.User{}, fmt.Errorf("make %s an admin at login: %w", u.Name, err)
		}
		u.IsAdmin = true
	}
	return u, nil
}

// nameTakenMessage is what a login is told when its user name belongs to another account:
// accounts never merge by name, so an administrator must link the login if it is the same
// person. It names the command that does it.
func nameTakenMessage(name string, l store.LoginUser) string {
	return fmt.Sprintf("The GPULab user name %q belongs to another account, which is not linked to this login "+
		"(issuer %s, subject %s). Accounts are never merged by name. If that account is yours, ask an administrator to link it: "+
		"gpulab-master user link %s --issuer %s --subject %s (or PUT users/%s/login in the API).",
		name, l.Issuer, l.Subject, name, l.Issuer, l.Subject, name)
}

// usernameFrom finds the GPULab user name in the ID token's claims: the configured claim,
// else the local part of the e-mail (unless the provider says it is unverified), lower-cased
// and cut at an "@" (claims such as upn hold an address). Names that do not fit
// pki.NamePattern are refused rather than mangled, so two accounts never merge by accident.
func usernameFrom(claims map[string]any, claim string) (string, error) {
	v, _ := claims[claim].(string)
	source := "claim " + claim
	if strings.TrimSpace(v) == "" {
		email, _ := claims["email"].(string)
		if verified, ok := claims["email_verified"].(bool); email == "" || (ok && !verified) {
			return "", fmt.Errorf("the identity provider gave no user name (claim %s) and no verified e-mail address, "+
				"so no GPULab user name can be derived; ask an administrator to check the provider's configuration", claim)
		}
		v, source = email, "e-mail address"
	}
	name := strings.ToLower(strings.TrimSpace(v))
	if at := strings.IndexByte(name, '@'); at >= 0 {
		name = name[:at]
	}
	if !pki.NamePattern.MatchString(name) {
		return "", fmt.Errorf("the user name %q (from the %s) cannot be a GPULab user name: names are lower-case letters, "+
			"digits, '.', '_' and '-', start with a letter or digit and have at most 63 characters; ask an administrator", name, source)
	}
	return name, nil
}

// logout ends the session. It is a POST (CSRF-protected like every state change), so no
// other site can log a user out with a link or an image.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	sess := s.sessionFrom(r)
	if urn := sessionString(sess, sessUser); urn != "" {
		s.log.Info("portal logout", "user", urn)
	}
	if err := s.sessions.clear(w, r, sess); err != nil {
		s.h.WriteError(w, r, err)
		return
	}
	if r.Header.Get("HX-Request") == "true" {
		w.Header().Set("HX-Redirect", LoggedOutPath)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	http.Redirect(w, r, LoggedOutPath, http.StatusSeeOther)
}

// loggedOut confirms a logout. It does not bounce to the provider at once: with single
// sign-on the user would be logged straight back in.
func (s *Server) loggedOut(w http.ResponseWriter, r *http.Request) {
	s.problem(w, r, http.StatusOK, "Logged out", "You have logged out of GPULab.", LoginPath, "Log in again")
}

// sessionInfo is GET <api>/session: the caller and, for a browser session, its CSRF token,
// which scripts of the portal put in the X-CSRF-Token header of their state-changing calls.
// Other sites cannot read it: the API sends no CORS headers.
func (s *Server) sessionInfo(w http.ResponseWriter, r *http.Request) error {
	c := handlers.CallerFrom(r.Context())
	if c == nil {
		return handlers.ErrUnauthenticated
	}
	if c.Kind != pki.KindUser {
		return &handlers.Error{Status: http.StatusForbidden, Message: fmt.Sprintf("%s credentials are not accepted on user endpoints", c.Kind)}
	}
	body := struct {
		User      store.User `json:"user"`
		Via       string     `json:"via"`
		CSRFToken string     `json:"csrfToken,omitempty"`
	}{User: c.User, Via: c.Via}
	if c.Via == viaSession {
		body.CSRFToken = handlers.CSRFToken(r.Context())
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, body)
	return nil
}

// safeNext keeps a return path only when it stays on this site: a path starting with a single
// "/" (not "//host" or "/\host", which browsers read as another host), without a scheme, host,
// backslash or control character. Anything else, and the login routes themselves, give "/".
func safeNext(next string) string {
	if next == "" || next[0] != '/' || strings.HasPrefix(next, "//") {
		return "/"
	}
	for _, c := range next {
		if c == '\\' || c < 0x20 || c == 0x7f {
			return "/"
		}
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || !strings.HasPrefix(u.Path, "/") || strings.HasPrefix(u.Path, "//") {
		return "/"
	}
	switch u.Path {
	case LoginPath, CallbackPath, LogoutPath:
		return "/"
	}
	return next
}

// problemPage is the small page of the login routes (the portal's own layout is not needed to
// say that a login failed).
var problemPage = template.Must(template.New("problem").Parse(`<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}} · GPULab</title>
<style>body{font-family:system-ui,sans-serif;max-width:40rem;margin:3rem auto;padding:0 1rem;line-height:1.5}</style>
</head>
<body><main>
<h1>{{.Title}}</h1>
<p id="message">{{.Message}}</p>
{{if .Link}}<p><a href="{{.Link}}">{{.LinkText}}</a></p>{{end}}
</main></body>
</html>
`))

// problem answers a login-route request: a small HTML page for browsers, the usual JSON error
// for API clients and htmx.
func (s *Server) problem(w http.ResponseWriter, r *http.Request, status int, title, msg, link, linkText string) {
	if !wantsHTML(r) || r.Header.Get("HX-Request") == "true" {
		if status < 400 {
			writeJSON(w, status, map[string]string{"message": msg})
			return
		}
		s.h.WriteError(w, r, &handlers.Error{Status: status, Message: msg})
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_ = problemPage.Execute(w, struct{ Title, Message, Link, LinkText string }{title, msg, link, linkText})
}

// wantsHTML reports whether the client prefers a page (browsers send Accept: text/html,...).
func wantsHTML(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

// writeJSON writes v as the JSON body (an encoding error can only be a broken connection).
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
