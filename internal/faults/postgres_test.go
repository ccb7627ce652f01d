package faults

import (
	"context"
	"database/sql"
	"testing"
	"time"
)

func openDB(t *testing.T, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("postgres", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func countRows(ctx context.Context, db *sql.DB) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM marks`).Scan(&n)
	return n, err
}

func TestPostgresStopStart(t *testing.T) {
	t.Parallel()
	pg := StartPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	db := openDB(t, pg.URL())
	if _, err := db.ExecContext(ctx, `CREATE TABLE marks (n int); INSERT INTO marks VALUES (1)`); err != nil {
		t.Fatalf("write: %v", err)
	}
	held, err := db.Conn(ctx) // an open session, to see it cut
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()

	if err := pg.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := held.PingContext(ctx); err == nil {
		t.Fatal("a session survived Stop")
	}
	if _, err := countRows(ctx, openDB(t, pg.URL())); err == nil {
		t.Fatal("a new connection worked while stopped")
	}

	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := countRows(ctx, openDB(t, pg.URL())); err != nil || n != 1 {
		t.Fatalf("after Start: %d rows, %v; want the 1 row written before", n, err)
	}

	if _, err := db.ExecContext(ctx, `INSERT INTO marks VALUES (2)`); err != nil { // the old pool recovers
		t.Fatalf("write after Start: %v", err)
	}
	if err := pg.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pg.Restart(ctx); err != nil { // Stop of a stopped cluster is a no-op
		t.Fatal(err)
	}
	if n, err := countRows(ctx, openDB(t, pg.URL())); err != nil || n != 2 {
		t.Fatalf("after a crash: %d rows, %v; want the 2 committed rows", n, err)
	}
}
