package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/opengpulab/gpulab/retention"
)

// retentionFlags are the --retention-* settings and the per-job log cap of `serve`.
type retentionFlags struct {
	logs, events, deleted ageValue
	batch                 int
	maxJobLog             int64
}

// DefaultMaxJobLog is the master's --max-job-log: above the slave's own default limit (50 MiB),
// so it only bites when a slave sends more than slaves are meant to.
const DefaultMaxJobLog = 64 << 20

func (r *retentionFlags) add(fs *flag.FlagSet) {
	r.logs, r.events, r.deleted = ageValue(retention.DefaultLogs), ageValue(retention.DefaultEvents), ageValue(retention.DefaultDeleted)
	fs.Var(&r.logs, "retention-logs", "keep a job's log this long after the job ended (e.g. 90d, 36h; 0: for ever; env GPULAB_RETENTION_LOGS)")
	fs.Var(&r.events, "retention-events", "keep a job's events this long after the job ended (0: for ever; env GPULAB_RETENTION_EVENTS)")
	fs.Var(&r.deleted, "retention-deleted", "remove a DELETED job, with its log and events, this long after its deletion (0: never; env GPULAB_RETENTION_DELETED)")
	fs.IntVar(&r.batch, "retention-batch", retention.DefaultBatch, "rows the leader deletes per transaction when it applies the retention (hourly; env GPULAB_RETENTION_BATCH)")
	fs.Int64Var(&r.maxJobLog, "max-job-log", DefaultMaxJobLog, "bytes of one job's log the master keeps; the rest is dropped with a note (0: no limit; env GPULAB_MAX_JOB_LOG)")
}

func (r *retentionFlags) policy() retention.Policy {
	return retention.Policy{Logs: time.Duration(r.logs), Events: time.Duration(r.events), Deleted: time.Duration(r.deleted), Batch: r.batch}
}

func (r *retentionFlags) check() error {
	if r.batch < 1 {
		return fmt.Errorf("--retention-batch must be at least 1, not %d", r.batch)
	}
	if r.maxJobLog < 0 {
		return fmt.Errorf("--max-job-log must not be negative, not %d", r.maxJobLog)
	}
	return nil
}

// ageValue is a retention age: a Go duration (36h) or whole days (90d); 0 keeps for ever.
type ageValue time.Duration

func (a *ageValue) String() string {
	d := time.Duration(*a)
	if d > 0 && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return d.String()
}

func (a *ageValue) Set(s string) error {
	s = strings.TrimSpace(s)
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 0 {
			return fmt.Errorf("%q is not a number of days (e.g. 90d)", s)
		}
		*a = ageValue(time.Duration(days) * 24 * time.Hour)
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("%q is not an age (e.g. 90d, 36h, 0 for ever)", s)
	}
	*a = ageValue(d)
	return nil
}
