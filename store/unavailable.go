package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/lib/pq"
	"github.com/lib/pq/pqerror"
)

// unavailable reports whether err means that the database could not be reached or was lost
// (ErrUnavailable), as opposed to a statement that Postgres refused. It branches on types and
// SQLSTATE codes only, never on message text:
//   - any failure to open a connection (connectError): the server is down, refuses
//     connections (ALLOW_CONNECTIONS false, too many connections, starting up or shutting
//     down), or cannot be reached at all;
//   - a connection lost on the way: driver.ErrBadConn (what lib/pq answers for a broken
//     socket or a FATAL error), a network error, io.ErrUnexpectedEOF;
//   - SQLSTATE class 08 (connection exception), 57P01 admin_shutdown, 57P02 crash_shutdown,
//     57P03 cannot_connect_now and 53300 too_many_connections;
//   - a deadline that ran out while talking to the database.
//
// A cancelled context is never unavailability: the caller went away, and nobody waits for
// an answer.
func unavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var (
		ce    *connectError
		opErr *net.OpError
		pqErr *pq.Error
	)
	switch {
	case errors.As(err, &ce),
		errors.Is(err, driver.ErrBadConn),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.As(err, &opErr),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE),
		errors.Is(err, context.DeadlineExceeded):
		return true
	case errors.As(err, &pqErr):
		if pqErr.Code.Class() == pqerror.ClassConnectionException {
			return true
		}
		switch pqErr.Code {
		case pqerror.AdminShutdown, pqerror.CrashShutdown, pqerror.CannotConnectNow, pqerror.TooManyConnections:
			return true
		}
	}
	return false
}

// connectError is a failure to open a new connection to Postgres, whatever the reason: the
// server may be down, unreachable, starting, shutting down, full, or refusing connections to
// this database. For the master it all means the same: the database cannot be used now.
type connectError struct{ err error }

func (e *connectError) Error() string { return e.err.Error() }
func (e *connectError) Unwrap() error { return e.err }

// connector marks the errors of opening a connection (see connectError), so that mapErr can
// tell "could not connect" from a statement's own error even when Postgres gives both the same
// SQLSTATE (a database that does not accept connections answers 55000, as do some statements).
// database/sql still sees driver.ErrBadConn through Unwrap and retries as it does.
type connector struct {
	driver.Connector
	setup string // sessionSetup, or a pool's own (keptPlanSetup)
}

// Connect opens a connection and sets it up for the master's statements (c.setup) before the
// pool hands it out.
func (c connector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, &connectError{err: err}
	}
	if ex, ok := conn.(driver.ExecerContext); ok {
		if _, err := ex.ExecContext(ctx, c.setup, nil); err != nil {
			_ = conn.Close()
			return nil, &connectError{err: fmt.Errorf("set up the session: %w", err)}
		}
	}
	return conn, nil
}

// sessionSetup runs on every new connection of the store's pools. JIT compilation is off: the
// master's statements are short, and Postgres compiles a statement whose estimated cost passes
// jit_above_cost (100,000 by default) before running it, which the leader's full read of a
// 100,000-job queue crosses: 0.29 s of compiling for 0.43 s of reading (bench/ TestPassCost,
// auto_explain, 30 Nov). It is set here rather than in the connection's start-up parameters,
// which a connection pooler in front of Postgres (PgBouncer) may refuse.
const sessionSetup = `SET jit = off`

// keptPlanSetup is sessionSetup for the connections of the queues that write many calls in one
// statement (the heartbeats', the state changes'), whose parameters are arrays: Postgres plans
// such a statement again at every execution, since its plan for any length, kept, is estimated
// dearer than one made for the length given (plan_cache_mode auto), and the planning cost three
// times the execution of a heartbeats statement of one or two heartbeats (0.55 ms against 0.19
// ms on the bench's machine, with 3,000 slaves; B8x sends ~600 such statements a second). The
// plan kept for any length does as well at every batch size the queues send (1–200: the same
// time or less).
const keptPlanSetup = sessionSetup + `; SET plan_cache_mode = force_generic_plan`
