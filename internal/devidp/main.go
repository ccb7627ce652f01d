// Command gpulab-devidp is a development OpenID Connect provider: Dex, embedded as a library,
// with in-memory storage, one static client and static password users. `make run` and the
// login tests use it so the portal's browser login runs against a real, standard provider
// (real discovery, real login form, real signed ID tokens) without any outside service.
//
// It lives in its own Go module so Dex's large dependency tree stays out of the master's go.mod.
//
//	gpulab-devidp --issuer http://127.0.0.1:5556/dex --listen 127.0.0.1:5556 \
//	    --client-id gpulab-portal --client-secret-file SECRET --redirect-uri https://localhost:8443/auth/callback \
//	    --users-file USERS   # NAME:EMAIL:PASSWORD a line; both files mode 0600
package main

import (
	"context"
	"embed"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	gosundheit "github.com/AppsFlyer/go-sundheit"
	"github.com/dexidp/dex/server"
	"github.com/dexidp/dex/storage"
	"github.com/dexidp/dex/storage/memory"
	dexweb "github.com/dexidp/dex/web"
	"golang.org/x/crypto/bcrypt"
)

// loginByName lets users log in with their name as well as their e-mail address (Dex's
// password users log in by e-mail only), so `make run` can say "log in as alice".
type loginByName struct {
	storage.Storage
	emails map[string]string // lower-case name → e-mail
}

// GetPassword finds a password user by name or by e-mail address.
func (s loginByName) GetPassword(ctx context.Context, login string) (storage.Password, error) {
	if email, ok := s.emails[strings.ToLower(login)]; ok {
		login = email
	}
	return s.Storage.GetPassword(ctx, login)
}

// ownWeb is what this provider changes in Dex's web pages: the login form says GPULab and asks
// for the user name that `make run` prints (Dex's own says "Email Address"), with GPULab's logo.
//
//go:embed web
var ownWeb embed.FS

// overlayFS serves a file from top where top has it and everything else (directories included,
// so that Dex lists its own templates) from base.
type overlayFS struct{ top, base fs.FS }

func (o overlayFS) Open(name string) (fs.File, error) {
	if f, err := o.top.Open(name); err == nil {
		if st, err := f.Stat(); err == nil && !st.IsDir() {
			return f, nil
		}
		_ = f.Close()
	}
	return o.base.Open(name)
}

// webFS is Dex's web assets with ownWeb's files in their place.
func webFS() (fs.FS, error) {
	top, err := fs.Sub(ownWeb, "web")
	if err != nil {
		return nil, err
	}
	return overlayFS{top: top, base: dexweb.FS()}, nil
}

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(os.Stderr, "gpulab-devidp: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	var users, redirects listFlag
	fs := flag.NewFlagSet("gpulab-devidp", flag.ContinueOnError)
	issuer := fs.String("issuer", "", "issuer URL; its path is where Dex is served (default http://<listen address>/dex)")
	listen := fs.String("listen", "127.0.0.1:5556", "HTTP listen address (127.0.0.1:0: a free port; the issuer URL is printed on stdout)")
	clientID := fs.String("client-id", "gpulab-portal", "the static client's id")
	clientSecret := fs.String("client-secret", "gpulab-dev-secret", "the static client's secret; prefer --client-secret-file (flags show in ps)")
	clientSecretFile := fs.String("client-secret-file", "", "file (mode 0600) holding the static client's secret")
	usersFile := fs.String("users-file", "", "file (mode 0600) of users, NAME:EMAIL:PASSWORD one a line; keeps passwords off the command line")
	fs.Var(&redirects, "redirect-uri", "an allowed redirect URI of the client (repeatable; default https://localhost:8443/auth/callback)")
	hint := fs.String("login-hint", "", "a line under the login form, e.g. where make run put the password")
	fs.Var(&users, "user", "NAME:EMAIL:PASSWORD of a user who logs in with NAME or EMAIL (repeatable; default alice:alice@example.org:alice-password)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *clientSecretFile != "" {
		s, err := readSecretFile(*clientSecretFile)
		if err != nil {
			return fmt.Errorf("--client-secret-file: %w", err)
		}
		*clientSecret = s
	}
	if *usersFile != "" {
		s, err := readSecretFile(*usersFile)
		if err != nil {
			return fmt.Errorf("--users-file: %w", err)
		}
		for _, line := range strings.Split(s, "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				users = append(users, line)
			}
		}
	}
	if len(redirects) == 0 {
		redirects = listFlag{"https://localhost:8443/auth/callback"}
	}
	if len(users) == 0 {
		users = listFlag{"alice:alice@example.org:alice-password"}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var passwords []storage.Password
	emails := map[string]string{}
	for i, u := range users {
		name, rest, ok1 := strings.Cut(u, ":")
		email, password, ok2 := strings.Cut(rest, ":")
		if !ok1 || !ok2 || name == "" || email == "" || password == "" {
			return fmt.Errorf("--user number %d: want NAME:EMAIL:PASSWORD", i+1)
		}
		// Dex refuses a login whose hash has a cost below bcrypt.DefaultCost (10).
		hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
		if err != nil {
			return fmt.Errorf("hash the password of %s: %w", name, err)
		}
		passwords = append(passwords, storage.Password{Email: email, Hash: hash, Username: name, UserID: "devidp-" + name})
		emails[strings.ToLower(name)] = email
	}
	st := memory.New(log)
	st = storage.WithStaticClients(st, []storage.Client{{ID: *clientID, Secret: *clientSecret, RedirectURIs: redirects, Name: "GPULab"}})
	st = storage.WithStaticPasswords(st, passwords, log)
	st = storage.WithStaticConnectors(st, []storage.Connector{{ID: server.LocalConnector, Type: server.LocalConnector, Name: "Email"}})
	st = loginByName{Storage: st, emails: emails}
	// Listen first, so that --listen 127.0.0.1:0 (tests) yields an issuer with the real port.
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *listen, err)
	}
	defer func() { _ = l.Close() }()
	if *issuer == "" {
		*issuer = "http://" + l.Addr().String() + "/dex"
	}
	web, err := webFS()
	if err != nil {
		return fmt.Errorf("web pages: %w", err)
	}
	srv, err := server.NewServer(ctx, server.Config{
		Web:                server.WebConfig{WebFS: web, Issuer: "GPULab", LogoURL: "theme/gpulab-logo.svg", Extra: map[string]string{"hint": *hint}},
		Issuer:             *issuer,
		Storage:            st,
		AllowedGrantTypes:  []string{"authorization_code", "refresh_token", "password"},
		PasswordConnector:  server.LocalConnector,
		SkipApprovalScreen: true,
		Logger:             log,
		HealthChecker:      gosundheit.New(),
	})
	if err != nil {
		return fmt.Errorf("start dex: %w", err)
	}
	// Tests read this line to learn the issuer when --listen asks for a free port.
	fmt.Printf("gpulab-devidp issuer %s\n", *issuer)
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(l) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shut down: %w", err)
	}
	return nil
}

// readSecretFile reads a secret from a file readable by its owner only (as the master's
// internal/secretfile does; this module does not depend on the master's).
func readSecretFile(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s must be a regular file readable by its owner only (chmod 600 %s)", path, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}
