package bench

import (
	"os"
	"testing"
	"time"
)

// TestSlurmAllocationLines: both of slurmctld's ways to log a job's start (its main scheduler's
// and the backfill's, as 22.05 writes them) are read as allocations, and nothing else is.
func TestSlurmAllocationLines(t *testing.T) {
	for line, want := range map[string]string{
		"[2026-12-01T03:40:39.841] sched: Allocate JobId=17 NodeList=n1 #CPUs=2 Partition=all":        "17",
		"[2026-12-01T03:46:56.166] sched/backfill: _start_job: Started JobId=11 in all on n2":         "11",
		"[2026-12-01T03:40:38.341] _slurm_rpc_submit_batch_job: JobId=1 InitPrio=4294901759 usec=598": "",
		"[2026-12-01T03:32:25.582] _job_complete: JobId=1 done":                                       "",
	} {
		m := allocationLine.FindStringSubmatch(line)
		switch {
		case want == "" && m != nil:
			t.Errorf("%q read as an allocation of job %s", line, m[2])
		case want != "" && (m == nil || m[2] != want):
			t.Errorf("%q: got %v, want job %s", line, m, want)
		case m != nil:
			if _, err := time.ParseInLocation(slurmLogTime, m[1], time.Local); err != nil {
				t.Errorf("%q: its time: %v", line, err)
			}
		}
	}
}

// TestSlurmSubmitLine: a submission is received when slurmctld logged it less the time its
// handling took.
func TestSlurmSubmitLine(t *testing.T) {
	m := submitLine.FindStringSubmatch("[2026-12-01T03:40:38.341] _slurm_rpc_submit_batch_job: JobId=12 InitPrio=4294901759 usec=2598")
	if m == nil || m[2] != "12" || m[3] != "2598" {
		t.Fatalf("got %v", m)
	}
	if allocationLine.MatchString("[2026-12-01T03:40:38.341] _slurm_rpc_submit_batch_job: JobId=12 InitPrio=4294901759 usec=2598") {
		t.Error("a submission read as an allocation")
	}
}

// TestParseSdiag reads the schedulers' figures out of sdiag's report (22.05's layout), each
// from its own section although both name theirs alike.
func TestParseSdiag(t *testing.T) {
	got := parseSdiag(`*******************************************************
sdiag output at Tue Dec 01 04:09:47 2026 (1796098187)
*******************************************************
Server thread count:  6
Jobs submitted: 614

Main schedule statistics (microseconds):
	Last cycle:   894
	Max cycle:    894
	Total cycles: 25
	Mean cycle:   220
	Mean depth cycle:  0

Backfilling stats
	Total backfilled jobs (since last slurm start): 7
	Total cycles: 3
	Last cycle when: Tue Dec 01 04:09:50 2026 (1796098190)
	Max cycle:  1500
	Mean cycle: 900

Latency for 1000 calls to gettimeofday(): 27 microseconds
`)
	for k, want := range map[string]string{
		"main Total cycles": "25", "main Mean cycle": "220", "main Max cycle": "894",
		"backfill Total cycles": "3", "backfill Mean cycle": "900", "backfill Max cycle": "1500",
		"backfill Total backfilled jobs (since last slurm start)": "7",
	} {
		if got[k] != want {
			t.Errorf("%s: %q, want %q", k, got[k], want)
		}
	}
	if _, ok := got["main Jobs submitted"]; ok {
		t.Error("a figure outside the schedulers' sections was read as theirs")
	}
}

// TestScriptStarted reads a job's first line, date +%s.%N, to the nanosecond.
func TestScriptStarted(t *testing.T) {
	dir := t.TempDir()
	for body, want := range map[string]time.Time{
		"1796095943.575697508\n": time.Unix(1796095943, 575697508),
		"1796095943.5\nmore\n":   time.Unix(1796095943, 500000000),
	} {
		f := dir + "/out"
		writeFile(t, f, body)
		got, err := scriptStarted(f)
		if err != nil || !got.Equal(want) {
			t.Errorf("%q: %v, %v; want %v", body, got, err, want)
		}
	}
	writeFile(t, dir+"/partial", "1796095943.57")
	if _, err := scriptStarted(dir + "/partial"); err == nil {
		t.Error("a line not ended yet was read")
	}
}

func writeFile(t *testing.T, name, body string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSlurmLogTimes: the allocations and receipts read out of a log, each job's first line
// counted, a receipt moved back by its handling's time.
func TestSlurmLogTimes(t *testing.T) {
	dir := t.TempDir()
	s := &slurmCluster{log: dir + "/slurmctld.log"}
	writeFile(t, s.log, `[2026-12-01T03:40:38.341] _slurm_rpc_submit_batch_job: JobId=1 InitPrio=4294901759 usec=1500
[2026-12-01T03:40:38.400] _slurm_rpc_submit_batch_job: JobId=2 InitPrio=4294901758 usec=0
[2026-12-01T03:40:39.841] sched: Allocate JobId=1 NodeList=n1 #CPUs=2 Partition=all
[2026-12-01T03:40:40.000] sched/backfill: _start_job: Started JobId=2 in all on n2
[2026-12-01T03:40:41.000] sched: Allocate JobId=1 NodeList=n3 #CPUs=2 Partition=all
`)
	at := func(s string) time.Time {
		v, err := time.ParseInLocation(slurmLogTime, s, time.Local)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	received, err := s.received()
	if err != nil {
		t.Fatal(err)
	}
	allocs, err := s.allocations()
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct{ got, want time.Time }{
		"job 1 received":  {received["1"], at("2026-12-01T03:40:38.341").Add(-1500 * time.Microsecond)},
		"job 2 received":  {received["2"], at("2026-12-01T03:40:38.400")},
		"job 1 allocated": {allocs["1"], at("2026-12-01T03:40:39.841")},
		"job 2 allocated": {allocs["2"], at("2026-12-01T03:40:40.000")},
	} {
		if !c.got.Equal(c.want) {
			t.Errorf("%s at %v, want %v", name, c.got, c.want)
		}
	}
	if len(received) != 2 || len(allocs) != 2 {
		t.Errorf("%d receipts, %d allocations: want 2 of each", len(received), len(allocs))
	}
}
