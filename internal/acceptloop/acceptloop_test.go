package acceptloop

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
)

// Every connection reaches the handler; when the context ends, Serve closes the listener,
// the handlers' context ends too, and Serve returns nil only after they all returned.
func TestServe(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan struct{}, 3)
	var returned atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, l, "test", func(hctx context.Context, c net.Conn) {
			defer func() { _ = c.Close() }()
			got <- struct{}{}
			<-hctx.Done() // a long session: it ends with the server
			returned.Add(1)
		})
	}()
	for range 3 {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		<-got
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if n := returned.Load(); n != 3 {
		t.Fatalf("Serve returned with %d of 3 handlers still running", 3-n)
	}
	if _, err := net.Dial("tcp", l.Addr().String()); err == nil {
		t.Fatal("the listener still accepts")
	}
}
