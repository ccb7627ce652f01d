package web

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/static"
	"github.com/opengpulab/gpulab/store"
)

// A browser logged in to the portal sends its session cookie with every request, and the
// session middleware reads the user from the database before any handler runs. While the
// database is unreachable that read gives 503 with Retry-After: the portal's error page for a
// page, the #flash message for htmx, JSON on the API; never a 500, and never the login (the
// session is still good). The stylesheet and the health check need no database at all. Once
// the database is back the same cookie works.
func TestSessionDuringOutage(t *testing.T) {
	ctx := context.Background()
	dbURL := testenv.PostgresURL(t)
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	const urn = "urn:publicid:IDN+test+user+alice"
	if _, err := st.UpsertUser(ctx, urn, "alice", "alice@example.org", false); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := handlers.New(st, handlers.Config{Authority: "test", JobOptions: job.DefaultOptions()}, log, nil, nil)
	s := New(Config{Authority: "test"}, st, h, log)
	srv := s.Handler()

	// The cookie a login leaves.
	r0 := httptest.NewRequest("GET", "https://master/", nil)
	sess := s.sessions.load(r0)
	sess.Values[sessUser], sess.Values[sessCSRF] = urn, "token"
	w0 := httptest.NewRecorder()
	if err := s.sessions.save(w0, r0, sess); err != nil {
		t.Fatal(err)
	}
	cookie := w0.Result().Cookies()[0]
	get := func(path string, header ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "https://master"+path, nil)
		r.AddCookie(cookie)
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		return w
	}
	browser := []string{"Accept", "text/html,application/xhtml+xml,*/*;q=0.8"}
	if w := get("/jobs", browser...); w.Code != http.StatusOK {
		t.Fatalf("GET /jobs with the session before the outage: %d %s", w.Code, w.Body)
	}

	heal := testenv.DatabaseOutage(t, dbURL)
	tests := []struct {
		name, path string
		header     []string
		want       int
		check      func(w *httptest.ResponseRecorder) bool
	}{
		{"page", "/jobs", browser, http.StatusServiceUnavailable, func(w *httptest.ResponseRecorder) bool {
			return strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") && w.Header().Get("Retry-After") == "5" &&
				strings.Contains(w.Body.String(), `data-testid="error-page"`) && strings.Contains(w.Body.String(), handlers.MsgUnavailable)
		}},
		{"htmx", "/jobs", []string{"HX-Request", "true"}, http.StatusServiceUnavailable, func(w *httptest.ResponseRecorder) bool {
			return w.Header().Get("HX-Retarget") == "#flash" && w.Header().Get("Retry-After") == "5" &&
				strings.Contains(w.Body.String(), `data-testid="flash-error"`)
		}},
		{"API", "/api/gpulab/v3.1/jobs", browser, http.StatusServiceUnavailable, func(w *httptest.ResponseRecorder) bool {
			return strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") && w.Header().Get("Retry-After") == "5" &&
				strings.Contains(w.Body.String(), handlers.MsgUnavailable)
		}},
		{"stylesheet", static.URL("gpulab.css"), browser, http.StatusOK, nil},
		{"healthz", "/healthz", nil, http.StatusOK, nil},
		{"readyz", "/readyz", nil, http.StatusServiceUnavailable, func(w *httptest.ResponseRecorder) bool {
			return w.Header().Get("Retry-After") == "5"
		}},
	}
	for _, tt := range tests {
		w := get(tt.path, tt.header...)
		if w.Code != tt.want || (tt.check != nil && !tt.check(w)) {
			t.Errorf("%s during the outage: %d %v\n%.2000s", tt.name, w.Code, w.Header(), w.Body)
		}
	}

	heal()
	if w := get("/jobs", browser...); w.Code != http.StatusOK {
		t.Errorf("GET /jobs with the session after the outage: %d %.2000s", w.Code, w.Body)
	}
}
