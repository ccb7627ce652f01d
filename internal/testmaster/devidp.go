package testmaster

import (
	"bufio"
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testenv"
)

// IdPUser is a user of the development identity provider.
type IdPUser struct {
	// Name is the provider's user name (the "name" claim); Email is what he logs in with and
	// what the master derives his GPULab name from (preferred_username is not set by Dex's
	// password users).
	Name, Email, Password string
}

// DevIdP is a running Dex development provider (internal/devidp).
type DevIdP struct {
	Issuer, ClientID, ClientSecret string
}

// devIdPBuild is internal/devidp (its own module), built once per test process.
var devIdPBuild = testenv.ModuleBinary{Dir: "internal/devidp", Name: "gpulab-devidp"}

// DevIdPBinary is the path of the development provider's binary, built once per test process.
func DevIdPBinary() (string, error) { return devIdPBuild.Path() }

// RemoveBuilds removes what was built into a temporary folder (call it from TestMain).
func RemoveBuilds() { devIdPBuild.Remove() }

// StartDevIdP starts the Dex development provider on a free loopback port for the test's
// duration, with one client that may redirect to redirectURI and the given users (default:
// alice / alice@example.org / alice-password). If Dex cannot be built, the test is skipped (it
// fails under GPULAB_REQUIRE_SERVICES=1).
func StartDevIdP(t testing.TB, redirectURI string, users ...IdPUser) *DevIdP {
	t.Helper()
	bin, err := devIdPBuild.Path()
	if err != nil {
		testenv.Missing(t, "Dex development IdP (internal/devidp)", err.Error())
	}
	if len(users) == 0 {
		users = []IdPUser{{Name: "alice", Email: "alice@example.org", Password: "alice-password"}}
	}
	idp := &DevIdP{ClientID: "gpulab-portal", ClientSecret: "test-secret-" + fmt.Sprint(time.Now().UnixNano())}
	// Secrets go through files (mode 0600), never the command line, as in `make run`.
	dir := t.TempDir()
	var lines []string
	for _, u := range users {
		lines = append(lines, u.Name+":"+u.Email+":"+u.Password)
	}
	secretFile, usersFile := filepath.Join(dir, "client-secret"), filepath.Join(dir, "users")
	for file, content := range map[string]string{secretFile: idp.ClientSecret, usersFile: strings.Join(lines, "\n")} {
		if err := os.WriteFile(file, []byte(content+"\n"), 0o600); err != nil {
			t.Fatalf("dex secret file: %v", err)
		}
	}
	args := []string{"--listen", "127.0.0.1:0", "--client-id", idp.ClientID, "--client-secret-file", secretFile, "--users-file", usersFile, "--redirect-uri", redirectURI}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 5 * time.Second
	cmd.Stderr = testWriter{t}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		t.Fatalf("dex stdout: %v", err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start dex: %v", err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if iss, ok := strings.CutPrefix(sc.Text(), "gpulab-devidp issuer "); ok {
				line <- iss
			}
		}
		close(line)
	}()
	select {
	case iss, ok := <-line:
		if !ok {
			t.Fatalf("dex exited before it listened")
		}
		idp.Issuer = iss
	case <-time.After(2 * time.Minute): // starts in a fraction of a second, but the machine may be loaded
		t.Fatalf("dex did not start within 2 minutes")
	}
	return idp
}

// BrowserClient returns an HTTP client like a browser without a client certificate: it trusts
// the master's CA, keeps cookies and follows redirects.
func (m *Master) BrowserClient() *http.Client {
	c := m.Client(nil)
	jar, err := cookiejar.New(nil)
	if err != nil {
		m.t.Fatalf("cookie jar: %v", err)
	}
	c.Jar = jar
	return c
}

var formAction = regexp.MustCompile(`<form[^>]*\baction="([^"]*)"`)

// Login logs c (a BrowserClient) in to the portal through the master's development provider;
// see BrowserLogin.
func (m *Master) Login(c *http.Client, email, password string) (int, *url.URL, []byte, error) {
	return BrowserLogin(c, m.URL, email, password)
}

// BrowserLogin logs c (keeping cookies, following redirects) in to the portal of the master
// at masterURL, as a person does in a browser: GET /login, the provider's login form filled
// in and posted, back to the master's callback. It returns the last response's status, URL
// and body (the page the login returned to, or the provider's form again after a wrong
// password).
func BrowserLogin(c *http.Client, masterURL, email, password string) (int, *url.URL, []byte, error) {
	resp, err := c.Get(masterURL + "/login")
	if err != nil {
		return 0, nil, nil, fmt.Errorf("GET /login: %w", err)
	}
	page, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return 0, nil, nil, fmt.Errorf("read login form: %w", err)
	}
	match := formAction.FindSubmatch(page)
	if resp.StatusCode != http.StatusOK || match == nil {
		return 0, nil, nil, fmt.Errorf("GET /login ended at %s with %d and no login form: %.500s", resp.Request.URL, resp.StatusCode, page)
	}
	action, err := resp.Request.URL.Parse(html.UnescapeString(string(match[1])))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("login form action: %w", err)
	}
	resp, err = c.PostForm(action.String(), url.Values{"login": {email}, "password": {password}})
	if err != nil {
		return 0, nil, nil, fmt.Errorf("post login form: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("read answer to login: %w", err)
	}
	return resp.StatusCode, resp.Request.URL, body, nil
}
