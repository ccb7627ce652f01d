// Package logsink writes a process's log lines in batches: a write system call for each line
// was 6 % of the master's own CPU when it serves reads as fast as it can (bench/ B4, GET
// jobs/{id}: one info line a request). Lines wait at most FlushEvery; a warning or an error
// is written at once, with every line before it. The buffering is zap's BufferedWriteSyncer
// (a well-kept implementation of exactly this, the flush timer included); the lines are
// still slog's.
package logsink

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"

	"go.uber.org/zap/zapcore"
)

// FlushEvery bounds how long a line waits in the buffer: what a crash of the process loses
// at most (a panic's own report goes straight to stderr).
const FlushEvery = 100 * time.Millisecond

// bufferSize is flushed at once when full: about 250 request lines.
const bufferSize = 64 << 10

// Sink is an io.Writer for a slog handler that batches its writes to w.
type Sink struct {
	w  io.Writer
	ws *zapcore.BufferedWriteSyncer
	mu sync.RWMutex // Close waits for the writes under way
	// closed: the timer is stopped, and what goroutines still log goes straight to w.
	closed bool
}

// New batches writes to w until Close.
func New(w io.Writer) *Sink {
	// w is given without its Sync method (an *os.File has one): the syncer's flush would
	// otherwise fsync a log file every FlushEvery.
	plain := struct{ io.Writer }{w}
	return &Sink{w: w, ws: &zapcore.BufferedWriteSyncer{WS: zapcore.AddSync(plain), Size: bufferSize, FlushInterval: FlushEvery}}
}

// Write buffers one line (a slog handler writes each record whole, in one call).
func (s *Sink) Write(p []byte) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return s.w.Write(p)
	}
	return s.ws.Write(p)
}

// Flush writes what waits now.
func (s *Sink) Flush() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil
	}
	return s.ws.Sync()
}

// Close writes what waits and stops the flush timer; later lines are written at once.
func (s *Sink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.ws.Stop()
}

// Handler wraps h, which writes to s, so that a record at level warn or above is written at
// once: an operator reading the log as a problem happens sees it then, and a crash right
// after it does not take it away.
func (s *Sink) Handler(h slog.Handler) slog.Handler { return urgent{Handler: h, s: s} }

type urgent struct {
	slog.Handler
	s *Sink
}

func (u urgent) Handle(ctx context.Context, r slog.Record) error {
	err := u.Handler.Handle(ctx, r)
	if r.Level >= slog.LevelWarn {
		if ferr := u.s.Flush(); err == nil {
			err = ferr
		}
	}
	return err
}

func (u urgent) WithAttrs(as []slog.Attr) slog.Handler {
	return urgent{Handler: u.Handler.WithAttrs(as), s: u.s}
}

func (u urgent) WithGroup(name string) slog.Handler {
	return urgent{Handler: u.Handler.WithGroup(name), s: u.s}
}
