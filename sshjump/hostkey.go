package sshjump

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/crypto/ssh"
)

// HostKeyFile is the master's SSH host key in its data folder, made once: a host key that
// changed would make every client's known_hosts entry a warning users learn to ignore.
const HostKeyFile = "ssh_host_ed25519_key"

// LoadOrCreateHostKey reads the ed25519 host key in dir, making it (mode 0600) the first time.
// created says it was made now.
func LoadOrCreateHostKey(dir string) (signer ssh.Signer, created bool, err error) {
	path := filepath.Join(dir, HostKeyFile)
	data, err := os.ReadFile(path)
	if err == nil {
		signer, err = ssh.ParsePrivateKey(data)
		if err != nil {
			return nil, false, fmt.Errorf("read ssh host key %s: %w", path, err)
		}
		return signer, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, fmt.Errorf("read ssh host key: %w", err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, false, fmt.Errorf("make ssh host key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "gpulab master")
	if err != nil {
		return nil, false, fmt.Errorf("encode ssh host key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("make data folder for the ssh host key: %w", err)
	}
	// O_EXCL: two masters starting on one folder keep the first key, not two.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return LoadOrCreateHostKey(dir)
	}
	if err != nil {
		return nil, false, fmt.Errorf("write ssh host key: %w", err)
	}
	if err := pem.Encode(f, block); err != nil {
		_ = f.Close()
		return nil, false, fmt.Errorf("write ssh host key %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return nil, false, fmt.Errorf("write ssh host key %s: %w", path, err)
	}
	signer, err = ssh.NewSignerFromKey(priv)
	return signer, true, err
}

// AuthorizedKey is a public key in authorized_keys form without the newline.
func AuthorizedKey(k ssh.PublicKey) string {
	b := ssh.MarshalAuthorizedKey(k)
	return string(b[:len(b)-1])
}
