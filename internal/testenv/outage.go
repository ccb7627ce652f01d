package testenv

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lib/pq"
)

// DatabaseOutage cuts off the test database at dbURL (one made by PostgresURL), as a stopped
// Postgres would be cut off from the code under test, without disturbing the other tests that
// share the server: the database accepts no new connection (ALLOW_CONNECTIONS false, CONNECT
// revoked from PUBLIC) and its sessions are terminated. New connections then fail with
// SQLSTATE 55000 and open ones break, which is what a master sees while its database
// restarts. It returns the function that ends the outage; the test's cleanup ends it too.
func DatabaseOutage(t testing.TB, dbURL string) (heal func()) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("parse database URL: %v", err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	if !strings.HasPrefix(name, "test_") {
		t.Fatalf("DatabaseOutage only cuts off test databases, not %q", name)
	}
	admin, err := sql.Open("postgres", os.Getenv("DATABASE_URL"))
	if err != nil {
		t.Fatalf("open admin connection: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := pq.QuoteIdentifier(name)
	for _, stmt := range []string{
		`ALTER DATABASE ` + db + ` ALLOW_CONNECTIONS false`,
		`REVOKE CONNECT ON DATABASE ` + db + ` FROM PUBLIC`,
	} {
		if _, err := admin.ExecContext(ctx, stmt); err != nil {
			_ = admin.Close()
			t.Fatalf("cut off %s: %s: %v", name, stmt, err)
		}
	}
	// pg_terminate_backend only signals: wait until the sessions are gone.
	for {
		var left int
		err := admin.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = $1 AND pid <> pg_backend_pid()`, name).Scan(&left)
		if err != nil {
			_ = admin.Close()
			t.Fatalf("terminate sessions of %s: %v", name, err)
		}
		if left == 0 {
			break
		}
		select {
		case <-ctx.Done():
			_ = admin.Close()
			t.Fatalf("sessions of %s did not end: %v", name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	var once sync.Once
	heal = func() {
		once.Do(func() {
			defer func() { _ = admin.Close() }()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for _, stmt := range []string{
				`GRANT CONNECT ON DATABASE ` + db + ` TO PUBLIC`,
				`ALTER DATABASE ` + db + ` ALLOW_CONNECTIONS true`,
			} {
				if _, err := admin.ExecContext(ctx, stmt); err != nil {
					t.Errorf("end the outage of %s: %s: %v", name, stmt, err)
				}
			}
		})
	}
	t.Cleanup(heal)
	return heal
}
