package web

import (
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestParseSessionKeys(t *testing.T) {
	k1, k2 := NewSessionKey(), NewSessionKey()
	hex1 := hex.EncodeToString(k1[:])
	cases := []struct {
		name string
		in   string
		want []SessionKey
		err  string
	}{
		{"hex", hex1, []SessionKey{k1}, ""},
		{"base64", base64.StdEncoding.EncodeToString(k1[:]), []SessionKey{k1}, ""},
		{"base64url unpadded", base64.RawURLEncoding.EncodeToString(k1[:]), []SessionKey{k1}, ""},
		{"rotation", hex1 + ", " + base64.StdEncoding.EncodeToString(k2[:]), []SessionKey{k1, k2}, ""},
		{"short", hex.EncodeToString(k1[:32]), nil, "32 bytes, want 96"},
		{"garbage", "not a key!", nil, "neither hex nor base64"},
		{"empty", " , ", nil, "no session key"},
	}
	for _, c := range cases {
		got, err := ParseSessionKeys(c.in)
		if (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.err)
			continue
		}
		if err != nil && strings.Contains(err.Error(), c.in) && c.in != " , " {
			t.Errorf("%s: the error quotes the key: %v", c.name, err)
		}
		if len(got) != len(c.want) {
			t.Errorf("%s: %d keys, want %d", c.name, len(got), len(c.want))
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s: key %d differs", c.name, i)
			}
		}
	}
}

func TestLoadOrCreateSessionKeys(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	// Several masters starting at once on one data folder agree on one key.
	const n = 8
	keys := make([][]SessionKey, n)
	created := make([]bool, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var err error
			keys[i], created[i], err = LoadOrCreateSessionKeys(dir)
			if err != nil {
				t.Errorf("load %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	made := 0
	for i := range n {
		if created[i] {
			made++
		}
		if len(keys[i]) != 1 || keys[i][0] != keys[0][0] {
			t.Fatalf("master %d got other keys", i)
		}
	}
	if made != 1 {
		t.Errorf("%d masters made the file, want 1", made)
	}
	info, err := os.Stat(filepath.Join(dir, SessionKeysFile))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("session-keys file: %v %v", info, err)
	}
	again, created2, err := LoadOrCreateSessionKeys(dir)
	if err != nil || created2 || again[0] != keys[0][0] {
		t.Fatalf("second start: %v %v", created2, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("data folder holds %d entries, want only %s", len(entries), SessionKeysFile)
	}
}

func TestSessionCookie(t *testing.T) {
	oldKey, newKey := NewSessionKey(), NewSessionKey()
	st := newSessionStore([]SessionKey{oldKey})
	r := httptest.NewRequest("GET", "https://example.com/", nil)
	sess := st.load(r)
	if !sess.IsNew {
		t.Fatal("a request without cookie has a stored session")
	}
	sess.Values[sessUser] = "urn:publicid:IDN+test+user+alice"
	w := httptest.NewRecorder()
	if err := st.save(w, r, sess); err != nil {
		t.Fatal(err)
	}
	cookies := w.Result().Cookies()
	if len(cookies) != 1 {
		t.Fatalf("cookies: %v", cookies)
	}
	c := cookies[0]
	if c.Name != "gpulab_session" || !c.HttpOnly || !c.Secure || c.SameSite != http.SameSiteLaxMode || c.Path != "/" || c.MaxAge != 12*3600 {
		t.Fatalf("cookie attributes: %+v", c)
	}
	if strings.Contains(c.Value, "alice") {
		t.Fatal("the cookie is not encrypted")
	}
	read := func(st *sessionStore, value string) string {
		r := httptest.NewRequest("GET", "https://example.com/", nil)
		r.AddCookie(&http.Cookie{Name: sessionCookie, Value: value})
		return sessionString(st.load(r), sessUser)
	}
	if got := read(st, c.Value); got != "urn:publicid:IDN+test+user+alice" {
		t.Fatalf("read back %q", got)
	}
	tampered := []byte(c.Value)
	tampered[len(tampered)/2] ^= 1
	if got := read(st, string(tampered)); got != "" {
		t.Fatalf("a tampered cookie gave %q", got)
	}
	if got := read(newSessionStore([]SessionKey{newKey}), c.Value); got != "" {
		t.Fatalf("another key decoded the cookie: %q", got)
	}
	if got := read(newSessionStore([]SessionKey{newKey, oldKey}), c.Value); got == "" {
		t.Fatal("after rotation the old key no longer decodes")
	}
}
