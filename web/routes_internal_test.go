package web

import (
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
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
	h := markCalls(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { marked = store.IsRetried(r.Context()) }))
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

// Everyone else's requests are marked with who sent them, before authentication: the client
// certificate, else the session (not the cookie's secret), else the address; the connection
// queue serves senders in turn.
func TestRequestsMarkedWithTheirSender(t *testing.T) {
	var got string
	h := markCalls(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = store.SenderOf(r.Context()) }))
	cert := httptest.NewRequest(http.MethodGet, "/api/gpulab/v3.1/jobs", nil)
	cert.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{SerialNumber: big.NewInt(0xbeef)}}}
	session := httptest.NewRequest(http.MethodGet, "/jobs", nil)
	session.AddCookie(&http.Cookie{Name: sessionCookie, Value: "secret-session-value"})
	other := httptest.NewRequest(http.MethodGet, "/jobs", nil)
	other.AddCookie(&http.Cookie{Name: sessionCookie, Value: "another-session"})
	anon := httptest.NewRequest(http.MethodGet, "/login", nil)
	anon.RemoteAddr = "192.0.2.7:51234"
	senders := map[string]bool{}
	for _, c := range []struct {
		r      *http.Request
		prefix string
	}{{cert, "cert:beef"}, {session, "session:"}, {other, "session:"}, {anon, "addr:192.0.2.7"}} {
		h.ServeHTTP(httptest.NewRecorder(), c.r)
		if !strings.HasPrefix(got, c.prefix) || strings.Contains(got, "secret") || senders[got] {
			t.Errorf("%s %s: sender %q, want a new one starting %q, without the cookie's value", c.r.Method, c.r.URL.Path, got, c.prefix)
		}
		senders[got] = true
	}
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, protocol.HeartbeatPath, nil))
	if got != "" {
		t.Errorf("a slave's heartbeat has sender %q, want none (slaves' calls are one line)", got)
	}
}
