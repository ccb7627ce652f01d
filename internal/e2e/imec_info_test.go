package e2e

// Conformance of the v4.0 answers that imec's Python gpulab-cli validates besides the job
// itself: GET jobs/{id}/debug (a list of imec's JobEvent), GET clusters (ClusterInfo), GET
// slaves (SlaveInfo2) and GET version. imec's models (imecilabt-gpulab-common 6.x) forbid
// unknown fields and require some; the mirrors below are written from reading them: every
// field imec knows, pointers for the ones it requires (so a missing or null one is caught),
// decoded with DisallowUnknownFields as imec's extra="forbid" would refuse an unknown one.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/opengpulab/gpulab/job"
)

const v40 = "/api/gpulab/v4.0"

// confTime is imec's AwareDatetime: an ISO 8601 time with its zone.
type confTime struct{ time.Time }

func (c *confTime) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a time must be a string: %w", err)
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return fmt.Errorf("not a time with a zone: %q", s)
	}
	c.Time = t
	return nil
}

// confEnum reads an imec CaseInsensitiveEnum by member name.
type confEnum struct {
	name    string
	members []string
}

func (c *confEnum) check(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("an enum must be a string: %w", err)
	}
	for _, m := range c.members {
		if strings.EqualFold(m, s) {
			c.name = m
			return nil
		}
	}
	return fmt.Errorf("%q is none of %v", s, c.members)
}

type confEventType struct{ confEnum }

func (c *confEventType) UnmarshalJSON(b []byte) error {
	c.members = []string{"STATUS_CHANGE", "DEBUG", "INFO", "WARN", "ERROR"}
	return c.check(b)
}

type confJobStatus struct{ confEnum }

func (c *confJobStatus) UnmarshalJSON(b []byte) error {
	c.members = []string{"ONHOLD", "QUEUED", "ASSIGNED", "STARTING", "RUNNING", "CANCELLED", "FINISHED", "DELETED",
		"FAILED", "MUSTHALT", "HALTING", "HALTED"}
	return c.check(b)
}

// confJobID is imec's JobId: a UUID.
type confJobID string

func (c *confJobID) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if _, err := uuid.Parse(s); err != nil {
		return fmt.Errorf("job id %q is not a UUID", s)
	}
	*c = confJobID(s)
	return nil
}

// confJobEvent is imec's JobEvent. imec accepts jobId or job_id, and newState, new_state or
// new_status; we hold ourselves to the first of each.
type confJobEvent struct {
	JobID    *confJobID     `json:"jobId" conf:"required"`
	Type     *confEventType `json:"type" conf:"required"`
	Time     *confTime      `json:"time"`
	NewState *confJobStatus `json:"newState"`
	Msg      *string        `json:"msg"`
}

// confResourceInfo is imec's ResourceInfo (strict ints; acquired − used = available).
type confResourceInfo struct {
	SystemTotal *int `json:"systemTotal" conf:"required"`
	Acquired    *int `json:"acquired" conf:"required"`
	Used        *int `json:"used" conf:"required"`
	Available   *int `json:"available" conf:"required"`
}

func (r *confResourceInfo) valid() error {
	if r == nil || r.Acquired == nil || r.Used == nil || r.Available == nil {
		return nil // reported as missing
	}
	if *r.Acquired-*r.Used != *r.Available {
		return fmt.Errorf("acquired - used != available (%d - %d != %d)", *r.Acquired, *r.Used, *r.Available)
	}
	return nil
}

type confGpuModel struct {
	Vendor   *string `json:"vendor" conf:"required"`
	Name     *string `json:"name" conf:"required"`
	MemoryMb *int    `json:"memoryMb" conf:"required"`
}

type confActiveJobsCounts struct {
	Onhold   *int `json:"onhold" conf:"required"`
	Queued   *int `json:"queued" conf:"required"`
	Assigned *int `json:"assigned" conf:"required"`
	Starting *int `json:"starting" conf:"required"`
	Running  *int `json:"running" conf:"required"`
	Musthalt *int `json:"musthalt" conf:"required"`
	Halting  *int `json:"halting" conf:"required"`
}

// confClusterInfo is imec's ClusterInfo.
type confClusterInfo struct {
	DeploymentEnvironment   *string               `json:"deploymentEnvironment" conf:"required"`
	ClusterID               *int                  `json:"clusterId" conf:"required"`
	Comment                 *string               `json:"comment" conf:"required"`
	IsPrivate               *bool                 `json:"isPrivate" conf:"required"`
	SlaveCount              int                   `json:"slaveCount"`
	GpuModel                []confGpuModel        `json:"gpuModel"`
	Worker                  *confResourceInfo     `json:"worker"`
	CPUMemoryMb             *confResourceInfo     `json:"cpuMemoryMb"`
	GPU                     *confResourceInfo     `json:"gpu"`
	CPU                     *confResourceInfo     `json:"cpu"`
	ActiveJobsCounts        *confActiveJobsCounts `json:"activeJobsCounts"`
	HaveAccess              *bool                 `json:"haveAccess"`
	AllowedProjects         []string              `json:"allowedProjects"`
	StoragePathsAvailable   []string              `json:"storagePathsAvailable"`
	StorageAliasesAvailable map[string]string     `json:"storageAliasesAvailable"`
}

// confSlaveInfo2 is imec's SlaveInfo2 (with SlaveInstanceBase's fields).
type confSlaveInfo2 struct {
	Name                                *string               `json:"name" conf:"required"`
	InstanceID                          *string               `json:"instanceId" conf:"required"`
	ClusterID                           *int                  `json:"clusterId" conf:"required"`
	PID                                 *int                  `json:"pid"`
	DeploymentEnvironment               *string               `json:"deploymentEnvironment"`
	SoftwareVersion                     *string               `json:"softwareVersion"`
	Aliases                             []string              `json:"aliases"`
	Comment                             *string               `json:"comment"`
	Host                                *string               `json:"host"`
	GpuModel                            []confGpuModel        `json:"gpuModel" conf:"required"`
	CPUModel                            []string              `json:"cpuModel" conf:"required"`
	Worker                              *confResourceInfo     `json:"worker" conf:"required"`
	CPUMemoryMb                         *confResourceInfo     `json:"cpuMemoryMb" conf:"required"`
	GPU                                 *confResourceInfo     `json:"gpu" conf:"required"`
	CPU                                 *confResourceInfo     `json:"cpu" conf:"required"`
	LastUpdate                          *confTime             `json:"lastUpdate" conf:"required"`
	ShuttingDown                        *bool                 `json:"shuttingDown" conf:"required"`
	CudaVersionFull                     *string               `json:"cudaVersionFull"`
	CudaVersionMajor                    *int                  `json:"cudaVersionMajor"`
	DockerDiskUsedPercent               *float64              `json:"dockerDiskUsedPercent"`
	AcceptingJobs                       *bool                 `json:"acceptingJobs"`
	Statistics                          json.RawMessage       `json:"statistics"`
	ActiveJobsCounts                    *confActiveJobsCounts `json:"activeJobsCounts"`
	StoragePathsAvailable               []string              `json:"storagePathsAvailable"`
	StorageAliasesAvailable             map[string]string     `json:"storageAliasesAvailable"`
	StoragePathsAvailableProjectLimited map[string][]string   `json:"storagePathsAvailableProjectLimited"`
	ActiveJobUUIDs                      []string              `json:"activeJobUuids"`
}

var cudaFullPattern = regexp.MustCompile(`^([0-9]+)\.[0-9.]+$`)

// valid checks what imec's validators check beyond types: the CUDA major version agrees with
// the full version, and every ResourceInfo adds up.
func (s *confSlaveInfo2) valid() error {
	if s.CudaVersionMajor != nil && s.CudaVersionFull != nil {
		m := cudaFullPattern.FindStringSubmatch(*s.CudaVersionFull)
		if m == nil || m[1] != strconv.Itoa(*s.CudaVersionMajor) {
			return fmt.Errorf("cudaVersionMajor %d disagrees with cudaVersionFull %q", *s.CudaVersionMajor, *s.CudaVersionFull)
		}
	}
	return validResources(s.Worker, s.CPUMemoryMb, s.GPU, s.CPU)
}

func (c *confClusterInfo) valid() error { return validResources(c.Worker, c.CPUMemoryMb, c.GPU, c.CPU) }

func validResources(rs ...*confResourceInfo) error {
	for _, r := range rs {
		if err := r.valid(); err != nil {
			return err
		}
	}
	return nil
}

// decodeConform decodes data into out (a pointer to a mirror, or to a list of them) refusing
// unknown fields, then reports every required field that is missing or null.
func decodeConform(data []byte, out any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		return err
	}
	if missing := missingRequired(reflect.ValueOf(out), ""); len(missing) > 0 {
		return fmt.Errorf("required fields missing or null: %s", strings.Join(missing, ", "))
	}
	return nil
}

// missingRequired walks a decoded mirror and lists the paths of required fields left nil.
func missingRequired(v reflect.Value, path string) []string {
	var out []string
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			out = append(out, missingRequired(v.Elem(), path)...)
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			out = append(out, missingRequired(v.Index(i), fmt.Sprintf("%s[%d]", path, i))...)
		}
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name := path + "." + strings.Split(f.Tag.Get("json"), ",")[0]
			fv := v.Field(i)
			if f.Tag.Get("conf") == "required" && (fv.Kind() == reflect.Pointer || fv.Kind() == reflect.Slice) && fv.IsNil() {
				out = append(out, strings.TrimPrefix(name, "."))
				continue
			}
			out = append(out, missingRequired(fv, name)...)
		}
	}
	return out
}

// imecNags says whether imec's gpulab-cli of version current warns that latest is newer, by
// imec's rule: it stays quiet when latest equals its own version or is older than it
// (compared as lists of numbers, a shorter equal prefix being older); a version it cannot read
// counts as not older.
func imecNags(current, latest string) bool {
	nums := func(s string) ([]int, bool) {
		var out []int
		for _, p := range strings.Split(s, ".") {
			n, err := strconv.Atoi(p)
			if err != nil {
				return nil, false
			}
			out = append(out, n)
		}
		return out, true
	}
	cur, ok1 := nums(current)
	lat, ok2 := nums(latest)
	older := false
	if ok1 && ok2 {
		older = slices.Compare(lat, cur) < 0
	}
	return !older && latest != current
}

func TestImecNagRule(t *testing.T) {
	for _, tt := range []struct {
		current, latest string
		nag             bool
	}{
		{"3.11", "3.11", false}, {"3.11.2", "3.11", false}, {"3.12.0", "3.11", false}, {"4.0.1", "3.11", false},
		{"3.10.5", "3.11", true}, {"3.11", "4.0.0", true}, {"3.11.2", "3.11.x", true},
	} {
		if got := imecNags(tt.current, tt.latest); got != tt.nag {
			t.Errorf("client %s, latest %s: nags = %v, want %v", tt.current, tt.latest, got, tt.nag)
		}
	}
}

// TestImecClientModels checks GET debug, clusters, slaves and version of v4.0 against imec's
// models on a master with a fake-GPU slave and jobs in several states, and that v3.1 keeps
// our own shapes.
func TestImecClientModels(t *testing.T) {
	e := newEnv(t)
	// Two CPUs: jobs are pinned to CPU ids, and the test machine may have no more.
	e.startSlave(slaveOpts{name: "imec", cluster: 1, fakeGPUs: "2xV100-32GB", cpus: 2})
	oneGPU := func(r map[string]any) { r["resources"].(map[string]any)["gpus"] = 1 }

	running := e.submit(e.jobFile("imec-running", "echo up; sleep 600", oneGPU))
	failed := e.submit(e.jobFile("imec-failed", "exit 3", nil))
	finished := e.submit(e.jobFile("imec-finished", "echo done", nil))
	status, data, _ := e.m.Do(e.alice, "POST", v31+"/jobs?hold=true", strings.NewReader(e.jobFile("imec-held", "echo hi", nil)))
	if status != 201 {
		t.Fatalf("submit held: %d %s", status, data)
	}
	held := strings.TrimSpace(string(data))
	e.waitFor(running, job.StatusRunning)
	e.waitFor(failed, job.StatusFailed)
	e.waitFor(finished, job.StatusFinished)
	deleted := e.submit(e.jobFile("imec-deleted", "echo bye", nil))
	e.waitFor(deleted, job.StatusFinished)
	if status, data, _ := e.m.Do(e.alice, "DELETE", v40+"/jobs/"+deleted, nil); status != 200 {
		t.Fatalf("delete: %d %s", status, data)
	}
	// imec's `halt`: PUT state/status with the bare text MUSTHALT, on v4.0.
	halted := e.submit(e.jobFile("imec-halted", haltScript, func(r map[string]any) {
		r["scheduling"] = map[string]any{"restartable": true}
	}))
	e.waitFor(halted, job.StatusRunning)
	if status, data, _ := e.m.Do(e.alice, "PUT", v40+"/jobs/"+halted+"/state/status", strings.NewReader("MUSTHALT")); status != 200 {
		t.Fatalf("halt: %d %s", status, data)
	}
	e.waitFor(halted, job.StatusHalted)
	cancelled := e.submit(e.jobFile("imec-cancelled", "sleep 600", nil))
	e.put(cancelled, "CANCELLED")
	e.waitFor(cancelled, job.StatusCancelled)

	get := func(path string) []byte {
		t.Helper()
		status, data, _ := e.m.Do(e.alice, "GET", path, nil)
		if status != 200 {
			t.Fatalf("GET %s: %d %s", path, status, data)
		}
		return data
	}

	// debug: a list of JobEvent for every job, the state changes naming the state entered.
	for id, want := range map[string]job.Status{running: job.StatusRunning, failed: job.StatusFailed,
		finished: job.StatusFinished, held: job.StatusOnHold, cancelled: job.StatusCancelled, deleted: job.StatusDeleted, halted: job.StatusHalted} {
		data := get(v40 + "/jobs/" + id + "/debug")
		t.Logf("v4.0 debug of the %s job: %s", want, data)
		var evs []confJobEvent
		if err := decodeConform(data, &evs); err != nil {
			t.Fatalf("debug of the %s job is no list of imec's JobEvent: %v\n%s", want, err, data)
		}
		var states []string
		for _, ev := range evs {
			if string(*ev.JobID) != id {
				t.Errorf("event of job %s names job %s", id, *ev.JobID)
			}
			if ev.Type.name == "STATUS_CHANGE" {
				if ev.NewState == nil {
					t.Errorf("a STATUS_CHANGE of job %s without newState: %s", id, data)
					continue
				}
				states = append(states, ev.NewState.name)
			}
		}
		if len(states) == 0 || states[len(states)-1] != string(want) {
			t.Errorf("the %s job's state changes are %v, want the last to be %s", want, states, want)
		}
	}

	// clusters: ClusterInfo of cluster 1 counts the slave and the running job's GPU.
	data = get(v40 + "/clusters")
	t.Logf("v4.0 clusters: %s", data)
	var clusters []confClusterInfo
	if err := decodeConform(data, &clusters); err != nil {
		t.Fatalf("clusters is no list of imec's ClusterInfo: %v\n%s", err, data)
	}
	i := slices.IndexFunc(clusters, func(c confClusterInfo) bool { return *c.ClusterID == 1 })
	if i < 0 {
		t.Fatalf("no cluster 1 in %s", data)
	}
	c := clusters[i]
	if err := c.valid(); err != nil {
		t.Errorf("cluster 1: %v", err)
	}
	if c.SlaveCount < 1 || c.GPU == nil || *c.GPU.Acquired < 2 || *c.GPU.Used < 1 {
		t.Errorf("cluster 1 shows %d slaves and GPUs %+v, want the slave's 2 GPUs with 1 used:\n%s", c.SlaveCount, c.GPU, data)
	}

	// slaves: SlaveInfo2 of the slave, with its GPU model and the running job's GPU used.
	data = get(v40 + "/slaves")
	t.Logf("v4.0 slaves: %s", data)
	var slaves []confSlaveInfo2
	if err := decodeConform(data, &slaves); err != nil {
		t.Fatalf("slaves is no list of imec's SlaveInfo2: %v\n%s", err, data)
	}
	name := slaveName("imec")
	i = slices.IndexFunc(slaves, func(s confSlaveInfo2) bool { return *s.Name == name })
	if i < 0 {
		t.Fatalf("no slave %s in %s", name, data)
	}
	s := slaves[i]
	if err := s.valid(); err != nil {
		t.Errorf("slave %s: %v", name, err)
	}
	if *s.GPU.SystemTotal != 2 || *s.GPU.Used != 1 || *s.GPU.Available != 1 || *s.CPUMemoryMb.Acquired != 8192 {
		t.Errorf("slave %s: gpu %+v, cpuMemoryMb %+v; want 2 GPUs with 1 used, 8192 MB", name, s.GPU, s.CPUMemoryMb)
	}
	if len(s.GpuModel) != 1 || !strings.Contains(*s.GpuModel[0].Name, "V100") || *s.GpuModel[0].MemoryMb <= 0 {
		t.Errorf("slave %s: gpuModel %s", name, data)
	}
	if s.CudaVersionMajor == nil || *s.CudaVersionMajor != 12 || time.Since(s.LastUpdate.Time) > time.Hour {
		t.Errorf("slave %s: cudaVersionMajor, lastUpdate wrong in %s", name, data)
	}

	// version: what imec's client 3.11 reads, without a nag.
	data = get(v40 + "/version")
	var v map[string]string
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("version: %v: %s", err, data)
	}
	latest, ok := v["latest_client_version"]
	if !ok || imecNags("3.11", latest) || imecNags("3.11.2", latest) {
		t.Errorf("v4.0 version %s would make imec's client 3.11 ask for an upgrade", data)
	}

	// log -f: imec's client asks for its next piece from the end of the Content-Range it got,
	// so v4.0's end is where the next piece starts (v3.1 keeps HTTP's last byte); from there
	// there is nothing new (204), not the last byte again.
	e.waitLog(running, "up\n")
	for _, tt := range []struct{ base, want string }{{v40, "bytes 0-3/3"}, {v31, "bytes 0-2/3"}} {
		status, _, h := e.m.Do(e.alice, "GET", tt.base+"/jobs/"+running+"/log", nil, "Range", "bytes=0-")
		if status != 206 || h.Get("Content-Range") != tt.want {
			t.Errorf("%s log with Range bytes=0-: %d, Content-Range %q, want 206 %q", tt.base, status, h.Get("Content-Range"), tt.want)
		}
	}
	if status, data, _ := e.m.Do(e.alice, "GET", v40+"/jobs/"+running+"/log", nil, "Range", "bytes=3-"); status != 204 {
		t.Errorf("v4.0 log from the end imec's client was given: %d %q, want 204", status, data)
	}

	// jobs as imec's `jobs -u -c 50` asks: Python writes the flag "True"; imec reads "items".
	data = get(v40 + "/jobs?user_urn=" + url.QueryEscape(e.alice.URN) + "&other_user_running=True&page_size=50")
	type listed struct {
		UUID string `json:"uuid"`
	}
	var list struct {
		Items []listed `json:"items"`
	}
	if err := json.Unmarshal(data, &list); err != nil || !slices.Contains(list.Items, listed{running}) {
		t.Errorf("v4.0 jobs as imec lists them lacks the running job (%v): %.500s", err, data)
	}

	// v3.1 keeps our own shapes, which our CLI and the portal read.
	var ours []struct {
		ID     int               `json:"id"`
		Slaves []json.RawMessage `json:"slaves"`
	}
	if err := json.Unmarshal(get(v31+"/clusters"), &ours); err != nil || len(ours) == 0 || ours[0].ID == 0 {
		t.Errorf("v3.1 clusters lost its shape: %v", err)
	}
	var ourEvents []struct {
		ID   int64  `json:"id"`
		Type string `json:"type"`
	}
	if err := json.Unmarshal(get(v31+"/jobs/"+running+"/debug"), &ourEvents); err != nil || len(ourEvents) == 0 || ourEvents[0].Type != "status" {
		t.Errorf("v3.1 debug lost its shape: %v %+v", err, ourEvents)
	}
}
