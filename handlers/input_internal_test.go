package handlers

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestReadBody: a body is read whole whatever its announced length says of it (true, short of
// it, beyond it, unknown), through buffers of its own size where the length is known and small;
// one beyond the limit is a 413 naming the limit.
func TestReadBody(t *testing.T) {
	const limit = 200 << 10
	for _, size := range []int{0, 1, 511, 512, 513, 3000, prealloc - 1, prealloc, prealloc + 1, limit} {
		body := bytes.Repeat([]byte("x"), size)
		for _, announced := range []int64{int64(size), -1, int64(size) / 2, int64(size) * 3} {
			r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
			r.ContentLength = announced
			got, err := readBody(httptest.NewRecorder(), r, limit)
			if err != nil || !bytes.Equal(got, body) {
				t.Errorf("%d bytes announced as %d: read %d bytes, %v", size, announced, len(got), err)
			}
			if announced == int64(size) && size < prealloc && cap(got) != size+1 {
				t.Errorf("%d bytes announced as such: read into %d bytes, want %d", size, cap(got), size+1)
			}
		}
	}
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(strings.Repeat("x", limit+1)))
	_, err := readBody(httptest.NewRecorder(), r, limit)
	var he *Error
	if !errors.As(err, &he) || he.Status != http.StatusRequestEntityTooLarge || !strings.Contains(he.Message, "204800") {
		t.Errorf("a body beyond the limit: %v, want 413 naming the limit", err)
	}
}

// BenchmarkReadBody reads a heartbeat-sized body of announced length.
func BenchmarkReadBody(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 3000)
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		if _, err := readBody(nil, r, maxProtocolBody); err != nil {
			b.Fatal(err)
		}
	}
}
