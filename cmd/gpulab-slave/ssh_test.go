package main

import (
	"net"
	"testing"
)

func TestSSHAdvertiseAddr(t *testing.T) {
	listen := &net.TCPAddr{IP: net.IPv4zero, Port: 2222}
	for _, tc := range []struct {
		flag, dns, want string
		ok              bool
	}{
		{"", "gpu1.example.org", "gpu1.example.org:2222", true},
		{"ssh.example.org:22", "gpu1.example.org", "ssh.example.org:22", true},
		{"ssh.example.org", "gpu1.example.org", "", false},
	} {
		got, err := sshAdvertiseAddr(tc.flag, tc.dns, listen)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("sshAdvertiseAddr(%q, %q) = %q, %v; want %q", tc.flag, tc.dns, got, err, tc.want)
		}
	}
}
