package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/pki"
)

// master runs a gpulab-master command in-process against the given database and data folder.
func master(t *testing.T, db, dataDir string, args ...string) (int, string, string) {
	t.Helper()
	env := map[string]string{"DATABASE_URL": db, "GPULAB_DATA_DIR": dataDir, "GPULAB_AUTHORITY": "example.org"}
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, func(k string) string { return env[k] }, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestAdminCommands(t *testing.T) {
	db, data := testenv.PostgresURL(t), t.TempDir()
	steps := []struct {
		args     []string
		code     int
		contains string
	}{
		{[]string{"migrate"}, 0, "schema at version"},
		{[]string{"project", "add", "vision", "--gid", "31000"}, 0, "gid 31000"},
		{[]string{"project", "add", "vision"}, 1, "exists already"},
		{[]string{"project", "add", "Bad Name"}, 2, "project name"},
		{[]string{"member", "add", "vision", "alice", "--email", "alice@example.org"}, 0, "alice is a member of project vision"},
		{[]string{"member", "add", "nope", "alice"}, 1, "no project nope"},
		{[]string{"project", "list"}, 0, "members: [alice]"},
		{[]string{"cluster", "add", "1", "--name", "local"}, 0, "created cluster 1"},
		{[]string{"cluster", "add", "zero"}, 2, "positive integer"},
		{[]string{"user-cert", "--user", "alice"}, 2, "--email is required"},
		{[]string{"frobnicate"}, 2, "unknown command"},
		{[]string{"member", "remove", "vision", "alice"}, 0, "removed alice"},
	}
	for _, s := range steps {
		code, out, errOut := master(t, db, data, s.args...)
		if code != s.code || !strings.Contains(out+errOut, s.contains) {
			t.Errorf("gpulab-master %s: exit %d, output %q %q; want exit %d containing %q", strings.Join(s.args, " "), code, out, errOut, s.code, s.contains)
		}
	}
}

func TestUserCertWritesAUsablePEM(t *testing.T) {
	db, data := testenv.PostgresURL(t), t.TempDir()
	out := filepath.Join(t.TempDir(), "alice.pem")
	code, _, errOut := master(t, db, data, "user-cert", "--user", "alice", "--email", "alice@example.org", "--out", out, "--password", "pw")
	if code != 0 {
		t.Fatalf("user-cert: %d %s", code, errOut)
	}
	info, err := os.Stat(out)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("certificate file mode: %v %v", info, err)
	}
	pemData, _ := os.ReadFile(out)
	tc, err := pki.LoadClientPEM(pemData, "pw")
	if err != nil {
		t.Fatalf("the written PEM does not load: %v", err)
	}
	if tc.Leaf.URIs[0].String() != "urn:publicid:IDN+example.org+user+alice" || tc.Leaf.EmailAddresses[0] != "alice@example.org" {
		t.Fatalf("SANs: %v %v", tc.Leaf.URIs, tc.Leaf.EmailAddresses)
	}
	caPEM, _ := os.ReadFile(filepath.Join(data, "ca.pem"))
	ca, err := pki.ParseCA(caPEM, mustRead(t, filepath.Join(data, "ca-key.pem")))
	if err != nil {
		t.Fatal(err)
	}
	if err := tc.Leaf.CheckSignatureFrom(ca.Cert); err != nil {
		t.Fatalf("certificate not signed by the master's CA: %v", err)
	}
	// To stdout without a password.
	code, pemOut, _ := master(t, db, data, "user-cert", "--user", "bob", "--email", "bob@example.org")
	if code != 0 || !strings.Contains(pemOut, "BEGIN CERTIFICATE") || !strings.Contains(pemOut, "BEGIN EC PRIVATE KEY") {
		t.Fatalf("user-cert to stdout: %d %q", code, pemOut)
	}
}

func TestServeRefusesOlderSchema(t *testing.T) {
	db, data := testenv.PostgresURL(t), t.TempDir()
	code, _, errOut := master(t, db, data, "serve", "--no-migrate", "--listen", "127.0.0.1:0")
	if code != 1 || !strings.Contains(errOut, "gpulab-master migrate") {
		t.Fatalf("serve on an empty database without migrating: exit %d, %q", code, errOut)
	}
}

func mustRead(t *testing.T, f string) []byte {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
