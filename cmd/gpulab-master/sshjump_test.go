package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/sshjump"
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

// serve --ssh-listen runs the jump host with a host key made once in the data folder, and GET
// ssh/known_hosts publishes that key under the advertised address; a restart keeps the key.
func TestServeWithSSHJump(t *testing.T) {
	db, data := testenv.PostgresURL(t), t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	sshPort := testenv.FreePort(t)
	env := map[string]string{"DATABASE_URL": db, "GPULAB_DATA_DIR": data, "GPULAB_AUTHORITY": "example.org"}
	knownHosts := func() string {
		var logs testenv.SyncBuffer
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, []string{"serve", "--listen", addr, "--scheduler-interval", "1h",
				"--ssh-listen", fmt.Sprintf("127.0.0.1:%d", sshPort), "--ssh-advertise", fmt.Sprintf("jump.test:%d", sshPort)},
				func(k string) string { return env[k] }, &logs, &logs)
		}()
		defer func() {
			cancel()
			if code := <-done; code != 0 {
				t.Errorf("serve exited %d: %s", code, logs.String())
			}
		}()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			resp, err := insecureGet("https://" + addr + "/readyz")
			if err == nil && resp.StatusCode == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the master did not get ready: %s", logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // test
		resp, err := c.Get("https://" + addr + "/api/gpulab/v3.1/ssh/known_hosts")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", sshPort), 10*time.Second)
		if err != nil {
			t.Fatalf("jump host: %v", err)
		}
		banner := make([]byte, 19)
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = io.ReadFull(conn, banner)
		_ = conn.Close()
		if string(banner) != "SSH-2.0-GPULab-jump" {
			t.Errorf("jump host banner %q", banner)
		}
		return string(body)
	}
	first := knownHosts()
	keyFile := filepath.Join(data, sshjump.HostKeyFile)
	st, err := os.Stat(keyFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("host key file: %v %v", st, err)
	}
	pemData, _ := os.ReadFile(keyFile)
	signer, err := ssh.ParsePrivateKey(pemData)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("[jump.test]:%d %s\n", sshPort, sshjump.AuthorizedKey(signer.PublicKey()))
	if first != want {
		t.Errorf("known_hosts %q, want %q", first, want)
	}
	if again := knownHosts(); again != first {
		t.Errorf("after a restart: %q, before %q", again, first)
	}
}
