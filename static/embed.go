// Package static holds the portal's stylesheet and scripts, embedded in the master so that a
// deployment is one binary. htmx comes unmodified from its npm package (`make htmx` fetches it
// again and checks it against htmx.min.js.sha256; HTMX_VERSION pins the version).
package static

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"sync"
)

// FS holds the files served below Prefix.
//
//go:embed gpulab.css gpulab.js htmx.min.js
var FS embed.FS

// Prefix is the URL path the files are served under.
const Prefix = "/static/"

var (
	hashOnce sync.Once
	hashes   map[string]string
)

// fileHashes computes a short content hash per file once: URLs carry it (?v=…), so browsers
// may cache a file for ever and still get a new one after an upgrade.
func fileHashes() map[string]string {
	hashOnce.Do(func() {
		hashes = map[string]string{}
		_ = fs.WalkDir(FS, ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := FS.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			hashes[p] = hex.EncodeToString(sum[:6])
			return nil
		})
	})
	return hashes
}

// URL is the address of an embedded file, versioned by its content so caches never serve a
// stale one.
func URL(name string) string {
	if h, ok := fileHashes()[name]; ok {
		return Prefix + name + "?v=" + h
	}
	return Prefix + name
}

// Handler serves the embedded files below Prefix: immutable for a year when the request names
// the current version, revalidated otherwise.
func Handler() http.Handler {
	files := http.StripPrefix(Prefix, http.FileServerFS(FS))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(path.Clean(r.URL.Path), Prefix)
		h, ok := fileHashes()[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if r.URL.Query().Get("v") == h {
			w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		} else {
			w.Header().Set("Cache-Control", "no-cache")
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		files.ServeHTTP(w, r)
	})
}
