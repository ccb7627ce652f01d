package store

import (
	"context"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/opengpulab/gpulab/migrations"
)

// Migration is one numbered schema file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations lists the embedded migrations in order.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrations.FS, ".")
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a positive number and '_'", name)
		}
		body, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", name, err)
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := range out {
		if out[i].Version != i+1 {
			return nil, fmt.Errorf("migration %s: expected number %d (no gaps, no duplicates)", out[i].Name, i+1)
		}
	}
	return out, nil
}

// LatestVersion is the schema version this binary needs.
func LatestVersion() int {
	ms, err := Migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

const createMigrationsTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)`

// migrationLockKey is the advisory lock that keeps two masters from migrating at once.
const migrationLockKey = 0x6770756c6162 // "gpulab"

// Migrate applies every migration not yet applied, each in its own transaction, under an
// advisory lock so that masters starting together do not race. It returns the versions applied.
func (s *Store) Migrate(ctx context.Context) ([]int, error) {
	ms, err := Migrations()
	if err != nil {
		return nil, err
	}
	conn, err := s.db.Connx(ctx)
	if err != nil {
		return nil, mapErr(err, "migrate")
	}
	defer func() { _ = conn.Close() }()
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, migrationLockKey); err != nil {
		return nil, mapErr(err, "migrate: take lock")
	}
	defer func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, migrationLockKey)
	}()
	if _, err := conn.ExecContext(ctx, createMigrationsTable); err != nil {
		return nil, fmt.Errorf("migrate: create schema_migrations: %w", err)
	}
	var current int
	if err := conn.GetContext(ctx, &current, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`); err != nil {
		return nil, fmt.Errorf("migrate: read version: %w", err)
	}
	if current > len(ms) {
		return nil, fmt.Errorf("migrate: database at version %d, this master knows %d: %w", current, len(ms), ErrSchemaTooNew)
	}
	var applied []int
	for _, m := range ms[current:] {
		tx, err := conn.BeginTxx(ctx, nil)
		if err != nil {
			return applied, fmt.Errorf("migrate %s: %w", m.Name, err)
		}
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			_ = tx.Rollback()
			return applied, fmt.Errorf("migrate %s: %w", m.Name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			_ = tx.Rollback()
			return applied, fmt.Errorf("migrate %s: record: %w", m.Name, err)
		}
		if err := tx.Commit(); err != nil {
			return applied, fmt.Errorf("migrate %s: commit: %w", m.Name, err)
		}
		applied = append(applied, m.Version)
	}
	return applied, nil
}

// SchemaVersion returns the highest applied migration (0 for an empty database).
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var exists bool
	if err := s.q.GetContext(ctx, &exists, `SELECT to_regclass('schema_migrations') IS NOT NULL`); err != nil {
		return 0, mapErr(err, "read schema version")
	}
	if !exists {
		return 0, nil
	}
	var v int
	if err := s.q.GetContext(ctx, &v, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`); err != nil {
		return 0, mapErr(err, "read schema version")
	}
	return v, nil
}

// CheckSchema refuses a database whose schema is not exactly the one this binary was built
// for: an older one must be migrated first (`gpulab-master migrate`), a newer one belongs to a
// newer master.
func (s *Store) CheckSchema(ctx context.Context) error {
	v, err := s.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	want := LatestVersion()
	switch {
	case v < want:
		return fmt.Errorf("database at schema version %d, this master needs %d (run `gpulab-master migrate`): %w", v, want, ErrSchemaOutdated)
	case v > want:
		return fmt.Errorf("database at schema version %d, this master knows only %d: %w", v, want, ErrSchemaTooNew)
	}
	return nil
}
