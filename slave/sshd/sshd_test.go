package sshd

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"
)

func TestForwardHostOnlyReachesTheJob(t *testing.T) {
	for _, tc := range []struct {
		host, inside string
		ok           bool
	}{
		{"localhost", "127.0.0.1", true},
		{"127.0.0.1", "127.0.0.1", true},
		{"::1", "127.0.0.1", true},
		{"172.18.0.5", "172.18.0.5", true},
		{"172.18.0.6", "", false}, // another job
		{"172.18.0.1", "", false}, // the slave's side of the bridge
		{"example.org", "", false},
		{"", "", false},
	} {
		t.Run(tc.host, func(t *testing.T) {
			inside, outside, err := forwardHost(tc.host, "172.18.0.5")
			if (err == nil) != tc.ok || inside != tc.inside {
				t.Fatalf("forwardHost(%q) = %q, %q, %v; want %q ok=%v", tc.host, inside, outside, err, tc.inside, tc.ok)
			}
			if tc.ok && outside != "172.18.0.5" {
				t.Fatalf("fallback address %q", outside)
			}
		})
	}
}

func TestHostKeyIsMadeOnceAndKept(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ssh_host_ed25519_key")
	a, err := LoadOrMakeHostKey(file)
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadOrMakeHostKey(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.PublicKey().Marshal(), b.PublicKey().Marshal()) {
		t.Fatal("the host key changed between two starts")
	}
	if a.PublicKey().Type() != "ssh-ed25519" {
		t.Fatalf("host key type %s", a.PublicKey().Type())
	}
	s, err := New(Config{Advertise: "gpu1.example.org:2222", HostKeyFile: file}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := s.Endpoint()
	if err != nil {
		t.Fatal(err)
	}
	if ep.Host != "gpu1.example.org" || ep.Port != 2222 || ep.HostKey[:12] != "ssh-ed25519 " {
		t.Fatalf("endpoint %+v", ep)
	}
	for _, bad := range []string{"gpu1", "gpu1:0", "gpu1:x", fmt.Sprintf("gpu1:%d", 70000)} {
		s.cfg.Advertise = bad
		if _, err := s.Endpoint(); err == nil {
			t.Errorf("advertise %q accepted", bad)
		}
	}
}
