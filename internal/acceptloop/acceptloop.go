// Package acceptloop is the accept loop of the SSH servers (the master's jump host, the
// slaves' servers into jobs): one goroutine per connection, transient accept errors waited
// out, and everything ended with the context.
package acceptloop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Serve accepts connections on l and hands each to handle on a goroutine of its own, until ctx
// ends (it then returns nil) or l fails for good. Either way it closes l, cancels the context
// the handlers got, and waits for them to return.
func Serve(ctx context.Context, l net.Listener, what string, handle func(context.Context, net.Conn)) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { <-ctx.Done(); _ = l.Close() }()
	for {
		nc, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			return fmt.Errorf("%s accept: %w", what, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			handle(ctx, nc)
		}()
	}
}
