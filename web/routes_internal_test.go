package web

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/store"
)

// Every call of the slave protocol that the agent retries by itself is marked so from the
// start, before authentication reads the certificate (its statements take turns with people's
// requests in the connection queue); the join, run by an operator, the SSH authorization, made
// while a person logs in, and every other request are not.
func TestSlaveCallsRetriedByTheAgent(t *testing.T) {
	var marked bool
	h := markRetried(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { marked = store.IsRetried(r.Context()) }))
	want := map[string]bool{"/api/gpulab/v3.1/jobs": false, "/jobs": false, "/api/slave/": false}
	for _, rt := range SlaveRoutes(&handlers.Handlers{}) {
		want[rt.Path] = rt.Path != protocol.JoinPath && rt.Path != protocol.SSHAuthPath
	}
	for p, w := range want {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, p, nil))
		if marked != w {
			t.Errorf("%s: marked Retried %v, want %v", p, marked, w)
		}
	}
}
