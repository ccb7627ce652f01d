package web_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/web"
)

// heartbeatStatements returns the db_statements of the heartbeat lines logged after the first
// skip lines of the log.
func heartbeatStatements(t *testing.T, logs *lockedBuffer, skip int) []int {
	return slaveCallStatements(t, logs, skip, protocol.HeartbeatPath)
}

// slaveCallStatements returns the db_statements of the lines of slave calls to path logged
// after the first skip lines of the log.
func slaveCallStatements(t *testing.T, logs *lockedBuffer, skip int, path string) []int {
	t.Helper()
	var out []int
	for i, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var line struct {
			Msg          string `json:"msg"`
			Route        string `json:"route"`
			Status       int    `json:"status"`
			DBStatements int    `json:"db_statements"`
			// body_ms: when the body had been read, since the request began (a POST's).
			BodyMS     *float64 `json:"body_ms"`
			DurationMS float64  `json:"duration_ms"`
			// db_ms: the time in the store's statements (a heartbeat's: in its batch).
			DBMS float64 `json:"db_ms"`
		}
		if i < skip || json.Unmarshal([]byte(l), &line) != nil || line.Msg != "request" || !strings.HasSuffix(line.Route, path) {
			continue
		}
		if line.Status/100 != 2 {
			t.Fatalf("%s answered %d: %s", path, line.Status, l)
		}
		if strings.HasPrefix(line.Route, "POST ") && (line.BodyMS == nil || *line.BodyMS < 0 || *line.BodyMS > line.DurationMS) {
			t.Errorf("%s: body_ms missing or outside the request's %.3f ms: %s", path, line.DurationMS, l)
		}
		if line.DBStatements > 0 && (line.DBMS <= 0 || line.DBMS > line.DurationMS) {
			t.Errorf("%s: db_ms %.3f for %d statements, outside the request's %.3f ms: %s", path, line.DBMS, line.DBStatements, line.DurationMS, l)
		}
		out = append(out, line.DBStatements)
	}
	return out
}

// loggedSlave starts a master whose request log (at debug: a slave call that succeeds is
// logged at debug, web.routineSlaveCall) is kept, with slave name of 8 GPUs registered.
func loggedSlave(t *testing.T, name string) (*protoWorld, *lockedBuffer) {
	t.Helper()
	logs := &lockedBuffer{}
	log := slog.New(web.WithRequestID(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	m := testmaster.Start(t, testmaster.Options{Log: log, MissingGrace: time.Minute})
	w := &protoWorld{m: m, alice: m.AddUser("alice", false, "", "vision"), name: name}
	w.slave = w.slaveClient(t, w.name)
	var gpus []protocol.GPU
	for i := range 8 {
		gpus = append(gpus, protocol.GPU{Index: i, UUID: "GPU-" + string(rune('a'+i)), Model: "Fake V100"})
	}
	if _, err := w.slave.Register(context.Background(), protocol.Inventory{InstanceID: "i1", CPUs: 16, MemoryMiB: 65536, GPUs: gpus}); err != nil {
		t.Fatal(err)
	}
	return w, logs
}

// A heartbeat costs one statement whatever the number of jobs its slave runs: it reads the
// slave's certificate's state, records the heartbeat and reads what reconciling needs (the
// jobs' usage samples are summed in the master and written apart, see store.usageBuffer). It
// used to write every running job's row too, then a usage row per job, and to read the
// certificate in a statement of its own.
func TestHeartbeatStatementsDoNotGrowWithJobs(t *testing.T) {
	w, logs := loggedSlave(t, "hbcost1")
	m := w.m
	ctx := context.Background()
	var held []protocol.RunningJob
	beat := func() {
		t.Helper()
		reply, err := w.slave.Heartbeat(ctx, protocol.Heartbeat{InstanceID: "i1", Jobs: held, Accepting: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(reply.Stops) > 0 || len(reply.Jobs) != len(held) {
			t.Fatalf("heartbeat with %d jobs: stops %v, master's view %v", len(held), reply.Stops, reply.Jobs)
		}
	}
	addJobs := func(n int) {
		for range n {
			id, attempt := w.job(t, w.name, len(held), false)
			w.advance(t, w.slave, id, attempt, job.StatusRunning)
			held = append(held, protocol.RunningJob{JobUUID: id, Attempt: attempt, ContainerID: "c-" + id[:8], Status: job.StatusRunning,
				Usage: &protocol.Usage{CPUPercent: 90, MemoryMiB: 512, GPUs: []protocol.GPUUsage{{Index: len(held), UtilPercent: 75, MemoryUsedMiB: 1000}}}})
		}
	}
	count := func() []int {
		t.Helper()
		skip := len(strings.Split(strings.TrimSpace(logs.String()), "\n"))
		beat()
		beat()
		// The request's line is written after its answer.
		deadline := time.Now().Add(time.Minute)
		for {
			if n := heartbeatStatements(t, logs, skip); len(n) == 2 {
				return n
			}
			if time.Now().After(deadline) {
				t.Fatalf("no heartbeat lines in the request log within a minute")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	addJobs(1)
	one := count()
	addJobs(7)
	eight := count()
	t.Logf("statements per heartbeat: %v with 1 job, %v with 8 jobs", one, eight)
	for _, n := range append(one, eight...) {
		if n != 1 {
			t.Errorf("a heartbeat sent %d statements, want 1 (the heartbeat's, which reads the certificate's state too and may be shared with other slaves'): %v with 1 job, %v with 8", n, one, eight)
		}
	}
	// The samples reached each job's series (this master's sum not yet written included).
	for _, hj := range held {
		pts, err := m.Store.JobUsage(ctx, hj.JobUUID)
		if err != nil {
			t.Fatal(err)
		}
		if len(pts) == 0 {
			t.Errorf("job %s has no usage points after its heartbeats", hj.JobUUID)
		}
	}
}

// A long poll hands out every job assigned to its slave with one read of them, however many
// there are (it read each apart before: up to a job per GPU after a pass on a full cluster),
// and in two statements: the slave's work (with its certificate) and the hand-over, which
// reads the jobs and stamps them handed over at once (store.HandOver; three before).
func TestNextStatementsDoNotGrowWithJobs(t *testing.T) {
	w, logs := loggedSlave(t, "nextcost1")
	ctx := context.Background()
	var held []protocol.RunningJob
	// next assigns n jobs to the slave and has it poll: the jobs come in one answer; it
	// returns the statements the poll sent.
	next := func(n int) int {
		t.Helper()
		for range n {
			id, attempt := w.job(t, w.name, len(held), false)
			held = append(held, protocol.RunningJob{JobUUID: id, Attempt: attempt, Status: job.StatusAssigned})
		}
		skip := len(strings.Split(strings.TrimSpace(logs.String()), "\n"))
		work, err := w.slave.Next(ctx, protocol.NextRequest{InstanceID: "i1", Jobs: held[:len(held)-n]})
		if err != nil || len(work.Assignments) != n {
			t.Fatalf("a poll with %d jobs assigned: %d handed out, %v", n, len(work.Assignments), err)
		}
		for _, a := range work.Assignments {
			if a.Job.Request.Docker.Image != "busybox" {
				t.Fatalf("job %s handed out without its request: %+v", a.Job.UUID, a.Job.Request)
			}
		}
		// The request's line is written after its answer.
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			if s := slaveCallStatements(t, logs, skip, protocol.NextPath); len(s) == 1 {
				return s[0]
			}
			if time.Now().After(deadline) {
				t.Fatalf("no long-poll line in the request log within a minute")
			}
		}
	}
	one, seven := next(1), next(7)
	t.Logf("statements of a long poll: %d handing out 1 job, %d handing out 7", one, seven)
	if seven != one {
		t.Errorf("a long poll handing out 7 jobs sent %d statements, one handing out 1 sent %d: the jobs' read grows with them", seven, one)
	}
	if one != 2 {
		t.Errorf("a long poll handing out work sent %d statements, want 2 (the slave's work, the hand-over)", one)
	}
}

// A slave's start, run, log chunks and end of a job cost one statement each: the change (or
// the chunk's append) reads the job's place, the slave's disabled flag and the caller's
// certificate itself (store.SlaveChangeJob, store.AppendLog). The place was read in a
// statement of its own before: 44,000 statements in B1x's burst, and a running job writing
// output sends a chunk every 250 ms.
func TestJobChangesAreOneStatement(t *testing.T) {
	w, logs := loggedSlave(t, "chgcost1")
	ctx := context.Background()
	id, attempt := w.job(t, w.name, 0, false)
	skip := len(strings.Split(strings.TrimSpace(logs.String()), "\n"))
	for _, to := range []job.Status{job.StatusStarting, job.StatusRunning} {
		from := job.StatusAssigned
		if to == job.StatusRunning {
			from = job.StatusStarting
		}
		if err := w.slave.Update(ctx, protocol.StateUpdate{JobUUID: id, Attempt: attempt, From: from, To: to}); err != nil {
			t.Fatalf("%s: %v", to, err)
		}
	}
	for seq := range 2 {
		if err := w.slave.Log(ctx, protocol.LogChunk{JobUUID: id, Attempt: attempt, Seq: seq, Data: []byte("line\n")}); err != nil {
			t.Fatalf("log chunk %d: %v", seq, err)
		}
	}
	code := 0
	if err := w.slave.Done(ctx, protocol.Completion{JobUUID: id, Attempt: attempt, From: job.StatusRunning, To: job.StatusFinished, ExitCode: &code}); err != nil {
		t.Fatal(err)
	}
	// The requests' lines are written after their answers.
	var updates, chunks, done []int
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		updates, chunks, done = slaveCallStatements(t, logs, skip, protocol.UpdatePath), slaveCallStatements(t, logs, skip, protocol.LogPath),
			slaveCallStatements(t, logs, skip, protocol.DonePath)
		if len(updates) == 2 && len(chunks) == 2 && len(done) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the request log has %d update, %d log and %d done lines a minute after the calls", len(updates), len(chunks), len(done))
		}
	}
	t.Logf("statements: updates %v, log chunks %v, done %v", updates, chunks, done)
	for _, n := range append(append(updates, chunks...), done...) {
		if n != 1 {
			t.Errorf("a slave's call about its job sent %d statements, want 1: updates %v, log chunks %v, done %v", n, updates, chunks, done)
		}
	}
	if st := w.status(t, id); st != job.StatusFinished {
		t.Fatalf("the job is %s after its done", st)
	}
}
