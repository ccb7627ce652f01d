package job

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fill sets every field reachable from v to a non-zero value, so that a field added to the job
// types later is covered by the Clone test without anyone remembering to add it.
func fill(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), n)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Date(2025, 1, 1, 0, 0, *n, 0, time.UTC)))
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), n)
			}
		}
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := 0; i < 2; i++ {
			fill(s.Index(i), n)
		}
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k := reflect.New(v.Type().Key()).Elem()
		fill(k, n)
		e := reflect.New(v.Type().Elem()).Elem()
		fill(e, n)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.String:
		v.SetString("s" + strings.Repeat("x", *n%7))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(int64(*n))
	case reflect.Uint8:
		v.SetUint(uint64('0' + *n%10))
	case reflect.Float64:
		v.SetFloat(float64(*n) + 0.5)
	default:
		panic("fill: unhandled kind " + v.Kind().String())
	}
}

// shared reports a path at which a and b share memory (a pointer, slice or map).
func shared(a, b reflect.Value, path string) string {
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() {
			return ""
		}
		if a.Pointer() == b.Pointer() {
			return path
		}
		return shared(a.Elem(), b.Elem(), path)
	case reflect.Slice:
		if a.Len() > 0 && a.Pointer() == b.Pointer() {
			return path
		}
		for i := 0; i < a.Len(); i++ {
			if p := shared(a.Index(i), b.Index(i), path+"[]"); p != "" {
				return p
			}
		}
	case reflect.Map:
		if a.Len() > 0 && a.Pointer() == b.Pointer() {
			return path
		}
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			if !a.Type().Field(i).IsExported() {
				continue
			}
			if p := shared(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name); p != "" {
				return p
			}
		}
	}
	return ""
}

func TestClone(t *testing.T) {
	var j Job
	n := 0
	fill(reflect.ValueOf(&j).Elem(), &n)
	c := j.Clone()
	if !reflect.DeepEqual(c, &j) {
		t.Fatalf("Clone differs:\n%+v\n%+v", c, j)
	}
	if p := shared(reflect.ValueOf(&j).Elem(), reflect.ValueOf(c).Elem(), "Job"); p != "" {
		t.Errorf("Clone shares memory with the original at %s", p)
	}
	if (*Job)(nil).Clone() != nil || (*Job)(nil).Redacted() != nil || (*Job)(nil).Sanitized() != nil {
		t.Error("nil job does not stay nil")
	}
}

func fullJob(t *testing.T) *Job {
	t.Helper()
	j := mustParse(t, []byte(`{
		"name": "secret-experiment", "description": "about my thesis",
		"owner": {"projectUrn": "urn:publicid:IDN+example.org+project+p", "userUrn": "urn:publicid:IDN+example.org+user+me", "userEmail": "me@example.org"},
		"request": {
			"resources": {"cpus": 1, "gpus": 1, "cpuMemoryGb": 2},
			"docker": {"image": "gitlab+deploy-token-3:S3cr3tT0ken@gitlab.ilabt.imec.be:4567/ilabt/gpulab/sample:nvidia-smi",
				"environment": {"TOKEN": "x"}, "portMappings": [8888], "command": "run"},
			"extra": {"emailOnEnd": "me@example.org"}
		}}`))
	j.UUID = "a280f7e8-b1e6-11e9-93a1-ffe9aeb472f8"
	j.State.Status = StatusRunning
	j.State.Resources = &StateResources{SlaveName: "n085-02", PortMappings: []PortMapping{{ContainerPort: 8888, HostPort: 32768, HostIP: "::"}}}
	return j
}

func TestRedacted(t *testing.T) {
	j := fullJob(t)
	r := j.Redacted()
	want := "gitlab+deploy-token-3:XXXX@gitlab.ilabt.imec.be:4567/ilabt/gpulab/sample:nvidia-smi"
	if r.Request.Docker.Image != want {
		t.Errorf("image = %q, want %q", r.Request.Docker.Image, want)
	}
	b, _ := json.Marshal(r)
	if strings.Contains(string(b), "S3cr3tT0ken") {
		t.Errorf("password in the redacted job JSON: %s", b)
	}
	if !strings.Contains(string(b), `"image":"`+want+`"`) {
		t.Errorf("redacted image missing from the JSON: %s", b)
	}
	if !strings.Contains(j.Request.Docker.Image, "S3cr3tT0ken") {
		t.Error("Redacted changed the original")
	}
	if r.Request.Docker.Environment["TOKEN"] != RedactedPassword {
		t.Errorf("environment TOKEN = %q, want it redacted", r.Request.Docker.Environment["TOKEN"])
	}
	// The rest is the same job.
	r.Request.Docker.Image = j.Request.Docker.Image
	r.Request.Docker.Environment = j.Request.Docker.Environment
	if !reflect.DeepEqual(r, j) {
		t.Error("Redacted changed more than the image and the secret environment values")
	}
	// A public image is left alone.
	pub := mustParse(t, mustJSON(t, minimalDoc())).Redacted()
	if pub.Request.Docker.Image != "debian:stable" {
		t.Errorf("public image = %q", pub.Request.Docker.Image)
	}
}

func TestSanitized(t *testing.T) {
	j := fullJob(t)
	s := j.Sanitized()
	b, _ := json.Marshal(s)
	for _, secret := range []string{"secret-experiment", "thesis", "me@example.org", "+user+me", "+project+p", "S3cr3t", "TOKEN", "8888", "32768", "gitlab"} {
		if strings.Contains(string(b), secret) {
			t.Errorf("sanitized JSON shows %q: %s", secret, b)
		}
	}
	if s.Name != "job-a280f7" {
		t.Errorf("name = %q, want job-a280f7", s.Name)
	}
	if s.Owner != (Owner{UserURN: HiddenUserURN, ProjectURN: HiddenUserURN}) {
		t.Errorf("owner = %+v", s.Owner)
	}
	if !strings.Contains(string(b), `"docker":{"image":"hidden"}`) {
		t.Errorf("docker not reduced to the hidden image: %s", b)
	}
	if s.State.Resources == nil || s.State.Resources.PortMappings == nil || len(s.State.Resources.PortMappings) != 0 || s.State.Resources.SlaveName != "n085-02" {
		t.Errorf("state.resources = %+v", s.State.Resources)
	}
	if s.Request.Resources.GPUs != 1 || s.State.Status != StatusRunning || s.UUID != j.UUID {
		t.Error("sanitizing removed what others may see")
	}
	if j.Name != "secret-experiment" || j.State.Resources.PortMappings == nil {
		t.Error("Sanitized changed the original")
	}
	j.Name = JupyterHubJobName
	if got := j.Sanitized().Name; got != JupyterHubJobName {
		t.Errorf("JupyterHub job name = %q", got)
	}
}

// Environment values whose names say they are secrets (the JupyterHub spawner's API token) are
// shown as XXXX; others, and the original, are left alone.
func TestRedactedEnvironment(t *testing.T) {
	j := fullJob(t)
	j.Request.Docker.Environment = map[string]string{"JUPYTERHUB_API_TOKEN": "hub-t0ken", "aws_secret_access_key": "k3y",
		"DB_PASSWORD": "pw", "JUPYTERHUB_USER": "alice", "EPOCHS": "10"}
	r := j.Redacted()
	want := map[string]string{"JUPYTERHUB_API_TOKEN": "XXXX", "aws_secret_access_key": "XXXX", "DB_PASSWORD": "XXXX",
		"JUPYTERHUB_USER": "alice", "EPOCHS": "10"}
	if !reflect.DeepEqual(r.Request.Docker.Environment, want) {
		t.Errorf("redacted environment = %v, want %v", r.Request.Docker.Environment, want)
	}
	if j.Request.Docker.Environment["JUPYTERHUB_API_TOKEN"] != "hub-t0ken" {
		t.Error("Redacted changed the original's environment")
	}
}

// A list's row gets the job without what it runs, its description or its owner, and with
// what a row shows (name, resources asked for, state).
func TestListed(t *testing.T) {
	j := fullJob(t)
	j.Request.Docker.Environment = map[string]string{"JUPYTERHUB_API_TOKEN": "hub-t0ken"}
	l := j.Listed()
	b, _ := json.Marshal(l)
	for _, hidden := range []string{"S3cr3t", "hub-t0ken", "gitlab", "thesis", "me@example.org", "+user+me", "+project+p", "8888"} {
		if strings.Contains(string(b), hidden) {
			t.Errorf("listed JSON shows %q: %s", hidden, b)
		}
	}
	if l.UUID != j.UUID || l.Name != j.Name || !reflect.DeepEqual(l.Request.Resources, j.Request.Resources) {
		t.Errorf("listed job lost what a row shows: %+v", l)
	}
	if l.State.Status != j.State.Status || !l.State.Created.Equal(j.State.Created) ||
		!reflect.DeepEqual(l.State.Scheduling, j.State.Scheduling) || !reflect.DeepEqual(l.State.IdleGPUs, j.State.IdleGPUs) {
		t.Errorf("listed state = %+v, want that of %+v", l.State, j.State)
	}
	if l.State.Resources != nil || l.State.FinalUsageStatistics != nil {
		t.Errorf("listed state keeps the resources got or the usage: %+v", l.State)
	}
	if (*Job)(nil).Listed() != nil {
		t.Error("a nil job listed is not nil")
	}
}
