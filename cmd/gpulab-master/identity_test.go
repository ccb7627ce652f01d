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

// The identity commands work on the database: a certificate made by user-cert is recorded
// with the 90-day default lifetime and can be revoked by serial; users are disabled, enabled
// and linked to an OpenID login; slaves disabled.
func TestIdentityCommands(t *testing.T) {
	db, data := testenv.PostgresURL(t), t.TempDir()
	out := filepath.Join(t.TempDir(), "alice.pem")
	if code, _, errOut := master(t, db, data, "user-cert", "--user", "alice", "--email", "alice@example.org", "--out", out); code != 0 {
		t.Fatalf("user-cert: %d %s", code, errOut)
	}
	pemData, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := pki.LoadClientPEM(pemData, "")
	if err != nil {
		t.Fatal(err)
	}
	serial := tc.Leaf.SerialNumber.String()
	if life := time.Until(tc.Leaf.NotAfter); life < 89*24*time.Hour || life > 90*24*time.Hour {
		t.Errorf("user-cert lifetime %s, want 90 days", life)
	}
	if code, _, _ := master(t, db, data, "cluster", "add", "1"); code != 0 {
		t.Fatal("cluster add")
	}
	ctx := context.Background()
	st, err := store.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	if err := st.JoinSlave(ctx, "gpu1", 1); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordCertificate(ctx, "4242", store.CertSlave, "gpu1", time.Now().Add(time.Hour), ""); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		args     []string
		code     int
		contains string
	}{
		{[]string{"cert", "list"}, 0, serial},
		{[]string{"cert", "revoke", serial}, 0, "revoked"},
		{[]string{"cert", "list", "--owner", "alice"}, 0, "revoked"},
		{[]string{"cert", "revoke", "1"}, 1, `no certificate "1"`},
		{[]string{"cert", "revoke"}, 2, "needs a serial"},
		{[]string{"user", "disable", "alice"}, 0, "disabled"},
		{[]string{"user", "list"}, 0, "alice@example.org  false     false  true"},
		{[]string{"user", "enable", "alice"}, 0, "enabled"},
		{[]string{"user", "disable", "nobody"}, 1, `no user "nobody"`},
		{[]string{"user", "link", "alice", "--issuer", "https://idp.example.org"}, 2, "needs --issuer and --subject"},
		{[]string{"user", "link", "alice", "--issuer", "https://idp.example.org", "--subject", "s-1"}, 0, "https://idp.example.org#s-1"},
		{[]string{"user", "list"}, 0, "https://idp.example.org#s-1"},
		{[]string{"slave", "disable", "gpu1", "--revoke"}, 0, "1 certificates revoked"},
		{[]string{"slave", "enable", "gpu1"}, 0, "enabled"},
		{[]string{"slave", "disable", "nope"}, 1, `no slave "nope"`},
		{[]string{"serve", "--admins", "alice"}, 2, "bare name"},
		{[]string{"serve", "--user-cert-validity", "-1h"}, 2, "must be positive"},
	}
	for _, s := range steps {
		code, out, errOut := master(t, db, data, s.args...)
		if code != s.code || !strings.Contains(out+errOut, s.contains) {
			t.Errorf("gpulab-master %s: exit %d, output %q %q; want exit %d containing %q", strings.Join(s.args, " "), code, out, errOut, s.code, s.contains)
		}
	}
	if u, err := st.GetUserByName(ctx, "alice"); err != nil || u.Disabled || u.Issuer != "https://idp.example.org" {
		t.Errorf("alice after the commands: %+v %v", u, err)
	}
	if c, err := st.GetCertificate(ctx, "4242"); err != nil || c.State(time.Now()) != "revoked" {
		t.Errorf("slave certificate after disable --revoke: %+v %v", c, err)
	}
}
