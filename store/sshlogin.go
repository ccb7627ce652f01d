package store

import (
	"context"
	"fmt"
)

// SSHLogin is what the master's SSH jump host needs to let a user through, read afresh at
// every login and every forward so that a disabled user, a removed key or an ended job is
// refused at once.
type SSHLogin struct {
	UserID   int64 `db:"id"`
	Disabled bool  `db:"disabled"`
	// Keys are the public keys (authorized_keys form, unchecked) the user may log in with: his
	// profile keys and the sshPubKeys of his running jobs.
	Keys []string
	// CertKeys are the SSH fingerprints (SHA256:…) of his valid login certificates' keys, so
	// that `ssh -i login.pem` (what imec's client runs) passes the jump host too.
	CertKeys []string
	// Targets are the SSH endpoints of the slaves his RUNNING jobs run on: the only places
	// the jump host forwards him to.
	Targets []SSHTarget
}

// SSHTarget is a slave's SSH endpoint.
type SSHTarget struct {
	Host string `db:"ssh_host"`
	Port int    `db:"ssh_port"`
}

const (
	sqlSSHLoginUser = `SELECT id, disabled FROM users WHERE name = $1`
	sqlSSHLoginKeys = `SELECT public_key FROM ssh_keys WHERE user_id = $1
UNION
SELECT jsonb_array_elements_text(request->'extra'->'sshPubKeys') FROM jobs
WHERE user_id = $1 AND status = 'RUNNING' AND jsonb_typeof(request->'extra'->'sshPubKeys') = 'array'`
	sqlSSHLoginCertKeys = `SELECT ssh_fingerprint FROM certificates WHERE kind = 'user' AND owner = $1
AND ssh_fingerprint IS NOT NULL AND revoked_at IS NULL AND not_after > now()`
	sqlSSHLoginTargets = `SELECT DISTINCT s.ssh_host, s.ssh_port FROM jobs j JOIN slaves s ON s.name = j.assigned_slave_name
WHERE j.user_id = $1 AND j.status = 'RUNNING' AND s.ssh_host <> '' AND s.ssh_port > 0 AND NOT s.disabled
ORDER BY 1, 2`
)

// GetSSHLogin reads a user's SSH login facts by user name. ErrNotFound for an unknown user.
func (s *Store) GetSSHLogin(ctx context.Context, userName string) (SSHLogin, error) {
	var l SSHLogin
	if err := s.q.GetContext(ctx, &l, sqlSSHLoginUser, userName); err != nil {
		return l, mapErr(err, fmt.Sprintf("get ssh login of user %q", userName))
	}
	if err := s.q.SelectContext(ctx, &l.Keys, sqlSSHLoginKeys, l.UserID); err != nil {
		return l, mapErr(err, "list ssh login keys of user "+userName)
	}
	if err := s.q.SelectContext(ctx, &l.CertKeys, sqlSSHLoginCertKeys, userName); err != nil {
		return l, mapErr(err, "list certificate keys of user "+userName)
	}
	if err := s.q.SelectContext(ctx, &l.Targets, sqlSSHLoginTargets, l.UserID); err != nil {
		return l, mapErr(err, "list ssh targets of user "+userName)
	}
	return l, nil
}
