package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
)

// sampleJob is a running job of alice as the master would serve it.
func sampleJob(id string, st job.Status) *job.Job {
	exit := 0
	t0 := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	j := &job.Job{
		UUID:        id,
		Name:        "train-resnet-with-a-very-long-name",
		Description: "a test job",
		Request: job.Request{
			Resources: job.Resources{CPUs: 4, GPUs: 2, CPUMemoryGb: 16, ClusterID: 1, GPUModel: []string{"V100"}},
			Docker: job.Docker{
				Image:        "bob:s3cret@registry.example.org:5000/team/train:latest",
				Command:      job.Command{Text: "python3 train.py --epochs 100 --lr 0.1"},
				PortMappings: []job.PortMapping{{ContainerPort: 8888}, {ContainerPort: 22}},
			},
			Scheduling: job.Scheduling{
				Restartable: true,
				MinDuration: job.Duration(time.Hour), MaxDuration: job.Duration(48 * time.Hour),
			},
			Extra: job.Extra{SSHPubKeys: []string{"ssh-ed25519 AAAA alice"}},
		},
		Owner: job.Owner{UserURN: aliceURN, UserEmail: aliceEmail, ProjectURN: demoURN},
		State: job.State{
			Status: st,
			EventTimes: map[job.Status]time.Time{
				job.StatusQueued:   t0,
				job.StatusAssigned: t0.Add(90 * time.Second),
				job.StatusStarting: t0.Add(100 * time.Second),
				job.StatusRunning:  t0.Add(2 * time.Minute),
			},
			Scheduling: job.StateScheduling{AssignedClusterID: 1, AssignedSlaveName: "gpu1"},
			Resources: &job.StateResources{
				ClusterID: 1, GPUIDs: []int{0, 1}, CPUIDs: []int{4, 5, 6, 7}, CPUMemoryGb: 16,
				SlaveName: "gpu1", SlaveHost: "gpu1.example.org",
				PortMappings: []job.PortMapping{
					{ContainerPort: 8888, HostPort: 32768, HostIP: "0.0.0.0"},
					{ContainerPort: 22, HostPort: 32769},
				},
			},
		},
	}
	if st.Ended() {
		j.State.EventTimes[st] = t0.Add(2*time.Hour + 2*time.Minute)
		j.State.Resources.ExitCode = &exit
	}
	return j
}

func queuedJob(id, user string) *job.Job {
	return &job.Job{
		UUID: id, Name: "waiting",
		Request: job.Request{
			Resources: job.Resources{CPUs: 1, GPUs: 8, CPUMemoryGb: 2},
			Docker:    job.Docker{Image: "debian:stable", Command: job.Command{List: []string{"sleep", "60"}, IsList: true}},
		},
		Owner: job.Owner{UserURN: user, ProjectURN: demoURN},
		State: job.State{
			Status:     job.StatusQueued,
			EventTimes: map[job.Status]time.Time{job.StatusQueued: time.Date(2024, 5, 1, 11, 0, 0, 0, time.UTC)},
			Scheduling: job.StateScheduling{QueuedExplanations: []string{"needs 8 GPUs, at most 2 free on a matching slave", "expected to start around 14:00"}},
		},
	}
}

const (
	runningID = "11111111-aaaa-4000-8000-000000000001"
	queuedID  = "22222222-bbbb-4000-8000-000000000002"
	bobsID    = "33333333-cccc-4000-8000-000000000003"
)

func TestJobsList(t *testing.T) {
	e := newTestEnv(t)
	e.m.add(sampleJob(runningID, job.StatusRunning))
	e.m.add(queuedJob(queuedID, aliceURN))
	e.m.add(queuedJob(bobsID, bobURN))

	r := e.run("jobs")
	if r.code != exitOK {
		t.Fatalf("jobs:\n%s", r)
	}
	// imec's fixed-width columns, written here with Go's own padding and cutting (which count
	// characters as Python's do), so that scripts written for imec's client read ours.
	imecLine := func(v ...any) string {
		return fmt.Sprintf("%-36s %-20.20s %-20.20s %-25.25s %-12.12s %-15.15s %-3s %-10.10s", v...)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 4 || lines[0] != imecLine("TASK ID", "NAME", "COMMAND", "CREATED", "USER", "PROJECT", "CID", "STATUS") {
		t.Fatalf("jobs: want imec's header and 3 lines:\n%s", r.stdout)
	}
	for _, want := range []string{
		imecLine(runningID, "train-resnet-with-a-very-long-name", "python3 train.py --epochs 100 --lr 0.1",
			"2024-05-01T10:00:00+00:00", "alice@gpulab.example.org", "demo", "1", "RUNNING"),
		imecLine(bobsID, "waiting", "sleep 60", "2024-05-01T11:00:00+00:00", "bob@gpulab.example.org", "demo", "***", "QUEUED"),
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("jobs output lacks the line\n%q\n%s", want, r.stdout)
		}
	}
	// What `cut -c1-36` and `cut -c139-` give scripts: the ID and the status.
	for i, l := range lines[1:] {
		if id, st := strings.TrimSpace(l[:36]), strings.TrimSpace(l[138:]); len(id) != 36 || !validStatus(st) {
			t.Errorf("line %d: columns 1-36 %q and 139- %q are not an ID and a status", i+1, id, st)
		}
	}

	// The table of earlier versions stays available.
	r = e.run("jobs", "--table")
	assertTable(t, r.stdout, 3)
	header := strings.Split(r.stdout, "\n")[1]
	for _, col := range []string{"ID", "Name", "Command", "Created", "User", "Project", "Cluster", "Status"} {
		if !strings.Contains(header, "| "+col+" ") {
			t.Errorf("header lacks column %q: %s", col, header)
		}
	}
	for _, want := range []string{
		runningID, "train-resnet-with...", "python3 train.py ...", "2024-05-01T10:00:00+00:00",
		"alice@gpulab", "| demo ", "RUNNING", "sleep 60", "bob@gpulab", "QUEUED",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("jobs --table output lacks %q:\n%s", want, r.stdout)
		}
	}
	q := e.m.reqs("GET", "jobs")[0].Query
	for k, v := range map[string]string{"pending": "true", "running": "true", "finished": "true", "max_count": "10", "sort": "-created"} {
		if got := strings.Join(q[k], ","); got != v {
			t.Errorf("query %s = %q, want %q (query %v)", k, got, v, q)
		}
	}
	if _, ok := q["user_urn"]; ok {
		t.Errorf("plain jobs filtered on the user: %v", q)
	}
}

func TestJobsListFilters(t *testing.T) {
	e := newTestEnv(t)
	e.m.add(queuedJob(queuedID, aliceURN))
	e.m.add(queuedJob(bobsID, bobURN))
	tests := []struct {
		args []string
		want map[string]string // query values; "" means absent
	}{
		{[]string{"-u"}, map[string]string{"user_urn": aliceURN, "other_user_running": "true", "max_count": "50"}},
		{[]string{"-U"}, map[string]string{"user_urn": aliceURN, "other_user_running": "", "max_count": "50"}},
		{[]string{"-c", "3", "-H", "24"}, map[string]string{"max_count": "3", "max_hours": "24"}},
		{[]string{"--running"}, map[string]string{"running": "true", "pending": "", "finished": ""}},
		{[]string{"--cluster-id", "4", "--user-name", "bob", "--project", "demo"}, map[string]string{"cluster_id": "4", "user_name": "bob", "project_name": "demo"}},
		{[]string{"--project", demoURN}, map[string]string{"project_urn": demoURN, "project_name": ""}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			before := len(e.m.reqs("GET", "jobs"))
			r := e.run(append([]string{"jobs"}, tt.args...)...)
			if r.code != exitOK {
				t.Fatalf("%s", r)
			}
			reqs := e.m.reqs("GET", "jobs")
			if len(reqs) != before+1 {
				t.Fatalf("%d list requests, want 1", len(reqs)-before)
			}
			q := reqs[len(reqs)-1].Query
			for k, v := range tt.want {
				if got := strings.Join(q[k], ","); got != v {
					t.Errorf("query %s = %q, want %q", k, got, v)
				}
			}
		})
	}
	r := e.run("jobs", "-U", "-q")
	if r.code != exitOK || r.stdout != queuedID+"\n" {
		t.Errorf("jobs -U -q must print only alice's job ID:\n%s", r)
	}
	r = e.run("jobs", "-n")
	if strings.Contains(r.stdout, "|") || !strings.HasPrefix(r.stdout, "ID ") {
		t.Errorf("jobs -n:\n%s", r)
	}
	r = e.run("jobs", "-r")
	var raw []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &raw); err != nil || len(raw) != 2 {
		t.Errorf("jobs -r is not the JSON list (%v):\n%s", err, r)
	}
}

func TestJobDetail(t *testing.T) {
	e := newTestEnv(t)
	e.m.add(sampleJob(runningID, job.StatusRunning))
	r := e.run("jobs", runningID[:8])
	if r.code != exitOK {
		t.Fatalf("jobs ID:\n%s", r)
	}
	want := []string{
		"       Job ID: " + runningID,
		"         Name: train-resnet-with-a-very-long-name",
		"      Project: demo",
		"         User: alice@gpulab (" + aliceURN + ")",
		"        Email: " + aliceEmail,
		" Docker image: bob:XXXX@registry.example.org:5000/team/train:latest",
		"      Command: python3 train.py --epochs 100 --lr 0.1",
		"       Status: RUNNING",
		"      Created: 2024-05-01T10:00:00+00:00 (2h0m0s ago)",
		"     Assigned: 2024-05-01T10:01:30+00:00 (after 1m30s in the queue)",
		"      Started: 2024-05-01T10:02:00+00:00 (after 2m0s in the queue)",
		"     Duration: 1h58m0s so far",
		"   Scheduling: restartable",
		" Max duration: 2 days",
		" Min duration: 1 hour",
		"      Cluster: 1",
		"        Slave: gpu1",
		"   Slave host: gpu1.example.org",
		"         GPUs: 2 (ids 0,1)",
		"         CPUs: 4 (ids 4,5,6,7)",
		"       Memory: 16 GB",
		"Port mappings: 8888 -> gpu1.example.org:32768\n               22 -> gpu1.example.org:32769",
		"    SSH login: ssh -p 32769 root@gpu1.example.org",
	}
	for _, w := range want {
		if !strings.Contains(r.stdout, w+"\n") {
			t.Errorf("detail lacks line %q:\n%s", w, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "s3cret") {
		t.Errorf("detail shows the registry password:\n%s", r.stdout)
	}
	// Flags may follow the job ID, as users type them.
	r = e.run("jobs", runningID, "-d")
	if r.code != exitOK {
		t.Fatalf("jobs ID -d:\n%s", r)
	}
	if _, err := job.Parse([]byte(r.stdout), job.DefaultOptions()); err != nil {
		t.Errorf("jobs -d output cannot be submitted again: %v\n%s", err, r.stdout)
	}
	if strings.Contains(r.stdout, `"state"`) || strings.Contains(r.stdout, `"uuid"`) {
		t.Errorf("jobs -d output holds server-owned fields:\n%s", r.stdout)
	}
	r = e.run("jobs", runningID, "--raw")
	if r.code != exitOK || !strings.Contains(r.stdout, `"uuid": "`+runningID+`"`) {
		t.Errorf("jobs ID --raw:\n%s", r)
	}
}

func TestJobDetailEndedAndQueued(t *testing.T) {
	e := newTestEnv(t)
	failed := sampleJob(runningID, job.StatusFailed)
	code := 3
	failed.State.Resources.ExitCode = &code
	e.m.add(failed)
	e.m.add(queuedJob(queuedID, aliceURN))
	r := e.run("jobs", runningID)
	for _, w := range []string{
		"Status: FAILED", "more about why: gpulab-cli debug " + runningID,
		"Ended: 2024-05-01T12:02:00+00:00 (in 2m0s)", "Duration: 2h0m0s", "Exit code: 3",
	} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("failed job detail lacks %q:\n%s", w, r.stdout)
		}
	}
	r = e.run("jobs", queuedID)
	for _, w := range []string{
		"Status: QUEUED", "Waiting because: needs 8 GPUs, at most 2 free on a matching slave\n",
		"expected to start around 14:00", "Waiting: 1h0m0s so far", "Cluster: -", "GPUs: 8\n",
	} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("queued job detail lacks %q:\n%s", w, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "SSH login") || strings.Contains(r.stdout, "Port mappings") {
		t.Errorf("queued job without keys or ports shows SSH or ports:\n%s", r.stdout)
	}
}

// TestJobDetailEstimateRange: the expected start of a queued job comes with its range.
func TestJobDetailEstimateRange(t *testing.T) {
	e := newTestEnv(t)
	q := queuedJob(queuedID, aliceURN)
	at := func(h, m int) *time.Time { t := time.Date(2024, 5, 1, h, m, 0, 0, time.UTC); return &t }
	q.State.Scheduling.EstimatedStart, q.State.Scheduling.EstimatedStartEarliest, q.State.Scheduling.EstimatedStartLatest = at(14, 40), at(14, 10), at(15, 30)
	e.m.add(q)
	r := e.run("jobs", queuedID)
	if !strings.Contains(r.stdout, "Expected start: 2024-05-01T14:40:00+00:00 (likely 14:10–15:30)") {
		t.Errorf("queued job detail lacks the estimate range:\n%s", r.stdout)
	}
}

func TestJobErrors(t *testing.T) {
	e := newTestEnv(t)
	e.m.add(queuedJob("44444444-0000-4000-8000-000000000001", aliceURN))
	e.m.add(queuedJob("44444444-0000-4000-8000-000000000002", aliceURN))
	r := e.run("jobs", "444444")
	if r.code != exitError || !strings.Contains(r.stderr, "Error: get job 444444: job id prefix 444444 is ambiguous") {
		t.Errorf("ambiguous prefix:\n%s", r)
	}
	r = e.run("jobs", "ffffffff")
	if r.code != exitError || !strings.Contains(r.stderr, "no job ffffffff") {
		t.Errorf("unknown job:\n%s", r)
	}
}

func TestMiniID(t *testing.T) {
	tests := map[string]string{
		aliceURN: "alice@gpulab",
		"urn:publicid:IDN+ilabt.imec.be+user+jdoe":         "jdoe@ilabt",
		"urn:publicid:IDN+wall2.ilabt.iminds.be+user+jdoe": "jdoe@w2",
		"urn:publicid:IDN+hidden+user+hidden":              "hidden@hidden",
		"not a urn":                                        "not a urn",
	}
	for in, want := range tests {
		if got := miniID(in); got != want {
			t.Errorf("miniID(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHumanDuration(t *testing.T) {
	tests := map[time.Duration]string{
		0:                           "0s",
		45 * time.Second:            "45s",
		90 * time.Second:            "1m30s",
		2*time.Hour + 7*time.Second: "2h0m7s",
		3*24*time.Hour + 4*time.Hour + 5*time.Minute: "3d4h5m",
	}
	for d, want := range tests {
		if got := humanDuration(d); got != want {
			t.Errorf("humanDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestRedactImage(t *testing.T) {
	tests := map[string]string{
		"debian:stable":         "debian:stable",
		"u:p@host:5000/a/b:tag": "u:XXXX@host:5000/a/b:tag",
		"u:p@w:rd@host/a":       "u:XXXX@host/a",
		"hidden":                "hidden",
		"U:P@Not A Valid/Image": "U:XXXX@Not A Valid/Image",
	}
	for in, want := range tests {
		if got := redactImage(in); got != want {
			t.Errorf("redactImage(%q) = %q, want %q", in, got, want)
		}
	}
}

func validStatus(s string) bool {
	_, err := job.ParseStatus(s)
	return err == nil
}

func TestImecMiniID(t *testing.T) {
	for urn, want := range map[string]string{
		"urn:publicid:IDN+ilabt.imec.be+user+jdoe":         "jdoe@ilabt",
		"urn:publicid:IDN+wall2.ilabt.iminds.be+user+jdoe": "jdoe@w2",
		"urn:publicid:IDN+gpulab.example.org+user+alice":   "alice@gpulab.example.org",
		"": "", "not a urn": "",
	} {
		if got := imecMiniID(urn); got != want {
			t.Errorf("imecMiniID(%q) = %q, want %q", urn, got, want)
		}
	}
}
