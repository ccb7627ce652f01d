package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/lib/pq"
	"github.com/lib/pq/pqerror"
)

// TestUnavailableClassification is the table of what counts as "the database cannot be
// reached": types and SQLSTATE codes, never message text.
func TestUnavailableClassification(t *testing.T) {
	pqErr := func(code string) error { return &pq.Error{Severity: "ERROR", Code: pqerror.Code(code), Message: "x"} }
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"no rows", sql.ErrNoRows, false},
		{"bad connection", driver.ErrBadConn, true},
		{"bad connection, wrapped", fmt.Errorf("get job: %w", driver.ErrBadConn), true},
		{"connection refused (dial)", dial, true},
		{"connection refused (bare errno)", syscall.ECONNREFUSED, true},
		{"connection reset", os.NewSyscallError("read", syscall.ECONNRESET), true},
		{"broken pipe", os.NewSyscallError("write", syscall.EPIPE), true},
		{"unexpected EOF", io.ErrUnexpectedEOF, true},
		{"deadline exceeded", context.DeadlineExceeded, true},
		{"caller went away", context.Canceled, false},
		{"08000 connection_exception", pqErr("08000"), true},
		{"08006 connection_failure", pqErr("08006"), true},
		{"08001 cannot establish", pqErr("08001"), true},
		{"08P01 protocol_violation (class 08)", pqErr("08P01"), true},
		{"57P01 admin_shutdown", pqErr("57P01"), true},
		{"57P02 crash_shutdown", pqErr("57P02"), true},
		{"57P03 cannot_connect_now", pqErr("57P03"), true},
		{"53300 too_many_connections", pqErr("53300"), true},
		{"23505 unique_violation", pqErr("23505"), false},
		{"40001 serialization_failure", pqErr("40001"), false},
		{"42P01 undefined_table", pqErr("42P01"), false},
		{"57014 query_canceled", pqErr("57014"), false},
		{"55000 in a statement", pqErr("55000"), false},
		{"55000 when connecting (database not accepting connections)", &connectError{err: pqErr("55000")}, true},
		{"28P01 when connecting (password refused)", &connectError{err: pqErr("28P01")}, true},
		{"dial error when connecting", &connectError{err: dial}, true},
		{"connecting, caller went away", &connectError{err: context.Canceled}, false},
		{"the words alone", errors.New("pq: the database system is shutting down: connection refused"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := unavailable(tt.err); got != tt.want {
				t.Errorf("unavailable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// TestMapErrKeepsTheCause checks that mapErr gives callers the sentinel to branch on and the
// driver's error for the log.
func TestMapErrKeepsTheCause(t *testing.T) {
	err := mapErr(driver.ErrBadConn, "get job x")
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, driver.ErrBadConn) {
		t.Errorf("mapErr(ErrBadConn) = %v: want ErrUnavailable wrapping driver.ErrBadConn", err)
	}
	again := mapErr(fmt.Errorf("in a transaction: %w", err), "commit")
	if again.Error() != "in a transaction: "+err.Error() {
		t.Errorf("mapping a mapped error again changed it: %v", again)
	}
	shutdown := mapErr(&pq.Error{Code: "57P01"}, "list jobs")
	var pe *pq.Error
	if !errors.Is(shutdown, ErrUnavailable) || !errors.As(shutdown, &pe) || pe.Code != "57P01" {
		t.Errorf("mapErr(57P01) = %v: want ErrUnavailable wrapping the *pq.Error", shutdown)
	}
	if err := mapErr(&pq.Error{Code: "23505"}, "create user"); !errors.Is(err, ErrConflict) || errors.Is(err, ErrUnavailable) {
		t.Errorf("mapErr(23505) = %v, want ErrConflict only", err)
	}
	if err := mapErr(sql.ErrNoRows, "get job"); !errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnavailable) {
		t.Errorf("mapErr(ErrNoRows) = %v, want ErrNotFound only", err)
	}
}
