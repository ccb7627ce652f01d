package store

import (
	"bytes"
	"context"
	"fmt"
)

// AppendJobLog stores the next chunk of a job's log. seq must be the next number: a chunk sent
// twice (a retry) is ErrConflict and one whose predecessor is missing is ErrLogGap; neither
// changes anything, so logs are kept whole and in order.
func (s *Store) AppendJobLog(ctx context.Context, uuid string, seq int, data []byte) error {
	res, err := s.q.ExecContext(ctx, `INSERT INTO job_logs (job_uuid, seq, start_offset, data)
SELECT $1, $2, COALESCE((SELECT start_offset + length(data) FROM job_logs WHERE job_uuid = $1 AND seq = $2 - 1), 0), $3
WHERE $2 = 0 OR EXISTS (SELECT 1 FROM job_logs WHERE job_uuid = $1 AND seq = $2 - 1)`, uuid, seq, data)
	what := fmt.Sprintf("append log chunk %d of job %s", seq, uuid)
	if err != nil {
		return mapErr(err, what)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return fmt.Errorf("%s: %w", what, ErrLogGap)
	}
	return nil
}

// ReadJobLog returns the log from byte offset `from` to the end, and the total log size.
func (s *Store) ReadJobLog(ctx context.Context, uuid string, from int64) ([]byte, int64, error) {
	var chunks []struct {
		Start int64  `db:"start_offset"`
		Data  []byte `db:"data"`
	}
	if err := s.q.SelectContext(ctx, &chunks, `SELECT start_offset, data FROM job_logs
WHERE job_uuid = $1 AND start_offset + length(data) > $2 ORDER BY seq`, uuid, from); err != nil {
		return nil, 0, mapErr(err, "read log of job "+uuid)
	}
	var size int64
	if err := s.q.GetContext(ctx, &size, `SELECT COALESCE(SUM(length(data)), 0) FROM job_logs WHERE job_uuid = $1`, uuid); err != nil {
		return nil, 0, mapErr(err, "read log size of job "+uuid)
	}
	var buf bytes.Buffer
	for _, c := range chunks {
		d := c.Data
		if c.Start < from {
			d = d[from-c.Start:]
		}
		buf.Write(d)
	}
	return buf.Bytes(), size, nil
}
