package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/store"
)

// A login finds its account by issuer and subject only: a new subject under a taken name is
// refused (nothing written), an account without a login takes a login with its verified
// e-mail, an unverified e-mail takes nothing, and a linked login is found again.
func TestResolveLoginNeverMergesByName(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	urn := func(n string) string { return "urn:publicid:IDN+test+user+" + n }
	a1 := store.LoginUser{Issuer: "https://uni-a.example", Subject: "a-1", Name: "alice", Email: "alice@uni-a.example", EmailVerified: true}
	u, outcome, err := st.ResolveLogin(ctx, a1, urn("alice"))
	if err != nil || outcome != store.LoginCreated || u.Subject != "a-1" || !u.EmailVerified {
		t.Fatalf("first alice: %+v %v %v", u, outcome, err)
	}
	if again, outcome, err := st.ResolveLogin(ctx, a1, urn("alice")); err != nil || outcome != store.LoginKnown || again.ID != u.ID {
		t.Fatalf("first alice again: %+v %v %v", again, outcome, err)
	}
	// Same name, same (verified) e-mail even, another provider: refused while the account has
	// a login.
	a2 := store.LoginUser{Issuer: "https://uni-b.example", Subject: "b-7", Name: "alice", Email: "alice@uni-a.example", EmailVerified: true}
	if got, outcome, err := st.ResolveLogin(ctx, a2, urn("alice")); err != nil || outcome != store.LoginNameTaken || got.ID != u.ID {
		t.Fatalf("second alice: %+v %v %v", got, outcome, err)
	}
	if _, err := st.GetUserByLogin(ctx, a2.Issuer, a2.Subject); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused login was stored: %v", err)
	}
	// An account made by hand (no login): an unverified e-mail does not take it, a verified one does.
	if _, err := st.UpsertUser(ctx, urn("bob"), "bob", "bob@example.org", false); err != nil {
		t.Fatal(err)
	}
	b := store.LoginUser{Issuer: "https://uni-a.example", Subject: "b-1", Name: "bob", Email: "bob@example.org"}
	if _, outcome, err := st.ResolveLogin(ctx, b, urn("bob")); err != nil || outcome != store.LoginNameTaken {
		t.Fatalf("bob with an unverified e-mail: %v %v", outcome, err)
	}
	b.EmailVerified = true
	if got, outcome, err := st.ResolveLogin(ctx, b, urn("bob")); err != nil || outcome != store.LoginLinkedByEmail || got.Subject != "b-1" {
		t.Fatalf("bob with a verified e-mail: %+v %v %v", got, outcome, err)
	}
	// An admin links the second alice; the login cannot be linked to two users.
	if err := st.LinkLogin(ctx, "alice", a2.Issuer, a2.Subject); err != nil {
		t.Fatal(err)
	}
	if err := st.LinkLogin(ctx, "bob", a2.Issuer, a2.Subject); !errors.Is(err, store.ErrLoginTaken) {
		t.Fatalf("linking a login twice: %v", err)
	}
	if got, outcome, err := st.ResolveLogin(ctx, a2, urn("alice")); err != nil || outcome != store.LoginKnown || got.ID != u.ID {
		t.Fatalf("second alice once linked: %+v %v %v", got, outcome, err)
	}
}

// A certificate's state: valid, expired (recorded end passed), revoked (kept at the first time).
func TestCertificateStates(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	now := time.Now()
	if err := st.RecordCertificate(ctx, "1", store.CertUser, "alice", now.Add(time.Hour), ""); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordCertificate(ctx, "2", store.CertUser, "alice", now.Add(-time.Second), ""); err != nil {
		t.Fatal(err)
	}
	for serial, want := range map[string]string{"1": "valid", "2": "expired"} {
		if c, err := st.GetCertificate(ctx, serial); err != nil || c.State(time.Now()) != want {
			t.Errorf("certificate %s: %+v %v, want %s", serial, c, err, want)
		}
	}
	first, err := st.RevokeCertificate(ctx, "1")
	if err != nil || first.State(time.Now()) != "revoked" {
		t.Fatalf("revoke: %+v %v", first, err)
	}
	if again, err := st.RevokeCertificate(ctx, "1"); err != nil || !again.RevokedAt.Time.Equal(first.RevokedAt.Time) {
		t.Fatalf("revoking twice changed the time: %+v %v", again, err)
	}
	if _, err := st.RevokeCertificate(ctx, "3"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("revoking an unknown serial: %v", err)
	}
	if cs, err := st.ListCertificates(ctx, store.CertUser, "alice"); err != nil || len(cs) != 2 {
		t.Fatalf("alice's certificates: %+v %v", cs, err)
	}
}
