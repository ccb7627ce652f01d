-- Usage over time, per job (issue 14): the samples the slaves send with their heartbeats, kept
-- as a compact series that is downsampled as the job ages (store.CompactUsage): full resolution
-- for the last hour, one row a minute up to a day, one per 10 minutes up to a week, one an hour
-- beyond. secs is the time a row stands for (a raw sample: the heartbeat interval; a merged
-- row: the sum of its parts), the weight of every average. The GPU arrays are parallel:
-- gpu_idx[i] is the index on the slave of the GPU whose utilisation is gpu_util[i].
CREATE TABLE job_usage (
    job_uuid     UUID NOT NULL REFERENCES jobs(uuid) ON DELETE CASCADE,
    at           TIMESTAMPTZ NOT NULL,
    span_s       INTEGER NOT NULL DEFAULT 0, -- 0: a raw sample; else the bucket it merges
    secs         REAL NOT NULL,
    cpu_percent  REAL NOT NULL,
    mem_mib      BIGINT NOT NULL,
    gpu_idx      INTEGER[] NOT NULL DEFAULT '{}',
    gpu_util     REAL[] NOT NULL DEFAULT '{}',
    gpu_mem_mib  BIGINT[] NOT NULL DEFAULT '{}'
);
CREATE INDEX job_usage_job_idx ON job_usage (job_uuid, at);
-- Compaction looks for the rows of a tier that have aged out of it.
CREATE INDEX job_usage_tier_idx ON job_usage (span_s, at);

-- The idle-GPU flag: set by the leader when some of a running job's GPUs stayed under the
-- threshold for the configured time (idle_gpus names them, idle_since is when it was flagged),
-- cleared when they are busy again. One idle-gpu event per flagging.
ALTER TABLE jobs ADD COLUMN idle_gpus INTEGER[];
ALTER TABLE jobs ADD COLUMN idle_since TIMESTAMPTZ;
