package handlers

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/store"
)

// Service identities (issue 13): an admin issues a service (the JupyterHub spawner) a client
// certificate with `gpulab-master service-cert` or on the portal's Admin page; the service
// then acts for users by naming them in ActAsHeader (web's authentication checks it on every
// request). Revoking a service disables it and revokes all its certificates.

// ServiceRequest is what an admin gives to create a service or renew its certificate.
type ServiceRequest struct {
	Name string
	// Projects the service may act in (their members only); none: any user.
	Projects []string
	Validity time.Duration
	// Password encrypts the key in the PEM ("" for none).
	Password string
}

// ParseProjectList reads a comma- or space-separated list of project names, without repeats.
func ParseProjectList(s string) []string {
	var out []string
	for _, p := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\r' || r == '\t' }) {
		if !containsString(out, p) {
			out = append(out, p)
		}
	}
	return out
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// validate checks a service request; the error names the field.
func (req ServiceRequest) validate() error {
	if !pki.NamePattern.MatchString(req.Name) {
		return fieldError("name", "must be lowercase letters, digits, '.', '_' or '-' (at most 63), not %.80q", req.Name)
	}
	for _, p := range req.Projects {
		if !pki.NamePattern.MatchString(p) {
			return fieldError("projects", "%.80q is not a project name", p)
		}
	}
	if req.Validity < 0 {
		return fieldError("validity", "must be positive")
	}
	return nil
}

// IssueServiceCertificate creates a service (or renews it: a new certificate, its project list
// replaced, enabled again) and returns its certificate with the private key in one PEM, as the
// service reads it. The key is made here and never stored. Shared by the admin command and the
// portal.
func IssueServiceCertificate(ctx context.Context, st *store.Store, ca *pki.CA, authority string, req ServiceRequest) (store.Service, *x509.Certificate, []byte, error) {
	if err := req.validate(); err != nil {
		return store.Service{}, nil, nil, err
	}
	cert, key, err := ca.IssueClient(pki.ClientSpec{Kind: pki.KindService, URN: pki.ServiceURN(authority, req.Name), Name: req.Name, Validity: req.Validity})
	if err != nil {
		return store.Service{}, nil, nil, fmt.Errorf("issue certificate for service %s: %w", req.Name, err)
	}
	svc, err := st.IssueServiceCertificate(ctx, req.Name, req.Projects, cert.SerialNumber.String(), cert.NotAfter)
	if errors.Is(err, store.ErrNotFound) {
		return store.Service{}, nil, nil, fieldError("projects", "%v", err)
	}
	if err != nil {
		return store.Service{}, nil, nil, err
	}
	data, err := pki.ClientPEM(cert, key, req.Password)
	if err != nil {
		return store.Service{}, nil, nil, fmt.Errorf("encode certificate for service %s: %w", req.Name, err)
	}
	return svc, cert, data, nil
}

// AdminCreateService is POST /admin/services (admins): creates a service, or renews one, and
// answers its certificate and key as a PEM download, as the profile's certificate download.
func (h *Handlers) AdminCreateService(w http.ResponseWriter, r *http.Request) error {
	c, err := adminForm(w, r)
	if err != nil {
		return err
	}
	if h.cfg.CA == nil {
		return errorf(http.StatusServiceUnavailable, "this master cannot sign certificates")
	}
	req := ServiceRequest{Name: strings.TrimSpace(r.PostForm.Get("name")), Projects: ParseProjectList(r.PostForm.Get("projects"))}
	svc, cert, data, err := IssueServiceCertificate(r.Context(), h.store, h.cfg.CA, h.cfg.Authority, req)
	if err != nil {
		return err
	}
	h.log.InfoContext(r.Context(), "service certificate issued", "service", svc.Name, "projects", strings.Join(svc.Projects, ","),
		"serial", cert.SerialNumber.String(), "by", c.User.Name)
	w.Header().Set("Content-Type", "application/x-pem-file")
	w.Header().Set("Content-Disposition", `attachment; filename="`+ServiceCertificateFileName(svc.Name)+`"`)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	_, _ = w.Write(data)
	return nil
}

// ServiceCertificateFileName is the name a service's certificate download is saved under.
func ServiceCertificateFileName(service string) string { return "gpulab-service-" + service + ".pem" }

// AdminRevokeService is POST /admin/services/{name}/revoke (admins): the service is disabled
// and all its certificates revoked; its next request, at any master, gets 401.
func (h *Handlers) AdminRevokeService(w http.ResponseWriter, r *http.Request) error {
	c, err := adminForm(w, r)
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	serials, err := h.store.RevokeService(r.Context(), name)
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, "no service %q", name)
	} else if err != nil {
		return err
	}
	h.log.InfoContext(r.Context(), "service revoked", "service", name, "certificates", len(serials), "by", c.User.Name)
	return seeOther(w, r, "/admin#services-heading")
}
