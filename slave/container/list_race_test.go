package container

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/opengpulab/gpulab/internal/testenv"
)

// Two slaves sharing one fresh client list their containers at once, as two agents of a test
// do at start. The client negotiates its API version on its first request; List must not read
// the version before that negotiation is settled (go test -race finds it otherwise).
func TestListOnSharedFreshClient(t *testing.T) {
	t.Parallel()
	for range 3 {
		cli := testenv.Docker(t) // pinged, not negotiated
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 3 {
			rt := New(cli, Config{SlaveName: "test-" + uuid.NewString()[:8]}, nil)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if list, err := rt.List(ctx); err != nil || len(list) != 0 {
					t.Errorf("List = %v, %v; want no containers", list, err)
				}
			}()
		}
		close(start)
		wg.Wait()
	}
}
