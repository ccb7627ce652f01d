// Command gpulab-devregistry is a development container registry: the Distribution registry
// (the one behind Docker Hub and most private registries), embedded as a library, with
// in-memory storage and htpasswd users. The slave's private-image tests push an image to it and
// pull it back with and without credentials, against a real registry's real authentication.
//
// It lives in its own Go module so the registry's dependency tree stays out of the main go.mod.
//
//	gpulab-devregistry --listen 127.0.0.1:0 --user alice:PASSWORD
//
// Without --user it is open: anybody pulls and pushes without credentials (a public registry).
// It prints its address ("127.0.0.1:PORT") on stdout once it serves. The Docker Engine talks
// plain HTTP to a registry on 127.0.0.0/8 without further configuration.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	"golang.org/x/crypto/bcrypt"

	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
)

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(os.Stderr, "gpulab-devregistry: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	var users listFlag
	fs := flag.NewFlagSet("gpulab-devregistry", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:5000", "HTTP listen address (127.0.0.1:0: a free port; the address is printed on stdout)")
	fs.Var(&users, "user", "NAME:PASSWORD of a user who may push and pull (repeatable; none: anybody may, without credentials)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "gpulab-devregistry-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()

	cfg := &configuration.Configuration{}
	cfg.Version = "0.1"
	cfg.Storage = configuration.Storage{"inmemory": configuration.Parameters{}}
	if len(users) > 0 {
		htpasswd := filepath.Join(dir, "htpasswd")
		if err := writeHtpasswd(htpasswd, users); err != nil {
			return err
		}
		cfg.Auth = configuration.Auth{"htpasswd": configuration.Parameters{"realm": "gpulab-devregistry", "path": htpasswd}}
	}
	cfg.HTTP.Secret = rand.Text() // one registry: any secret will do, but say it so the registry does not warn
	cfg.Log.Level = "warn"
	cfg.Log.AccessLog.Disabled = true
	app := handlers.NewApp(ctx, cfg)

	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: app, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Println(l.Addr().String())
	slog.Info("serving", "addr", l.Addr().String(), "users", len(users))
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// writeHtpasswd writes the users with bcrypt hashes, the only kind the registry accepts.
func writeHtpasswd(path string, users []string) error {
	var b strings.Builder
	for _, u := range users {
		name, pass, ok := strings.Cut(u, ":")
		if !ok || name == "" || pass == "" {
			return fmt.Errorf("--user %q: want NAME:PASSWORD", name)
		}
		hash, err := bcrypt.GenerateFromPassword([]byte(pass), bcrypt.DefaultCost)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s:%s\n", name, hash)
	}
	return os.WriteFile(path, []byte(b.String()), 0o600)
}
