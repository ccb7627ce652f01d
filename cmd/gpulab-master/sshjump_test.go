package main

import (
	"net"
	"testing"
)

// The advertised jump host: --ssh-advertise as given, else the first --hostnames (localhost
// when none) with the port listened on; a bad value is refused.
func TestSSHAdvertised(t *testing.T) {
	listened := &net.TCPAddr{IP: net.IPv4zero, Port: 2222}
	cases := []struct {
		advertise string
		hostnames []string
		host      string
		port      int
		bad       bool
	}{
		{"", nil, "localhost", 2222, false},
		{"", []string{"gpulab.example.org", "10.0.0.1"}, "gpulab.example.org", 2222, false},
		{"jump.example.org:22", []string{"x"}, "jump.example.org", 22, false},
		{"[::1]:2200", nil, "::1", 2200, false},
		{"jump.example.org", nil, "", 0, true},
		{"jump.example.org:0", nil, "", 0, true},
		{":22", nil, "", 0, true},
	}
	for _, tc := range cases {
		got, err := sshAdvertised(tc.advertise, tc.hostnames, listened)
		if tc.bad {
			if err == nil {
				t.Errorf("%q: accepted as %+v", tc.advertise, got)
			}
			continue
		}
		if err != nil || got.Host != tc.host || got.Port != tc.port {
			t.Errorf("%q %v: %+v %v", tc.advertise, tc.hostnames, got, err)
		}
	}
}
