package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/opengpulab/gpulab/store"
)

// A database that cannot be reached and a master too overloaded to give a request a
// connection are both 503 with Retry-After, each with its own message; only the first is
// logged (the second is counted by gpulab_db_connection_shed_total: under overload a line each
// would be thousands a second).
func TestUnavailableAndOverloadedAre503(t *testing.T) {
	for _, c := range []struct {
		err    error
		msg    string
		logged bool
	}{
		{fmt.Errorf("get job: %w", store.ErrUnavailable), MsgUnavailable, true},
		{fmt.Errorf("get job: %w", store.ErrOverloaded), MsgOverloaded, false},
	} {
		var logs bytes.Buffer
		h := &Handlers{log: slog.New(slog.NewTextHandler(&logs, nil))}
		w := httptest.NewRecorder()
		h.WriteError(w, httptest.NewRequest(http.MethodGet, "/api/gpulab/v3.0/jobs/x", nil), c.err)
		var body errorBody
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("%v: body %q: %v", c.err, w.Body, err)
		}
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "5" || body.Error != c.msg {
			t.Errorf("%v: %d, Retry-After %q, error %q; want 503, 5, %q", c.err, w.Code, w.Header().Get("Retry-After"), body.Error, c.msg)
		}
		if got := logs.Len() > 0; got != c.logged {
			t.Errorf("%v: logged %v (%q), want %v", c.err, got, logs.String(), c.logged)
		}
	}
}

// A request whose client went away while it ran is not a failure of the master: 499, not
// logged as an error. The same error while the client still waits is a 500, logged.
func TestClientGoneIsNotAnError(t *testing.T) {
	err := fmt.Errorf("heartbeat of slave sim-0001: %w", context.Canceled)
	for _, gone := range []bool{true, false} {
		var logs bytes.Buffer
		h := &Handlers{log: slog.New(slog.NewTextHandler(&logs, nil))}
		r := httptest.NewRequest(http.MethodPost, "/api/slave/v1/heartbeat", nil)
		if gone {
			ctx, cancel := context.WithCancel(r.Context())
			cancel()
			r = r.WithContext(ctx)
		}
		w := httptest.NewRecorder()
		h.WriteError(w, r, err)
		want, logged := http.StatusInternalServerError, true
		if gone {
			want, logged = StatusClientClosedRequest, false
		}
		if w.Code != want || (logs.Len() > 0) != logged {
			t.Errorf("client gone %v: %d, logged %q; want %d, logged %v", gone, w.Code, logs.String(), want, logged)
		}
	}
}
