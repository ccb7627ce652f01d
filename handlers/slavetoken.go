package handlers

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/store"
	"github.com/opengpulab/gpulab/views"
)

// DefaultSlaveTokenValidity is how long a join token can be used unless its maker says.
const DefaultSlaveTokenValidity = 24 * time.Hour

// maxSlaveTokenValidity bounds a token's life: a join token is a secret that makes a slave,
// so it should not lie around for long.
const maxSlaveTokenValidity = 30 * 24 * time.Hour

// SlaveTokenRequest is a join token to make: for the slave's name, in a cluster, valid for a
// while.
type SlaveTokenRequest struct {
	Name      string
	ClusterID int
	Valid     time.Duration
}

// IssueSlaveToken makes a one-time join token: the slave exchanges it (with a CSR) for its
// certificate. Only the token's hash is stored. `gpulab-master slave-token` and the Admin page
// both make tokens here, so both check the same things. Bad input is a 400 naming the field
// (name, clusterId, valid).
func IssueSlaveToken(ctx context.Context, st *store.Store, req SlaveTokenRequest) (string, error) {
	if !pki.NamePattern.MatchString(req.Name) {
		return "", fieldError("name", "a slave name is lowercase letters, digits, '.', '_' or '-', not %q", req.Name)
	}
	if req.Valid <= 0 || req.Valid > maxSlaveTokenValidity {
		return "", fieldError("valid", "must be more than 0 and at most %s, not %s", maxSlaveTokenValidity, req.Valid)
	}
	clusters, err := st.ListClusters(ctx)
	if err != nil {
		return "", fmt.Errorf("slave token: %w", err)
	}
	found := false
	for _, cl := range clusters {
		found = found || cl.ID == req.ClusterID
	}
	if !found {
		return "", fieldError("clusterId", "no cluster %d (create it first)", req.ClusterID)
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("make token: %w", err)
	}
	token := base64.RawURLEncoding.EncodeToString(b)
	if err := st.CreateSlaveToken(ctx, HashToken(token), req.Name, req.ClusterID, req.Valid); err != nil {
		return "", fmt.Errorf("store slave token for %s: %w", req.Name, err)
	}
	return token, nil
}

// SlaveJoinCommand is the command that joins a slave with a token, for the master at url.
func SlaveJoinCommand(url, token string) string {
	return "gpulab-slave join --master " + url + " --ca ca.pem --token " + token
}

// AdminSlaveToken is POST /admin/slave-token (name, clusterId, valid: a Go duration, default
// 24h): admins make a join token in the portal. The answer shows the token once, with the
// `gpulab-slave join` command that uses it, and is never cached.
func (h *Handlers) AdminSlaveToken(w http.ResponseWriter, r *http.Request) error {
	c, err := adminForm(w, r)
	if err != nil {
		return err
	}
	req := SlaveTokenRequest{Name: strings.TrimSpace(r.PostForm.Get("name")), Valid: DefaultSlaveTokenValidity}
	if req.ClusterID, err = strconv.Atoi(strings.TrimSpace(r.PostForm.Get("clusterId"))); err != nil {
		return fieldError("clusterId", "must be a cluster id, not %q", r.PostForm.Get("clusterId"))
	}
	if s := strings.TrimSpace(r.PostForm.Get("valid")); s != "" {
		if req.Valid, err = time.ParseDuration(s); err != nil {
			return fieldError("valid", "must be a duration like 24h or 90m, not %q", s)
		}
	}
	token, err := IssueSlaveToken(r.Context(), h.store, req)
	if err != nil {
		return err
	}
	h.log.InfoContext(r.Context(), "slave join token made", "slave", req.Name, "cluster", req.ClusterID, "valid", req.Valid.String(), "by", c.User.Name)
	scheme := "https"
	if r.TLS == nil {
		scheme = "http"
	}
	w.Header().Set("Cache-Control", "no-store")
	return h.render(w, r, http.StatusOK, views.SlaveTokenPage(views.SlaveTokenView{
		Chrome: h.chrome(r, views.NavAdmin), Name: req.Name, ClusterID: req.ClusterID, Valid: req.Valid.String(),
		Token: token, Command: SlaveJoinCommand(scheme+"://"+r.Host, token),
	}))
}
