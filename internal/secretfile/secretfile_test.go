package secretfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // the umask does not decide the test
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name, path, want, err string
	}{
		{"0600 with newline", write("a", "s3cret\n", 0o600), "s3cret", ""},
		{"0400 without newline", write("b", "s3cret", 0o400), "s3cret", ""},
		{"CRLF", write("c", "s3cret\r\n", 0o600), "s3cret", ""},
		{"inner newlines kept", write("d", "k1\nk2\n", 0o600), "k1\nk2", ""},
		{"group readable", write("e", "s3cret", 0o640), "", "chmod 600"},
		{"world readable", write("f", "s3cret", 0o644), "", "readable by others"},
		{"empty", write("g", "\n", 0o600), "", "empty"},
		{"too large", write("h", strings.Repeat("x", MaxSize+1), 0o600), "", "larger than"},
		{"missing", filepath.Join(dir, "nope"), "", "no such file"},
		{"a folder", dir, "", "not a regular file"},
	}
	for _, c := range cases {
		got, err := Read(c.path)
		if got != c.want || (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: %q, %v; want %q, error containing %q", c.name, got, err, c.want, c.err)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: the error shows the secret: %v", c.name, err)
		}
	}
	if _, err := Read(filepath.Join(dir, "e")); !errors.Is(err, ErrPermissions) {
		t.Errorf("group readable: %v, want ErrPermissions", err)
	}
}

func TestWriteAndEither(t *testing.T) {
	p := filepath.Join(t.TempDir(), "s")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, "new-secret"); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	for _, c := range []struct{ value, file, want, err string }{
		{"direct", "", "direct", ""},
		{"", p, "new-secret", ""},
		{"", "", "", ""},
		{"direct", p, "", "not both"},
	} {
		got, err := Either("--password", c.value, c.file)
		if got != c.want || (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("Either(%q, %q) = %q, %v", c.value, c.file, got, err)
		}
	}
}
