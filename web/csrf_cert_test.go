package web_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestCertificateCSRF: a browser with an installed client certificate presents it to any page
// that posts to the master. Over real TLS with a real certificate: a cross-site POST is
// refused (403) and stores nothing; a same-origin POST and a script's POST (no browser
// headers, as both gpulab-clis send) submit the job.
func TestCertificateCSRF(t *testing.T) {
	w := newWorld(t)
	own := w.m.URL
	cases := []struct {
		name   string
		header []string
		want   int
	}{
		{"cross-site form post", []string{"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site", "Content-Type", "text/plain"}, http.StatusForbidden},
		{"cross-site, Origin only", []string{"Origin", "https://evil.example"}, http.StatusForbidden},
		{"same-site sibling", []string{"Origin", "https://x.127.0.0.1", "Sec-Fetch-Site", "same-site"}, http.StatusForbidden},
		{"same-origin", []string{"Origin", own, "Sec-Fetch-Site", "same-origin"}, http.StatusCreated},
		{"script: no browser headers", nil, http.StatusCreated},
	}
	created := 0
	for _, c := range cases {
		status, data, _ := w.m.Do(w.alice, "POST", v31+"/jobs", strings.NewReader(helloWorld), c.header...)
		if status != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, status, data, c.want)
		}
		if status == http.StatusCreated {
			created++
		}
	}
	if n := w.jobCount(t); n != created {
		t.Fatalf("%d jobs stored, want %d (a refused request stored one)", n, created)
	}
}
