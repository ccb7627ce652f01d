package handlers

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/store"
)

// Identities, disabling and revocation in the API (issue 10):
//
//	GET  users                          admins: every user, with login and state
//	PUT  users/{name}/disabled          admins: {"disabled": true|false}
//	PUT  users/{name}/login             admins: {"issuer": I, "subject": S} links an OpenID login
//	GET  certificates                   the caller's certificates; admins: all (?kind=&owner= filter)
//	POST certificates/{serial}/revoke   the owner of the certificate, or an admin
//	PUT  slaves/{name}/disabled         admins: {"disabled": true|false}
//
// None of this is cached anywhere: every request reads users, slaves and certificates from
// the database, so a change holds at once on every master.

// maxAdminBody bounds the small JSON bodies of these endpoints.
const maxAdminBody = 4 << 10

// decodeStrict reads a small JSON object into v, checked as every body is (unmarshalStrict's
// text and shape limits) and refusing unknown fields and trailing data.
func decodeStrict(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := readBody(w, r, maxAdminBody)
	if err != nil {
		return err
	}
	if err := unmarshalStrict(body, v); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errorf(http.StatusBadRequest, "invalid request body: %v", err)
	}
	if dec.More() {
		return errorf(http.StatusBadRequest, "invalid request body: data after the JSON object")
	}
	return nil
}

// requireAPIAdmin returns the caller if he is an admin, else 401/403.
func requireAPIAdmin(r *http.Request) (*Caller, error) {
	c, err := requireUser(r)
	if err != nil {
		return nil, err
	}
	if !c.Admin() {
		return nil, errorf(http.StatusForbidden, "this endpoint is for admins only")
	}
	return c, nil
}

// ListUsers is GET users (admins).
func (h *Handlers) ListUsers(w http.ResponseWriter, r *http.Request) error {
	if _, err := requireAPIAdmin(r); err != nil {
		return err
	}
	us, err := h.store.ListUsers(r.Context())
	if err != nil {
		return err
	}
	if us == nil {
		us = []store.User{}
	}
	writeList(w, r, us)
	return nil
}

type disabledBody struct {
	Disabled *bool `json:"disabled"`
}

func (b disabledBody) value() (bool, error) {
	if b.Disabled == nil {
		return false, fieldError("disabled", "is required (true or false)")
	}
	return *b.Disabled, nil
}

// disabledRequest reads a PUT …/{name}/disabled by an admin: the caller, the name in the path
// and the state asked for. The admin check comes before the body is read.
func disabledRequest(w http.ResponseWriter, r *http.Request) (*Caller, string, bool, error) {
	c, err := requireAPIAdmin(r)
	if err != nil {
		return nil, "", false, err
	}
	var body disabledBody
	if err := decodeStrict(w, r, &body); err != nil {
		return nil, "", false, err
	}
	disabled, err := body.value()
	if err != nil {
		return nil, "", false, err
	}
	return c, r.PathValue("name"), disabled, nil
}

// SetUserDisabled is PUT users/{name}/disabled (admins): a disabled user is refused on his
// next request, whatever his credentials.
func (h *Handlers) SetUserDisabled(w http.ResponseWriter, r *http.Request) error {
	c, name, disabled, err := disabledRequest(w, r)
	if err != nil {
		return err
	}
	if name == c.User.Name && disabled {
		return errorf(http.StatusConflict, "an admin cannot disable himself")
	}
	if err := h.store.SetUserDisabled(r.Context(), name, disabled); errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, "no user %q", name)
	} else if err != nil {
		return err
	}
	h.log.InfoContext(r.Context(), "user disabled changed", "user", name, "disabled", disabled, "by", c.User.Name)
	writeJSON(w, http.StatusOK, map[string]any{"name": name, "disabled": disabled})
	return nil
}

// LinkUserLogin is PUT users/{name}/login (admins): the OpenID login (issuer, subject) is
// this user's from now on. It is how a person whose name was taken by another account at his
// first login gets in, by an admin's decision, never by a name matching.
func (h *Handlers) LinkUserLogin(w http.ResponseWriter, r *http.Request) error {
	c, err := requireAPIAdmin(r)
	if err != nil {
		return err
	}
	var body struct {
		Issuer  string `json:"issuer"`
		Subject string `json:"subject"`
	}
	if err := decodeStrict(w, r, &body); err != nil {
		return err
	}
	if body.Issuer == "" || len(body.Issuer) > 1024 {
		return fieldError("issuer", "is required (at most 1024 characters)")
	}
	if body.Subject == "" || len(body.Subject) > 1024 {
		return fieldError("subject", "is required (at most 1024 characters)")
	}
	name := r.PathValue("name")
	err = h.store.LinkLogin(r.Context(), name, body.Issuer, body.Subject)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return errorf(http.StatusNotFound, "no user %q", name)
	case errors.Is(err, store.ErrLoginTaken):
		return errorf(http.StatusConflict, "this login is linked to another user already")
	case err != nil:
		return err
	}
	h.log.InfoContext(r.Context(), "login linked", "user", name, "issuer", body.Issuer, "subject", body.Subject, "by", c.User.Name)
	writeJSON(w, http.StatusOK, map[string]string{"name": name, "issuer": body.Issuer, "subject": body.Subject})
	return nil
}

// CertificateView is a certificate as the API and the portal show it.
type CertificateView struct {
	store.Certificate
	State     string     `json:"state"`
	RevokedAt *time.Time `json:"revokedAt,omitempty"`
}

// CertificateViews adds the state at now to each certificate.
func CertificateViews(cs []store.Certificate, now time.Time) []CertificateView {
	out := make([]CertificateView, 0, len(cs))
	for _, c := range cs {
		v := CertificateView{Certificate: c, State: c.State(now)}
		if c.RevokedAt.Valid {
			t := c.RevokedAt.Time
			v.RevokedAt = &t
		}
		out = append(out, v)
	}
	return out
}

// ListCertificates is GET certificates: the caller's own; an admin's, every certificate
// (kind and owner filter them).
func (h *Handlers) ListCertificates(w http.ResponseWriter, r *http.Request) error {
	c, err := requirePerson(r)
	if err != nil {
		return err
	}
	kind, owner := store.CertUser, c.User.Name
	if c.Admin() {
		q := r.URL.Query()
		kind, owner = q.Get("kind"), q.Get("owner")
		if kind != "" && kind != store.CertUser && kind != store.CertSlave && kind != store.CertService {
			return fieldError("kind", "must be user, slave or service")
		}
		if (kind == "") != (owner == "") {
			return fieldError("owner", "kind and owner go together")
		}
	}
	cs, err := h.store.ListCertificates(r.Context(), kind, owner)
	if err != nil {
		return err
	}
	writeList(w, r, CertificateViews(cs, time.Now()))
	return nil
}

// RevokeCertificate is POST certificates/{serial}/revoke: by its owner or an admin. Another
// user's certificate is answered as unknown (404), so serials cannot be probed.
func (h *Handlers) RevokeCertificate(w http.ResponseWriter, r *http.Request) error {
	c, err := requirePerson(r)
	if err != nil {
		return err
	}
	v, err := h.revokeCertificate(r.Context(), c, r.PathValue("serial"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// revokeCertificate revokes a certificate the caller owns, or any as an admin.
func (h *Handlers) revokeCertificate(ctx context.Context, c *Caller, serial string) (CertificateView, error) {
	cert, err := h.store.GetCertificate(ctx, serial)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !c.Admin() && (cert.Kind != store.CertUser || cert.Owner != c.User.Name)) {
		return CertificateView{}, errorf(http.StatusNotFound, "no certificate %q of yours", serial)
	} else if err != nil {
		return CertificateView{}, err
	}
	cert, err = h.store.RevokeCertificate(ctx, serial)
	if err != nil {
		return CertificateView{}, err
	}
	h.log.InfoContext(ctx, "certificate revoked", "serial", serial, "owner", cert.Owner, "kind", cert.Kind, "by", c.User.Name)
	return CertificateViews([]store.Certificate{cert}, time.Now())[0], nil
}

// SetSlaveDisabled is PUT slaves/{name}/disabled (admins): a disabled slave gets no jobs and
// no job secrets; the jobs assigned to it and not yet taken are queued again at once.
func (h *Handlers) SetSlaveDisabled(w http.ResponseWriter, r *http.Request) error {
	c, name, disabled, err := disabledRequest(w, r)
	if err != nil {
		return err
	}
	requeued, err := h.store.SetSlaveDisabled(r.Context(), name, disabled)
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, "no slave %q", name)
	} else if err != nil {
		return err
	}
	h.log.InfoContext(r.Context(), "slave disabled changed", "slave", name, "disabled", disabled, "requeued", len(requeued), "by", c.User.Name)
	h.wakeScheduler()
	if requeued == nil {
		requeued = []string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"name": name, "disabled": disabled, "requeued": requeued})
	return nil
}

// issueUserCertificate makes a user certificate with the configured lifetime, records it (so
// it can be listed and revoked) and returns it with its PEM (key encrypted with password when
// one is given). The key is made here and never stored.
func (h *Handlers) issueUserCertificate(ctx context.Context, u store.User, password string) (*x509.Certificate, []byte, error) {
	cert, key, err := h.cfg.CA.IssueClient(pki.ClientSpec{Kind: pki.KindUser, URN: u.URN, Email: u.Email, Name: u.Name,
		Validity: h.cfg.UserCertValidity})
	if err != nil {
		return nil, nil, fmt.Errorf("issue certificate for %s: %w", u.Name, err)
	}
	fp, err := pki.SSHFingerprint(cert.PublicKey)
	if err != nil {
		return nil, nil, err
	}
	if err := h.store.RecordCertificate(ctx, cert.SerialNumber.String(), store.CertUser, u.Name, cert.NotAfter, fp); err != nil {
		return nil, nil, err
	}
	data, err := pki.ClientPEM(cert, key, password)
	if err != nil {
		return nil, nil, fmt.Errorf("encode certificate for %s: %w", u.Name, err)
	}
	return cert, data, nil
}
