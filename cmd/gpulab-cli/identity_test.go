package main

import (
	"strings"
	"testing"
)

// certs lists and revokes the caller's certificates; admin lists users and disables users and
// slaves, against a real master.
func TestCertsAndAdminCommands(t *testing.T) {
	run, vars, m := realMasterEnv(t)
	root := m.AddUser("root", true, "")
	bob := m.AddUser("bob", false, "")
	m.SlaveCert("gpu1", 1)
	if r := run("", "certs"); r.code != exitOK || strings.Count(r.stdout, "alice") != 1 || strings.Contains(r.stdout, "bob") {
		t.Fatalf("certs of alice: %s", r)
	}
	if r := run("", "admin", "users"); r.code == exitOK || !strings.Contains(r.stderr, "admins only") {
		t.Errorf("admin users as alice: %s", r)
	}
	if r := run("", "certs", "revoke", bob.Serial); r.code == exitOK {
		t.Errorf("alice revoking bob's certificate: %s", r)
	}
	if r := run("", "certs", "frobnicate"); r.code != exitUsage {
		t.Errorf("certs frobnicate: %s", r)
	}

	vars["GPULAB_CERT"] = root.CertFile
	if r := run("", "admin", "users"); r.code != exitOK || !strings.Contains(r.stdout, "bob") || !strings.Contains(r.stdout, "root") {
		t.Fatalf("admin users: %s", r)
	}
	if r := run("", "admin", "disable-user", "bob"); r.code != exitOK || !strings.Contains(r.stdout, "disabled bob") {
		t.Fatalf("admin disable-user: %s", r)
	}
	if status, _, _ := m.Do(bob, "GET", "/api/gpulab/v3.1/jobs", nil); status != 401 {
		t.Fatalf("bob after admin disable-user: %d", status)
	}
	if r := run("", "admin", "disable-slave", "gpu1"); r.code != exitOK {
		t.Fatalf("admin disable-slave: %s", r)
	}
	if sl, err := m.Store.GetSlave(t.Context(), "gpu1"); err != nil || !sl.Disabled {
		t.Fatalf("gpu1 after admin disable-slave: %+v %v", sl, err)
	}
	if r := run("", "certs", "revoke", bob.Serial); r.code != exitOK || !strings.Contains(r.stdout, "revoked") {
		t.Fatalf("admin revoking bob's certificate: %s", r)
	}
	if r := run("", "certs"); r.code != exitOK || !strings.Contains(r.stdout, "gpu1") {
		t.Fatalf("certs as admin (all): %s", r)
	}
}
