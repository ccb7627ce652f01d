package main

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/store"
)

// A master that begins to listen to the database's notifications (at its start, and again
// after a failure) wakes its scheduler and every waiting long poll: what other masters sent
// before is lost, and a long poll looks for work again only when it is woken.
func TestListenWakesEverythingWhenItBegins(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	st, err := store.Open(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	wake, work := scheduler.NewSignal(), scheduler.NewSignal()
	waiting := map[string]<-chan struct{}{"the scheduler": wake.C(), "a long poll": work.For("n1")}
	done := make(chan struct{})
	go func() { defer close(done); listen(ctx, st, slog.New(slog.DiscardHandler), wake, work) }()
	defer func() { cancel(); <-done }()
	for what, c := range waiting {
		select {
		case <-c:
		case <-time.After(time.Minute):
			t.Fatalf("%s was not woken within a minute of the master listening", what)
		}
	}
}
