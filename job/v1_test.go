package job

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestConvertV1(t *testing.T) {
	in := `{"jobDefinition": {
		"name": "v1 job",
		"description": "old format",
		"dockerImage": "u:secret@gitlab.ilabt.imec.be:4567/x/y:1",
		"command": "python train.py --epochs 3",
		"clusterId": ["4", 5],
		"resources": {"systemMemory": 2000, "cpuCores": 4, "gpus": 2, "gpuModel": "1080", "minCudaVersion": 9},
		"jobDataLocations": [{"mountPoint": "/project"}, {"sharePath": "/project/mycode/", "mountPoint": "/work/code/"}, "/project_scratch"],
		"portMappings": [{"containerPort": "8888/tcp"}, {"containerPort": 80, "hostPort": 8080}, 22],
		"environment": {"A": 1},
		"projectGidVariableName": "GID",
		"workingDir": "/work",
		"dockerUser": "1000",
		"dockerGroupAdd": ["video"],
		"ssh_pubkeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 me@x"]
	}}`
	if !IsV1([]byte(in)) {
		t.Fatal("IsV1 = false")
	}
	for name, parse := range map[string]func([]byte, Options) (*Job, error){"Parse": Parse, "ConvertV1": ConvertV1} {
		t.Run(name, func(t *testing.T) {
			j, err := parse([]byte(in), testOptions())
			if err != nil {
				t.Fatal(err)
			}
			want := Request{
				Resources: Resources{CPUs: 4, GPUs: 2, CPUMemoryGb: 2, GPUModel: []string{"1080"}, MinCudaVersion: 9, ClusterID: 4},
				Docker: Docker{
					Image:   "u:secret@gitlab.ilabt.imec.be:4567/x/y:1",
					Command: Command{Text: "python train.py --epochs 3"},
					Storage: []Storage{
						{HostPath: "/project", ContainerPath: "/project"},
						{HostPath: "/project/mycode/", ContainerPath: "/work/code/"},
						{HostPath: "/project_scratch", ContainerPath: "/project_scratch"},
					},
					PortMappings:           []PortMapping{{ContainerPort: 8888}, {ContainerPort: 80, HostPort: 8080}, {ContainerPort: 22}},
					Environment:            map[string]string{"A": "1"},
					ProjectGidVariableName: "GID",
					WorkingDir:             "/work",
					User:                   "1000",
					GroupAdd:               []string{"video"},
				},
				Scheduling: Scheduling{MinDuration: Duration(7 * 24 * time.Hour), MaxDuration: Duration(14 * 24 * time.Hour)},
				Extra:      Extra{SSHPubKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 me@x"}},
			}
			if !reflect.DeepEqual(j.Request, want) {
				t.Errorf("request =\n%s\nwant\n%s", mustJSON(t, j.Request), mustJSON(t, want))
			}
			if j.Name != "v1 job" || j.Description != "old format" {
				t.Errorf("name, description = %q, %q", j.Name, j.Description)
			}
			checkRoundTrip(t, j)
		})
	}
}

func TestConvertV1Defaults(t *testing.T) {
	j := mustParse(t, []byte(`{"jobDefinition": {"name": "n", "dockerImage": "debian:stable"}}`))
	if r := j.Request.Resources; r.CPUs != 1 || r.GPUs != 0 || r.CPUMemoryGb != 2 {
		t.Errorf("resources = %+v, want cpus 1, gpus 0, cpuMemoryGb 2", r)
	}
	tests := []struct {
		mb   string
		want int
	}{{"1", 1}, {"1024", 1}, {"1025", 2}, {"2000", 2}, {`"4096"`, 4}, {"1536.5", 2}, {"16000", 16}}
	for _, tt := range tests {
		j := mustParse(t, []byte(`{"jobDefinition": {"name": "n", "dockerImage": "x", "resources": {"systemMemory": `+tt.mb+`}}}`))
		if j.Request.Resources.CPUMemoryGb != tt.want {
			t.Errorf("systemMemory %s → cpuMemoryGb %d, want %d", tt.mb, j.Request.Resources.CPUMemoryGb, tt.want)
		}
	}
	for in, want := range map[string]int{`7`: 7, `"7"`: 7, `[3, 4]`: 3, `[]`: 0, `""`: 0} {
		j := mustParse(t, []byte(`{"jobDefinition": {"name": "n", "dockerImage": "x", "clusterId": `+in+`}}`))
		if j.Request.Resources.ClusterID != want {
			t.Errorf("clusterId %s → %d, want %d", in, j.Request.Resources.ClusterID, want)
		}
	}
}

func TestConvertV1Problems(t *testing.T) {
	tests := []struct {
		name, in string
		problems []string
	}{
		{"unknown key", `{"jobDefinition": {"name": "n", "dockerImage": "x", "dockerimage": "y"}}`,
			[]string{`jobDefinition.dockerimage: Invalid Key "jobDefinition.dockerimage"`}},
		{"unknown nested keys", `{"jobDefinition": {"name": "n", "dockerImage": "x", "resources": {"ram": 1}, "jobDataLocations": [{"mountpoint": "/p"}], "portMappings": [{"port": 1}]}}`,
			[]string{`jobDefinition.jobDataLocations[0]: needs a mountPoint or a sharePath`, `jobDefinition.jobDataLocations[0].mountpoint: Invalid Key "jobDefinition.jobDataLocations[0].mountpoint"`,
				"jobDefinition.portMappings[0].containerPort: is required", `jobDefinition.portMappings[0].port: Invalid Key "jobDefinition.portMappings[0].port"`,
				`jobDefinition.resources.ram: Invalid Key "jobDefinition.resources.ram"`}},
		{"unknown top key", `{"jobDefinition": {"name": "n", "dockerImage": "x"}, "version": 1}`, []string{`version: Invalid Key "version"`}},
		{"with a v2 request", `{"jobDefinition": {"name": "n", "dockerImage": "x"}, "request": {}}`, []string{"request: a version 2 request cannot be combined with a version 1 jobDefinition"}},
		{"not an object", `{"jobDefinition": []}`, []string{"jobDefinition: must be an object, not a list"}},
		{"v1 paths in problems", `{"jobDefinition": {"dockerImage": "Bad", "command": "'", "resources": {"cpuCores": 0, "gpus": -1, "systemMemory": "lots", "gpuModel": "A"}, "clusterId": [0], "dockerUser": "a b", "dockerGroupAdd": "a b", "ssh_pubkeys": ["x"], "jobDataLocations": [{"sharePath": "/p"}, {"mountPoint": "rel"}], "portMappings": ["x"], "environment": {"1": 1}, "workingDir": "w", "projectGidVariableName": "-"}}`,
			[]string{
				"jobDefinition.clusterId[0]: must be at least 1, not 0",
				"jobDefinition.command: cannot split the command",
				"jobDefinition.dockerGroupAdd: must be a group name",
				"jobDefinition.dockerImage: invalid image",
				"jobDefinition.dockerUser: must be a user name",
				`jobDefinition.environment.1: "1" is not a valid environment variable name`,
				"jobDefinition.jobDataLocations[1].mountPoint: must be an absolute path",
				"jobDefinition.name: is required",
				"jobDefinition.portMappings[0]: must be a port number",
				"jobDefinition.projectGidVariableName: is not a valid environment variable name",
				"jobDefinition.resources.cpuCores: must be at least 1, not 0",
				"jobDefinition.resources.gpuModel: at least 2 characters",
				"jobDefinition.resources.gpus: must be at least 0, not -1",
				`jobDefinition.resources.systemMemory: must be a number of megabytes, not "lots"`,
				"jobDefinition.ssh_pubkeys[0]: must be one SSH public key line",
				"jobDefinition.workingDir: must be an absolute path",
			}},
		{"image required", `{"jobDefinition": {"name": "n"}}`, []string{"jobDefinition.dockerImage: is required"}},
		{"memory zero", `{"jobDefinition": {"name": "n", "dockerImage": "x", "resources": {"systemMemory": 0}}}`, []string{"jobDefinition.resources.systemMemory: must be at least 1 (megabyte)"}},
		{"duplicate mount", `{"jobDefinition": {"name": "n", "dockerImage": "x", "jobDataLocations": [{"mountPoint": "/p"}, {"mountPoint": "/p", "sharePath": "/q"}]}}`,
			[]string{"jobDefinition.jobDataLocations[1]: containerPath /p is mounted twice (also by entry 0)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkProblems(t, problemsOf(t, []byte(tt.in)), tt.problems...)
		})
	}
}

func TestConvertV1RefusesV2(t *testing.T) {
	in := mustJSON(t, minimalDoc())
	if IsV1(in) {
		t.Error("IsV1(v2) = true")
	}
	_, err := ConvertV1(in, testOptions())
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Problems[0].Path != "jobDefinition" {
		t.Errorf("ConvertV1(v2) = %v", err)
	}
	for _, bad := range []string{``, `{`, `[]`, `{"request": {}}`} {
		if IsV1([]byte(bad)) {
			t.Errorf("IsV1(%q) = true", bad)
		}
	}
}
