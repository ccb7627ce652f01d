package leader_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/leader"
	"github.com/opengpulab/gpulab/scheduler"
)

// A wake that comes while a pass runs (a submit during a pass) starts another pass at once, not
// after the interval: the submitted job used to wait a whole interval.
func TestWakeDuringAPassStartsTheNextPass(t *testing.T) {
	w := newEstimateWorld(t)
	wake := scheduler.NewSignal()
	var passes atomic.Int32
	second := make(chan struct{})
	cfg := leader.Config{Interval: time.Hour, OnPass: func(time.Time, time.Duration, error) {
		switch passes.Add(1) {
		case 1:
			wake.Wake() // as a submit during the first pass would
		case 2:
			close(second)
		}
	}}
	l := leader.NewLoop(w.st, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), wake, scheduler.NewSignal())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Lead(ctx, w.lead) }()
	defer func() { cancel(); <-done }()
	select {
	case <-second:
	case <-time.After(2 * time.Minute):
		t.Fatalf("a wake during the first pass started no second pass (interval 1h): %d passes", passes.Load())
	}
}
