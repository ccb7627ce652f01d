package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
)

// Submissions racing for the last notebook places (two connections each, as two masters
// would) never store more than the limit: count and insert are one locked transaction.
func TestSubmitJobWithinHoldsUnderRaces(t *testing.T) {
	st := newStore(t)
	u, p := fixture(t, st, "alice", "vision")
	ctx := context.Background()
	const racers, limit = 12, 2
	lim := store.NameLimit{Name: job.JupyterHubJobName, Max: limit}
	var wg sync.WaitGroup
	errs := make(chan error, racers)
	for i := 0; i < racers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j, err := job.Parse([]byte(`{"name": "`+job.JupyterHubJobName+`", "request": {"resources": {"clusterId": 1, "gpus": 0, "cpus": 1, "cpuMemoryGb": 1},
 "docker": {"image": "debian:stable"}, "scheduling": {"interactive": true}}}`), job.DefaultOptions())
			if err != nil {
				errs <- err
				return
			}
			j.UUID = uuid.NewString()
			j.State = job.State{Status: job.StatusQueued}
			_, err = st.SubmitJobWithin(ctx, j, u.ID, p.ID, "submitted", "", lim)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	stored, refused := 0, 0
	for err := range errs {
		var le *store.LimitError
		switch {
		case err == nil:
			stored++
		case errors.As(err, &le) && le.Count == limit && le.Max == limit:
			refused++
		default:
			t.Errorf("submission: %v", err)
		}
	}
	if stored != limit || refused != racers-limit {
		t.Fatalf("%d racing submissions with limit %d: %d stored, %d refused", racers, limit, stored, refused)
	}
	t.Logf("%d racing notebook submissions, limit %d: %d stored, %d refused", racers, limit, stored, refused)
}
