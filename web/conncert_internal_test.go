package web

import (
	"context"
	"crypto/x509"
	"math/big"
	"net/url"
	"testing"

	"github.com/opengpulab/gpulab/pki"
)

// A connection reads its certificate once; another certificate (a new connection's, or one
// served without a connection: no connCert) is read anew.
func TestCertFactsReadOncePerConnection(t *testing.T) {
	cert := func(serial int64, urn string) *x509.Certificate {
		u, err := url.Parse(urn)
		if err != nil {
			t.Fatal(err)
		}
		c := &x509.Certificate{SerialNumber: big.NewInt(serial), URIs: []*url.URL{u}}
		c.Subject.CommonName = "someone"
		return c
	}
	alice, bob := cert(41, "urn:publicid:IDN+test+user+alice"), cert(42, "urn:publicid:IDN+test+user+bob")
	ctx := withConnCert(context.Background(), nil)
	first := certFactsOf(ctx, alice)
	if first.serial != "41" || first.id.URN != "urn:publicid:IDN+test+user+alice" || first.id.Kind != pki.KindUser || first.err != nil {
		t.Fatalf("alice's facts: %+v", first)
	}
	if again := certFactsOf(ctx, alice); again != first {
		t.Fatal("the same certificate on the same connection was read again")
	}
	if other := certFactsOf(ctx, bob); other == first || other.serial != "42" || other.id.URN != "urn:publicid:IDN+test+user+bob" {
		t.Fatalf("another certificate got %+v", other)
	}
	if fresh := certFactsOf(withConnCert(context.Background(), nil), alice); fresh == first || fresh.serial != "41" {
		t.Fatalf("another connection shared the first's facts: %+v", fresh)
	}
	a, b := certFactsOf(context.Background(), alice), certFactsOf(context.Background(), alice)
	if a == b || a.serial != "41" {
		t.Fatal("without a connection the facts were kept")
	}
	if bad := certFactsOf(ctx, &x509.Certificate{SerialNumber: big.NewInt(7)}); bad.err == nil {
		t.Fatal("a certificate without a URI read as an identity")
	}
}
