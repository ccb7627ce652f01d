package static

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// The embedded htmx is the npm package's file, unmodified: its checksum is the one recorded
// beside it, and its version the pinned one.
func TestHTMXIsThePinnedRelease(t *testing.T) {
	data, err := FS.ReadFile("htmx.min.js")
	if err != nil {
		t.Fatal(err)
	}
	sums, err := os.ReadFile("htmx.min.js.sha256")
	if err != nil {
		t.Fatal(err)
	}
	want, _, _ := strings.Cut(string(sums), " ")
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != want {
		t.Errorf("htmx.min.js has sha256 %s, htmx.min.js.sha256 says %s: run `make htmx`", got, want)
	}
	version, err := os.ReadFile("HTMX_VERSION")
	if err != nil {
		t.Fatal(err)
	}
	if v := strings.TrimSpace(string(version)); !strings.Contains(string(data), `version:"`+v+`"`) {
		t.Errorf("htmx.min.js is not version %s (HTMX_VERSION)", v)
	}
}

func TestHandler(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	for _, tc := range []struct {
		path, cache string
		status      int
		ctype       string
	}{
		{URL("gpulab.css"), "public, max-age=31536000, immutable", 200, "text/css"},
		{URL("htmx.min.js"), "public, max-age=31536000, immutable", 200, "javascript"},
		{Prefix + "gpulab.css", "no-cache", 200, "text/css"},
		{Prefix + "gpulab.css?v=old", "no-cache", 200, "text/css"},
		{Prefix + "nothing.css", "", 404, ""},
		{Prefix + "embed.go", "", 404, ""},
		{Prefix + "../static/embed.go", "", 404, ""},
	} {
		t.Run(tc.path, func(t *testing.T) {
			resp, err := http.Get(srv.URL + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if got := resp.Header.Get("Cache-Control"); tc.cache != "" && got != tc.cache {
				t.Errorf("Cache-Control %q, want %q", got, tc.cache)
			}
			if got := resp.Header.Get("Content-Type"); !strings.Contains(got, tc.ctype) {
				t.Errorf("Content-Type %q, want %q", got, tc.ctype)
			}
		})
	}
	if !strings.HasPrefix(URL("gpulab.css"), "/static/gpulab.css?v=") {
		t.Errorf("URL = %q", URL("gpulab.css"))
	}
}
