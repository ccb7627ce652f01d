package pki

import (
	"crypto"
	"fmt"

	"golang.org/x/crypto/ssh"
)

// SSHFingerprint is the SSH fingerprint (SHA256:…, as `ssh-keygen -l` prints it) of a
// certificate's public key. imec's client logs in to jobs with the key of the user's login
// certificate (`ssh -i <login pem>`), so the master records this fingerprint with every user
// certificate it issues and accepts the key for SSH while the certificate is valid.
func SSHFingerprint(pub crypto.PublicKey) (string, error) {
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("certificate key as an SSH key: %w", err)
	}
	return ssh.FingerprintSHA256(k), nil
}
