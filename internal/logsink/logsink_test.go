package logsink_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/logsink"
)

// recorder counts the writes it gets and the Syncs asked of it (an *os.File has Sync).
type recorder struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	writes int
	syncs  int
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes++
	return r.buf.Write(p)
}

func (r *recorder) Sync() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.syncs++
	return nil
}

func (r *recorder) text() (string, int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.String(), r.writes, r.syncs
}

// Info lines are written together, and all of them within FlushEvery; a warning is written at
// once with every line before it, in order; nothing is ever fsynced.
func TestLinesBatchedWarningsAtOnce(t *testing.T) {
	rec := &recorder{}
	sink := logsink.New(rec)
	defer func() { _ = sink.Close() }()
	log := slog.New(sink.Handler(slog.NewTextHandler(sink, nil)))
	for i := range 200 {
		log.Info("request", "n", i)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		text, writes, _ := rec.text()
		if strings.Count(text, "msg=request") == 200 {
			// 200 lines in a few writes: a flush by the timer may fall between two lines.
			if writes > 10 {
				t.Fatalf("200 lines took %d writes", writes)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lines were not written within 30 s: %d of 200", strings.Count(text, "msg=request"))
		}
		time.Sleep(10 * time.Millisecond)
	}

	log.Info("before the warning")
	log.Warn("disk full")
	text, _, syncs := rec.text()
	before, warn := strings.Index(text, "before the warning"), strings.Index(text, "disk full")
	if before < 0 || warn < 0 || before > warn {
		t.Fatalf("right after the warning the log reads:\n%s", text[max(0, len(text)-300):])
	}
	if syncs != 0 {
		t.Fatalf("the writer was synced %d times", syncs)
	}
	// WithAttrs and WithGroup keep the warning's flush.
	log.With("slave", "gpu1").WithGroup("g").Error("lost", "job", "x")
	if text, _, _ := rec.text(); !strings.Contains(text, `msg=lost slave=gpu1 g.job=x`) {
		t.Fatalf("an error of a derived logger waits:\n%s", text[max(0, len(text)-300):])
	}
}

// Close writes what waits; a line logged after it is written at once.
func TestCloseWritesWhatWaits(t *testing.T) {
	rec := &recorder{}
	sink := logsink.New(rec)
	log := slog.New(sink.Handler(slog.NewTextHandler(sink, nil)))
	log.Info("last words")
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	if text, _, _ := rec.text(); !strings.Contains(text, "last words") {
		t.Fatalf("after Close: %q", text)
	}
	log.Info("after the end")
	if text, _, _ := rec.text(); !strings.Contains(text, "after the end") {
		t.Fatalf("a line after Close waits: %q", text)
	}
	if err := sink.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}
