package web

import (
	"bytes"
	"net/http/httptest"
	"testing"
)

// writeSizes records the size of every write it is given.
type writeSizes struct {
	*httptest.ResponseRecorder
	sizes []int
}

func (w *writeSizes) Write(b []byte) (int, error) {
	w.sizes = append(w.sizes, len(b))
	return w.ResponseRecorder.Write(b)
}

// An HTTP/2 response is handed on in writes of at most 4 KiB (so that its DATA frames, and the
// buffer each connection keeps of its largest frame, stay that small), whole, in order and
// counted; an HTTP/1.1 response as the handler wrote it.
func TestResponseWritesInPieces(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789"), 1000)
	for _, h2 := range []bool{true, false} {
		w := &writeSizes{ResponseRecorder: httptest.NewRecorder()}
		rec := &statusRecorder{ResponseWriter: w, pieces: h2}
		if n, err := rec.Write(body); n != len(body) || err != nil {
			t.Fatalf("HTTP/2 %v: wrote %d, %v", h2, n, err)
		}
		if !bytes.Equal(w.Body.Bytes(), body) || rec.bytes != int64(len(body)) {
			t.Errorf("HTTP/2 %v: %d bytes arrived, %d counted, want %d", h2, w.Body.Len(), rec.bytes, len(body))
		}
		want := []int{len(body)}
		if h2 {
			want = []int{pieceSize, pieceSize, len(body) - 2*pieceSize}
		}
		if len(w.sizes) != len(want) || w.sizes[0] != want[0] || w.sizes[len(want)-1] != want[len(want)-1] {
			t.Errorf("HTTP/2 %v: writes of %v bytes, want %v", h2, w.sizes, want)
		}
	}
}
