package web

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gorilla/sessions"
)

// Browser sessions are gorilla/sessions cookies, signed (HMAC-SHA256) and encrypted
// (AES-256): the browser holds them, so any master sharing the keys serves any user and a
// restart logs nobody out. A session holds only the user's URN (the user, his admin status and
// projects are loaded afresh on every request, so changes apply at once), his CSRF token and,
// during a login, the OAuth2 flow's state, nonce, PKCE verifier and return path. Logout makes
// the browser drop the cookie; as with any stateless cookie session, a copy taken before stays
// valid until it expires (sessionMaxAge), unless the user is removed or the keys are rotated.
const (
	sessionCookie = "gpulab_session"
	// sessionMaxAge bounds a login: the cookie and the signed timestamp inside it both expire.
	sessionMaxAge = 12 * time.Hour

	// SessionKeySize is the length of a SessionKey.
	SessionKeySize = 64 + 32
	// SessionKeysFile is the file in the data folder holding generated session keys.
	SessionKeysFile = "session-keys"
)

// Keys of the session's values.
const (
	sessUser     = "user"  // the user's URN once logged in
	sessCSRF     = "csrf"  // the CSRF token of forms and htmx requests
	sessState    = "state" // OAuth2 state of a login in progress
	sessNonce    = "nonce" // OIDC nonce of a login in progress
	sessVerifier = "pkce"  // PKCE code verifier of a login in progress
	sessNext     = "next"  // where to go after the login
	sessStarted  = "start" // when the login began (Unix seconds)
)

// SessionKey is one key of the session cookies: 64 bytes to sign (HMAC-SHA256), then 32 to
// encrypt (AES-256). A fixed-size type, so a key of the wrong length cannot reach the server.
type SessionKey [SessionKeySize]byte

// sessionStore reads and writes the session cookie.
type sessionStore struct {
	cs *sessions.CookieStore
}

// newSessionStore makes the store; the first key signs and encrypts, all keys decode, so
// keys can be rotated by putting a new one first.
// With no keys, a random one is made: sessions then last as long as the process.
func newSessionStore(keys []SessionKey) *sessionStore {
	if len(keys) == 0 {
		keys = []SessionKey{NewSessionKey()}
	}
	var pairs [][]byte
	for _, k := range keys {
		pairs = append(pairs, k[:64], k[64:])
	}
	cs := sessions.NewCookieStore(pairs...)
	cs.MaxAge(int(sessionMaxAge / time.Second))
	cs.Options.Path = "/"
	cs.Options.HttpOnly = true
	cs.Options.Secure = true
	cs.Options.SameSite = http.SameSiteLaxMode
	return &sessionStore{cs: cs}
}

// load decodes the request's session. A missing, expired, tampered or undecodable cookie (keys
// rotated away) gives a new, empty session: the user simply logs in again.
func (s *sessionStore) load(r *http.Request) *sessions.Session {
	sess, err := s.cs.New(r, sessionCookie)
	if err != nil || sess == nil {
		sess = sessions.NewSession(s.cs, sessionCookie)
		opts := *s.cs.Options
		sess.Options = &opts
		sess.IsNew = true
	}
	return sess
}

// save writes the session cookie.
func (s *sessionStore) save(w http.ResponseWriter, r *http.Request, sess *sessions.Session) error {
	if err := s.cs.Save(r, w, sess); err != nil {
		return fmt.Errorf("save session: %w", err)
	}
	return nil
}

// clear empties the session and tells the browser to drop the cookie.
func (s *sessionStore) clear(w http.ResponseWriter, r *http.Request, sess *sessions.Session) error {
	for k := range sess.Values {
		delete(sess.Values, k)
	}
	sess.Options.MaxAge = -1
	return s.save(w, r, sess)
}

// sessionString reads a string value of the session ("" when absent).
func sessionString(sess *sessions.Session, key string) string {
	v, _ := sess.Values[key].(string)
	return v
}

type sessionCtxKey struct{}

// withSession keeps the decoded session in the request context, so the login handlers do not
// decode the cookie a second time.
func withSession(ctx context.Context, sess *sessions.Session) context.Context {
	return context.WithValue(ctx, sessionCtxKey{}, sess)
}

// sessionFrom returns the request's session as decoded by authenticate, else decodes it.
func (s *Server) sessionFrom(r *http.Request) *sessions.Session {
	if sess, ok := r.Context().Value(sessionCtxKey{}).(*sessions.Session); ok {
		return sess
	}
	return s.sessions.load(r)
}

// randomToken returns n random bytes, URL-safe base64 encoded.
func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

// ParseSessionKeys reads session keys from configuration: a comma-separated list of keys, each
// SessionKeySize bytes in hex or base64; the first signs and encrypts new cookies, the others
// only decode existing ones (rotation without logging everybody out).
func ParseSessionKeys(s string) ([]SessionKey, error) {
	var keys []SessionKey
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, err := decodeKey(part)
		if err != nil {
			return nil, fmt.Errorf("session key %d: %w", i+1, err)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("no session key given")
	}
	return keys, nil
}

// decodeKey decodes one key in hex or (standard or URL-safe, padded or not) base64. The
// error never quotes the key: it is a secret.
func decodeKey(s string) (SessionKey, error) {
	decoders := []func(string) ([]byte, error){hex.DecodeString, base64.StdEncoding.DecodeString,
		base64.RawStdEncoding.DecodeString, base64.URLEncoding.DecodeString, base64.RawURLEncoding.DecodeString}
	got := -1
	for _, decode := range decoders {
		b, err := decode(s)
		if err != nil {
			continue
		}
		if len(b) == SessionKeySize {
			return SessionKey(b), nil
		}
		if got < 0 {
			got = len(b)
		}
	}
	if got < 0 {
		return SessionKey{}, errors.New("neither hex nor base64")
	}
	return SessionKey{}, fmt.Errorf("%d bytes, want %d (64 to sign and 32 to encrypt)", got, SessionKeySize)
}

// NewSessionKey returns a fresh random session key.
func NewSessionKey() SessionKey {
	var k SessionKey
	_, _ = rand.Read(k[:])
	return k
}

// LoadOrCreateSessionKeys returns the session keys kept in dir/SessionKeysFile, making the
// file (mode 0600) with a fresh key when there is none. Masters sharing the data folder thus
// agree on the keys, and restarts keep users logged in. created reports a new file.
func LoadOrCreateSessionKeys(dir string) (keys []SessionKey, created bool, err error) {
	path := filepath.Join(dir, SessionKeysFile)
	data, err := os.ReadFile(path)
	if err == nil {
		keys, err := ParseSessionKeys(strings.TrimSpace(string(data)))
		if err != nil {
			return nil, false, fmt.Errorf("read %s: %w", path, err)
		}
		return keys, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, fmt.Errorf("read session keys: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("make data folder: %w", err)
	}
	// Write a temporary file and link it into place: the link fails if another master made
	// the file meanwhile, and no reader ever sees a half-written file.
	tmp, err := os.CreateTemp(dir, ".session-keys-*")
	if err != nil {
		return nil, false, fmt.Errorf("write session keys: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	key := NewSessionKey()
	_, werr := tmp.WriteString(hex.EncodeToString(key[:]) + "\n")
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(tmp.Name(), 0o600)
	}
	if werr != nil {
		return nil, false, fmt.Errorf("write session keys: %w", werr)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return LoadOrCreateSessionKeys(dir)
		}
		return nil, false, fmt.Errorf("write session keys: %w", err)
	}
	return []SessionKey{key}, true, nil
}
