package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/store"
)

// service-cert writes a PEM of kind service with the service URN, records it and the service
// (with its projects); running it again renews and replaces the projects; service-revoke
// disables the service and revokes every certificate; service-list shows them.
func TestServiceCommands(t *testing.T) {
	db, data := testenv.PostgresURL(t), t.TempDir()
	out := filepath.Join(t.TempDir(), "hub.pem")
	steps := []struct {
		args     []string
		code     int
		contains string
	}{
		{[]string{"project", "add", "vision"}, 0, "created project vision"},
		{[]string{"service-cert"}, 2, "--name is required"},
		{[]string{"service-cert", "--name", "Bad Name", "--out", out}, 1, "name: must be lowercase"},
		{[]string{"service-cert", "--name", "jupyterhub", "--projects", "nope", "--out", out}, 1, "nope"},
		{[]string{"service-cert", "--name", "jupyterhub", "--out", out}, 0, "acts for any user"},
		{[]string{"service-list"}, 0, "jupyterhub  any user  enabled  1"},
		{[]string{"service-cert", "--name", "jupyterhub", "--projects", "vision", "--out", out}, 0, "acts for members of vision"},
		{[]string{"service-list"}, 0, "jupyterhub  members of vision  enabled  2"},
		{[]string{"cert", "list", "--kind", "service", "--owner", "jupyterhub"}, 0, "service  jupyterhub"},
		{[]string{"service-revoke", "--name", "nope"}, 1, `no service "nope"`},
		{[]string{"service-revoke", "--name", "jupyterhub"}, 0, "2 certificates revoked"},
		{[]string{"service-list"}, 0, "disabled"},
	}
	for _, s := range steps {
		code, stdout, stderr := master(t, db, data, s.args...)
		if code != s.code || !strings.Contains(stdout+stderr, s.contains) {
			t.Errorf("gpulab-master %s: exit %d, output %q %q; want exit %d containing %q", strings.Join(s.args, " "), code, stdout, stderr, s.code, s.contains)
		}
	}
	info, err := os.Stat(out)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("service PEM: %v %v", info, err)
	}
	pemData, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := pki.LoadClientPEM(pemData, "")
	if err != nil {
		t.Fatal(err)
	}
	id, err := pki.IdentityOf(tc.Leaf)
	if err != nil || id.Kind != pki.KindService || id.URN != "urn:publicid:IDN+example.org+service+jupyterhub" {
		t.Fatalf("service certificate identity: %+v %v", id, err)
	}
	if life := time.Until(tc.Leaf.NotAfter); life < 364*24*time.Hour || life > 365*24*time.Hour {
		t.Errorf("service certificate lifetime %s, want a year", life)
	}
	ctx := context.Background()
	st, err := store.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	c, err := st.GetCertificate(ctx, tc.Leaf.SerialNumber.String())
	if err != nil || c.Kind != store.CertService || c.Owner != "jupyterhub" || c.State(time.Now()) != "revoked" {
		t.Fatalf("the service certificate's record: %+v %v", c, err)
	}
	acc, err := st.GetServiceAccess(ctx, "jupyterhub", c.Serial)
	if err != nil || !acc.Disabled || len(acc.Projects) != 1 || acc.Projects[0] != "vision" || len(acc.ProjectIDs) != 1 {
		t.Fatalf("the service after revocation: %+v %v", acc, err)
	}
}
