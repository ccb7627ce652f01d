package bench

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
)

// jobDoc is a job as users submit it; gpus, cpus, memory and cluster are filled in.
func jobDoc(name string, gpus, cpus, memGb, cluster int) string {
	res := map[string]any{"gpus": gpus, "cpus": cpus, "cpuMemoryGb": memGb}
	if cluster > 0 {
		res["clusterId"] = cluster
	}
	b, _ := json.Marshal(map[string]any{
		"name":        name,
		"description": "benchmark job",
		"request": map[string]any{
			"resources":  res,
			"docker":     map[string]any{"image": "gpulab-bench/train:latest", "command": "python train.py --epochs 1", "environment": map[string]string{"EPOCHS": "1"}},
			"scheduling": map[string]any{},
		},
	})
	return string(b)
}

// parsedRequest is the request job.Parse makes of jobDoc (defaults filled in), as the API
// would store it.
func parsedRequest(t testing.TB, gpus, cpus, memGb, cluster int) job.Request {
	t.Helper()
	j, err := job.Parse([]byte(jobDoc("bench", gpus, cpus, memGb, cluster)), job.DefaultOptions())
	if err != nil {
		t.Fatalf("parse benchmark job: %v", err)
	}
	return j.Request
}

// bulkJob is one job row for bulkInsert.
type bulkJob struct {
	UUID    string
	Name    string
	User    *user
	Project int64
	Status  job.Status
	Request job.Request
	Created time.Time
	// Slave, when set, is where the job ran (states past QUEUED): it gets resources and
	// assignment columns like the scheduler and slave would have written, GPUs 0..gpus-1.
	Slave string
	// Ended is when an ended job ended.
	Ended time.Time
}

// bulkInsert writes jobs with their first event through COPY, filling the columns exactly as
// store.CreateJob and the scheduler would, then vacuums, analyzes and checkpoints, so the
// master's own queries meet a realistic, settled table.
func bulkInsert(t testing.TB, dbURL string, jobs []bulkJob) {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("postgres", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	stmt, err := tx.Prepare(`COPY jobs (uuid, name, description, request, user_id, user_email, project_id, status, event_times,
    interactive, restartable, cluster_id, gpus, cpus, cpu_memory_gb, min_duration_s, max_duration_s, assigned_cluster_id,
    assigned_slave_name, assigned_instance_id, scheduling, resources, final_usage, created_at, updated_at) FROM STDIN`)
	if err != nil {
		t.Fatalf("copy jobs: %v", err)
	}
	defer func() { _ = stmt.Close() }()
	for _, j := range jobs {
		req, err := json.Marshal(j.Request)
		if err != nil {
			t.Fatal(err)
		}
		r := j.Request.Resources
		times := map[job.Status]time.Time{job.StatusQueued: j.Created}
		var cluster, aCluster any
		if r.ClusterID > 0 {
			cluster = r.ClusterID
		}
		var slave, instance, resources, finalUsage any
		updated := j.Created
		if j.Slave != "" {
			c := max(r.ClusterID, 1)
			aCluster, slave, instance = c, j.Slave, "inst-"+j.Slave
			gpus, cpus := make([]int, r.GPUs), make([]int, r.CPUs)
			details := make([]protocol.GPU, r.GPUs)
			for i := range gpus {
				gpus[i] = i
				details[i] = protocol.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", j.Slave, i), Model: "Simulated V100", MemoryMiB: 32 << 10, Fake: true}
			}
			for i := range cpus {
				cpus[i] = i
			}
			gd, _ := json.Marshal(details)
			res := job.StateResources{ClusterID: c, GPUIDs: gpus, CPUIDs: cpus, CPUMemoryGb: r.CPUMemoryGb, SlaveName: j.Slave,
				SlaveHost: j.Slave + ".bench", SlaveInstanceID: "inst-" + j.Slave, PortMappings: []job.PortMapping{}, GPUDetails: gd}
			b, _ := json.Marshal(res)
			resources = string(b)
			times[job.StatusAssigned] = j.Created.Add(time.Second)
			times[job.StatusStarting] = j.Created.Add(2 * time.Second)
			times[job.StatusRunning] = j.Created.Add(3 * time.Second)
			updated = j.Created.Add(3 * time.Second)
		}
		if j.Status.Ended() {
			times[j.Status] = j.Ended
			updated = j.Ended
			if j.Slave != "" {
				finalUsage = `{"cpuPercent":95,"memoryMiB":2048}`
			}
		}
		et, _ := json.Marshal(times)
		_, err = stmt.Exec(j.UUID, j.Name, "benchmark job", string(req), j.User.ID, j.User.Email, j.Project, string(j.Status), string(et),
			j.Request.Scheduling.Interactive, j.Request.Scheduling.Restartable, cluster, r.GPUs, r.CPUs, r.CPUMemoryGb,
			int64(time.Duration(j.Request.Scheduling.MinDuration)/time.Second), int64(time.Duration(j.Request.Scheduling.MaxDuration)/time.Second),
			aCluster, slave, instance, "{}", resources, finalUsage, j.Created, updated)
		if err != nil {
			t.Fatalf("copy job: %v", err)
		}
	}
	if _, err := stmt.Exec(); err != nil {
		t.Fatalf("copy jobs: %v", err)
	}
	ev, err := tx.Prepare(`COPY job_events (job_uuid, at, kind, to_status, actor, message) FROM STDIN`)
	if err != nil {
		t.Fatalf("copy events: %v", err)
	}
	defer func() { _ = ev.Close() }()
	for _, j := range jobs {
		if _, err := ev.Exec(j.UUID, j.Created, "status", "QUEUED", "owner", "submitted by "+j.User.Name); err != nil {
			t.Fatalf("copy event: %v", err)
		}
	}
	if _, err := ev.Exec(); err != nil {
		t.Fatalf("copy events: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit bulk insert: %v", err)
	}
	// What a maintained database would have done by now, so that neither autovacuum (it vacuums
	// a table after many inserts) nor a checkpoint lands in the middle of a measurement.
	for _, q := range []string{`VACUUM ANALYZE jobs`, `VACUUM ANALYZE job_events`, `CHECKPOINT`} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// newUUID is a job UUID as the API makes them.
func newUUID() string { return uuid.NewString() }

// statusCounts counts jobs by state straight from the database.
// queuedMultiGPU counts the queued jobs that need more than one GPU.
func queuedMultiGPU(t testing.TB, m *master) int {
	t.Helper()
	var n int
	if err := m.Store.DB().QueryRowContext(context.Background(), `SELECT count(*) FROM jobs WHERE status = 'QUEUED' AND gpus > 1`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func statusCounts(t testing.TB, m *master) map[job.Status]int {
	t.Helper()
	c, err := m.Store.CountJobs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c
}
