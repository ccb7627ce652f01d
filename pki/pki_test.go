package pki

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestCAIsMadeOnceAndReloaded(t *testing.T) {
	dir := t.TempDir()
	ca, created, err := LoadOrCreateCA(dir, "test CA")
	if err != nil || !created {
		t.Fatalf("first start: created=%v err=%v", created, err)
	}
	info, err := os.Stat(filepath.Join(dir, "ca-key.pem"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("CA key mode: %v %v", info, err)
	}
	again, created, err := LoadOrCreateCA(dir, "test CA")
	if err != nil || created || !again.Cert.Equal(ca.Cert) {
		t.Fatalf("second start: created=%v err=%v same=%v", created, err, again.Cert.Equal(ca.Cert))
	}
	if err := os.Remove(filepath.Join(dir, "ca-key.pem")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreateCA(dir, "test CA"); err == nil {
		t.Fatal("a CA certificate without its key was accepted (or silently replaced)")
	}
}

func TestClientCertificateCarriesIdentity(t *testing.T) {
	ca, err := NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	urn := UserURN("example.org", "alice")
	cert, key, err := ca.IssueClient(ClientSpec{Kind: KindUser, URN: urn, Email: "alice@example.org", Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("client certificate does not verify against its CA: %v", err)
	}
	if cert.URIs[0].String() != urn || cert.EmailAddresses[0] != "alice@example.org" {
		t.Fatalf("SANs: %v %v", cert.URIs, cert.EmailAddresses)
	}
	id, err := IdentityOf(cert)
	if err != nil || id.URN != urn || id.Email != "alice@example.org" || id.Kind != KindUser {
		t.Fatalf("identity %+v %v", id, err)
	}
	for _, password := range []string{"", "correct horse"} {
		pemData, err := ClientPEM(cert, key, password)
		if err != nil {
			t.Fatal(err)
		}
		if password != "" && !strings.Contains(string(pemData), "ENCRYPTED") {
			t.Fatal("password given but key not encrypted")
		}
		tc, err := LoadClientPEM(pemData, password)
		if err != nil || !tc.Leaf.Equal(cert) {
			t.Fatalf("load PEM (password %q): %v", password, err)
		}
		if password != "" {
			if _, err := LoadClientPEM(pemData, "wrong"); !errors.Is(err, ErrWrongPassword) {
				t.Fatalf("wrong password: %v", err)
			}
			if _, err := LoadClientPEM(pemData, ""); !errors.Is(err, ErrPasswordNeeded) {
				t.Fatalf("no password: %v", err)
			}
		}
	}
	if _, _, err := ca.IssueClient(ClientSpec{Kind: KindUser, URN: "alice"}); err == nil {
		t.Fatal("a non-URN identity was accepted")
	}
}

// The PEM must be readable by OpenSSL (and so by curl and imec's Python client), with and
// without a password.
func TestClientPEMReadableByOpenSSL(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl not installed")
	}
	ca, _ := NewCA("test CA")
	cert, key, _ := ca.IssueClient(ClientSpec{Kind: KindUser, URN: UserURN("example.org", "bob"), Name: "bob"})
	dir := t.TempDir()
	for _, password := range []string{"", "s3cret"} {
		pemData, _ := ClientPEM(cert, key, password)
		f := filepath.Join(dir, "bob.pem")
		if err := os.WriteFile(f, pemData, 0o600); err != nil {
			t.Fatal(err)
		}
		args := []string{"pkey", "-in", f, "-noout"}
		if password != "" {
			args = append(args, "-passin", "pass:"+password)
		}
		if out, err := exec.Command("openssl", args...).CombinedOutput(); err != nil {
			t.Fatalf("openssl cannot read the key (password %q): %v %s", password, err, out)
		}
		if out, err := exec.Command("openssl", "x509", "-in", f, "-noout", "-ext", "subjectAltName").CombinedOutput(); err != nil ||
			!strings.Contains(string(out), "URI:urn:publicid:IDN+example.org+user+bob") {
			t.Fatalf("openssl x509: %v %s", err, out)
		}
	}
}

func TestURN(t *testing.T) {
	u, err := ParseURN("urn:publicid:IDN+ilabt.imec.be+user+wvdemeer")
	if err != nil || u.Name != "wvdemeer" || u.Type != "user" || u.MiniID() != "wvdemeer@ilabt" {
		t.Fatalf("%+v %v", u, err)
	}
	for _, bad := range []string{"", "urn:x", "urn:publicid:IDN+a+user", "urn:publicid:IDN++user+x"} {
		if _, err := ParseURN(bad); err == nil {
			t.Errorf("ParseURN(%q) accepted", bad)
		}
	}
}

// The legacy PEM encryption has no integrity check: some wrong passwords pass its padding test.
// Every one of many wrong passwords must still read as a wrong password.
func TestEveryWrongPasswordIsWrong(t *testing.T) {
	ca, err := NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.IssueClient(ClientSpec{Kind: KindUser, URN: UserURN("example.org", "carol"), Name: "carol"})
	if err != nil {
		t.Fatal(err)
	}
	pemData, err := ClientPEM(cert, key, "right")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2000; i++ {
		if _, err := LoadClientPEM(pemData, fmt.Sprintf("wrong-%d", i)); !errors.Is(err, ErrWrongPassword) {
			t.Fatalf("password wrong-%d: %v", i, err)
		}
	}
}
