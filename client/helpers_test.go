package client

import (
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/pki"
)

const (
	testUserURN = "urn:publicid:IDN+gpulab.example.org+user+alice"
	testEmail   = "alice@example.org"
)

// testPKI is a CA with a user certificate, as a master and its user would have them.
type testPKI struct {
	ca      *pki.CA
	userPEM []byte
}

func newTestPKI(t *testing.T, password string) *testPKI {
	t.Helper()
	ca, err := pki.NewCA("test CA")
	if err != nil {
		t.Fatalf("new CA: %v", err)
	}
	return &testPKI{ca: ca, userPEM: issuePEM(t, ca, password, time.Hour)}
}

func issuePEM(t *testing.T, ca *pki.CA, password string, validity time.Duration) []byte {
	t.Helper()
	cert, key, err := ca.IssueClient(pki.ClientSpec{
		Kind: pki.KindUser, URN: testUserURN, Email: testEmail, Name: "alice", Validity: validity,
	})
	if err != nil {
		t.Fatalf("issue client certificate: %v", err)
	}
	p, err := pki.ClientPEM(cert, key, password)
	if err != nil {
		t.Fatalf("client PEM: %v", err)
	}
	return p
}

// startTLS starts an HTTPS server that, like the master, asks for a client certificate from
// its CA but accepts requests without one.
func (p *testPKI) startTLS(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	serverCert, err := p.ca.ServerCert([]string{"127.0.0.1", "localhost"})
	if err != nil {
		t.Fatalf("server certificate: %v", err)
	}
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{serverCert},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    p.ca.Pool(),
		MinVersion:   tls.VersionTLS12,
	}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // handshake failures are expected in some tests
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// config is a client configuration for srv with the user's certificate.
func (p *testPKI) config(srv *httptest.Server) Config {
	return Config{
		BaseURL:  srv.URL + "/api/gpulab/v3.1",
		CertPEM:  p.userPEM,
		CertName: "alice.pem",
		ServerCA: p.ca.CertPEM,
		Timeout:  30 * time.Second, // a loaded machine may be slow; no test waits for it to expire
	}
}

func newTestClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	c.retryWait = time.Millisecond
	if cfg.RetryMaxTime == 0 {
		// Retries are tested on their own (retry_test.go); elsewhere a failure must come fast.
		c.retryMax = 300 * time.Millisecond
	}
	return c
}
