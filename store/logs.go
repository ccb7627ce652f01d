package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
)

// AppendJobLog stores the next chunk of a job's log. seq must be the next number: a chunk sent
// twice (a retry) is ErrConflict and one whose predecessor is missing is ErrLogGap; neither
// changes anything, so logs are kept whole and in order.
func (s *Store) AppendJobLog(ctx context.Context, uuid string, seq int, data []byte) error {
	_, err := s.AppendLog(ctx, LogChunk{JobUUID: uuid, Seq: seq, Data: data})
	return err
}

// LogCapMarker ends a log the master cut at its limit.
const LogCapMarker = "\n[gpulab: the master keeps at most %d bytes of a job's log: the rest is dropped]\n"

// LogChunk is a chunk of a job's log to append (AppendLog).
type LogChunk struct {
	JobUUID string
	Seq     int
	Data    []byte
	// Limit caps the log's size (0: none), in case a slave sends more than its own limit: the
	// chunk that crosses it is cut and ends with LogCapMarker, later chunks are kept empty, so
	// their sequence stays whole and the slave goes on as usual.
	Limit int64
	// Slave, when set, is the slave sending the chunk: it is appended only if the job is that
	// slave's (as a slave's change, Change.Slave) in Attempt; CertSerial, when set, is the
	// slave's certificate, read in the same statement.
	Slave      string
	Attempt    int
	CertSerial string
}

// appendLog appends a chunk after the one before it (seq - 1) and, for a slave's chunk, checks
// in the same statement that the job is the slave's (slavePlace): a slave's log calls read the
// job's place in a statement before, and a job writing output sends a chunk every LogFlush
// (250 ms) while it runs, the commonest call of a busy real cluster.
var appendLog = `WITH input AS (SELECT $1::uuid AS uuid, $6::text AS slave, $7::text AS serial, 1::bigint AS i), ` + slavePlace("") + `, ins AS (
    INSERT INTO job_logs (job_uuid, seq, start_offset, data)
    SELECT $1, $2, p.size, CASE
        WHEN $4::bigint <= 0 OR p.size + length($3::bytea) <= $4::bigint THEN $3::bytea
        WHEN p.size >= $4::bigint THEN ''::bytea
        ELSE substring($3::bytea FROM 1 FOR ($4::bigint - p.size)::int) || $5::bytea END
    FROM (SELECT COALESCE((SELECT start_offset + length(data) FROM job_logs WHERE job_uuid = $1 AND seq = $2 - 1), 0) AS size) p
    WHERE ($2 = 0 OR EXISTS (SELECT 1 FROM job_logs WHERE job_uuid = $1 AND seq = $2 - 1))
      AND (SELECT ok FROM may) AND ($6::text = '' OR EXISTS (SELECT FROM old WHERE old.attempt = $8))
    RETURNING 1
)
SELECT cert.state AS cert_state, o.status, o.attempt, COALESCE(o.assigned_slave_name, '') AS slave, o.slave_disabled,
    EXISTS (SELECT FROM ins) AS appended
FROM cert LEFT JOIN old o ON true`

// ErrOtherAttempt is a slave's log chunk refused because the job is at another attempt than
// the chunk's: the slave lost the job (AppendLog gives the job's place with it).
var ErrOtherAttempt = errors.New("the job is at another attempt")

// AppendLog stores the next chunk of a job's log (see AppendJobLog) and returns where the job
// is. A slave's chunk (c.Slave) is refused first for its certificate (*CertificateRefusedError),
// then as a slave's change is (*WrongSlaveError), then for another attempt (ErrOtherAttempt);
// none of them appends anything.
func (s *Store) AppendLog(ctx context.Context, c LogChunk) (JobPlace, error) {
	marker := []byte(fmt.Sprintf(LogCapMarker, c.Limit))
	what := fmt.Sprintf("append log chunk %d of job %s", c.Seq, c.JobUUID)
	var row struct {
		slaveRow
		Appended bool `db:"appended"`
	}
	if err := s.q.GetContext(ctx, &row, appendLog, c.JobUUID, c.Seq, c.Data, c.Limit, marker, c.Slave, c.CertSerial, c.Attempt); err != nil {
		return JobPlace{}, mapErr(err, what)
	}
	p, found, err := row.check(c.JobUUID, c.Slave, c.CertSerial)
	if err != nil {
		return JobPlace{}, err
	}
	if c.Slave != "" && p.Attempt != c.Attempt {
		return p, fmt.Errorf("%s: %w", what, ErrOtherAttempt)
	}
	if !row.Appended {
		if !found {
			return JobPlace{}, fmt.Errorf("%s: %w", what, ErrNotFound)
		}
		return p, fmt.Errorf("%s: %w", what, ErrLogGap)
	}
	return p, nil
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
