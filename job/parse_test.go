package job

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// kv is one change to minimalDoc.
type kv struct {
	path string
	v    any
}

// TestParseRules checks every rule of SPEC section 3, one case each way. A case either lists
// the exact problems ("path: message part", sorted by path) or checks the parsed job.
func TestParseRules(t *testing.T) {
	const uuid1 = "f6dbca7b-58fd-47e3-9ac4-9ad33e7f6030"
	obj := func(kvs ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i < len(kvs); i += 2 {
			m[kvs[i].(string)] = kvs[i+1]
		}
		return m
	}
	list := func(v ...any) []any {
		if v == nil {
			return []any{}
		}
		return v
	}
	tests := []struct {
		name     string
		set      []kv
		problems []string
		check    func(t *testing.T, j *Job)
	}{
		// ---- top level ----
		{name: "minimal job gets defaults", check: func(t *testing.T, j *Job) {
			s := j.Request.Scheduling
			if s.MinDuration.Std() != 7*24*time.Hour || s.MaxDuration.Std() != 14*24*time.Hour {
				t.Errorf("durations = %v, %v; want 1 week, 2 weeks", s.MinDuration, s.MaxDuration)
			}
			if s.Interactive || s.Restartable || s.AllowHaltWithoutSignal {
				t.Errorf("bools default to true: %+v", s)
			}
			if j.UUID != "" || j.State.Status != "" {
				t.Errorf("server fields set: %q %q", j.UUID, j.State.Status)
			}
		}},
		{name: "name required", set: []kv{{"name", remove}}, problems: []string{"name: is required"}},
		{name: "name null", set: []kv{{"name", nil}}, problems: []string{"name: is required"}},
		{name: "name empty", set: []kv{{"name", "  "}}, problems: []string{"name: must not be empty"}},
		{name: "name not a string", set: []kv{{"name", 3}}, problems: []string{"name: must be a string, not 3"}},
		{name: "description kept", set: []kv{{"description", "d"}}, check: func(t *testing.T, j *Job) {
			if j.Description != "d" {
				t.Errorf("description = %q", j.Description)
			}
		}},
		{name: "description not a string", set: []kv{{"description", list()}}, problems: []string{"description: must be a string, not a list"}},
		{name: "deploymentEnvironment kept", set: []kv{{"deploymentEnvironment", "production"}}, check: func(t *testing.T, j *Job) {
			if j.DeploymentEnvironment != "production" {
				t.Errorf("deploymentEnvironment = %q", j.DeploymentEnvironment)
			}
		}},
		{name: "request required", set: []kv{{"request", remove}}, problems: []string{"request: is required"}},
		{name: "request not an object", set: []kv{{"request", "x"}}, problems: []string{`request: must be an object, not "x"`}},
		{name: "unknown top key", set: []kv{{"jobname", "x"}}, problems: []string{`jobname: Invalid key "jobname"`}},
		{name: "unknown nested key", set: []kv{{"request.resourcs", obj()}}, problems: []string{`request.resourcs: Invalid key "request.resourcs"`}},
		{name: "unknown deep key", set: []kv{{"request.docker.storage", list(obj("containerPath", "/p", "mode", "ro"))}},
			problems: []string{`request.docker.storage[0].mode: Invalid key "request.docker.storage[0].mode"`}},
		{name: "uuid refused", set: []kv{{"uuid", "x"}}, problems: []string{"uuid: is set by the server"}},
		{name: "state refused", set: []kv{{"state", obj()}}, problems: []string{"state: is set by the server"}},
		{name: "restartInfo refused", set: []kv{{"restartInfo", obj()}}, problems: []string{"restartInfo: is set by the server"}},
		{name: "owner", set: []kv{{"owner", obj("projectUrn", "urn:publicid:IDN+example.org+project+demo", "userUrn", "u", "userEmail", "e@x")}}, check: func(t *testing.T, j *Job) {
			if j.Owner != (Owner{ProjectURN: "urn:publicid:IDN+example.org+project+demo", UserURN: "u", UserEmail: "e@x"}) {
				t.Errorf("owner = %+v", j.Owner)
			}
		}},
		{name: "owner with a project name", set: []kv{{"owner", obj("projectUrn", "demo")}}, check: func(t *testing.T, j *Job) {
			if j.Owner.ProjectURN != "demo" {
				t.Errorf("owner = %+v", j.Owner)
			}
		}},
		{name: "owner bad fields", set: []kv{{"owner", obj("projectUrn", 3, "team", "x")}},
			problems: []string{"owner.projectUrn: must be a string, not 3", `owner.team: Invalid key "owner.team"`}},
		{name: "owner not an object", set: []kv{{"owner", "me"}}, problems: []string{`owner: must be an object, not "me"`}},
		{name: "top-level extra is request.extra", set: []kv{{"extra", obj("emailOnRun", list("me@example.com"))}}, check: func(t *testing.T, j *Job) {
			if !reflect.DeepEqual(j.Request.Extra.EmailOnRun, []string{"me@example.com"}) {
				t.Errorf("extra = %+v", j.Request.Extra)
			}
		}},
		{name: "extra given twice", set: []kv{{"extra", obj()}, {"request.extra", obj()}}, problems: []string{"extra: cannot be given both"}},
		{name: "problems in top-level extra use its path", set: []kv{{"extra", obj("emailOnRun", "nobody")}}, problems: []string{"extra.emailOnRun: must be an e-mail address"}},
		{name: "all problems at once, sorted", set: []kv{{"name", ""}, {"request.resources.cpus", 0}, {"request.docker.image", remove}, {"request.scheduling.maxDuration", "1 s"}},
			problems: []string{"name: must not be empty", "request.docker.image: is required", "request.resources.cpus: must be at least 1, not 0", "request.scheduling.maxDuration: must be at least 1 minute, not 1 second"}},

		// ---- resources ----
		{name: "resources required", set: []kv{{"request.resources", remove}}, problems: []string{"request.resources: is required"}},
		{name: "cpus required", set: []kv{{"request.resources.cpus", remove}}, problems: []string{"request.resources.cpus: is required"}},
		{name: "cpus 0", set: []kv{{"request.resources.cpus", 0}}, problems: []string{"request.resources.cpus: must be at least 1, not 0"}},
		{name: "cpus 2.5", set: []kv{{"request.resources.cpus", 2.5}}, problems: []string{"request.resources.cpus: must be an integer, not 2.5"}},
		{name: "cpus string", set: []kv{{"request.resources.cpus", "two"}}, problems: []string{`request.resources.cpus: must be a number, not the string "two"`}},
		{name: "cpus numeric string refused", set: []kv{{"request.resources.gpus", "1"}}, problems: []string{`request.resources.gpus: must be a number, not the string "1"`}},
		{name: "cpus bool", set: []kv{{"request.resources.cpus", true}}, problems: []string{"request.resources.cpus: must be an integer, not true"}},
		{name: "cpus huge", set: []kv{{"request.resources.cpus", 1e12}}, problems: []string{"request.resources.cpus: must be at most 2147483647"}},
		{name: "integral floats accepted", set: []kv{{"request.resources.cpus", 2}, {"request.resources.cpuMemoryGb", 4.0}}, check: func(t *testing.T, j *Job) {
			if j.Request.Resources.CPUs != 2 || j.Request.Resources.CPUMemoryGb != 4 {
				t.Errorf("resources = %+v", j.Request.Resources)
			}
		}},
		{name: "gpus required", set: []kv{{"request.resources.gpus", remove}}, problems: []string{"request.resources.gpus: is required"}},
		{name: "gpus negative", set: []kv{{"request.resources.gpus", -1}}, problems: []string{"request.resources.gpus: must be at least 0, not -1"}},
		{name: "cpuMemoryGb required", set: []kv{{"request.resources.cpuMemoryGb", remove}}, problems: []string{"request.resources.cpuMemoryGb: is required"}},
		{name: "cpuMemoryGb 0", set: []kv{{"request.resources.cpuMemoryGb", 0}}, problems: []string{"request.resources.cpuMemoryGb: must be at least 1"}},
		{name: "gpuMemoryGb 0", set: []kv{{"request.resources.gpuMemoryGb", 0}}, problems: []string{"request.resources.gpuMemoryGb: must be at least 1"}},
		{name: "optional ints", set: []kv{{"request.resources.gpuMemoryGb", 16}, {"request.resources.minCudaVersion", 11}, {"request.resources.clusterId", 7}}, check: func(t *testing.T, j *Job) {
			r := j.Request.Resources
			if r.GPUMemoryGb != 16 || r.MinCudaVersion != 11 || r.ClusterID != 7 {
				t.Errorf("resources = %+v", r)
			}
		}},
		{name: "minCudaVersion 0", set: []kv{{"request.resources.minCudaVersion", 0}}, problems: []string{"request.resources.minCudaVersion: must be at least 1"}},
		{name: "minCudaVersion 10.1", set: []kv{{"request.resources.minCudaVersion", 10.1}}, problems: []string{"request.resources.minCudaVersion: must be an integer, not 10.1"}},
		{name: "clusterId 0", set: []kv{{"request.resources.clusterId", 0}}, problems: []string{"request.resources.clusterId: must be at least 1"}},
		{name: "gpuModel string becomes a list", set: []kv{{"request.resources.gpuModel", "V100"}}, check: func(t *testing.T, j *Job) {
			if !reflect.DeepEqual(j.Request.Resources.GPUModel, []string{"V100"}) {
				t.Errorf("gpuModel = %q", j.Request.Resources.GPUModel)
			}
		}},
		{name: "gpuModel too short", set: []kv{{"request.resources.gpuModel", list("V100", "A")}}, problems: []string{`request.resources.gpuModel[1]: at least 2 characters long, not "A"`}},
		{name: "gpuModel short string", set: []kv{{"request.resources.gpuModel", "A"}}, problems: []string{"request.resources.gpuModel: at least 2 characters"}},
		{name: "gpuModel not strings", set: []kv{{"request.resources.gpuModel", list(100)}}, problems: []string{"request.resources.gpuModel[0]: must be a string, not 100"}},
		{name: "slave pinning", set: []kv{{"request.resources.slaveName", "slave7A"}, {"request.resources.slaveInstanceId", "af25"}}, check: func(t *testing.T, j *Job) {
			if j.Request.Resources.SlaveName != "slave7A" || j.Request.Resources.SlaveInstanceID != "af25" {
				t.Errorf("resources = %+v", j.Request.Resources)
			}
		}},
		{name: "known features", set: []kv{{"request.resources.features", list("nvlink")}}, check: func(t *testing.T, j *Job) {
			if !reflect.DeepEqual(j.Request.Resources.Features, []string{"nvlink"}) {
				t.Errorf("features = %q", j.Request.Resources.Features)
			}
		}},
		{name: "unknown feature", set: []kv{{"request.resources.features", list("nvlink", "warp-drive")}},
			problems: []string{`request.resources.features[1]: unknown feature "warp-drive" (known: infiniband, nvlink)`}},
		{name: "features not a list", set: []kv{{"request.resources.features", "nvlink"}}, problems: []string{"request.resources.features: must be a list of strings"}},

		// ---- docker ----
		{name: "docker required", set: []kv{{"request.docker", remove}}, problems: []string{"request.docker: is required"}},
		{name: "image required", set: []kv{{"request.docker.image", remove}}, problems: []string{"request.docker.image: is required"}},
		{name: "image invalid", set: []kv{{"request.docker.image", "Debian:Stable"}}, problems: []string{"request.docker.image: invalid image: repository name \"Debian\" must be lowercase"}},
		{name: "image with credentials kept for the pull", set: []kv{{"request.docker.image", "u:secret@reg.io/x:1"}}, check: func(t *testing.T, j *Job) {
			if j.Request.Docker.Image != "u:secret@reg.io/x:1" {
				t.Errorf("image = %q", j.Request.Docker.Image)
			}
		}},
		{name: "command string", set: []kv{{"request.docker.command", "echo 'a b'"}}, check: func(t *testing.T, j *Job) {
			if !reflect.DeepEqual(j.Request.Docker.Command, Command{Text: "echo 'a b'"}) {
				t.Errorf("command = %#v", j.Request.Docker.Command)
			}
		}},
		{name: "command list", set: []kv{{"request.docker.command", list("echo", "a b")}}, check: func(t *testing.T, j *Job) {
			if !reflect.DeepEqual(j.Request.Docker.Command, Command{List: []string{"echo", "a b"}, IsList: true}) {
				t.Errorf("command = %#v", j.Request.Docker.Command)
			}
		}},
		{name: "command empty means image CMD", set: []kv{{"request.docker.command", list()}}, check: func(t *testing.T, j *Job) {
			if !j.Request.Docker.Command.IsZero() {
				t.Errorf("command = %#v", j.Request.Docker.Command)
			}
		}},
		{name: "command unterminated quote", set: []kv{{"request.docker.command", "echo 'oops"}}, problems: []string{"request.docker.command: cannot split the command into words: unterminated single quote"}},
		{name: "command list of non-strings", set: []kv{{"request.docker.command", list("sleep", 10)}}, problems: []string{"request.docker.command[1]: must be a string, not 10"}},
		{name: "command object", set: []kv{{"request.docker.command", obj()}}, problems: []string{"request.docker.command: must be a string or a list of strings, not an object"}},
		{name: "environment values", set: []kv{{"request.docker.environment", obj("A", 1, "B", "two", "C", true, "D", 1.50, "_e9", "")}}, check: func(t *testing.T, j *Job) {
			want := map[string]string{"A": "1", "B": "two", "C": "true", "D": "1.5", "_e9": ""}
			if !reflect.DeepEqual(j.Request.Docker.Environment, want) {
				t.Errorf("environment = %q, want %q", j.Request.Docker.Environment, want)
			}
		}},
		{name: "environment bad name and value", set: []kv{{"request.docker.environment", obj("9X", "a", "MY-VAR", "b", "OK", obj(), "N", nil)}},
			problems: []string{`request.docker.environment.9X: "9X" is not a valid environment variable name`, `request.docker.environment.MY-VAR: "MY-VAR" is not a valid`,
				"request.docker.environment.N: must be a string, number or boolean, not null", "request.docker.environment.OK: must be a string, number or boolean, not an object"}},
		{name: "environment not an object", set: []kv{{"request.docker.environment", list("A=1")}}, problems: []string{"request.docker.environment: must be an object, not a list"}},
		{name: "projectGidVariableName", set: []kv{{"request.docker.projectGidVariableName", "DEMO_PROJECT_GID"}}, check: func(t *testing.T, j *Job) {
			if j.Request.Docker.ProjectGidVariableName != "DEMO_PROJECT_GID" {
				t.Errorf("projectGidVariableName = %q", j.Request.Docker.ProjectGidVariableName)
			}
		}},
		{name: "projectGidVariableName invalid", set: []kv{{"request.docker.projectGidVariableName", "PROJECT GID"}}, problems: []string{"request.docker.projectGidVariableName: \"PROJECT GID\" is not a valid environment variable name"}},
		{name: "projectGidVariableName clashes with environment", set: []kv{{"request.docker.projectGidVariableName", "G"}, {"request.docker.environment", obj("G", "1")}},
			problems: []string{"request.docker.projectGidVariableName: G is also set in environment"}},
		{name: "workingDir", set: []kv{{"request.docker.workingDir", "/project"}}, check: func(t *testing.T, j *Job) {
			if j.Request.Docker.WorkingDir != "/project" {
				t.Errorf("workingDir = %q", j.Request.Docker.WorkingDir)
			}
		}},
		{name: "workingDir relative", set: []kv{{"request.docker.workingDir", "project"}}, problems: []string{"request.docker.workingDir: must be an absolute path"}},
		{name: "user and groupAdd", set: []kv{{"request.docker.user", "1000:1000"}, {"request.docker.groupAdd", "video"}}, check: func(t *testing.T, j *Job) {
			if j.Request.Docker.User != "1000:1000" || !reflect.DeepEqual(j.Request.Docker.GroupAdd, []string{"video"}) {
				t.Errorf("docker = %+v", j.Request.Docker)
			}
		}},
		{name: "user invalid", set: []kv{{"request.docker.user", "root; rm"}}, problems: []string{"request.docker.user: must be a user name or id"}},
		{name: "groupAdd invalid", set: []kv{{"request.docker.groupAdd", list("video", "a b")}}, problems: []string{`request.docker.groupAdd[1]: must be a group name or id (letters, digits, '_'), not "a b"`}},

		// ---- storage ----
		{name: "PROJECT_SHARE_AUTO defaults to /project", set: []kv{{"request.docker.storage", list(
			obj("containerPath", "/project"),
			obj("hostPath", "PROJECT_SHARE_AUTO"),
		)}}, problems: []string{"request.docker.storage[1]: containerPath /project is mounted twice (also by entry 0)"}},
		{name: "storage filled", set: []kv{{"request.docker.storage", list(
			"/project_scratch",
			obj("containerPath", "/project"),
			obj("hostPath", "/project/mycode/", "containerPath", "/work/code/"),
			obj("hostPath", ".ssh"),
			obj("hostPath", "PROJECT_SHARE_AUTO", "containerPath", "/shared"),
			obj("hostPath", "tmpfs", "containerPath", "/ram", "sizeGb", 2),
		)}}, check: func(t *testing.T, j *Job) {
			want := []Storage{
				{HostPath: "/project_scratch", ContainerPath: "/project_scratch"},
				{HostPath: "/project", ContainerPath: "/project"},
				{HostPath: "/project/mycode/", ContainerPath: "/work/code/"},
				{HostPath: ".ssh", ContainerPath: "/root/.ssh/"},
				{HostPath: "PROJECT_SHARE_AUTO", ContainerPath: "/shared"},
				{HostPath: "tmpfs", ContainerPath: "/ram", SizeGb: 2},
			}
			if !reflect.DeepEqual(j.Request.Docker.Storage, want) {
				t.Errorf("storage =\n%+v\nwant\n%+v", j.Request.Docker.Storage, want)
			}
			if j.Request.TotalMemoryGb() != 3 {
				t.Errorf("TotalMemoryGb = %d, want 1 + 2 of tmpfs", j.Request.TotalMemoryGb())
			}
		}},
		{name: "storage empty entry", set: []kv{{"request.docker.storage", list(obj())}}, problems: []string{"request.docker.storage[0]: needs a hostPath or a containerPath"}},
		{name: "storage not a list", set: []kv{{"request.docker.storage", "/project"}}, problems: []string{`request.docker.storage: must be a list, not "/project"`}},
		{name: "storage bad entry type", set: []kv{{"request.docker.storage", list(3)}}, problems: []string{"request.docker.storage[0]: must be an object {hostPath, containerPath} or a path, not 3"}},
		{name: "tmpfs needs containerPath and size", set: []kv{{"request.docker.storage", list(obj("hostPath", "tmpfs"))}},
			problems: []string{"request.docker.storage[0].containerPath: is required for a tmpfs RAM disk", "request.docker.storage[0].sizeGb: is required for a tmpfs RAM disk"}},
		{name: "tmpfs bare string", set: []kv{{"request.docker.storage", list("tmpfs")}},
			problems: []string{`request.docker.storage[0]: a tmpfs RAM disk must be written {"hostPath": "tmpfs"`}},
		{name: "tmpfs size 0", set: []kv{{"request.docker.storage", list(obj("hostPath", "tmpfs", "containerPath", "/ram", "sizeGb", 0))}},
			problems: []string{"request.docker.storage[0].sizeGb: must be at least 1"}},
		{name: "sizeGb only for tmpfs", set: []kv{{"request.docker.storage", list(obj("hostPath", "/project", "sizeGb", 1))}},
			problems: []string{`request.docker.storage[0].sizeGb: is only allowed for a tmpfs RAM disk`}},
		{name: "containerPath relative", set: []kv{{"request.docker.storage", list(obj("hostPath", "/project", "containerPath", "project"))}},
			problems: []string{`request.docker.storage[0].containerPath: must be an absolute path, not "project"`}},
		{name: "containerPath root", set: []kv{{"request.docker.storage", list(obj("hostPath", "/project", "containerPath", "/"))}},
			problems: []string{"request.docker.storage[0].containerPath: must not be /"}},
		{name: "containerPath with ..", set: []kv{{"request.docker.storage", list(obj("hostPath", "/project", "containerPath", "/a/../etc"))}},
			problems: []string{"request.docker.storage[0].containerPath: must not contain '..'"}},
		{name: "hostPath relative", set: []kv{{"request.docker.storage", list(obj("hostPath", "project", "containerPath", "/p"))}},
			problems: []string{`request.docker.storage[0].hostPath: must be an absolute path, not "project", or one of ".ssh", "tmpfs", "PROJECT_SHARE_AUTO"`}},
		{name: "hostPath escaping", set: []kv{{"request.docker.storage", list("/project/../../etc")}},
			problems: []string{"request.docker.storage[0]: must not contain '..'"}},
		{name: "duplicate containerPath", set: []kv{{"request.docker.storage", list("/project", obj("hostPath", "/project_scratch", "containerPath", "/project/"))}},
			problems: []string{"request.docker.storage[1]: containerPath /project/ is mounted twice (also by entry 0)"}},

		// ---- port mappings ----
		{name: "port mappings forms", set: []kv{{"request.docker.portMappings", list(80, "8888", "8889/tcp", obj("containerPort", 22, "hostPort", 2222, "hostIp", "::"), obj("containerPort", "9000/TCP", "hostIp", "10.0.0.1"))}}, check: func(t *testing.T, j *Job) {
			want := []PortMapping{{ContainerPort: 80}, {ContainerPort: 8888}, {ContainerPort: 8889}, {ContainerPort: 22, HostPort: 2222, HostIP: "::"}, {ContainerPort: 9000, HostIP: "10.0.0.1"}}
			if !reflect.DeepEqual(j.Request.Docker.PortMappings, want) {
				t.Errorf("portMappings = %+v, want %+v", j.Request.Docker.PortMappings, want)
			}
		}},
		{name: "containerPort required", set: []kv{{"request.docker.portMappings", list(obj("hostPort", 80))}}, problems: []string{"request.docker.portMappings[0].containerPort: is required"}},
		{name: "port out of range", set: []kv{{"request.docker.portMappings", list(0, 65536, obj("containerPort", 80, "hostPort", 70000))}},
			problems: []string{"request.docker.portMappings[0]: must be a port number from 1 to 65535, not 0", "request.docker.portMappings[1]: must be a port number from 1 to 65535, not 65536",
				"request.docker.portMappings[2].hostPort: must be a port number from 1 to 65535, not 70000"}},
		{name: "udp port", set: []kv{{"request.docker.portMappings", list("53/udp")}}, problems: []string{"request.docker.portMappings[0]: only TCP ports can be mapped"}},
		{name: "port string junk", set: []kv{{"request.docker.portMappings", list("http")}}, problems: []string{`request.docker.portMappings[0]: must be a port number or a string like "8888/tcp", not "http"`}},
		{name: "hostIp invalid", set: []kv{{"request.docker.portMappings", list(obj("containerPort", 80, "hostIp", "localhost"))}}, problems: []string{`request.docker.portMappings[0].hostIp: must be an IP address, not "localhost"`}},
		{name: "duplicate port mapping", set: []kv{{"request.docker.portMappings", list(80, obj("containerPort", 80))}}, problems: []string{"request.docker.portMappings[1]: maps the same ports as entry 0"}},
		{name: "duplicate host port", set: []kv{{"request.docker.portMappings", list(obj("containerPort", 80, "hostPort", 8080), obj("containerPort", 81, "hostPort", 8080))}},
			problems: []string{"request.docker.portMappings[1].hostPort: host port 8080 is also used by entry 0"}},
		{name: "host port on all addresses, then one", set: []kv{{"request.docker.portMappings", list(obj("containerPort", 80, "hostPort", 8080), obj("containerPort", 81, "hostPort", 8080, "hostIp", "::1"))}},
			problems: []string{"request.docker.portMappings[1].hostPort: host port 8080 is also used by entry 0"}},
		{name: "host port on one address, then all", set: []kv{{"request.docker.portMappings", list(obj("containerPort", 80, "hostPort", 8080, "hostIp", "::1"), obj("containerPort", 81, "hostPort", 8080))}},
			problems: []string{"request.docker.portMappings[1].hostPort: host port 8080 is also used by entry 0"}},
		{name: "host port twice on one address", set: []kv{{"request.docker.portMappings", list(obj("containerPort", 80, "hostPort", 8080, "hostIp", "10.0.0.1"), obj("containerPort", 81, "hostPort", 8080, "hostIp", "10.0.0.1"))}},
			problems: []string{"request.docker.portMappings[1].hostPort: host port 8080 is also used by entry 0"}},
		{name: "same host port on two addresses", set: []kv{{"request.docker.portMappings", list(obj("containerPort", 80, "hostPort", 8080, "hostIp", "127.0.0.1"), obj("containerPort", 81, "hostPort", 8080, "hostIp", "::1"))}}},
		{name: "same container port to two host ports", set: []kv{{"request.docker.portMappings", list(obj("containerPort", 80, "hostPort", 8080), obj("containerPort", 80, "hostPort", 8081))}}},

		// ---- scheduling ----
		{name: "scheduling bools", set: []kv{{"request.scheduling", obj("interactive", true, "restartable", "true", "allowHaltWithoutSignal", "FALSE")}}, check: func(t *testing.T, j *Job) {
			s := j.Request.Scheduling
			if !s.Interactive || !s.Restartable || s.AllowHaltWithoutSignal {
				t.Errorf("scheduling = %+v", s)
			}
		}},
		{name: "bool invalid", set: []kv{{"request.scheduling.restartable", 1}}, problems: []string{"request.scheduling.restartable: must be true or false, not 1"}},
		{name: "scheduling not an object", set: []kv{{"request.scheduling", list()}}, problems: []string{"request.scheduling: must be an object, not a list"}},
		{name: "unknown scheduling key", set: []kv{{"request.scheduling.priority", 1}}, problems: []string{`request.scheduling.priority: Invalid key "request.scheduling.priority"`}},
		{name: "both durations", set: []kv{{"request.scheduling.minDuration", "1 hour"}, {"request.scheduling.maxDuration", "8 hours"}}, check: func(t *testing.T, j *Job) {
			s := j.Request.Scheduling
			if s.MinDuration.Std() != time.Hour || s.MaxDuration.Std() != 8*time.Hour {
				t.Errorf("durations = %v, %v", s.MinDuration, s.MaxDuration)
			}
		}},
		{name: "killableAfter alias", set: []kv{{"request.scheduling.killableAfter", "30 minutes"}}, check: func(t *testing.T, j *Job) {
			if j.Request.Scheduling.MinDuration.Std() != 30*time.Minute {
				t.Errorf("minDuration = %v", j.Request.Scheduling.MinDuration)
			}
		}},
		{name: "alias and name", set: []kv{{"request.scheduling.killableAfter", "1h"}, {"request.scheduling.minDuration", "1h"}},
			problems: []string{"request.scheduling.killableAfter: cannot be given together with minDuration"}},
		{name: "duration seconds number", set: []kv{{"request.scheduling.maxDuration", 7200}}, check: func(t *testing.T, j *Job) {
			s := j.Request.Scheduling
			if s.MaxDuration.Std() != 2*time.Hour || s.MinDuration.Std() != 2*time.Hour {
				t.Errorf("durations = %v, %v; want 2 hours, 2 hours", s.MinDuration, s.MaxDuration)
			}
		}},
		{name: "only a short maxDuration lowers the default minDuration", set: []kv{{"request.scheduling.maxDuration", "1 hour"}}, check: func(t *testing.T, j *Job) {
			s := j.Request.Scheduling
			if s.MinDuration.Std() != time.Hour || s.MaxDuration.Std() != time.Hour {
				t.Errorf("durations = %v, %v; want 1 hour, 1 hour", s.MinDuration, s.MaxDuration)
			}
		}},
		{name: "only minDuration keeps the default max", set: []kv{{"request.scheduling.minDuration", "0 s"}}, check: func(t *testing.T, j *Job) {
			s := j.Request.Scheduling
			if s.MinDuration != 0 || s.MaxDuration.Std() != 14*24*time.Hour {
				t.Errorf("durations = %v, %v", s.MinDuration, s.MaxDuration)
			}
		}},
		{name: "minDuration over default max", set: []kv{{"request.scheduling.minDuration", "3 weeks"}},
			problems: []string{"request.scheduling.minDuration: must not be longer than maxDuration, which defaults to 2 weeks (3 weeks > 2 weeks)"}},
		{name: "minDuration over maxDuration", set: []kv{{"request.scheduling.minDuration", "2 days"}, {"request.scheduling.maxDuration", "1 day"}},
			problems: []string{"request.scheduling.minDuration: must not be longer than maxDuration (2 days > 1 day)"}},
		{name: "killableAfter over maxDuration", set: []kv{{"request.scheduling.killableAfter", "2 days"}, {"request.scheduling.maxDuration", "1 day"}},
			problems: []string{"request.scheduling.killableAfter: must not be longer than maxDuration"}},
		{name: "maxDuration under a minute", set: []kv{{"request.scheduling.maxDuration", "59 seconds"}},
			problems: []string{"request.scheduling.maxDuration: must be at least 1 minute, not 59 seconds"}},
		{name: "invalid duration message", set: []kv{{"request.scheduling.maxDuration", "2 fortnights"}},
			problems: []string{"request.scheduling.maxDuration: Invalid duration: 2 fortnights. Must be a number followed by a time unit (examples: '1h', '5 minutes', '3 days', etc.)."}},
		{name: "duration bool", set: []kv{{"request.scheduling.minDuration", true}}, problems: []string{"request.scheduling.minDuration: Invalid duration: true."}},
		{name: "negative seconds", set: []kv{{"request.scheduling.minDuration", -5}}, problems: []string{"request.scheduling.minDuration: Invalid duration: -5."}},
		{name: "time window", set: []kv{{"request.scheduling.notBefore", "2026-01-01T00:00:00+01:00"}, {"request.scheduling.notAfter", "2026-01-02T00:00:00Z"}}, check: func(t *testing.T, j *Job) {
			s := j.Request.Scheduling
			if !s.NotBefore.Equal(time.Date(2025, 12, 31, 23, 0, 0, 0, time.UTC)) || !s.NotAfter.Equal(time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)) {
				t.Errorf("window = %v .. %v", s.NotBefore, s.NotAfter)
			}
			if _, off := s.NotBefore.Zone(); off != 3600 {
				t.Errorf("zone of notBefore lost: %v", s.NotBefore)
			}
		}},
		{name: "notBefore in the past is fine", set: []kv{{"request.scheduling.notBefore", "2020-01-01T00:00:00+01:00"}}},
		{name: "time without zone", set: []kv{{"request.scheduling.notBefore", "2026-01-01T00:00:00"}}, problems: []string{"request.scheduling.notBefore: must be a date and time in RFC 3339 format with a zone"}},
		{name: "time as a number", set: []kv{{"request.scheduling.notAfter", 1767225600}}, problems: []string{"request.scheduling.notAfter: must be a string, not 1767225600"}},
		{name: "notBefore after notAfter", set: []kv{{"request.scheduling.notBefore", "2026-02-01T00:00:00Z"}, {"request.scheduling.notAfter", "2026-01-01T00:00:00Z"}},
			problems: []string{"request.scheduling.notAfter: must be later than notBefore"}},
		{name: "notAfter in the past", set: []kv{{"request.scheduling.notAfter", "2025-01-01T00:00:00Z"}}, problems: []string{"request.scheduling.notAfter: is in the past"}},
		{name: "interactive with a window", set: []kv{{"request.scheduling.interactive", true}, {"request.scheduling.notBefore", "2026-01-01T00:00:00Z"}, {"request.scheduling.notAfter", "2026-02-01T00:00:00Z"}},
			problems: []string{"request.scheduling.notAfter: cannot be combined with interactive", "request.scheduling.notBefore: cannot be combined with interactive"}},
		{name: "interactive with null window", set: []kv{{"request.scheduling.interactive", true}, {"request.scheduling.notBefore", nil}}},
		{name: "maxSimultaneousJobs", set: []kv{{"request.scheduling.maxSimultaneousJobs", obj("bucketName", "sweep-1@me.x_y", "bucketMax", 2)}}, check: func(t *testing.T, j *Job) {
			if m := j.Request.Scheduling.MaxSimultaneousJobs; m == nil || *m != (MaxSimultaneousJobs{BucketName: "sweep-1@me.x_y", BucketMax: 2}) {
				t.Errorf("maxSimultaneousJobs = %+v", m)
			}
		}},
		{name: "maxSimultaneousJobs incomplete", set: []kv{{"request.scheduling.maxSimultaneousJobs", obj("max", 1)}},
			problems: []string{"request.scheduling.maxSimultaneousJobs.bucketMax: is required", "request.scheduling.maxSimultaneousJobs.bucketName: is required", `request.scheduling.maxSimultaneousJobs.max: Invalid key`}},
		{name: "maxSimultaneousJobs bad values", set: []kv{{"request.scheduling.maxSimultaneousJobs", obj("bucketName", "-my sweep", "bucketMax", 0)}},
			problems: []string{"request.scheduling.maxSimultaneousJobs.bucketMax: must be at least 1, not 0", `request.scheduling.maxSimultaneousJobs.bucketName: must start with a letter, digit or '_' and hold only those and '-', '@', '.' (no spaces), not "-my sweep"`}},
		{name: "reservationIds", set: []kv{{"request.scheduling.reservationIds", list(strings.ToUpper(uuid1))}}, check: func(t *testing.T, j *Job) {
			if !reflect.DeepEqual(j.Request.Scheduling.ReservationIDs, []string{uuid1}) {
				t.Errorf("reservationIds = %q", j.Request.Scheduling.ReservationIDs)
			}
		}},
		{name: "reservationId alias, one string", set: []kv{{"request.scheduling.reservationId", uuid1}}, check: func(t *testing.T, j *Job) {
			if !reflect.DeepEqual(j.Request.Scheduling.ReservationIDs, []string{uuid1}) {
				t.Errorf("reservationIds = %q", j.Request.Scheduling.ReservationIDs)
			}
		}},
		{name: "reservation alias and name", set: []kv{{"request.scheduling.reservationId", uuid1}, {"request.scheduling.reservationIds", list(uuid1)}},
			problems: []string{"request.scheduling.reservationId: cannot be given together with reservationIds"}},
		{name: "reservation not a uuid", set: []kv{{"request.scheduling.reservationIds", list(uuid1, "class-2025")}},
			problems: []string{`request.scheduling.reservationIds[1]: must be a reservation UUID like f6dbca7b-58fd-47e3-9ac4-9ad33e7f6030, not "class-2025"`}},

		// ---- extra ----
		{name: "extra lists", set: []kv{{"request.extra", obj("sshPubKeys", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFake me@laptop", "emailOnQueue", list("a@x.org"), "emailOnRun", "b@x.org", "emailOnEnd", list(), "emailOnHalt", list("c@x.org", "d@x.org"), "emailOnRestart", list(" e@x.org "))}}, check: func(t *testing.T, j *Job) {
			want := Extra{SSHPubKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFake me@laptop"}, EmailOnQueue: []string{"a@x.org"}, EmailOnRun: []string{"b@x.org"}, EmailOnHalt: []string{"c@x.org", "d@x.org"}, EmailOnRestart: []string{"e@x.org"}}
			if !reflect.DeepEqual(j.Request.Extra, want) {
				t.Errorf("extra = %+v, want %+v", j.Request.Extra, want)
			}
		}},
		{name: "ssh key kinds", set: []kv{{"request.extra.sshPubKeys", list("ecdsa-sha2-nistp256 AAAAE2VjZHNh=", "sk-ssh-ed25519@openssh.com AAAAGnNr", "ssh-rsa AAAAB3NzaC1yc2E= comment with spaces")}}},
		{name: "extra bad values", set: []kv{{"request.extra", obj("sshPubKeys", list("not a key", "ssh-rsa AAAA\nssh-rsa BBBB"), "emailOnEnd", list("me at example.com"), "emailOnRun", 3, "emailOnFail", list())}},
			problems: []string{`request.extra.emailOnEnd[0]: must be an e-mail address, not "me at example.com"`, `request.extra.emailOnFail: Invalid key`, "request.extra.emailOnRun: must be a string or a list of strings, not 3",
				"request.extra.sshPubKeys[0]: must be one SSH public key line", "request.extra.sshPubKeys[1]: must be one SSH public key line"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := minimalDoc()
			for _, c := range tt.set {
				doc = set(doc, c.path, c.v)
			}
			data := mustJSON(t, doc)
			if tt.problems != nil {
				checkProblems(t, problemsOf(t, data), tt.problems...)
				return
			}
			j := mustParse(t, data)
			if tt.check != nil {
				tt.check(t, j)
			}
			checkRoundTrip(t, j)
		})
	}
}

func TestParseTopLevel(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string // a problem, "path: message"
	}{
		{"list", `[1, 2]`, ": a job must be a JSON object, not a list"},
		{"string", `"job"`, `: a job must be a JSON object, not "job"`},
		{"null", `null`, ": a job must be a JSON object, not null"},
		{"duplicate key", `{"name": "a", "name": "b", "request": {}}`, "name: duplicate key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := problemsOf(t, []byte(tt.in))
			path, msg, _ := strings.Cut(tt.want, ": ")
			if got[0].Path != path || !strings.Contains(got[0].Message, msg) {
				t.Errorf("problems = %q, want first %q", got, tt.want)
			}
		})
	}
	t.Run("error text", func(t *testing.T) {
		_, err := Parse([]byte(`{"name": "", "request": {"resources": {"cpus": 0, "gpus": 0, "cpuMemoryGb": 1}, "docker": {"image": "x"}}}`), testOptions())
		want := "invalid job: name: must not be empty; request.resources.cpus: must be at least 1, not 0"
		if err == nil || err.Error() != want {
			t.Errorf("Error() = %v\nwant %s", err, want)
		}
	})
	t.Run("many problems are capped", func(t *testing.T) {
		ports := make([]any, 300)
		for i := range ports {
			ports[i] = 0
		}
		got := problemsOf(t, mustJSON(t, set(minimalDoc(), "request.docker.portMappings", ports)))
		if len(got) != 101 || got[100].Message != "and 200 more problems" {
			t.Errorf("got %d problems, last %q", len(got), got[len(got)-1])
		}
	})
	t.Run("too deep", func(t *testing.T) {
		deep := strings.Repeat(`{"a":`, 100) + "1" + strings.Repeat("}", 100)
		got := problemsOf(t, []byte(`{"name": "x", "request": `+deep+`}`))
		found := false
		for _, p := range got {
			found = found || strings.Contains(p.Message, "nested more than")
		}
		if !found {
			t.Errorf("problems = %q, want one about nesting", got)
		}
	})
}

func TestParseSyntaxErrors(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		line, col int
		msg       string
	}{
		{"empty", "", 1, 1, "the document is empty"},
		{"blank", " \n\t", 1, 1, "the document is empty"},
		{"missing colon", "{\n  \"request\": {\n    \"docker\" {", 3, 14, "after object key (is a colon missing?)"},
		{"missing comma", "{\n  \"a\": 1\n  \"b\": 2\n}", 3, 3, "after object key:value pair (is a comma missing?)"},
		{"missing comma in a list", `{"a": [1 2]}`, 1, 10, "after array element (is a comma missing?)"},
		{"placeholder", "{\n  \"resources\": {\n    \"clusterId\": 1,\n    ...\n  }\n}", 4, 5, "looking for beginning of object key string"},
		{"unterminated", `{"name": "x`, 1, 12, "unexpected end of the document"},
		{"unclosed", "{\"name\": \"x\",\n", 2, 1, "unexpected end of the document"},
		{"single quotes", `{'name': 1}`, 1, 2, "invalid character '\\''"},
		{"comment", "{\n// hi\n}", 2, 1, "invalid character '/'"},
		{"characters not bytes", `{"naïve": "é", x}`, 1, 16, "invalid character 'x'"},
		{"two documents", `{} {}`, 1, 4, "after top-level value"},
		{"lone comma", `{"a": [,]}`, 1, 8, "looking for beginning of value"},
		{"comma after open brace", `{,}`, 1, 2, "looking for beginning of object key"},
		{"double trailing comma", `{"a": 1,,}`, 1, 9, "looking for beginning of object key"},
		{"bom", "\xEF\xBB\xBF{x", 1, 2, "invalid character 'x'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in), testOptions())
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Parse: %v, want a *SyntaxError", err)
			}
			if se.Line != tt.line || se.Column != tt.col || !strings.Contains(se.Msg, tt.msg) {
				t.Errorf("got line %d, column %d, %q; want line %d, column %d, %q", se.Line, se.Column, se.Msg, tt.line, tt.col, tt.msg)
			}
			if !strings.HasPrefix(se.Error(), "invalid JSON at line ") {
				t.Errorf("Error() = %q", se.Error())
			}
		})
	}
}

func TestTrailingCommas(t *testing.T) {
	for _, in := range []string{
		`{"name": "a", "request": {"resources": {"cpus": 1, "gpus": 0, "cpuMemoryGb": 1,}, "docker": {"image": "x", "storage": ["/p",],},},}`,
		"{\"name\": \"a\",\n \"request\": {\"resources\": {\"cpus\": 1, \"gpus\": 0, \"cpuMemoryGb\": 1 ,\n\t\r }, \"docker\": {\"image\": \"x\"}}}",
	} {
		mustParse(t, []byte(in))
	}
	// Commas inside strings are text, not syntax.
	j := mustParse(t, []byte(`{"name": "a,}", "description": "\",]", "request": {"resources": {"cpus": 1, "gpus": 0, "cpuMemoryGb": 1}, "docker": {"image": "x", "command": "echo ,]"}}}`))
	if j.Name != "a,}" || j.Description != `",]` || j.Request.Docker.Command.Text != "echo ,]" {
		t.Errorf("strings changed: %q %q %q", j.Name, j.Description, j.Request.Docker.Command.Text)
	}
}

func TestOptions(t *testing.T) {
	doc := mustJSON(t, minimalDoc())
	t.Run("configured defaults", func(t *testing.T) {
		o := testOptions()
		o.DefaultMinDuration, o.DefaultMaxDuration = time.Hour, 24*time.Hour
		j, err := Parse(doc, o)
		if err != nil {
			t.Fatal(err)
		}
		if j.Request.Scheduling.MinDuration.Std() != time.Hour || j.Request.Scheduling.MaxDuration.Std() != 24*time.Hour {
			t.Errorf("durations = %v %v", j.Request.Scheduling.MinDuration, j.Request.Scheduling.MaxDuration)
		}
	})
	t.Run("zero options are the defaults", func(t *testing.T) {
		j, err := Parse(doc, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if j.Request.Scheduling.MinDuration.Std() != 7*24*time.Hour || j.Request.Scheduling.MaxDuration.Std() != 14*24*time.Hour {
			t.Errorf("durations = %v %v", j.Request.Scheduling.MinDuration, j.Request.Scheduling.MaxDuration)
		}
	})
	t.Run("no known features", func(t *testing.T) {
		_, err := Parse(mustJSON(t, set(minimalDoc(), "request.resources.features", []any{"nvlink"})), DefaultOptions())
		var ve *ValidationError
		if !errors.As(err, &ve) || !strings.Contains(ve.Problems[0].Message, "no slave features are known") {
			t.Errorf("Parse = %v", err)
		}
	})
}
