package handlers

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/imecschema"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
)

// v4Fixture is a job with everything our v3.1 shape can carry that imec's model has no place
// for (ONHOLD time, created/updated, exit code, estimated start), in the state asked for.
func v4Fixture(t *testing.T, st job.Status) *job.Job {
	t.Helper()
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	est := t0.Add(time.Hour)
	code := 0
	gpus, _ := json.Marshal([]protocol.GPU{{Index: 0, UUID: "GPU-aaaa", Model: "Tesla V100-SXM2-32GB", MemoryMiB: 32768, Fake: true}})
	usage, _ := json.Marshal(protocol.Usage{CPUPercent: 150, MemoryMiB: 512, GPUs: []protocol.GPUUsage{{Index: 0, UtilPercent: 80, MemoryUsedMiB: 16384}}})
	j := &job.Job{
		UUID: "0b4c3a9e-1111-4222-8333-444455556666", Name: "train", Description: "d",
		Owner: job.Owner{UserURN: "urn:publicid:IDN+example.org+user+alice", UserEmail: "alice@example.org", ProjectURN: "urn:publicid:IDN+example.org+project+vision"},
		Request: job.Request{
			Resources: job.Resources{CPUs: 2, GPUs: 1, CPUMemoryGb: 4, GPUMemoryGb: 1},
			Docker: job.Docker{Image: "user:secret@registry.example.org:5000/team/img:1", Command: job.Command{Text: "python train.py"},
				Environment: map[string]string{"A": "1"}, WorkingDir: "/work", User: "1000:1000",
				Storage:      []job.Storage{{HostPath: "tmpfs", ContainerPath: "/scratch", SizeGb: 2}, {HostPath: "/project", ContainerPath: "/project"}},
				PortMappings: []job.PortMapping{{ContainerPort: 8888}}},
			Scheduling: job.Scheduling{Restartable: true, MinDuration: job.Duration(time.Minute), MaxDuration: job.Duration(time.Hour)},
			Extra:      job.Extra{EmailOnEnd: []string{"alice@example.org"}},
		},
		State: job.State{Status: st, Created: t0, Updated: t0.Add(time.Minute),
			EventTimes: map[job.Status]time.Time{job.StatusOnHold: t0, job.StatusQueued: t0.Add(time.Second), st: t0.Add(time.Minute)},
			Scheduling: job.StateScheduling{QueuedExplanations: []string{"no slave has 1 free GPU"}, EstimatedStart: &est},
		},
	}
	if st != job.StatusQueued && st != job.StatusOnHold {
		j.State.EventTimes[job.StatusRunning] = t0.Add(10 * time.Second)
		j.State.Scheduling = job.StateScheduling{AssignedClusterID: 1, AssignedSlaveName: "s1", AssignedInstanceID: "i1", TallyIncrement: 0.5,
			HaltEvents: []job.HaltEvent{{Time: t0, Reason: "SCORE", HaltedJobs: []string{"h"}, StartedJobs: []string{"s"}, VictimScore: 3, StarterScore: 1}}}
		j.State.Resources = &job.StateResources{ClusterID: 1, GPUIDs: []int{0}, CPUIDs: []int{0, 1}, CPUMemoryGb: 6, SlaveName: "s1", SlaveHost: "h1",
			SlaveInstanceID: "i1", PortMappings: []job.PortMapping{{ContainerPort: 8888, HostPort: 32768, HostIP: "0.0.0.0"}}, GPUDetails: gpus, ExitCode: &code}
		j.RestartInfo = &job.RestartInfo{InitialJobUUID: "9b4c3a9e-1111-4222-8333-444455556666", RestartCount: 2}
	}
	if st.Ended() {
		j.State.FinalUsageStatistics = usage
	}
	return j
}

// TestV4JobIsImecsJobModel maps jobs in every state, seen by their owner and by a stranger
// (sanitized), and checks each against our schema of imec's Job and the mapping itself.
func TestV4JobIsImecsJobModel(t *testing.T) {
	schemas, err := imecschema.Load()
	if err != nil {
		t.Fatal(err)
	}
	slaves := map[string]slaveFacts{"s1": {instanceID: "i1", pid: 4242, driverVersion: "550.54.15", cudaVersion: "12.4"}}
	for _, st := range job.AllStatuses {
		for _, sanitized := range []bool{false, true} {
			j := v4Fixture(t, st).Redacted()
			if sanitized {
				j = j.Sanitized()
			}
			data, err := json.Marshal(v4JobOf(j, sanitized, slaves))
			if err != nil {
				t.Fatal(err)
			}
			if err := schemas.Validate("job.json#/$defs/Job", data); err != nil {
				t.Errorf("%s (sanitized %v): %v\n%s", st, sanitized, err, data)
			}
			list, _ := json.Marshal(jobList{Items: []any{json.RawMessage(data)}, Page: 1, PageSize: 50})
			if err := schemas.Validate("job.json#/$defs/JobList", list); err != nil {
				t.Errorf("%s list: %v", st, err)
			}
			s := string(data)
			for _, banned := range []string{`"ONHOLD":`, `"exitCode"`, `"estimatedStart"`} {
				if strings.Contains(s, banned) {
					t.Errorf("%s: v4.0 job has %s: %s", st, banned, s)
				}
			}
			if !strings.Contains(s, `"eventTimes":{`) || !strings.Contains(s, `"created":"2026-05-01T10:00:00Z"`) || !strings.Contains(s, `"statusUpdated":"2026-05-01T10:01:00Z"`) {
				t.Errorf("%s: event times: %s", st, s)
			}
		}
	}
	// The details of the mapping, on a running job seen by its owner.
	out := v4JobOf(v4Fixture(t, job.StatusRunning).Redacted(), false, slaves)
	r := out.State.Resources
	if r.SlaveInstancePID != 4242 || r.GPUMemoryGb != 32 || r.TmpfsMemGb != 2 || r.CPUMemoryGb != 4 || r.WorkerID != 0 {
		t.Errorf("resources: %+v", r)
	}
	if g := r.GPUDetails; g == nil || g.CudaVersionInt != 12040 || g.NvmlVersion != "12.550.54.15" || len(g.GPUs) != 1 || g.GPUs[0].UUID != "GPU-aaaa" {
		t.Errorf("gpu details: %+v", g)
	}
	if h := out.State.Scheduling.HaltEvents; len(h) != 1 || h[0].SlaveName != "s1" || h[0].HaltedJobScores[0] != 3 || h[0].StartedJobScores[0] != 1 {
		t.Errorf("halt events: %+v", h)
	}
	if out.RestartInfo.RestartCount != 2 || out.Request.Docker.WorkingDir != "/work/" || !strings.Contains(out.Request.Docker.Image, "XXXX") {
		t.Errorf("restart info %+v, workingDir %q, image %q", out.RestartInfo, out.Request.Docker.WorkingDir, out.Request.Docker.Image)
	}
	if d := out.Request.Docker; d.User != "1000" || out.Request.Resources.GPUMemoryGb != 0 {
		t.Errorf("user %q, gpuMemoryGb %d: imec allows neither a group nor 1 GB", d.User, out.Request.Resources.GPUMemoryGb)
	}
	// A slave restarted since: its process is not the job's.
	if out := v4JobOf(v4Fixture(t, job.StatusRunning), false, map[string]slaveFacts{"s1": {instanceID: "other", pid: 7}}); out.State.Resources.SlaveInstancePID != -1 {
		t.Errorf("pid of another instance: %d", out.State.Resources.SlaveInstancePID)
	}
	// Queued: our estimated start is a line of imec's queuedExplanations; no restart yet.
	q := v4JobOf(v4Fixture(t, job.StatusQueued), false, nil)
	if e := q.State.Scheduling.QueuedExplanations; len(e) != 2 || e[1] != "Estimated start: 2026-05-01T11:00:00Z" {
		t.Errorf("queued explanations: %q", e)
	}
	// With a range, the same line says it; imec's model keeps no other field for it.
	rj := v4Fixture(t, job.StatusQueued)
	early, late := rj.State.Scheduling.EstimatedStart.Add(-30*time.Minute), rj.State.Scheduling.EstimatedStart.Add(50*time.Minute)
	rj.State.Scheduling.EstimatedStartEarliest, rj.State.Scheduling.EstimatedStartLatest = &early, &late
	if e := v4JobOf(rj, false, nil).State.Scheduling.QueuedExplanations; len(e) != 2 || e[1] != "Estimated start: 2026-05-01T11:00:00Z (likely May 1 10:30–May 1 11:50 UTC)" {
		t.Errorf("queued explanations with a range: %q", e)
	}
	if q.RestartInfo != (v4RestartInfo{InitialJobUUID: q.UUID}) || q.State.Resources != nil {
		t.Errorf("queued restart info %+v, resources %+v", q.RestartInfo, q.State.Resources)
	}
	// Finished: usage over the run, in imec's units.
	f := v4JobOf(v4Fixture(t, job.StatusFinished), false, slaves).State.FinalUsageStatistics
	if f == nil || f.ContainerStatistics.CPUUsage != 1.5 || f.ContainerStatistics.AggPeriodNs != int64(50*time.Second) ||
		f.ContainerStatistics.MemUsageByte != 512<<20 || f.GPUStatistics.GPUCount != 1 || f.GPUStatistics.AverageUtilization != 0.8 || f.GPUStatistics.AverageMemUtilization != 0.5 {
		t.Errorf("usage: %+v", f)
	}
}

// TestOpenAPIJobV4MatchesImecSchema: the OpenAPI document's v4.0 job (JobV4...) names the same
// fields, model by model, as the schema of imec's Job the conformance test checks answers with.
func TestOpenAPIJobV4MatchesImecSchema(t *testing.T) {
	var api struct {
		Components struct {
			Schemas map[string]struct {
				Required   []string                   `json:"required"`
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(OpenAPIDocument(), &api); err != nil {
		t.Fatal(err)
	}
	data, err := imecschema.File("job.json")
	if err != nil {
		t.Fatal(err)
	}
	var imec struct {
		Defs map[string]struct {
			Required   []string                   `json:"required"`
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(data, &imec); err != nil {
		t.Fatal(err)
	}
	// Deprecated fields imec accepts but never sends are not documented.
	undocumented := map[string]bool{"wasteReport": true, "withinMaxSimultaneousJobs": true}
	pairs := map[string]string{
		"JobV4": "Job", "JobV4RestartInfo": "RestartInfo", "JobV4Owner": "JobOwner", "JobV4State": "JobState",
		"JobV4StateScheduling": "JobStateScheduling", "JobV4EventTimes": "JobEventTimes", "JobV4HaltInfo": "HaltInfo",
		"JobV4Resources": "JobStateResources", "JobV4PortMapping": "JobPortMapping", "JobV4GpuOverview": "GpuOverview",
		"JobV4GpuInfo": "GpuInfo", "JobV4UsageStatistics": "GPULabUsageStatistics", "JobV4ContainerUsage": "ContainerUsageStatistics",
		"JobV4GpuUsage": "GpuUsageStatistics",
	}
	for ours, theirs := range pairs {
		a, ok := api.Components.Schemas[ours]
		if !ok {
			t.Errorf("OpenAPI has no %s", ours)
			continue
		}
		b := imec.Defs[theirs]
		var want []string
		for k := range b.Properties {
			if !undocumented[k] {
				want = append(want, k)
			}
		}
		var got []string
		for k := range a.Properties {
			got = append(got, k)
		}
		if g, w := strings.Join(sortedStrings(got), ","), strings.Join(sortedStrings(want), ","); g != w {
			t.Errorf("OpenAPI %s has %s\nimec's %s has %s", ours, g, theirs, w)
		}
		if g, w := strings.Join(sortedStrings(a.Required), ","), strings.Join(sortedStrings(b.Required), ","); g != w {
			t.Errorf("OpenAPI %s requires %s, imec's %s %s", ours, g, theirs, w)
		}
	}
}

// TestV4JobOfEveryExampleFile: every job file of the repository that we accept (imec's seed
// examples, version 1 files converted, our examples) reads as imec's Job in v4.0, whatever
// its request holds (command forms, storage, ports, scheduling options, e-mails).
func TestV4JobOfEveryExampleFile(t *testing.T) {
	schemas, err := imecschema.Load()
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, pattern := range []string{"../job/testdata/*/*.json", "../examples/*.json"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	opts := job.DefaultOptions()
	opts.KnownFeatures = []string{"nvlink", "ssd"}
	accepted := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		j, err := job.Parse(data, opts)
		if err != nil {
			continue // refused files are the job package's business
		}
		accepted++
		now := time.Now()
		j.UUID = "0b4c3a9e-1111-4222-8333-444455556666"
		j.Owner = job.Owner{UserURN: "urn:publicid:IDN+example.org+user+alice", UserEmail: "alice@example.org", ProjectURN: "urn:publicid:IDN+example.org+project+vision"}
		j.State = job.State{Status: job.StatusQueued, Created: now, Updated: now, EventTimes: map[job.Status]time.Time{job.StatusQueued: now}}
		out, err := json.Marshal(v4JobOf(j.Redacted(), false, nil))
		if err != nil {
			t.Fatal(err)
		}
		if err := schemas.Validate("job.json#/$defs/Job", out); err != nil {
			t.Errorf("%s: %v\n%s", f, err, out)
		}
	}
	if accepted < 20 {
		t.Errorf("only %d of %d example files were accepted jobs", accepted, len(files))
	}
	t.Logf("%d accepted job files of %d read as imec's Job", accepted, len(files))
}
