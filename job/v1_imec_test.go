package job

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func readV1File(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "v1", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// v1Problems returns the problems of a failed parse, failing the test on success or another error.
func v1Problems(t *testing.T, data []byte, opts Options) []Problem {
	t.Helper()
	_, err := Parse(data, opts)
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Parse = %v, want a *ValidationError", err)
	}
	return ve.Problems
}

func hasProblem(ps []Problem, path, text string) bool {
	return slices.ContainsFunc(ps, func(p Problem) bool { return p.Path == path && strings.Contains(p.Message, text) })
}

// An imec v1 batch file with the keys imec's converter knows and ours refused before: jobType,
// userUidVariableName, jobDataLocations[].protocol and .shareHost, the top-level project and
// the e-mail wishes.
func TestV1ImecBatchFile(t *testing.T) {
	data := readV1File(t, "imec_batch.json")
	if !IsV1(data) {
		t.Fatal("IsV1 = false")
	}
	opts := testOptions()
	opts.SubmitterEmail = "me@example.org"
	j, err := Parse(data, opts)
	if err != nil {
		t.Fatal(err)
	}
	if j.Owner.ProjectURN != "vision" {
		t.Errorf("project = %q, want vision (the top-level project)", j.Owner.ProjectURN)
	}
	want := Extra{EmailOnRun: []string{"me@example.org"}, EmailOnEnd: []string{"me@example.org"}}
	if !reflect.DeepEqual(j.Request.Extra, want) {
		t.Errorf("extra = %+v, want %+v", j.Request.Extra, want)
	}
	wantStorage := []Storage{{HostPath: "/project", ContainerPath: "/project"}, {HostPath: "/project_scratch", ContainerPath: "/scratch"}}
	if !reflect.DeepEqual(j.Request.Docker.Storage, wantStorage) {
		t.Errorf("storage = %+v, want %+v (protocol and shareHost dropped)", j.Request.Docker.Storage, wantStorage)
	}
	if r := j.Request.Resources; r.GPUs != 1 || r.CPUs != 4 || r.CPUMemoryGb != 16 || r.ClusterID != 4 {
		t.Errorf("resources = %+v", r)
	}
	if j.Request.Docker.ProjectGidVariableName != "GPULAB_PROJECT_GID" || j.Name != "tf-train" {
		t.Errorf("projectGidVariableName %q, name %q", j.Request.Docker.ProjectGidVariableName, j.Name)
	}
	checkRoundTrip(t, j)

	// Without a known submitter (a conversion without login), "true" cannot be mapped: it is
	// refused by name rather than dropped.
	ps := v1Problems(t, data, testOptions())
	if !hasProblem(ps, "email_run", "submitter") || !hasProblem(ps, "email_done", "submitter") {
		t.Errorf("problems = %v, want email_run and email_done named", ps)
	}
}

// The nvdocker_data form imec's v1 master stored and printed: the jobDefinition inside it, with
// numeric strings, the SSH keys and e-mail wishes beside it and imec's e-mail lists at the top.
func TestV1NvdockerDataFile(t *testing.T) {
	data := readV1File(t, "nvdocker_data.json")
	if !IsV1(data) {
		t.Fatal("IsV1 = false for nvdocker_data")
	}
	for name, parse := range map[string]func([]byte, Options) (*Job, error){"Parse": Parse, "ConvertV1": ConvertV1} {
		j, err := parse(data, testOptions())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := Extra{
			SSHPubKeys:   []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIO0aB4lDL3YhbN1kT8n5ywdVvAm8q4J2fXJgXMn8VX3c me@laptop"},
			EmailOnQueue: []string{"team@example.org"},
			EmailOnEnd:   []string{"team@example.org", "me@example.org"},
		}
		if !reflect.DeepEqual(j.Request.Extra, want) {
			t.Errorf("%s: extra = %+v, want %+v", name, j.Request.Extra, want)
		}
		if r := j.Request.Resources; r.GPUs != 1 || r.CPUs != 2 || r.CPUMemoryGb != 8 || !reflect.DeepEqual(r.GPUModel, []string{"1080", "V100"}) {
			t.Errorf("%s: resources = %+v", name, r)
		}
		if pm := j.Request.Docker.PortMappings; len(pm) != 1 || pm[0].ContainerPort != 8888 {
			t.Errorf("%s: port mappings = %+v", name, pm)
		}
		checkRoundTrip(t, j)
	}
}

// Problems in a v1 file are reported where the user wrote them, inside nvdocker_data too, and
// keys imec's v1 format does not know are still refused.
func TestV1ImecKeysProblems(t *testing.T) {
	tests := []struct {
		doc, path, text string
	}{
		{`{"nvdocker_data": {"jobDefinition": {"name": "n", "dockerImage": "x", "resources": {"cpuCores": "many"}}}}`,
			"nvdocker_data.jobDefinition.resources.cpuCores", ""},
		{`{"nvdocker_data": {"jobDefinition": {"name": "n", "dockerImage": "x"}, "colour": 1}}`, "nvdocker_data.colour", "Invalid Key"},
		{`{"jobDefinition": {"name": "n", "dockerImage": "x"}, "nvdocker_data": {"jobDefinition": {}}}`, "nvdocker_data.jobDefinition", "once"},
		{`{"nvdocker_data": {}}`, "nvdocker_data.jobDefinition", "required"},
		{`{"jobDefinition": {"name": "n", "dockerImage": "x", "jobType": 3}}`, "jobDefinition.jobType", "string"},
		{`{"jobDefinition": {"name": "n", "dockerImage": "x", "jobDataLocations": [{"mountPoint": "/project", "shareHost": ["a"]}]}}`,
			"jobDefinition.jobDataLocations[0].shareHost", "string"},
		{`{"jobDefinition": {"name": "n", "dockerImage": "x", "jobDataLocations": [{"mountPoint": "/project", "mode": "ro"}]}}`,
			"jobDefinition.jobDataLocations[0].mode", "Invalid Key"},
		{`{"project": "vision", "owner": {"projectUrn": "other"}, "jobDefinition": {"name": "n", "dockerImage": "x"}}`, "project", "other"},
		{`{"project": "", "jobDefinition": {"name": "n", "dockerImage": "x"}}`, "project", "project"},
		{`{"email_run": ["not an address"], "jobDefinition": {"name": "n", "dockerImage": "x"}}`, "email_run", "e-mail"},
		{`{"email_done": 5, "jobDefinition": {"name": "n", "dockerImage": "x"}}`, "email_done", "string"},
	}
	for _, tt := range tests {
		ps := v1Problems(t, []byte(tt.doc), testOptions())
		if !hasProblem(ps, tt.path, tt.text) && !slices.ContainsFunc(ps, func(p Problem) bool {
			return strings.HasPrefix(p.Path, tt.path) && strings.Contains(p.Message, tt.text)
		}) {
			t.Errorf("%s\nproblems = %v, want one at %s saying %q", tt.doc, ps, tt.path, tt.text)
		}
	}
}

// The e-mail wishes in their other forms: an address, a list, false; the project beside an
// owner that names the same one.
func TestV1ImecEmailForms(t *testing.T) {
	j := mustParse(t, []byte(`{"project": "vision", "owner": {"projectUrn": "vision"}, "email_run": "a@example.org",
		"email_done": false, "emails_run": ["b@example.org", "a@example.org"],
		"jobDefinition": {"name": "n", "dockerImage": "x"}}`))
	if !reflect.DeepEqual(j.Request.Extra.EmailOnRun, []string{"a@example.org", "b@example.org"}) || len(j.Request.Extra.EmailOnEnd) != 0 {
		t.Errorf("extra = %+v", j.Request.Extra)
	}
	if j.Owner.ProjectURN != "vision" {
		t.Errorf("project = %q", j.Owner.ProjectURN)
	}
}
