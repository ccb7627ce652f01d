package web_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/web"
)

// Slow and greedy clients: a body or headers sent a byte at a time, idle connections, too many
// connections from one address. Each is cut by the server long before it could finish; a
// slave's long poll, which waits after its body was read, is not.

// dialTLS opens a TLS connection to the master, handshake done.
func dialTLS(m *testmaster.Master) (*tls.Conn, error) {
	c, err := tls.Dial("tcp", strings.TrimPrefix(m.URL, "https://"), &tls.Config{RootCAs: m.CA.Pool(), MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// trickle writes head at once, then tail one byte per tick, until the server answers or
// closes the connection. It returns the first line of the answer ("" when the server closed
// without one), or fails the test when all of tail was sent: the server waited for it all.
func trickle(t *testing.T, c net.Conn, head, tail string) string {
	t.Helper()
	answered := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(c).ReadString('\n')
		answered <- strings.TrimSpace(line)
	}()
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatalf("write head: %v", err)
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for i := 0; i < len(tail); i++ {
		select {
		case line := <-answered:
			return line
		case <-tick.C:
		}
		if _, err := c.Write([]byte{tail[i]}); err != nil {
			return <-answered // closed by the server
		}
	}
	t.Fatalf("the server waited for all %d bytes sent one by one", len(tail))
	return ""
}

func TestSlowClients(t *testing.T) {
	m := testmaster.Start(t, testmaster.Options{MaxLongPoll: 4 * time.Second,
		Web: web.Limits{ReadHeaderTimeout: time.Second, BodyTimeout: time.Second, IdleTimeout: time.Second}})

	t.Run("body one byte at a time", func(t *testing.T) {
		c, err := dialTLS(m)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		body := `{"name": "slow", "description": "` + strings.Repeat("x", 600) + `"}`
		line := trickle(t, c, "POST "+v31+"/convert HTTP/1.1\r\nHost: master\r\nContent-Type: application/json\r\nContent-Length: "+
			strconv.Itoa(len(body))+"\r\n\r\n", body)
		if line != "" && !strings.Contains(line, "408") {
			t.Errorf("answer %q, want 408 or the connection closed", line)
		}
		t.Logf("slow body: answered %q", line)
	})

	t.Run("headers one byte at a time", func(t *testing.T) {
		c, err := dialTLS(m)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		line := trickle(t, c, "GET /healthz HTTP/1.1\r\nHost: master\r\n", "X-Slow: "+strings.Repeat("s", 600)+"\r\n\r\n")
		if line != "" && !strings.Contains(line, " 4") {
			t.Errorf("answer %q, want a 4xx or the connection closed", line)
		}
		t.Logf("slow headers: answered %q", line)
	})

	t.Run("idle connection closed", func(t *testing.T) {
		c, err := dialTLS(m)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: master\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(c)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("healthz: %d", resp.StatusCode)
		}
		// Kept alive, then nothing: the server closes it (the read ends with EOF, not our
		// deadline, which only guards the test).
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
		if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("idle connection: read %v, want EOF (closed by the server)", err)
		}
	})

	t.Run("long poll outlives the body timeout", func(t *testing.T) {
		cert := m.SlaveCert("slow1", 1)
		sc := newSlaveClient(t, m, cert)
		ctx := context.Background()
		if _, err := sc.Register(ctx, protocol.Inventory{InstanceID: "i1", CPUs: 2, MemoryMiB: 4096}); err != nil {
			t.Fatal(err)
		}
		// Asks to wait 3 s, three body timeouts: the answer comes when the wait is over.
		start := time.Now()
		if _, err := sc.Next(ctx, protocol.NextRequest{InstanceID: "i1", Wait: 3 * time.Second}); err != nil {
			t.Fatalf("long poll: %v", err)
		}
		t.Logf("long poll answered after %s", time.Since(start).Round(time.Millisecond))
	})
}

func TestConnectionsPerClient(t *testing.T) {
	const max = 4
	m := testmaster.Start(t, testmaster.Options{Web: web.Limits{MaxConnsPerIP: max, ReadHeaderTimeout: 5 * time.Minute}})
	var open []*tls.Conn
	defer func() {
		for _, c := range open {
			_ = c.Close()
		}
	}()
	for range max {
		c, err := dialTLS(m)
		if err != nil {
			t.Fatalf("connection %d of %d: %v", len(open)+1, max, err)
		}
		open = append(open, c)
	}
	// One more from the same address: closed before its TLS handshake completes.
	if c, err := dialTLS(m); err == nil {
		_ = c.Close()
		t.Fatalf("connection %d accepted, the cap is %d", max+1, max)
	}
	// Closing one frees its place (once the server has seen it closed).
	_ = open[0].Close()
	open = open[1:]
	deadline := time.Now().Add(time.Minute) // guards the test only
	for {
		c, err := dialTLS(m)
		if err == nil {
			open = append(open, c)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection after one was closed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
