package web

import (
	"context"
	"crypto/x509"
	"net"
	"sync/atomic"

	"github.com/opengpulab/gpulab/pki"
)

// connCert remembers what one TLS connection's client certificate says. The certificate a
// connection was verified with is the same for every request on it (the same value: the
// TLS stack hands each request its connection's chains), while reading it anew at each
// request (its serial number as text, its URI and names) cost 4 % of the master's own CPU
// for a GET jobs/{id} (bench/ B4). Only what the certificate itself says is kept: whether
// it is revoked, and whether its user or slave may still call, is read at every request
// (callerFromCert).
type connCert struct {
	facts atomic.Pointer[certFacts] // HTTP/2 serves a connection's requests at once
}

// certFacts is what callerFromCert reads of a certificate.
type certFacts struct {
	cert   *x509.Certificate
	serial string
	id     pki.Identity
	err    error // the certificate names no identity (pki.IdentityOf)
}

type connCertKey struct{}

// withConnCert is the http.Server's ConnContext: each connection gets its own connCert.
func withConnCert(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, connCertKey{}, &connCert{})
}

// certFactsOf reads cert, or takes what its connection read of it before. A request served
// outside Serve (no connCert in its context) reads it every time.
func certFactsOf(ctx context.Context, cert *x509.Certificate) *certFacts {
	cc, _ := ctx.Value(connCertKey{}).(*connCert)
	if cc != nil {
		if f := cc.facts.Load(); f != nil && f.cert == cert {
			return f
		}
	}
	f := &certFacts{cert: cert, serial: cert.SerialNumber.String()}
	f.id, f.err = pki.IdentityOf(cert)
	if cc != nil {
		cc.facts.Store(f)
	}
	return f
}
