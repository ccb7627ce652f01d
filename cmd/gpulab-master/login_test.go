package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/web"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testmaster.RemoveBuilds()
	os.Exit(code)
}

func TestOIDCConfig(t *testing.T) {
	cases := []struct {
		name     string
		c        config
		redirect string
		err      string
	}{
		{"off", config{Listen: ":8443"}, "", ""},
		{"default redirect", config{Listen: ":8443", OIDCIssuer: "https://idp.example", OIDCClientID: "gpulab"}, "https://localhost:8443/auth/callback", ""},
		{"first hostname", config{Listen: ":8443", Hostnames: "gpulab.example.org, other.example.org", OIDCIssuer: "https://idp.example", OIDCClientID: "gpulab"},
			"https://gpulab.example.org:8443/auth/callback", ""},
		{"port 443", config{Listen: "0.0.0.0:443", Hostnames: "gpulab.example.org", OIDCIssuer: "https://idp.example", OIDCClientID: "gpulab"},
			"https://gpulab.example.org/auth/callback", ""},
		{"given redirect", config{Listen: ":8443", OIDCIssuer: "https://idp.example", OIDCClientID: "gpulab", OIDCRedirectURL: "https://lb.example/auth/callback"},
			"https://lb.example/auth/callback", ""},
		{"no client id", config{Listen: ":8443", OIDCIssuer: "https://idp.example"}, "", "--oidc-client-id"},
		{"bad issuer", config{Listen: ":8443", OIDCIssuer: "idp.example", OIDCClientID: "gpulab"}, "", "not an http(s) URL"},
		{"bad redirect", config{Listen: ":8443", OIDCIssuer: "https://idp.example", OIDCClientID: "gpulab", OIDCRedirectURL: "/auth/callback"}, "", "not an absolute URL"},
	}
	for _, c := range cases {
		got, err := c.c.oidcConfig()
		if (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) || got.RedirectURL != c.redirect {
			t.Errorf("%s: %q %v, want %q and an error containing %q", c.name, got.RedirectURL, err, c.redirect, c.err)
		}
	}
}

// Secrets come from the environment but never show in the help text.
func TestServeHelpHidesSecrets(t *testing.T) {
	env := map[string]string{"GPULAB_OIDC_CLIENT_SECRET": "very-secret-value", "GPULAB_SESSION_KEYS": "also-secret-keys"}
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"serve", "-h"}, func(k string) string { return env[k] }, &out, &errOut)
	if code != 0 || !strings.Contains(errOut.String(), "-oidc-client-secret") {
		t.Fatalf("serve -h: %d %s", code, errOut.String())
	}
	if strings.Contains(out.String()+errOut.String(), "secret-value") || strings.Contains(out.String()+errOut.String(), "secret-keys") {
		t.Fatalf("serve -h shows a secret: %s", errOut.String())
	}
}

// The serve command wires the OIDC flags and environment to a working portal login, keeps its
// session keys in the data folder so a restart keeps the user logged in, and never logs the
// client secret.
func TestServeWithPortalLogin(t *testing.T) {
	db, data := testenv.PostgresURL(t), t.TempDir()
	// The address is needed before serve listens on it (Dex must know the redirect URI), and
	// again for the restart: a port nothing else is handed meanwhile.
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	base := "https://" + addr
	idp := testmaster.StartDevIdP(t, base+web.CallbackPath, testmaster.IdPUser{Name: "carol", Email: "carol@example.org", Password: "carol-secret-1"})
	env := map[string]string{"DATABASE_URL": db, "GPULAB_DATA_DIR": data, "GPULAB_AUTHORITY": "example.org",
		"GPULAB_OIDC_ISSUER": idp.Issuer, "GPULAB_OIDC_CLIENT_ID": idp.ClientID, "GPULAB_OIDC_CLIENT_SECRET": idp.ClientSecret}
	var logs testenv.SyncBuffer
	start := func() func() {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, []string{"serve", "--listen", addr, "--hostnames", "127.0.0.1", "--admins", "carol@example.org", "--scheduler-interval", "1h"},
				func(k string) string { return env[k] }, &logs, &logs)
		}()
		stop := func() {
			cancel()
			select {
			case code := <-done:
				if code != 0 {
					t.Errorf("serve exited %d: %s", code, logs.String())
				}
			case <-time.After(time.Minute):
				t.Errorf("serve did not stop within a minute")
			}
		}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			select {
			case code := <-done:
				t.Fatalf("serve exited %d: %s", code, logs.String())
			default:
			}
			if resp, err := insecureGet(base + "/readyz"); err == nil && resp.StatusCode == 200 {
				break
			}
			if time.Now().After(deadline) {
				stop()
				t.Fatalf("the master did not get ready within 2 minutes: %s", logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		return stop
	}
	stop := start()
	caPEM, err := os.ReadFile(filepath.Join(data, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	// The provider's page says GPULab and asks for the user name make run prints (Dex's own
	// page is unbranded and asks for an "Email Address").
	loginPage, err := browser.Get(base + "/login")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(loginPage.Body)
	_ = loginPage.Body.Close()
	for _, want := range []string{"Log in to GPULab", `<label for="login">User name</label>`, `alt="GPULab"`, `<html lang="en">`} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the login page lacks %q:\n%.2000s", want, page)
		}
	}
	if strings.Contains(string(page), "Email Address") {
		t.Errorf("the login page still asks for an Email Address")
	}
	status, at, body, err := testmaster.BrowserLogin(browser, base, "carol", "carol-secret-1")
	if err != nil || at.Host != addr {
		t.Fatalf("login: %v, ended at %v with %d: %.300s", err, at, status, body)
	}
	session := func() (int, string) {
		resp, err := browser.Get(base + "/api/gpulab/v3.1/session")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	if status, body := session(); status != 200 || !strings.Contains(body, "urn:publicid:IDN+example.org+user+carol") || !strings.Contains(body, `"isAdmin": true`) {
		t.Fatalf("session: %d %s", status, body)
	}
	info, err := os.Stat(filepath.Join(data, web.SessionKeysFile))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("session keys file: %v %v", info, err)
	}
	stop()

	// Restarted, the master still knows the session.
	stop = start()
	defer stop()
	if status, body := session(); status != 200 || !strings.Contains(body, "carol") {
		t.Fatalf("session after a restart: %d %s", status, body)
	}
	if strings.Contains(logs.String(), idp.ClientSecret) {
		t.Fatalf("the log shows the client secret")
	}
	if !strings.Contains(logs.String(), "portal login") {
		t.Fatalf("the log does not mention the portal login: %s", logs.String())
	}
}

func insecureGet(url string) (*http.Response, error) {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // readiness probe only
	resp, err := c.Get(url)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", url, err)
	}
	_ = resp.Body.Close()
	return resp, nil
}

// Secrets can come from files (mode 0600), which keeps them off the command line; a secret
// given twice, or in a file others can read, is refused.
func TestSecretFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	secret := write("secret", "client-secret-from-file\n", 0o600)
	keys := write("keys", "k1\nk2\n", 0o600)
	open := write("open", "x\n", 0o644)
	cases := []struct {
		name                     string
		c                        config
		env                      map[string]string
		secret, sessionKeys, err string
	}{
		{"files", config{OIDCClientSecretFile: secret, SessionKeysFile: keys}, nil, "client-secret-from-file", "k1,k2", ""},
		{"environment", config{}, map[string]string{"GPULAB_OIDC_CLIENT_SECRET": "from-env", "GPULAB_SESSION_KEYS": "e1"}, "from-env", "e1", ""},
		{"file wins over the environment", config{OIDCClientSecretFile: secret}, map[string]string{"GPULAB_OIDC_CLIENT_SECRET": "from-env"}, "client-secret-from-file", "", ""},
		{"flag and file", config{OIDCClientSecret: "x", OIDCClientSecretFile: secret}, nil, "", "", "not both"},
		{"readable by others", config{SessionKeysFile: open}, nil, "", "", "chmod 600"},
	}
	for _, c := range cases {
		err := c.c.fillSecrets(func(k string) string { return c.env[k] })
		if (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.err)
			continue
		}
		if err == nil && (c.c.OIDCClientSecret != c.secret || c.c.SessionKeys != c.sessionKeys) {
			t.Errorf("%s: secret %q keys %q, want %q %q", c.name, c.c.OIDCClientSecret, c.c.SessionKeys, c.secret, c.sessionKeys)
		}
	}
}
