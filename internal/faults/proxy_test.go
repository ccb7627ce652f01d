package faults

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// counter is an HTTP(S) server whose POSTs have an effect the test can see (a count), with
// a client that talks to it through a Proxy.
type counter struct {
	hits   atomic.Int64
	srv    *httptest.Server
	proxy  *Proxy
	scheme string
	tlsCfg *tls.Config // client side; nil for plain HTTP
}

// serverKinds are the transports a Proxy must handle: DropReplies must see through each
// kind of TLS handshake (mTLS makes a Go server send its session tickets late).
var serverKinds = []string{"http", "tls13", "tls13-mtls", "tls12"}

func newCounter(t *testing.T, kind string) *counter {
	t.Helper()
	c := &counter{}
	c.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		if kind == "tls13-mtls" && (r.TLS == nil || len(r.TLS.PeerCertificates) == 0) {
			http.Error(w, "no client certificate", http.StatusForbidden)
			return
		}
		n := c.hits.Add(1)
		fmt.Fprintf(w, "hit %d", n)
	}))
	switch kind {
	case "http":
		c.srv.Start()
		c.scheme = "http"
	default:
		c.srv.TLS = &tls.Config{}
		var clientCert *tls.Certificate
		switch kind {
		case "tls12":
			c.srv.TLS.MaxVersion = tls.VersionTLS12
		case "tls13-mtls":
			ca, cert := clientCA(t)
			c.srv.TLS.ClientAuth = tls.VerifyClientCertIfGiven
			c.srv.TLS.ClientCAs = ca
			clientCert = cert
		}
		c.srv.StartTLS()
		c.scheme = "https"
		c.tlsCfg = c.srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
		if clientCert != nil {
			c.tlsCfg.Certificates = []tls.Certificate{*clientCert}
		}
	}
	t.Cleanup(c.srv.Close)
	p, err := NewProxy(c.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	c.proxy = p
	return c
}

// client returns an HTTP client of the server through the proxy; each client has its own
// pool of keep-alive connections.
func (c *counter) client(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{TLSClientConfig: c.tlsCfg}}
}

func (c *counter) post(cl *http.Client) (string, error) {
	resp, err := cl.Post(c.scheme+"://"+c.proxy.Addr()+"/", "text/plain", strings.NewReader("x"))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %s: %s", resp.Status, body)
	}
	return string(body), nil
}

func (c *counter) mustPost(t *testing.T, cl *http.Client) {
	t.Helper()
	if body, err := c.post(cl); err != nil {
		t.Fatalf("POST through %s proxy: %v", c.proxy.Mode(), err)
	} else if !strings.HasPrefix(body, "hit ") {
		t.Fatalf("POST answered %q", body)
	}
}

// mustFail posts and expects an error; it returns it.
func (c *counter) mustFail(t *testing.T, cl *http.Client) error {
	t.Helper()
	body, err := c.post(cl)
	if err == nil {
		t.Fatalf("POST through %s proxy answered %q, want an error", c.proxy.Mode(), body)
	}
	return err
}

// waitHits waits until the server counted n POSTs: a dropped reply may be cut while the
// server is still at work.
func (c *counter) waitHits(t *testing.T, n int64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d hits", n), func() bool { return c.hits.Load() == n })
	time.Sleep(10 * time.Millisecond) // and no more than n: a retry would show here
	if got := c.hits.Load(); got != n {
		t.Fatalf("server counted %d hits, want %d", got, n)
	}
}

func TestProxyDropReplies(t *testing.T) {
	for _, kind := range serverKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			c := newCounter(t, kind)
			cl := c.client(30 * time.Second)
			c.mustPost(t, cl) // a keep-alive connection, open before the fault
			c.waitHits(t, 1)

			// The open connection is selected; its next reply is dropped after the work.
			c.proxy.DropReplies(1, mrand.New(mrand.NewPCG(1, 2)))
			c.mustFail(t, cl)
			c.waitHits(t, 2)
			// A new connection is selected at accept: its handshake passes, its reply does not.
			c.mustFail(t, cl)
			c.waitHits(t, 3)
			if s := c.proxy.Stats(); s.DroppedReplies != 2 || s.Connections != 2 {
				t.Fatalf("stats %+v, want 2 dropped replies on 2 connections", s)
			}

			c.proxy.Pass()
			c.mustPost(t, cl)
			c.waitHits(t, 4)
			c.mustPost(t, cl) // over the same keep-alive connection
			c.waitHits(t, 5)
			if s := c.proxy.Stats(); s.Connections != 3 || s.BytesToServer == 0 || s.BytesToClient == 0 {
				t.Fatalf("stats %+v, want 3 connections and bytes both ways", s)
			}

			// Per request: the open keep-alive connection's next reply goes.
			c.proxy.DropRepliesPerRequest(1, nil)
			c.mustFail(t, cl)
			c.waitHits(t, 6)
			c.proxy.DropRepliesPerRequest(0, nil)
			c.mustPost(t, cl)
			c.waitHits(t, 7)
			c.mustPost(t, cl)
			c.waitHits(t, 8)
			if s := c.proxy.Stats(); s.DroppedReplies != 3 {
				t.Fatalf("stats %+v, want 3 dropped replies", s)
			}
		})
	}
}

// TestProxyDropRepliesPerRequestShare checks that per-request drops hit a share of the
// requests of one keep-alive client, with a seeded source.
func TestProxyDropRepliesPerRequestShare(t *testing.T) {
	c := newCounter(t, "tls13-mtls")
	cl := c.client(30 * time.Second)
	c.proxy.DropRepliesPerRequest(0.5, mrand.New(mrand.NewPCG(7, 7)))
	const n = 40
	failed := 0
	for range n {
		if _, err := c.post(cl); err != nil {
			failed++
		}
	}
	c.waitHits(t, n) // every request reached the server, answered or not
	s := c.proxy.Stats()
	if failed == 0 || failed == n || int64(failed) != s.DroppedReplies {
		t.Fatalf("%d of %d requests failed, stats %+v: want some, not all, each a dropped reply", failed, n, s)
	}
}

func TestProxyBlackhole(t *testing.T) {
	for _, kind := range serverKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			c := newCounter(t, kind)
			cl := c.client(300 * time.Millisecond)
			c.mustPost(t, cl)
			c.waitHits(t, 1)

			c.proxy.Blackhole()
			// The open connection: its request is swallowed.
			requireTimeout(t, c.mustFail(t, cl))
			// A new connection (the timeout closed the old one): accepted, never forwarded.
			requireTimeout(t, c.mustFail(t, c.client(300*time.Millisecond)))
			c.waitHits(t, 1)
			if s := c.proxy.Stats(); s.Swallowed == 0 {
				t.Fatalf("stats %+v, want swallowed bytes", s)
			}

			c.proxy.Pass()
			c.mustPost(t, cl)
			c.waitHits(t, 2)
		})
	}
}

// TestProxyBlackholeKeepsIdleConnections checks that a partition during which a keep-alive
// connection carried nothing leaves it usable, as TCP would.
func TestProxyBlackholeKeepsIdleConnections(t *testing.T) {
	c := newCounter(t, "http")
	cl := c.client(30 * time.Second)
	c.mustPost(t, cl)
	c.proxy.Blackhole()
	c.proxy.Pass()
	c.mustPost(t, cl)
	c.waitHits(t, 2)
	if s := c.proxy.Stats(); s.Connections != 1 {
		t.Fatalf("stats %+v, want the one connection reused", s)
	}
}

func TestProxyRefuse(t *testing.T) {
	for _, kind := range serverKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			c := newCounter(t, kind)
			cl := c.client(30 * time.Second)
			c.mustPost(t, cl)

			c.proxy.Refuse()
			// An error, and not the client's timeout: the connection was reset at once.
			err := c.mustFail(t, cl)
			if isTimeout(err) {
				t.Fatalf("refused connection timed out: %v", err)
			}
			err = c.mustFail(t, c.client(30*time.Second))
			if isTimeout(err) {
				t.Fatalf("refused connection timed out: %v", err)
			}
			c.waitHits(t, 1)

			c.proxy.Pass()
			c.mustPost(t, cl)
			c.waitHits(t, 2)
		})
	}
}

// TestProxyHalfClose checks that a client that shuts its write side still gets its answer,
// as with a direct connection.
func TestProxyHalfClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c) // until the client's half-close
		_, _ = c.Write([]byte(strings.ToUpper(string(b))))
	}()
	p, err := NewProxy(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(conn)
	if err != nil || string(got) != "HELLO" {
		t.Fatalf("read %q, %v; want HELLO", got, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func requireTimeout(t *testing.T, err error) {
	t.Helper()
	if !isTimeout(err) {
		t.Fatalf("want a timeout, got %v", err)
	}
}

// waitFor polls cond until it holds; the deadline only keeps a broken test from hanging.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// clientCA makes a CA and a client certificate it signed, for mutual TLS.
func clientCA(t *testing.T) (*x509.CertPool, *tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "faults test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "slave-1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return pool, &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
