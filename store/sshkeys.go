package store

import (
	"context"
	"fmt"
	"time"
)

// SSHKey is an SSH public key on a user's profile.
type SSHKey struct {
	ID          int64     `db:"id" json:"id"`
	UserID      int64     `db:"user_id" json:"-"`
	Name        string    `db:"name" json:"name"`
	PublicKey   string    `db:"public_key" json:"publicKey"`
	Fingerprint string    `db:"fingerprint" json:"fingerprint"`
	CreatedAt   time.Time `db:"created_at" json:"createdAt"`
}

const sshKeyColumns = `id, user_id, name, public_key, fingerprint, created_at`

// AddSSHKey stores a public key (already checked by the caller) on a user's profile.
// ErrConflict when the user has a key with this fingerprint.
func (s *Store) AddSSHKey(ctx context.Context, userID int64, name, publicKey, fingerprint string) (SSHKey, error) {
	var k SSHKey
	err := s.q.GetContext(ctx, &k, `INSERT INTO ssh_keys (user_id, name, public_key, fingerprint) VALUES ($1, $2, $3, $4)
RETURNING `+sshKeyColumns, userID, name, publicKey, fingerprint)
	return k, mapErr(err, "add ssh key")
}

// ListSSHKeys lists a user's keys, oldest first.
func (s *Store) ListSSHKeys(ctx context.Context, userID int64) ([]SSHKey, error) {
	ks := []SSHKey{}
	err := s.q.SelectContext(ctx, &ks, `SELECT `+sshKeyColumns+` FROM ssh_keys WHERE user_id = $1 ORDER BY created_at, id`, userID)
	return ks, mapErr(err, "list ssh keys")
}

// DeleteSSHKey removes one of a user's keys. ErrNotFound when the user has no key with that
// id (another user's key included), so ids cannot be probed.
func (s *Store) DeleteSSHKey(ctx context.Context, userID, id int64) error {
	res, err := s.q.ExecContext(ctx, `DELETE FROM ssh_keys WHERE id = $1 AND user_id = $2`, id, userID)
	return affectedOne(res, err, fmt.Sprintf("delete ssh key %d", id))
}
