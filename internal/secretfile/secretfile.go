// Package secretfile reads a secret (a password, a client secret, a token, keys) from a file,
// so that it never has to be put on a command line, where every user of the machine reads it
// with ps, or in a unit file's environment, which service managers log.
//
// The file must be a regular file readable by its owner only (mode 0600 or 0400): a secret
// that anybody on the machine can read is refused, with the chmod that fixes it. One trailing
// newline (what echo and editors add) is not part of the secret.
package secretfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// MaxSize bounds a secret file: secrets are short, and a flag naming a large file by mistake
// (a log, a device) must not be read whole.
const MaxSize = 64 << 10

// Read returns the secret in the file at path.
func Read(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("secret file: %w", err)
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("secret file %s: %w", path, err)
	}
	if err := check(path, fi.Mode()); err != nil {
		return "", err
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return "", fmt.Errorf("secret file %s: %w", path, err)
	}
	if len(b) > MaxSize {
		return "", fmt.Errorf("secret file %s is larger than %d bytes: is it the right file?", path, MaxSize)
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if strings.TrimSpace(s) == "" {
		return "", fmt.Errorf("secret file %s is empty", path)
	}
	return s, nil
}

// ErrPermissions: the file can be read by others than its owner.
var ErrPermissions = errors.New("readable by others than its owner")

// check refuses what is not a regular file readable by its owner only.
func check(path string, mode os.FileMode) error {
	if !mode.IsRegular() {
		return fmt.Errorf("secret file %s is not a regular file", path)
	}
	if mode.Perm()&0o077 != 0 {
		return fmt.Errorf("secret file %s is %w (mode %04o): chmod 600 %s", path, ErrPermissions, mode.Perm(), path)
	}
	return nil
}

// Write stores a secret in a new file readable by its owner only (0600), replacing one there.
func Write(path, secret string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("secret file: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("secret file: %w", err)
	}
	if _, err := f.WriteString(secret + "\n"); err != nil {
		_ = f.Close()
		return fmt.Errorf("secret file %s: %w", path, err)
	}
	return f.Close()
}

// Either returns the secret given directly (value) or read from file; giving both is an error,
// as it is ambiguous which one the operator meant. name is the option's name, for errors.
func Either(name, value, file string) (string, error) {
	switch {
	case value != "" && file != "":
		return "", fmt.Errorf("give %s or %s-file, not both", name, name)
	case file != "":
		s, err := Read(file)
		if err != nil {
			return "", fmt.Errorf("%s-file: %w", name, err)
		}
		return s, nil
	}
	return value, nil
}
