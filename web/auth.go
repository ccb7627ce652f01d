package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/static"
	"github.com/opengpulab/gpulab/store"
)

// authenticate establishes who calls: a client certificate that the TLS stack verified against
// the master's CA, else the browser's session cookie (a user logged in to the portal). A
// request with neither goes on without a caller; handlers that need one answer 401 (JSON,
// never a redirect, so scripts see what happened), page routes redirect to the login
// (requireLogin). A session request also carries its CSRF token in the context, for the
// portal's forms. Reading the user needs the database: when it cannot be reached the request
// ends here with 503 and Retry-After (a page for a browser), as a handler's would.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, static.Prefix) {
			// The stylesheet and htmx are the same for everybody, and the error page of a
			// database outage needs them too.
			next.ServeHTTP(w, r)
			return
		}
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			if _, ok := r.Header[http.CanonicalHeaderKey(handlers.ActAsHeader)]; ok {
				s.writeError(w, r, errActAsNotService)
				return
			}
			ctx, err := s.sessionContext(r)
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			next.ServeHTTP(w, r.WithContext(ctx))
			return
		}
		caller, err := s.callerFromCert(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if caller.Service != "" && !strings.HasPrefix(r.URL.Path, "/api/") {
			// The portal is for people, the slave protocol for slaves: a service has the API.
			s.writeError(w, r, &handlers.Error{Status: http.StatusForbidden,
				Message: "service " + caller.Service + " may use the API only, not the portal or the slave protocol"})
			return
		}
		next.ServeHTTP(w, r.WithContext(handlers.WithCaller(r.Context(), caller)))
	})
}

// sessionContext adds the session, its CSRF token and its user (when logged in) to the
// request's context. A session whose user no longer exists counts as logged out.
func (s *Server) sessionContext(r *http.Request) (context.Context, error) {
	ctx := r.Context()
	if _, err := r.Cookie(sessionCookie); err != nil {
		return ctx, nil
	}
	sess := s.sessions.load(r)
	ctx = withSession(ctx, sess)
	if tok := sessionString(sess, sessCSRF); tok != "" {
		ctx = handlers.WithCSRFToken(ctx, tok)
	}
	urn := sessionString(sess, sessUser)
	if urn == "" {
		return ctx, nil
	}
	caller, err := s.userCaller(ctx, urn, "", "", false, viaSession, "")
	if errors.Is(err, store.ErrNotFound) {
		return ctx, nil
	}
	if err != nil {
		return nil, err
	}
	return handlers.WithCaller(ctx, caller), nil
}

// callerFromCert is the caller of a verified client certificate. Every request reads, without
// a cache, whether the certificate is revoked and whether its user or slave is disabled, so a
// revocation made on one master holds on the next request at every master. For a user this
// is the same query that loads him (one round trip per request, as before).
func (s *Server) callerFromCert(r *http.Request) (*handlers.Caller, error) {
	facts := certFactsOf(r.Context(), r.TLS.VerifiedChains[0][0])
	serial, id := facts.serial, facts.id
	if err := facts.err; err != nil {
		return nil, &handlers.Error{Status: http.StatusUnauthorized, Message: "client certificate: " + err.Error()}
	}
	if id.Kind == pki.KindService {
		return s.serviceCaller(r, id, serial)
	}
	if _, actAs := r.Header[http.CanonicalHeaderKey(handlers.ActAsHeader)]; actAs {
		return nil, errActAsNotService
	}
	// A slave's most frequent calls (heartbeat, long poll, update, log, done) read their
	// certificate's state in their own first statement (handlers.CertCheckedByHandler): a
	// round trip less per call, still read at the request itself, so a revocation holds at
	// the next one.
	own := id.Kind == pki.KindSlave && r.Method == http.MethodPost && handlers.CertCheckedByHandler(r.URL.Path)
	if id.Kind != pki.KindUser && !own {
		if err := handlers.CheckCertificate(r.Context(), s.store, serial); err != nil {
			return nil, err
		}
	}
	if id.Kind == pki.KindSlave {
		urn, err := pki.ParseURN(id.URN)
		if err != nil || urn.Type != "slave" {
			return nil, &handlers.Error{Status: http.StatusUnauthorized, Message: fmt.Sprintf("slave certificate names %q, not a slave", id.URN)}
		}
		c := &handlers.Caller{Kind: pki.KindSlave, SlaveName: urn.Name, Via: "certificate"}
		if own {
			c.CertToCheck = serial
		}
		return c, nil
	}
	if id.Kind != pki.KindUser {
		return nil, &handlers.Error{Status: http.StatusUnauthorized, Message: fmt.Sprintf("client certificate of unknown kind %q", id.Kind)}
	}
	// A certificate of a user the master does not know is refused unless the operator lets the
	// CA's word create users (--auto-create-cert-users): a certificate made before the user was
	// deleted, or by an old master, must not bring him back.
	c, err := s.userCaller(r.Context(), id.URN, id.Email, serial, s.cfg.AutoCreateCertUsers, "certificate", jobToRead(r))
	if errors.Is(err, store.ErrNotFound) {
		if err := handlers.CheckCertificate(r.Context(), s.store, serial); err != nil {
			return nil, err
		}
		return nil, &handlers.Error{Status: http.StatusUnauthorized,
			Message: "the user of this certificate is not known to the master (an admin creates users, or starts the master with --auto-create-cert-users)"}
	}
	return c, err
}

// jobToRead is the job of a GET jobs/{id} of the API naming a whole UUID (lowercased), "" for
// any other request: the caller's certificate reads it with the user (userCaller).
func jobToRead(r *http.Request) string {
	if r.Method != http.MethodGet {
		return ""
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/api/gpulab/")
	if !ok {
		return ""
	}
	version, rest, _ := strings.Cut(rest, "/")
	id, ok := strings.CutPrefix(rest, "jobs/")
	if !ok || !slices.Contains(handlers.APIVersions, version) || len(id) != 36 || uuid.Validate(id) != nil {
		return ""
	}
	return strings.ToLower(id)
}

// userCaller loads a user and his projects as a caller, for certificates (serial: the
// certificate's, checked in the same query) and sessions (serial "") alike. Admins named in the
// configuration (by verified e-mail or issuer and subject) are admins for this request. With
// create, a user not yet known is created (with email); without, a store.ErrNotFound comes
// back. A disabled user, a revoked or expired certificate, are refused with 401. With jobID,
// the job is read in the same statement and handed to the handler (Caller.Job), which still
// decides whether the caller may see it.
func (s *Server) userCaller(ctx context.Context, urnStr, email, serial string, create bool, via, jobID string) (*handlers.Caller, error) {
	urn, err := pki.ParseURN(urnStr)
	if err != nil || urn.Type != "user" {
		return nil, &handlers.Error{Status: http.StatusUnauthorized, Message: fmt.Sprintf("credentials name %q, not a user", urnStr)}
	}
	var u store.User
	var projectIDs []int64
	var certState string
	var rec *store.JobRecord
	if jobID != "" {
		u, projectIDs, certState, rec, err = s.store.GetUserAndJob(ctx, urnStr, serial, jobID)
	}
	if jobID == "" || errors.Is(err, store.ErrNotFound) {
		// No such job (or user): read the user alone, for the answer each gives.
		u, projectIDs, certState, err = s.store.GetUserWithProjectsAndCert(ctx, urnStr, serial)
	}
	if create && errors.Is(err, store.ErrNotFound) {
		if err := handlers.CheckCertificate(ctx, s.store, serial); err != nil {
			return nil, err
		}
		if _, err = s.store.UpsertUser(ctx, urnStr, urn.Name, email, false); err == nil {
			s.log.InfoContext(ctx, "user created from his certificate", "user", urnStr)
			u, projectIDs, certState, err = s.store.GetUserWithProjectsAndCert(ctx, urnStr, serial)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("load user %s: %w", urnStr, err)
	}
	if err := handlers.CertificateRefused(serial, certState); err != nil {
		return nil, err
	}
	if u.Disabled {
		return nil, &handlers.Error{Status: http.StatusUnauthorized, Message: "user " + u.Name + " is disabled: ask an administrator"}
	}
	u.IsAdmin = u.IsAdmin || s.admins.match(u)
	c := &handlers.Caller{User: u, Kind: pki.KindUser, Via: via, ProjectIDs: projectIDs, Job: rec}
	return c, nil
}

// errActAsNotService refuses the act-as header with any credentials but a service's.
var errActAsNotService = &handlers.Error{Status: http.StatusForbidden,
	Message: "only service certificates may act for another user (header " + handlers.ActAsHeader + ")"}

// serviceCaller is the caller of a service certificate (issue 13). Every request reads, without
// a cache, the certificate's state and the service's row: a revoked certificate, a disabled
// or deleted service get 401 at once on every master. Without the act-as header the caller is
// the bare service (public endpoints only: requireUser refuses it, naming the header). With
// it, the caller is the named user, loaded as a user certificate loads him, acting through the
// service: never an admin, and only in his projects that the service may act in. Every service
// request is logged with both identities.
func (s *Server) serviceCaller(r *http.Request, id pki.Identity, serial string) (*handlers.Caller, error) {
	ctx := r.Context()
	urn, err := pki.ParseURN(id.URN)
	if err != nil || urn.Type != "service" {
		return nil, &handlers.Error{Status: http.StatusUnauthorized, Message: fmt.Sprintf("service certificate names %q, not a service", id.URN)}
	}
	acc, err := s.store.GetServiceAccess(ctx, urn.Name, serial)
	if errors.Is(err, store.ErrNotFound) {
		return nil, &handlers.Error{Status: http.StatusUnauthorized, Message: "service " + urn.Name + " is not known to the master"}
	}
	if err != nil {
		return nil, fmt.Errorf("load service %s: %w", urn.Name, err)
	}
	switch {
	case acc.Disabled:
		return nil, &handlers.Error{Status: http.StatusUnauthorized, Message: "service " + urn.Name + " is disabled (revoked): an administrator issues a new certificate"}
	case !acc.CertState.Valid:
		// Every service certificate the master issues is recorded: one it has no record of
		// was not made by service-cert.
		return nil, &handlers.Error{Status: http.StatusUnauthorized, Message: "client certificate " + serial + " of service " + urn.Name + " is not recorded by the master"}
	}
	if err := handlers.CertificateRefused(serial, acc.CertState.String); err != nil {
		return nil, err
	}
	values := r.Header.Values(handlers.ActAsHeader)
	if len(values) == 0 {
		s.log.InfoContext(ctx, "service request", "service", urn.Name, "user", "", "method", r.Method, "path", r.URL.Path)
		return &handlers.Caller{Kind: pki.KindService, Service: urn.Name, Via: "certificate"}, nil
	}
	c, err := s.actAs(ctx, acc, values)
	if err != nil {
		s.log.InfoContext(ctx, "service request refused", "service", urn.Name, "act_as", values, "method", r.Method, "path", r.URL.Path, "error", err)
		return nil, err
	}
	s.log.InfoContext(ctx, "service request", "service", urn.Name, "user", c.User.Name, "method", r.Method, "path", r.URL.Path)
	return c, nil
}

// actAs loads the user a service acts for (the act-as header's one value: a user name or
// URN). An unknown or disabled user, or one of whose projects the service may act in none,
// is refused with 403 naming him.
func (s *Server) actAs(ctx context.Context, acc store.ServiceAccess, values []string) (*handlers.Caller, error) {
	refuse := func(format string, args ...any) error {
		return &handlers.Error{Status: http.StatusForbidden, Message: fmt.Sprintf(handlers.ActAsHeader+": "+format, args...)}
	}
	if len(values) != 1 || values[0] == "" {
		return nil, refuse("give exactly one user name or URN")
	}
	who := strings.TrimSpace(values[0])
	urnStr := who
	if strings.HasPrefix(who, "urn:") {
		if u, err := pki.ParseURN(who); err != nil || u.Type != "user" {
			return nil, refuse("%.200q is not a user URN", who)
		}
	} else {
		if !pki.NamePattern.MatchString(who) {
			return nil, refuse("%.200q is not a user name", who)
		}
		u, err := s.store.GetUserByName(ctx, who)
		if errors.Is(err, store.ErrNotFound) {
			return nil, refuse("no user %s", who)
		}
		if err != nil {
			return nil, fmt.Errorf("load user %s: %w", who, err)
		}
		urnStr = u.URN
	}
	c, err := s.userCaller(ctx, urnStr, "", "", false, "service", "")
	var he *handlers.Error
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, refuse("no user %s", who)
	case errors.As(err, &he):
		// userCaller's 401s (disabled user, not a user URN) are about the named user, not
		// about the caller's credentials.
		return nil, refuse("service %s may not act for %s: %s", acc.Name, who, he.Message)
	case err != nil:
		return nil, err
	}
	c.Service = acc.Name
	c.User.IsAdmin = false
	if len(acc.Projects) > 0 {
		c.Confined = true
		if c.ProjectIDs = intersect(c.ProjectIDs, acc.ProjectIDs); len(c.ProjectIDs) == 0 {
			return nil, refuse("service %s acts only for members of %s; %s is in none of them", acc.Name, strings.Join(acc.Projects, ", "), who)
		}
	}
	return c, nil
}

// intersect keeps the ids of a that are in b, in a's order.
func intersect(a, b []int64) []int64 {
	out := []int64{}
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}
