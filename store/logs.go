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
	return s.AppendJobLogCapped(ctx, uuid, seq, data, 0)
}

// LogCapMarker ends a log the master cut at its limit.
const LogCapMarker = "\n[gpulab: the master keeps at most %d bytes of a job's log: the rest is dropped]\n"

// AppendJobLogCapped is AppendJobLog with a limit on the log's size (0: none), in case a slave
// sends more than its own limit: the chunk that crosses it is cut and ends with LogCapMarker,
// later chunks are kept empty, so their sequence stays whole and the slave goes on as usual.
func (s *Store) AppendJobLogCapped(ctx context.Context, uuid string, seq int, data []byte, limit int64) error {
	marker := []byte(fmt.Sprintf(LogCapMarker, limit))
	res, err := s.q.ExecContext(ctx, `INSERT INTO job_logs (job_uuid, seq, start_offset, data)
SELECT $1, $2, p.size, CASE
    WHEN $4::bigint <= 0 OR p.size + length($3::bytea) <= $4::bigint THEN $3::bytea
    WHEN p.size >= $4::bigint THEN ''::bytea
    ELSE substring($3::bytea FROM 1 FOR ($4::bigint - p.size)::int) || $5::bytea END
FROM (SELECT COALESCE((SELECT start_offset + length(data) FROM job_logs WHERE job_uuid = $1 AND seq = $2 - 1), 0) AS size) p
WHERE $2 = 0 OR EXISTS (SELECT 1 FROM job_logs WHERE job_uuid = $1 AND seq = $2 - 1)`, uuid, seq, data, limit, marker)
	what := fmt.Sprintf("append log chunk %d of job %s", seq, uuid)
	if err != nil {
		return mapErr(err, what)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return fmt.Errorf("%s: %w", what, ErrLogGap)
	}
	return nil
}

// ReadJobLog returns the log from byte offset `from` to the end, and the total log size, both
// from one statement (one snapshot): read apart, a chunk appended in between would be counted
// in the size but missing from the data, and a follower that goes on from the size (imec's
// `log -f`) would never see it.
func (s *Store) ReadJobLog(ctx context.Context, uuid string, from int64) ([]byte, int64, error) {
	var rows []struct {
		Total int64  `db:"total"`
		Start *int64 `db:"start_offset"`
		Data  []byte `db:"data"`
	}
	if err := s.q.SelectContext(ctx, &rows, `SELECT t.total, c.start_offset, c.data
FROM (SELECT COALESCE(SUM(length(data)), 0) AS total FROM job_logs WHERE job_uuid = $1) t
LEFT JOIN job_logs c ON c.job_uuid = $1 AND c.start_offset + length(c.data) > $2
ORDER BY c.seq`, uuid, from); err != nil {
		return nil, 0, mapErr(err, "read log of job "+uuid)
	}
	var size int64
	var buf bytes.Buffer
	for _, c := range rows {
		size = c.Total
		if c.Start == nil {
			continue // no chunk past from: the LEFT JOIN's one row carries the total alone
		}
		d := c.Data
		if *c.Start < from {
			d = d[from-*c.Start:]
		}
		buf.Write(d)
	}
	return buf.Bytes(), size, nil
}
