package handlers

import (
	"database/sql"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/a-h/templ"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/store"
	"github.com/opengpulab/gpulab/views"
)

func TestFormField(t *testing.T) {
	for path, want := range map[string]string{
		"name":                                    "name",
		"owner.projectUrn":                        "project",
		"request.resources.cpus":                  "cpus",
		"request.resources.gpuModel[1]":           "gpuModel",
		"request.docker.storage[1].containerPath": "storage",
		"request.docker.environment.1BAD":         "environment",
		"request.scheduling.killableAfter":        "minDuration",
		"jobDefinition.resources.systemMemory":    "cpuMemoryGb",
		"jobDefinition.dockerImage":               "image",
		"request.resourcs":                        "",
		"request.resources":                       "",
		"names":                                   "",
		"":                                        "",
	} {
		if got := FormField(path); got != want {
			t.Errorf("FormField(%q) = %q, want %q", path, got, want)
		}
	}
	if got := fieldMessage(job.Problem{Path: "request.docker.storage[1].containerPath", Message: "must be absolute"}); got != "[1].containerPath: must be absolute" {
		t.Errorf("fieldMessage = %q", got)
	}
	if got := fieldMessage(job.Problem{Path: "owner.userUrn", Message: "m"}); got != "userUrn: m" {
		t.Errorf("fieldMessage = %q", got)
	}
}

// A document shown in the form and read back unchanged is the same document: the form's
// notation loses nothing of the fields it shows.
func TestFormRoundTrip(t *testing.T) {
	text := `{"name": "n", "description": "d", "owner": {"projectUrn": "urn:p"},
	"request": {"resources": {"cpus": 2, "gpus": 1, "cpuMemoryGb": 4, "gpuModel": ["V100", "A100"], "clusterId": 3},
	"docker": {"image": "img:1", "command": ["sh", "-c", "echo 'a b'"], "environment": {"A": "1", "B": "x=y"},
	  "portMappings": [8888, {"containerPort": 80, "hostPort": 30080}, {"containerPort": 81, "hostPort": 30081, "hostIp": "127.0.0.1"}],
	  "storage": ["/project", {"hostPath": "/data/x", "containerPath": "/x"}, {"hostPath": "tmpfs", "containerPath": "/scratch", "sizeGb": 2}]},
	"scheduling": {"interactive": true, "restartable": false, "minDuration": "1 h", "maxDuration": 7200}}}`
	doc, err := decodeDoc(text)
	if err != nil {
		t.Fatal(err)
	}
	f := formFromDoc(doc)
	want := views.JobForm{Name: "n", Description: "d", Project: "urn:p", Image: "img:1", Command: `sh -c 'echo '\''a b'\'''`,
		CPUs: "2", GPUs: "1", CPUMemoryGb: "4", GPUModel: "V100, A100", ClusterID: "3", Interactive: true,
		MinDuration: "1 h", MaxDuration: "7200s", Ports: "8888, 30080:80, 127.0.0.1:30081:81",
		Storage: "/project\n/data/x:/x\ntmpfs:/scratch:2", Environment: "A=1\nB=x=y"}
	if f != want {
		t.Fatalf("form\n got %+v\nwant %+v", f, want)
	}
	// Applying every field of the form to an empty document gives the same job.
	empty := map[string]any{}
	if ps := applyForm(empty, f, views.JobForm{}); len(ps) != 0 {
		t.Fatalf("problems %v", ps)
	}
	a, errA := job.Parse([]byte(encodeDoc(empty)), job.DefaultOptions())
	b, errB := job.Parse([]byte(text), job.DefaultOptions())
	if errA != nil || errB != nil {
		t.Fatalf("parse: %v / %v", errA, errB)
	}
	a.Request.Docker.Command, b.Request.Docker.Command = job.Command{}, job.Command{} // string vs list, same words
	if !reflect.DeepEqual(a, b) {
		t.Errorf("through the form:\n%+v\ndirect:\n%+v", a.Request, b.Request)
	}
	words, _ := job.SplitCommand(f.Command)
	if strings.Join(words, "|") != "sh|-c|echo 'a b'" {
		t.Errorf("command words %q", words)
	}
	// Unchanged fields leave the document alone, changed ones replace, emptied ones remove.
	doc2, _ := decodeDoc(text)
	g := f
	g.GPUModel, g.Ports, g.Description = "T4", "", ""
	applyForm(doc2, g, f)
	if v, _ := docGet(doc2, "request.resources.gpuModel"); v != "T4" {
		t.Errorf("gpuModel %v", v)
	}
	if _, ok := docGet(doc2, "request.docker.portMappings"); ok {
		t.Errorf("ports not removed")
	}
	if _, ok := doc2["description"]; ok {
		t.Errorf("description not removed")
	}
	if v, _ := docGet(doc2, "request.scheduling.maxDuration"); v != json.Number("7200") {
		t.Errorf("untouched maxDuration became %v", v)
	}
}

func TestFormNotationProblems(t *testing.T) {
	doc := map[string]any{}
	ps := applyForm(doc, views.JobForm{Ports: "88, x:1, 1:2:3:4", Storage: "tmpfs:/a:big\n/a:/b:/c", Environment: "A=1\nnoequals"}, views.JobForm{})
	var paths []string
	for _, p := range ps {
		paths = append(paths, FormField(p.Path))
	}
	if strings.Join(paths, ",") != "ports,ports,storage,storage,environment" {
		t.Errorf("problems %v", ps)
	}
	if v, _ := docGet(doc, "request.docker.portMappings"); !reflect.DeepEqual(v, []any{88}) {
		t.Errorf("valid ports kept: %v", v)
	}
}

func TestEncodeDoc(t *testing.T) {
	doc, _ := decodeDoc(`{"request": {"scheduling": {}, "docker": {"image": "a<b>"}, "resources": {"gpus": 0, "cpus": 1}}, "zeta": 1, "name": "n"}`)
	got := encodeDoc(doc)
	want := `{
  "name": "n",
  "request": {
    "resources": {
      "cpus": 1,
      "gpus": 0
    },
    "docker": {
      "image": "a<b>"
    },
    "scheduling": {}
  },
  "zeta": 1
}`
	if got != want {
		t.Errorf("encodeDoc:\n%s", got)
	}
}

func TestCompleteUTF8(t *testing.T) {
	for in, want := range map[string]int{"": 0, "abc": 3, "a\xc3": 1, "a\xc3\xb6": 3, "\xe2\x82": 0, "\xe2\x82\xac": 3, "\xf0\x9f\x98": 0, "\xff": 1} {
		if got := completeUTF8([]byte(in)); got != want {
			t.Errorf("completeUTF8(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestLocalPath(t *testing.T) {
	for in, want := range map[string]string{
		"/jobs": "/jobs", "/jobs?scope=running": "/jobs?scope=running", "": "/x", "//evil.example/": "/x",
		"https://evil.example/": "/x", "/\\evil": "/x", "jobs": "/x", "/a\r\nSet-Cookie: x": "/x",
	} {
		if got := localPath(in, "/x"); got != want {
			t.Errorf("localPath(%q) = %q", in, got)
		}
	}
}

func TestLiveSlavesUtilisation(t *testing.T) {
	inv, _ := json.Marshal(protocol.Inventory{GPUs: []protocol.GPU{{Index: 1, Model: "A100"}, {Index: 0, Model: "A100"}}})
	usage, _ := json.Marshal([]protocol.RunningJob{{JobUUID: "j", Usage: &protocol.Usage{GPUs: []protocol.GPUUsage{{Index: 1, UtilPercent: 37.4}}}}})
	hb := time.Now()
	raw := []store.Slave{{Name: "s", Inventory: inv, Usage: usage, Online: true, LastHeartbeat: sql.NullTime{Time: hb, Valid: true}}}
	infos := []SlaveInfo{{Name: "s", Online: true}}
	out := liveSlaves(nil, nil, infos, raw, nil)
	if len(out) != 1 || len(out[0].GPUs) != 2 || out[0].GPUs[0].Index != 0 || out[0].GPUs[0].Util != "–" || out[0].GPUs[1].Util != "37 %" {
		t.Errorf("slave view %+v", out)
	}
	infos[0].Online = false
	if out := liveSlaves(nil, nil, infos, raw, nil); out[0].GPUs[1].Util != "–" {
		t.Errorf("an offline slave's old sample is shown")
	}
}

// What a heartbeat keeps on its slave's row reads as the full job list did, and is smaller.
func TestGPUReportKeepsTheUtilisation(t *testing.T) {
	held := []protocol.RunningJob{
		{JobUUID: "3f1d2c1e-8a4b-4c56-9d7e-0123456789ab", Attempt: 2, ContainerID: "c0ffee", Status: job.StatusRunning,
			Usage: &protocol.Usage{CPUPercent: 250, MemoryMiB: 4096, GPUs: []protocol.GPUUsage{{Index: 3, UtilPercent: 87.25, MemoryUsedMiB: 9000}, {Index: 0, UtilPercent: 0}}}},
		{JobUUID: "4f1d2c1e-8a4b-4c56-9d7e-0123456789ab", Attempt: 1, ContainerID: "beef", Status: job.StatusStarting},
		{JobUUID: "5f1d2c1e-8a4b-4c56-9d7e-0123456789ab", Attempt: 1, Status: job.StatusRunning, Usage: &protocol.Usage{GPUs: []protocol.GPUUsage{{Index: 5, UtilPercent: 12}}}},
	}
	full, _ := json.Marshal(held)
	report := gpuReport(held)
	if got, want := gpuUtilisation(report), map[int]float64{0: 0, 3: 87.3, 5: 12}; !reflect.DeepEqual(got, want) {
		t.Errorf("utilisation from the report %s: %v, want %v", report, got, want)
	}
	if len(report) >= len(full)/3 {
		t.Errorf("the report (%d bytes) is not much smaller than the job list (%d)", len(report), len(full))
	}
	if got := gpuUtilisation(gpuReport(nil)); len(got) != 0 {
		t.Errorf("no jobs: %v", got)
	}
}

// render writes exactly the component's markup, page after page: the buffer it makes them in
// is reused, and a short page after a long one carries nothing of the long one.
func TestRenderWritesOnlyItsPage(t *testing.T) {
	h := &Handlers{}
	for _, page := range []string{strings.Repeat("<p>long</p>", 5000), "<p>short</p>", "", "<p>short</p>"} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if err := h.render(rec, r, http.StatusTeapot, templ.Raw(page)); err != nil {
			t.Fatal(err)
		}
		if rec.Code != http.StatusTeapot || rec.Body.String() != page || rec.Header().Get("Content-Type") != "text/html; charset=utf-8" {
			t.Fatalf("rendered %d %q (%d bytes), want %q", rec.Code, rec.Header().Get("Content-Type"), rec.Body.Len(), page[:min(len(page), 40)])
		}
	}
}
