// Package store keeps every SQL statement of the master. It speaks PostgreSQL through sqlx and
// lib/pq; callers branch on its sentinel errors, never on driver errors or message text.
//
// Every job state change is conditional on the state it leaves (UPDATE ... WHERE status = ANY
// (sources)), so two masters, or a master and a slave, can never both win a race: the loser
// gets ErrStateConflict and the state as it now is.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// Sentinel errors. They are wrapped with context; test them with errors.Is.
var (
	// ErrNotFound means the row asked for does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict means a unique constraint refused the write (a name or URN already taken).
	ErrConflict = errors.New("already exists")
	// ErrStateConflict means a conditional state change found the row in another state.
	ErrStateConflict = errors.New("state changed")
	// ErrLogGap means a log chunk arrived before the chunk preceding it.
	ErrLogGap = errors.New("log chunk out of order")
	// ErrAmbiguous means a short job id matched more than one job.
	ErrAmbiguous = errors.New("ambiguous id")
	// ErrSchemaOutdated means the database schema is older than this binary needs.
	ErrSchemaOutdated = errors.New("database schema is older than this master")
	// ErrSchemaTooNew means the database was migrated by a newer master.
	ErrSchemaTooNew = errors.New("database schema is newer than this master")
)

// querier is what both *sqlx.DB and *sqlx.Tx offer; Store methods run on either.
type querier interface {
	sqlx.ExtContext
	GetContext(ctx context.Context, dest any, query string, args ...any) error
	SelectContext(ctx context.Context, dest any, query string, args ...any) error
}

// Store is the master's access to Postgres. The zero value is not usable; use Open.
type Store struct {
	db *sqlx.DB
	q  querier
}

// Open connects to Postgres at url and checks the connection.
func Open(ctx context.Context, url string) (*Store, error) {
	db, err := sqlx.Open("postgres", url)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	db.SetMaxOpenConns(20)
	db.SetMaxIdleConns(10)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return &Store{db: db, q: db}, nil
}

// Close closes the pool.
func (s *Store) Close() error { return s.db.Close() }

// DB exposes the pool for health checks.
func (s *Store) DB() *sql.DB { return s.db.DB }

// WithTx runs fn in one transaction: committed if fn returns nil, rolled back otherwise. The
// Store given to fn runs every method inside the transaction.
func (s *Store) WithTx(ctx context.Context, fn func(tx *Store) error) error {
	if _, inTx := s.q.(*sqlx.Tx); inTx {
		return fn(s)
	}
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	if err := fn(&Store{db: s.db, q: tx}); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit transaction: %w", err)
	}
	return nil
}

// mapErr turns driver errors into the package's sentinels, keeping the cause.
func mapErr(err error, what string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	var pqErr *pq.Error
	if errors.As(err, &pqErr) && pqErr.Code == "23505" {
		return fmt.Errorf("%s: %w (%s)", what, ErrConflict, pqErr.Detail)
	}
	return fmt.Errorf("%s: %w", what, err)
}
