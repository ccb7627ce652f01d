package job

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// seedFiles lists testdata/seeds/*.json: every JSON example of the seed documents (see the
// README there for how each was taken from the seeds).
func seedFiles(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "seeds", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no seed examples: %v", err)
	}
	return files
}

// seedRefusals are the examples, as printed, that are not valid jobs, and exactly why.
var seedRefusals = map[string]struct {
	line, col int      // a SyntaxError at this position, or
	problems  []string // these problems
}{
	"002_create_job.asprinted.json":              {problems: []string{`request.docker.image: invalid image: invalid repository name "<MYIMAGE>"`}},
	"003_advanced_scheduling_job.asprinted.json": {line: 27, col: 7},
	"003_advanced_scheduling_job.commafixed.json": {problems: []string{
		"request.scheduling.notAfter: cannot be combined with interactive",
		"request.scheduling.notBefore: cannot be combined with interactive"}},
	"003_scheduling_options.asprinted.json": {line: 17, col: 7},
	"003_scheduling_options.commafixed.json": {problems: []string{
		"request.scheduling.notAfter: cannot be combined with interactive",
		"request.scheduling.notBefore: cannot be combined with interactive"}},
	"003_scheduling_defaults.asprinted.json": {line: 15, col: 7},
	"003_maxsimultaneousjobs.asprinted.json": {problems: []string{`request.scheduling.maxSimultaneousJobs.bucketName: (no spaces), not "my parameter sweep limit"`}},
}

// TestSeedExamples parses every seed example: the valid ones must be accepted (version 1 ones
// converted) and survive the round trips; the refused ones fail exactly as listed.
func TestSeedExamples(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range seedFiles(t) {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(name, "000_") != IsV1(data) {
				t.Errorf("IsV1 = %v", IsV1(data))
			}
			refusal, refused := seedRefusals[name]
			if strings.Contains(name, ".asprinted.") || strings.Contains(name, ".commafixed.") {
				if !refused {
					t.Fatalf("%s is a refused example but has no entry in seedRefusals", name)
				}
			}
			if !refused {
				j := mustParse(t, data)
				checkRoundTrip(t, j)
				return
			}
			seen[name] = true
			_, err = Parse(data, testOptions())
			if refusal.problems == nil {
				var se *SyntaxError
				if !errors.As(err, &se) || se.Line != refusal.line || se.Column != refusal.col {
					t.Fatalf("Parse = %v, want a syntax error at line %d, column %d", err, refusal.line, refusal.col)
				}
				if !strings.Contains(se.Msg, "is a comma missing?") {
					t.Errorf("message %q does not point at the missing comma", se.Msg)
				}
				return
			}
			checkProblems(t, problemsOf(t, data), refusal.problems...)
		})
	}
	for name := range seedRefusals {
		if !seen[name] {
			t.Errorf("seedRefusals names %s, which is not in testdata/seeds", name)
		}
	}
}

// TestSeedExampleValues checks that the seed examples mean what the seeds say they mean.
func TestSeedExampleValues(t *testing.T) {
	parse := func(t *testing.T, name string) *Job {
		t.Helper()
		data, err := os.ReadFile(filepath.Join("testdata", "seeds", name))
		if err != nil {
			t.Fatal(err)
		}
		return mustParse(t, data)
	}
	week := Duration(7 * 24 * time.Hour)
	tests := []struct {
		file  string
		check func(j *Job) bool
	}{
		{"000_jobdatalocations_project.json", func(j *Job) bool {
			return reflect.DeepEqual(j.Request.Docker.Storage, []Storage{{HostPath: "/project", ContainerPath: "/project"}})
		}},
		{"000_jobdatalocations_subdir.json", func(j *Job) bool {
			return reflect.DeepEqual(j.Request.Docker.Storage, []Storage{{HostPath: "/project/mycode/", ContainerPath: "/work/code/"}})
		}},
		{"000_portmappings_container.json", func(j *Job) bool {
			return reflect.DeepEqual(j.Request.Docker.PortMappings, []PortMapping{{ContainerPort: 80}})
		}},
		{"000_portmappings_hostport.json", func(j *Job) bool {
			return reflect.DeepEqual(j.Request.Docker.PortMappings, []PortMapping{{ContainerPort: 80, HostPort: 8080}})
		}},
		{"001_helloworld.json", func(j *Job) bool {
			r := j.Request
			return j.Name == "HelloWorld" && reflect.DeepEqual(r.Resources, Resources{ClusterID: 1, GPUs: 1, CPUs: 2, CPUMemoryGb: 1}) &&
				r.Docker.Command.Text == "echo 'Hello World!'" && r.Scheduling.Interactive &&
				r.Docker.Environment == nil && r.Docker.Storage == nil && r.Docker.PortMappings == nil
		}},
		{"001_clusterid.json", func(j *Job) bool { return j.Request.Resources.ClusterID == 1 }},
		{"001_slavename.json", func(j *Job) bool { return j.Request.Resources.SlaveName == "slave7A" }},
		{"001_resources.json", func(j *Job) bool {
			r := j.Request.Resources
			return r.GPUs == 1 && r.CPUs == 1 && r.CPUMemoryGb == 2 && slices.Equal(r.GPUModel, []string{"V100"}) && r.MinCudaVersion == 10
		}},
		{"001_resources_mincudaversion.json", func(j *Job) bool {
			r := j.Request.Resources
			return r.GPUs == 2 && r.CPUMemoryGb == 4 && r.MinCudaVersion == 10
		}},
		{"001_resources_gpumodel_multiple.json", func(j *Job) bool {
			return slices.Equal(j.Request.Resources.GPUModel, []string{"V100", "1080"})
		}},
		{"001_command_bash.json", func(j *Job) bool {
			args, err := j.Request.Docker.Command.Args()
			return err == nil && len(args) == 3 && args[2] == "nvidia-smi; for i in `seq 1 5`; do echo $i; sleep 1; done;"
		}},
		{"001_command_list.json", func(j *Job) bool {
			c := j.Request.Docker.Command
			return c.IsList && len(c.List) == 5 && c.List[4] == "/project_scratch/logs/"
		}},
		{"001_storage_ssh.json", func(j *Job) bool {
			return reflect.DeepEqual(j.Request.Docker.Storage, []Storage{{HostPath: ".ssh", ContainerPath: "/root/.ssh/"}})
		}},
		{"001_portmappings_two.json", func(j *Job) bool {
			return reflect.DeepEqual(j.Request.Docker.PortMappings, []PortMapping{{ContainerPort: 80}, {ContainerPort: 21}})
		}},
		{"001_environment.json", func(j *Job) bool {
			d := j.Request.Docker
			return reflect.DeepEqual(d.Environment, map[string]string{"DEMO_A": "1", "DEMO_B": "two"}) && d.ProjectGidVariableName == "DEMO_PROJECT_GID"
		}},
		{"002_create_job.json", func(j *Job) bool {
			r := j.Request
			return r.Resources.ClusterID == 9 && r.Resources.MinCudaVersion == 10 &&
				reflect.DeepEqual(r.Docker.Storage, []Storage{{HostPath: "/project", ContainerPath: "/project"}}) &&
				slices.Equal(r.Extra.EmailOnRun, []string{"me@example.com"}) && slices.Equal(r.Extra.EmailOnEnd, []string{"me@example.com"})
		}},
		{"003_quick_migration.json", func(j *Job) bool {
			return j.Request.Scheduling.MinDuration == 2*week && j.Request.Scheduling.MaxDuration == 2*week
		}},
		{"003_advanced_scheduling_job.json", func(j *Job) bool {
			s := j.Request.Scheduling
			return s.MaxDuration == week && s.MinDuration == Duration(time.Hour) &&
				s.NotBefore.Equal(time.Date(2019, 12, 31, 23, 0, 0, 0, time.UTC)) &&
				*s.MaxSimultaneousJobs == (MaxSimultaneousJobs{BucketName: "aBucketName", BucketMax: 1}) &&
				slices.Equal(s.ReservationIDs, []string{"f6dbca7b-58fd-47e3-9ac4-9ad33e7f6030"})
		}},
		{"003_restartable_job.json", func(j *Job) bool {
			s := j.Request.Scheduling
			return s.Restartable && !s.Interactive && s.MaxDuration == week && s.MinDuration == Duration(time.Hour)
		}},
		{"003_scheduling_defaults.json", func(j *Job) bool {
			// The documented defaults are the defaults: the same as no scheduling at all.
			none := mustParse(t, mustJSON(t, minimalDoc())).Request.Scheduling
			return reflect.DeepEqual(j.Request.Scheduling, none)
		}},
		{"003_maxsimultaneousjobs.json", func(j *Job) bool {
			return j.Request.Scheduling.MaxSimultaneousJobs.BucketMax == 2
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			j := parse(t, tt.file)
			if !tt.check(j) {
				t.Errorf("unexpected values:\n%s", mustJSON(t, j))
			}
		})
	}
}

// TestSeedFragmentsAsPrinted keeps the fragments of seed 000 and 001 that are not JSON as
// printed: Parse must say where, and never guess what was meant.
func TestSeedFragmentsAsPrinted(t *testing.T) {
	tests := []struct {
		name, in  string
		line, col int
	}{
		{"000 jobDataLocations without braces", "{\"jobDefinition\": {\"name\": \"n\", \"dockerImage\": \"x\",\n\"jobDataLocations\": [\n       \"mountPoint\": \"/project\"\n]}}", 3, 20},
		{"001 docker without colon", "{\n    \"request\": {\n        \"docker\" {\n            \"image\": \"debian:stable\"\n        }\n    }\n}", 3, 18},
		{"001 placeholder", "{\n    \"request\": {\n        \"resources\": {\n            \"clusterId\": 1,\n            ...\n        }\n    }\n}", 5, 13},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in), testOptions())
			var se *SyntaxError
			if !errors.As(err, &se) || se.Line != tt.line || se.Column != tt.col {
				t.Errorf("Parse = %v, want a syntax error at line %d, column %d", err, tt.line, tt.col)
			}
		})
	}
}
