package pki

import (
	"testing"
	"time"
)

// Certificates issued without a lifetime get the short defaults: 90 days for users, a year for
// slaves (a leaked one does not stay good for years).
func TestDefaultLifetimes(t *testing.T) {
	ca, err := NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kind Kind
		urn  string
		want time.Duration
	}{
		{KindUser, "urn:publicid:IDN+test+user+alice", 90 * 24 * time.Hour},
		{KindSlave, "urn:publicid:IDN+test+slave+gpu1", 365 * 24 * time.Hour},
	} {
		cert, _, err := ca.IssueClient(ClientSpec{Kind: tc.kind, URN: tc.urn, Name: "x"})
		if err != nil {
			t.Fatal(err)
		}
		if life := time.Until(cert.NotAfter); life > tc.want || life < tc.want-time.Minute {
			t.Errorf("%s certificate lives %s, want %s", tc.kind, life, tc.want)
		}
	}
	cert, _, err := ca.IssueClient(ClientSpec{Kind: KindUser, URN: "urn:publicid:IDN+test+user+bob", Name: "bob", Validity: time.Hour})
	if err != nil || time.Until(cert.NotAfter) > time.Hour {
		t.Errorf("an explicit lifetime is not kept: %v %v", cert.NotAfter, err)
	}
}
