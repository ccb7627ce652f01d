package web

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/store"
)

// authenticate establishes who calls: a client certificate that the TLS stack verified against
// the master's CA. A request without one goes on without a caller; handlers that need one
// answer 401 (JSON, never a redirect, so scripts see what happened).
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		caller, err := s.callerFromCert(r)
		if err != nil {
			s.h.WriteError(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(handlers.WithCaller(r.Context(), caller)))
	})
}

func (s *Server) callerFromCert(r *http.Request) (*handlers.Caller, error) {
	id, err := pki.IdentityOf(r.TLS.VerifiedChains[0][0])
	if err != nil {
		return nil, &handlers.Error{Status: http.StatusUnauthorized, Message: "client certificate: " + err.Error()}
	}
	if id.Kind == pki.KindSlave {
		urn, err := pki.ParseURN(id.URN)
		if err != nil || urn.Type != "slave" {
			return nil, &handlers.Error{Status: http.StatusUnauthorized, Message: fmt.Sprintf("slave certificate names %q, not a slave", id.URN)}
		}
		return &handlers.Caller{Kind: pki.KindSlave, SlaveName: urn.Name, Via: "certificate"}, nil
	}
	if id.Kind != pki.KindUser {
		// Services get their own endpoints in a later milestone; user endpoints refuse them.
		return &handlers.Caller{Kind: id.Kind, Via: "certificate"}, nil
	}
	urn, err := pki.ParseURN(id.URN)
	if err != nil || urn.Type != "user" {
		return nil, &handlers.Error{Status: http.StatusUnauthorized, Message: fmt.Sprintf("client certificate names %q, not a user", id.URN)}
	}
	ctx := r.Context()
	u, err := s.store.GetUserByURN(ctx, id.URN)
	if errors.Is(err, store.ErrNotFound) || (err == nil && s.admins[urn.Name] && !u.IsAdmin) {
		// The certificate is the proof: a user the CA vouches for exists from his first call.
		u, err = s.store.UpsertUser(ctx, id.URN, urn.Name, id.Email, s.admins[urn.Name])
	}
	if err != nil {
		return nil, fmt.Errorf("load user %s: %w", id.URN, err)
	}
	projects, err := s.store.ListUserProjects(ctx, u.ID)
	if err != nil {
		return nil, fmt.Errorf("load projects of %s: %w", u.Name, err)
	}
	c := &handlers.Caller{User: u, Kind: pki.KindUser, Via: "certificate"}
	for _, p := range projects {
		c.ProjectIDs = append(c.ProjectIDs, p.ID)
	}
	return c, nil
}
