// Package testenv gives tests the real parts they need (a fresh Postgres database, the Docker
// Engine and local images, a stub-hook GPU engine, headless Chromium) and
// decides what happens when a part is missing: the test is skipped on a developer's machine, but
// fails when GPULAB_REQUIRE_SERVICES=1 (CI), so a green CI run always exercised the real parts.
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	_ "github.com/lib/pq" // the Postgres driver
)

// RequireServices reports whether missing services must fail tests (CI sets it).
func RequireServices() bool { return os.Getenv("GPULAB_REQUIRE_SERVICES") == "1" }

// Missing skips the test, or fails it when services are required.
func Missing(t testing.TB, service, why string) {
	t.Helper()
	if RequireServices() {
		t.Fatalf("%s is required (GPULAB_REQUIRE_SERVICES=1) but not available: %s", service, why)
	}
	t.Skipf("%s not available (%s); `make test` starts it", service, why)
}

// PostgresURL returns the URL of a new, empty database on the server named by DATABASE_URL,
// dropped when the test ends. Each test gets its own database, so tests run in parallel.
func PostgresURL(t testing.TB) string {
	t.Helper()
	base := os.Getenv("DATABASE_URL")
	if base == "" {
		Missing(t, "PostgreSQL", "DATABASE_URL is not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := sql.Open("postgres", base)
	if err != nil {
		Missing(t, "PostgreSQL", err.Error())
	}
	if err := admin.PingContext(ctx); err != nil {
		_ = admin.Close()
		Missing(t, "PostgreSQL", err.Error())
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "test_" + hex.EncodeToString(b)
	if _, err := admin.ExecContext(ctx, `CREATE DATABASE `+name); err != nil {
		_ = admin.Close()
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
			t.Logf("drop test database %s: %v", name, err)
		}
		_ = admin.Close()
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse DATABASE_URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}
