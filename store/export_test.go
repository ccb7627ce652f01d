package store

import (
	"context"
	"database/sql"
)

// HeartbeatCommitMode runs a heartbeat's statement in a transaction of its own that it rolls
// back, and returns the synchronous_commit its commit would have had.
func (s *Store) HeartbeatCommitMode(ctx context.Context, b Beat) (string, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return "", err
	}
	defer func() { _ = tx.Rollback() }()
	args := append([]any{b.Slave, b.InstanceID, b.Usage, b.MissingGrace.Seconds(), b.SampleSecs}, usageArgs(b.Samples)...)
	var online bool
	var jobs, releases []byte
	if err := tx.QueryRowContext(ctx, heartbeat, args...).Scan(&online, &jobs, &releases); err != nil && err != sql.ErrNoRows {
		return "", err
	}
	var mode string
	err = tx.QueryRowContext(ctx, `SHOW synchronous_commit`).Scan(&mode)
	return mode, err
}
