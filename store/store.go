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
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

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
	// ErrUnavailable means the database could not be reached or the connection to it was lost
	// (see unavailable). It passes: callers answer "try again later". Nothing was written,
	// unless the connection broke during a COMMIT, which Postgres may have completed.
	ErrUnavailable = errors.New("database unavailable")
)

// querier is what both *sqlx.DB and *sqlx.Tx offer; Store methods run on either.
type querier interface {
	sqlx.ExtContext
	GetContext(ctx context.Context, dest any, query string, args ...any) error
	SelectContext(ctx context.Context, dest any, query string, args ...any) error
}

// Store is the master's access to Postgres. The zero value is not usable; use Open.
type Store struct {
	db      *sqlx.DB
	tx      *sqlx.Tx // inside WithTx
	q       querier
	decoded *decodeCache
	listed  *listedCache
	// identities are the callers' identities read lately (identitycache.go), shared by the
	// store's copies; transactions neither use nor fill them.
	identities *identityCache
	names      *ownerNames // likewise
	// clusters is RecentClusters' list, shared by the store's copies (transactions, the
	// heartbeats' store).
	clusters *clusterCache
	projects *projectCache // ProjectsByID's, shared likewise
	leases   Leases
	url      string       // for LISTEN connections
	beats    *beatQueue   // heartbeats waiting to be recorded together; nil inside WithTx
	submits  *submitQueue // submissions waiting to be stored together; nil inside WithTx
	changes  *changeQueue // state changes waiting to be made together; nil inside WithTx and in the queues' stores
	usage    *usageBuffer
	conns    *connQueue  // the pool's places (connQueue: in turn, newest first when overloaded); nil inside WithTx
	wakes    *wakeSender // the scheduler's notifications (WakeScheduler); nil in the heartbeats' store
	// commitWake, inside WithTx, is set by WakeScheduler: the notification is asked for once
	// the transaction has committed.
	commitWake *bool
}

// DefaultConns bounds the requests' pool (serve's --db-max-conns). Idle connections are kept
// as long as there are open ones: a new connection costs Postgres a process and every
// statement's preparation again, and with fewer idle than open connections a busy master
// opened and closed tens of connections a second (bench/, B2: 560 sessions in 30 s).
const DefaultConns = 20

// Open connects to Postgres at url and checks the connection.
func Open(ctx context.Context, url string) (*Store, error) { return OpenPool(ctx, url, DefaultConns) }

// LeaderConns is the pool of the scheduler's own store (OpenPool): a pass, the lease's renewal,
// the tallies' accrual, the forecaster, the reads of the forecast's inputs and the periodic
// checks of the leader's memory each need a connection at times, and must not queue behind
// the API's requests. With one pool for all, 5,000 slaves' heartbeats (B8x, 1,000 a second)
// held every connection and the leader lost its lease for want of one ("renew the scheduler
// lease: database unavailable: context deadline exceeded").
const LeaderConns = 6

// OpenPool is Open with a pool of at most conns connections.
func OpenPool(ctx context.Context, url string, conns int) (*Store, error) {
	conns = max(conns, 1)
	pc, err := pq.NewConnector(url)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	db := newPool(pc, conns, sessionSetup)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, mapErr(err, "connect to database")
	}
	queue := newConnQueue(conns)
	s := &Store{db: db, q: &prepared{querier: db, cache: newStmtCache(db), conns: queue}, conns: queue, decoded: newDecodeCache(), listed: newListedCache(), identities: newIdentityCache(), names: &ownerNames{}, clusters: &clusterCache{}, projects: &projectCache{}, leases: DefaultLeases, url: url}
	// Heartbeats have connections of their own (opened when first used), as many as the
	// statements the queue sends at once: in a shared pool a batch waited behind every request
	// waiting for a connection, and on an overloaded master (bench/ B8x) heartbeats then timed
	// out, slaves were taken offline and their jobs given up, which made more work still. A
	// heartbeat is what keeps a slave's jobs alive; it must not queue behind reads and submits.
	s.beats = newBeatQueue(s.beside(newPool(pc, beatsInFlight, keptPlanSetup)))
	s.submits = newSubmitQueue(s)
	s.usage = newUsageBuffer(s.appendUsage)
	s.wakes = newWakeSender(s.notifyScheduler, wakeEvery)
	// The state changes too have connections of their own, for the same reasons: a slave's
	// report of a job it started or ended must not queue behind reads (in B8x's fill 11,000 of
	// them a run were refused as overloaded while they did), and their statements of several
	// changes take arrays, whose plan these connections keep (keptPlanSetup).
	changes := s.beside(newPool(pc, changesInFlight, keptPlanSetup))
	changes.wakes = s.wakes // an end wakes the scheduler
	s.changes = newChangeQueue(changes)
	return s, nil
}

// beside is a store on pool db beside s, sharing s's caches, for a queue's own connections.
func (s *Store) beside(db *sqlx.DB) *Store {
	return &Store{db: db, q: &prepared{querier: db, cache: newStmtCache(db)}, decoded: s.decoded, listed: s.listed, identities: s.identities,
		names: s.names, clusters: s.clusters, projects: s.projects, leases: s.leases, url: s.url}
}

// newPool is a pool of at most conns connections through pc, all kept while open, each set up
// with setup when opened.
func newPool(pc driver.Connector, conns int, setup string) *sqlx.DB {
	db := sqlx.NewDb(sql.OpenDB(connector{pc, setup}), "postgres")
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	return db
}

// Close writes the usage samples not yet written (see usageBuffer) and closes the pools.
func (s *Store) Close() error {
	if s.usage != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = s.usage.close(ctx) // a database that is gone loses them, as a crash would
		cancel()
	}
	if s.beats != nil {
		_ = s.beats.s.db.Close()
	}
	if s.changes != nil {
		_ = s.changes.s.db.Close()
	}
	if s.wakes != nil {
		s.wakes.close()
	}
	return s.db.Close()
}

// DB exposes the pool for health checks.
func (s *Store) DB() *sql.DB { return s.db.DB }

// Ping checks that the database answers; ErrUnavailable when it does not.
func (s *Store) Ping(ctx context.Context) error {
	return mapErr(s.db.PingContext(ctx), "ping database")
}

// WithTx runs fn in one transaction: committed if fn returns nil, rolled back otherwise. The
// Store given to fn runs every method inside the transaction.
func (s *Store) WithTx(ctx context.Context, fn func(tx *Store) error) error {
	return s.withTx(ctx, nil, fn)
}

// InSnapshot runs fn's reads in one read-only transaction that sees a single snapshot of the
// database (REPEATABLE READ): two reads made in it agree with each other, whatever commits
// between them.
func (s *Store) InSnapshot(ctx context.Context, fn func(tx *Store) error) error {
	if s.tx != nil {
		return fmt.Errorf("a snapshot inside a transaction: %w", errors.ErrUnsupported)
	}
	return s.withTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}, fn)
}

func (s *Store) withTx(ctx context.Context, opts *sql.TxOptions, fn func(tx *Store) error) error {
	if s.tx != nil {
		return fn(s)
	}
	defer countStatement(ctx).done() // BEGIN, and the transaction's time until its end
	if err := s.conns.enter(ctx); err != nil {
		return mapErr(err, "begin transaction")
	}
	defer s.conns.leave()
	tx, err := s.db.BeginTxx(ctx, opts)
	if err != nil {
		return mapErr(err, "begin transaction")
	}
	wake := false
	if err := fn(&Store{db: s.db, tx: tx, q: &prepared{querier: tx, tx: tx, cache: s.q.(*prepared).cache}, decoded: s.decoded, listed: s.listed, identities: s.identities, names: s.names, clusters: s.clusters, projects: s.projects, leases: s.leases, url: s.url, usage: s.usage,
		wakes: s.wakes, commitWake: &wake}); err != nil {
		_ = tx.Rollback()
		return err
	}
	_ = countStatement(ctx) // COMMIT: its time is the transaction's
	if err := tx.Commit(); err != nil {
		return mapErr(err, "commit transaction")
	}
	if wake {
		s.WakeScheduler()
	}
	return nil
}

// mapErr turns driver errors into the package's sentinels, keeping the cause: no row →
// ErrNotFound, a unique violation → ErrConflict, a database that cannot be reached →
// ErrUnavailable (see unavailable). An error mapped already goes through unchanged.
func mapErr(err error, what string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	if errors.Is(err, ErrUnavailable) {
		return err
	}
	if unavailable(err) {
		return fmt.Errorf("%s: %w: %w", what, ErrUnavailable, err)
	}
	var pqErr *pq.Error
	if errors.As(err, &pqErr) && pqErr.Code == "23505" {
		return fmt.Errorf("%s: %w (%s)", what, ErrConflict, pqErr.Detail)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// maxStatements bounds the prepared statements kept (per connection, in Postgres): the store
// has fewer distinct statements than this, ListJobs' filter combinations included.
const maxStatements = 512

// stmtCache keeps one prepared statement per query text, so that Postgres parses and plans
// the store's statements once per connection instead of at every call, and lib/pq runs each
// in one round trip instead of two (an unnamed statement is prepared, then executed). Reads of
// a job went from three parse-plan-execute cycles to three executions (bench/, B4).
type stmtCache struct {
	db    *sqlx.DB
	mu    sync.RWMutex
	stmts map[string]*sqlx.Stmt
	// pending are being prepared; failed did not prepare and are not tried again.
	pending, failed map[string]bool
}

func newStmtCache(db *sqlx.DB) *stmtCache {
	return &stmtCache{db: db, stmts: map[string]*sqlx.Stmt{}, pending: map[string]bool{}, failed: map[string]bool{}}
}

func (c *stmtCache) lookup(query string) *sqlx.Stmt {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.stmts[query]
}

// prepare prepares query on the pool and keeps it; nil when the cache is full or the statement
// does not prepare (the caller then runs the query as it is, and gets its error).
func (c *stmtCache) prepare(ctx context.Context, query string) *sqlx.Stmt {
	c.mu.Lock()
	skip := len(c.stmts)+len(c.pending)+len(c.failed) >= maxStatements || c.pending[query] || c.failed[query]
	if !skip {
		c.pending[query] = true
	}
	c.mu.Unlock()
	if skip {
		return nil
	}
	st, err := c.db.PreparexContext(ctx, query)
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pending, query)
	if err != nil {
		var pqErr *pq.Error
		if errors.As(err, &pqErr) && !unavailable(err) { // refused by Postgres, not a lost connection
			c.failed[query] = true
		}
		return nil
	}
	if old := c.stmts[query]; old != nil {
		_ = st.Close() //nolint:sqlclosecheck // a duplicate of one prepared meanwhile
		return old
	}
	c.stmts[query] = st
	return st
}

// prepared runs the store's statements through the cache. Queries without arguments go as
// they are: lib/pq sends them in one round trip already, and they may hold several statements
// (migrations). Inside a transaction a statement not yet cached is prepared in the background,
// never on a second connection while the transaction holds one: transactions filling the
// pool would wait for each other.
type prepared struct {
	querier          // *sqlx.DB or *sqlx.Tx
	tx      *sqlx.Tx // set inside a transaction
	cache   *stmtCache
	// conns is the pool's queue (connQueue): GetContext, SelectContext and ExecContext hold a
	// place while they run. nil inside a transaction, and for the Query methods, whose rows
	// keep their connection after they return (the store does not use them outside
	// transactions; sqlx's helpers would).
	conns *connQueue
}

// stmt is the prepared statement to run query with, or nil. Cached statements live as long as
// the pool; a transaction's copy closes with the transaction.
func (p *prepared) stmt(ctx context.Context, query string, args []any) *sqlx.Stmt {
	if len(args) == 0 {
		return nil
	}
	st := p.cache.lookup(query)
	switch {
	case st == nil && p.tx == nil:
		return p.cache.prepare(ctx, query)
	case st == nil:
		go func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			p.cache.prepare(ctx, query)
		}()
		return nil
	case p.tx != nil:
		return p.tx.StmtxContext(ctx, st)
	}
	return st
}

// statementsKey is the context key of a request's statement counter (CountStatements).
type statementsKey struct{}

// requestStatements are what the store counted of one request: its statements and the time
// they took, waits for a connection or a heartbeat's batch included.
type requestStatements struct {
	n, ns atomic.Int64
}

// CountStatements returns a context under which every statement the store sends (BEGIN and
// COMMIT included) is counted, and a function that reads the count. The master's request log
// shows it per request (db_statements), so a request whose statements grow with its rows, or
// a heartbeat that writes per job, shows in the log and fails its test.
func CountStatements(ctx context.Context) (context.Context, func() int64) {
	c := new(requestStatements)
	return context.WithValue(ctx, statementsKey{}, c), c.n.Load
}

// StatementTime is the time the store spent on the statements of a context made by
// CountStatements so far: waiting for a connection (or, for a heartbeat, for its batch's
// statement) and running them; a transaction counts from its BEGIN to its COMMIT. The request
// log shows it (db_ms) beside the request's duration, so that a request slow for want of the
// database is told from one slow for want of the CPU.
func StatementTime(ctx context.Context) time.Duration {
	if c, ok := ctx.Value(statementsKey{}).(*requestStatements); ok {
		return time.Duration(c.ns.Load())
	}
	return 0
}

// statementTimer adds a statement's time to its request's count when done is called; the zero
// value (no count on the context) adds nothing. A value, not a closure, so that timing the
// statements of every request allocates nothing.
type statementTimer struct {
	c     *requestStatements
	start time.Time
}

func (t statementTimer) done() {
	if t.c != nil {
		t.c.ns.Add(int64(time.Since(t.start)))
	}
}

// countStatement counts one statement for the context's counter, if it has one, and returns
// the timer that adds its time when it is done.
func countStatement(ctx context.Context) statementTimer {
	c, ok := ctx.Value(statementsKey{}).(*requestStatements)
	if !ok {
		return statementTimer{}
	}
	c.n.Add(1)
	return statementTimer{c: c, start: time.Now()}
}

// addStatement counts one statement that took d for the context's counter, if it has one.
func addStatement(ctx context.Context, d time.Duration) {
	if c, ok := ctx.Value(statementsKey{}).(*requestStatements); ok {
		c.n.Add(1)
		c.ns.Add(int64(d))
	}
}

// timeStatement is countStatement for a statement of the prepared querier: inside a
// transaction only counted, since the transaction's time (withTx) holds its statements'.
func (p *prepared) timeStatement(ctx context.Context) statementTimer {
	t := countStatement(ctx)
	if p.tx != nil {
		return statementTimer{}
	}
	return t
}

func (p *prepared) GetContext(ctx context.Context, dest any, query string, args ...any) error {
	defer p.timeStatement(ctx).done()
	if err := p.conns.enter(ctx); err != nil {
		return err
	}
	defer p.conns.leave()
	if st := p.stmt(ctx, query, args); st != nil { //nolint:sqlclosecheck // cached for the pool's life (see stmt)
		return st.GetContext(ctx, dest, args...)
	}
	return p.querier.GetContext(ctx, dest, query, args...)
}

// scanRow runs a statement of one row and scans its columns, in order, into dest: GetContext
// without sqlx's matching of columns to a struct's fields by reflection, for the hottest
// read (a GET of a job, where it was 4 % of the master's CPU, bench B4). sql.ErrNoRows when
// there is no row.
func (p *prepared) scanRow(ctx context.Context, query string, args []any, dest ...any) error {
	defer p.timeStatement(ctx).done()
	if err := p.conns.enter(ctx); err != nil {
		return err
	}
	defer p.conns.leave()
	if st := p.stmt(ctx, query, args); st != nil { //nolint:sqlclosecheck // cached for the pool's life (see stmt)
		return st.QueryRowContext(ctx, args...).Scan(dest...)
	}
	return p.querier.QueryRowxContext(ctx, query, args...).Scan(dest...)
}

// scanRows runs a statement and hands its rows to each, which scans them in column order:
// SelectContext without sqlx's reflection, for a list's page (listByVersion). The rows are
// closed, and the pool's place left, when each returns.
func (p *prepared) scanRows(ctx context.Context, query string, args []any, each func(*sql.Rows) error) error {
	return p.scanRowsx(ctx, query, args, func(rows *sqlx.Rows) error { return each(rows.Rows) })
}

// scanRowsx is scanRows with sqlx's rows, which scan a row into a struct by its columns' names.
func (p *prepared) scanRowsx(ctx context.Context, query string, args []any, each func(*sqlx.Rows) error) error {
	defer p.timeStatement(ctx).done()
	if err := p.conns.enter(ctx); err != nil {
		return err
	}
	defer p.conns.leave()
	var rows *sqlx.Rows
	var err error
	if st := p.stmt(ctx, query, args); st != nil { //nolint:sqlclosecheck // cached for the pool's life (see stmt)
		rows, err = st.QueryxContext(ctx, args...)
	} else {
		rows, err = p.querier.QueryxContext(ctx, query, args...)
	}
	if err != nil {
		return err
	}
	defer func() { _ = rows.Close() }()
	if err := each(rows); err != nil {
		return err
	}
	return rows.Close()
}

// selectMany is SelectContext for a long answer (the scheduler's full read: B1x's 100,000
// jobs), its rows scanned in place into a slice made for hint rows that doubles when full.
// sqlx's Select allocates each row apart and appends it by reflection, and a slice past 256
// elements grows by a quarter: every row was copied four or five times, half of the read's CPU.
func selectMany[T any](ctx context.Context, p *prepared, hint int, query string, args ...any) ([]T, error) {
	out := make([]T, 0, max(hint, 64))
	err := p.scanRowsx(ctx, query, args, func(rows *sqlx.Rows) error {
		for rows.Next() {
			if len(out) == cap(out) {
				out = slices.Grow(out, len(out))
			}
			out = out[:len(out)+1]
			if err := rows.StructScan(&out[len(out)-1]); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	return out, err
}

func (p *prepared) SelectContext(ctx context.Context, dest any, query string, args ...any) error {
	defer p.timeStatement(ctx).done()
	if err := p.conns.enter(ctx); err != nil {
		return err
	}
	defer p.conns.leave()
	if st := p.stmt(ctx, query, args); st != nil { //nolint:sqlclosecheck // cached for the pool's life (see stmt)
		return st.SelectContext(ctx, dest, args...)
	}
	return p.querier.SelectContext(ctx, dest, query, args...)
}

func (p *prepared) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	defer p.timeStatement(ctx).done()
	if err := p.conns.enter(ctx); err != nil {
		return nil, err
	}
	defer p.conns.leave()
	if st := p.stmt(ctx, query, args); st != nil { //nolint:sqlclosecheck // cached for the pool's life (see stmt)
		return st.ExecContext(ctx, args...)
	}
	return p.querier.ExecContext(ctx, query, args...)
}

func (p *prepared) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := p.stmt(ctx, query, args); st != nil { //nolint:sqlclosecheck // cached for the pool's life (see stmt)
		return st.QueryContext(ctx, args...)
	}
	return p.querier.QueryContext(ctx, query, args...)
}

func (p *prepared) QueryxContext(ctx context.Context, query string, args ...any) (*sqlx.Rows, error) {
	// Counted only: the rows are read after it returns, within the caller's transaction,
	// whose time (withTx) holds theirs.
	_ = countStatement(ctx)
	if st := p.stmt(ctx, query, args); st != nil { //nolint:sqlclosecheck // cached for the pool's life (see stmt)
		return st.QueryxContext(ctx, args...)
	}
	return p.querier.QueryxContext(ctx, query, args...)
}

func (p *prepared) QueryRowxContext(ctx context.Context, query string, args ...any) *sqlx.Row {
	// Counted only: the rows are read after it returns, within the caller's transaction,
	// whose time (withTx) holds theirs.
	_ = countStatement(ctx)
	if st := p.stmt(ctx, query, args); st != nil { //nolint:sqlclosecheck // cached for the pool's life (see stmt)
		return st.QueryRowxContext(ctx, args...)
	}
	return p.querier.QueryRowxContext(ctx, query, args...)
}
