package storage

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/job"
)

func TestParseMap(t *testing.T) {
	good, err := ParseMap([]string{
		"/project=/srv/gpulab/projects/{project}",
		" /project_scratch = /scratch/{project}/ ",
		"/project/deep/=/deep/{project}/x",
	})
	if err != nil {
		t.Fatalf("ParseMap: %v", err)
	}
	want := Map{
		"/project":         "/srv/gpulab/projects/{project}",
		"/project_scratch": "/scratch/{project}",
		"/project/deep":    "/deep/{project}/x",
	}
	if !reflect.DeepEqual(good, want) {
		t.Errorf("ParseMap = %v, want %v", good, want)
	}
	if got := good.Roots(); !reflect.DeepEqual(got, []string{"/project", "/project/deep", "/project_scratch"}) {
		t.Errorf("Roots = %v", got)
	}
	if m, err := ParseMap(nil); err != nil || len(m) != 0 {
		t.Errorf("ParseMap(nil) = %v, %v; want an empty map", m, err)
	}

	for _, tc := range []struct {
		spec, want string
	}{
		{"/project", "want ROOT=TEMPLATE"},
		{"project=/srv/{project}", "root must be an absolute path"},
		{"/=/srv/{project}", "root must not be /"},
		{"/project=/srv/shared", "must contain {project}"},
		{"/project=srv/{project}", "template must be an absolute path"},
		{"/project=/srv/../etc/{project}", "must not contain '..'"},
		{"/proc=/srv/{project}", "/proc must never be offered"},
		{"/project=/dev/{project}", "template /dev/{project} must never be offered"},
		{"/project=/var/run/docker.sock{project}", ""}, // a folder beside the socket is fine
	} {
		t.Run(tc.spec, func(t *testing.T) {
			_, err := ParseMap([]string{tc.spec})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("ParseMap(%q): %v", tc.spec, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseMap(%q) = %v, want an error containing %q", tc.spec, err, tc.want)
			}
		})
	}
	if _, err := ParseMap([]string{"/p=/a/{project}", "/p/=/b/{project}"}); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("duplicate root: %v", err)
	}
}

// fixture is a slave's storage laid out in a temporary folder: projects alpha, beta and
// alphab (a name that alpha is a prefix of), and traps inside alpha's folder.
type fixture struct {
	base, scratch string
	m             Map
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := fixture{
		base:    base,
		scratch: filepath.Join(base, "slave"),
		m: Map{
			"/project":         filepath.Join(base, "projects", "{project}"),
			"/project/deep":    filepath.Join(base, "deep", "{project}"),
			"/project_scratch": filepath.Join(base, "scratch", "{project}"),
		},
	}
	alpha := f.path("projects/alpha")
	for _, d := range []string{"projects/alpha/data", "projects/beta", "projects/alphab"} {
		if err := os.MkdirAll(f.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for file, body := range map[string]string{
		"projects/alpha/data/file.txt": "mine",
		"projects/beta/secret":         "not yours",
	} {
		if err := os.WriteFile(f.path(file), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range map[string]string{
		"toBeta":       "../beta",
		"toBetaAbs":    f.path("projects/beta"),
		"toRoot":       "/",
		"toAlphaB":     f.path("projects/alphab"),
		"inner":        "data",
		"dangling":     "/nonexistent-gpulab-test/x",
		"toDockerSock": "/var/run/docker.sock",
		"toProc":       "/proc",
	} {
		if err := os.Symlink(target, filepath.Join(alpha, name)); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("unix", filepath.Join(alpha, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return f
}

func (f fixture) path(rel string) string { return filepath.Join(f.base, filepath.FromSlash(rel)) }

const testJob = "0b7c2a4e-1111-4222-8333-944455556666"

func TestResolveAllowed(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name  string
		entry job.Storage
		want  Mount
		dir   bool // Source must be a folder afterwards
	}{
		{"project root", job.Storage{HostPath: "/project", ContainerPath: "/project"},
			Mount{Source: f.path("projects/alpha"), Target: "/project"}, true},
		{"container path defaults to host path", job.Storage{HostPath: "/project/data"},
			Mount{Source: f.path("projects/alpha/data"), Target: "/project/data"}, true},
		{"sub folder elsewhere", job.Storage{HostPath: "/project/data/", ContainerPath: "/data/"},
			Mount{Source: f.path("projects/alpha/data"), Target: "/data"}, true},
		{"file", job.Storage{HostPath: "/project/data/file.txt", ContainerPath: "/in.txt"},
			Mount{Source: f.path("projects/alpha/data/file.txt"), Target: "/in.txt"}, false},
		{"new sub folder is created", job.Storage{HostPath: "/project/new/sub", ContainerPath: "/out"},
			Mount{Source: f.path("projects/alpha/new/sub"), Target: "/out"}, true},
		{"double slashes cleaned", job.Storage{HostPath: "/project//data/./", ContainerPath: "/d"},
			Mount{Source: f.path("projects/alpha/data"), Target: "/d"}, true},
		{"symlink that stays inside", job.Storage{HostPath: "/project/inner", ContainerPath: "/i"},
			Mount{Source: f.path("projects/alpha/data"), Target: "/i"}, true},
		{"other root, folder created", job.Storage{HostPath: "/project_scratch", ContainerPath: "/project_scratch"},
			Mount{Source: f.path("scratch/alpha"), Target: "/project_scratch"}, true},
		{"longest root wins", job.Storage{HostPath: "/project/deep/x", ContainerPath: "/x"},
			Mount{Source: f.path("deep/alpha/x"), Target: "/x"}, true},
		{"PROJECT_SHARE_AUTO", job.Storage{HostPath: job.ProjectShareAuto, ContainerPath: "/project"},
			Mount{Source: f.path("projects/alpha"), Target: "/project"}, true},
		{"PROJECT_SHARE_AUTO default target", job.Storage{HostPath: job.ProjectShareAuto},
			Mount{Source: f.path("projects/alpha"), Target: "/project"}, true},
		{".ssh", job.Storage{HostPath: ".ssh", ContainerPath: "/root/.ssh/"},
			Mount{Source: f.path("slave/jobs/" + testJob + "/.ssh"), Target: "/root/.ssh"}, true},
		{".ssh default target", job.Storage{HostPath: ".ssh"},
			Mount{Source: f.path("slave/jobs/" + testJob + "/.ssh"), Target: "/root/.ssh"}, true},
		{"tmpfs", job.Storage{HostPath: "tmpfs", ContainerPath: "/ram", SizeGb: 2},
			Mount{Target: "/ram", Tmpfs: true, SizeBytes: 2 << 30}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(f.m, "alpha", testJob, f.scratch, []job.Storage{tc.entry})
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if len(got) == 1 && got[0].Beneath != "" {
				// The project folder that Pin opens the source below.
				if !within(got[0].Source, got[0].Beneath) || !strings.Contains(got[0].Beneath, "alpha") {
					t.Fatalf("Resolve = %+v: source not below its project folder", got)
				}
				got[0].Beneath = ""
			}
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("Resolve = %+v, want [%+v]", got, tc.want)
			}
			if tc.dir {
				fi, err := os.Stat(got[0].Source)
				if err != nil || !fi.IsDir() {
					t.Fatalf("source %s is not a folder: %v", got[0].Source, err)
				}
			}
		})
	}

	// The .ssh folder is private to the job.
	fi, err := os.Stat(SSHDir(f.scratch, testJob))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf(".ssh folder mode = %v, want 0700", fi.Mode().Perm())
	}
	if err := RemoveJobDir(f.scratch, testJob); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(JobDir(f.scratch, testJob)); !os.IsNotExist(err) {
		t.Errorf("job folder still there after RemoveJobDir: %v", err)
	}
	if err := RemoveJobDir(f.scratch, "../.."); err != nil {
		t.Errorf("RemoveJobDir of a non-name: %v", err)
	}
	if _, err := os.Stat(f.base); err != nil {
		t.Errorf("RemoveJobDir(../..) removed more than it should: %v", err)
	}

	// A project folder that does not exist yet is created (0770).
	got, err := Resolve(f.m, "gamma", testJob, f.scratch, []job.Storage{{HostPath: "/project", ContainerPath: "/project"}})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(got[0].Source); err != nil || !fi.IsDir() || got[0].Source != f.path("projects/gamma") {
		t.Errorf("new project folder: %+v, %v", got, err)
	}

	// Several entries come back in order.
	got, err = Resolve(f.m, "alpha", testJob, f.scratch, []job.Storage{
		{HostPath: "/project", ContainerPath: "/project"},
		{HostPath: "tmpfs", ContainerPath: "/tmp/ram", SizeGb: 1},
		{HostPath: "/project_scratch", ContainerPath: "/project_scratch"},
	})
	if err != nil || len(got) != 3 || got[1].Target != "/tmp/ram" || got[2].Target != "/project_scratch" {
		t.Errorf("three entries: %+v, %v", got, err)
	}
	if got, err := Resolve(f.m, "alpha", testJob, f.scratch, nil); err != nil || len(got) != 0 {
		t.Errorf("no entries: %+v, %v", got, err)
	}
}

func TestResolveRefused(t *testing.T) {
	f := newFixture(t)
	// A path whose creation would show that a refused entry made a folder outside.
	canary := "/gpulab-storage-test-canary-" + filepath.Base(f.base)
	for _, tc := range []struct {
		name    string
		entries []job.Storage
		m       Map    // f.m when nil
		scratch string // f.scratch when empty
		project string // alpha when empty
		index   int
		want    string
	}{
		{name: "dotdot", entries: []job.Storage{{HostPath: "/project/../beta", ContainerPath: "/b"}},
			want: "hostPath /project/../beta must not contain '..'"},
		{name: "dotdot deep", entries: []job.Storage{{HostPath: "/project/data/../../beta/secret", ContainerPath: "/b"}},
			want: "must not contain '..'"},
		{name: "symlink to other project", entries: []job.Storage{{HostPath: "/project/toBeta", ContainerPath: "/b"}},
			want: "hostPath /project/toBeta leads outside the project's folder of /project"},
		{name: "absolute symlink to other project", entries: []job.Storage{{HostPath: "/project/toBetaAbs", ContainerPath: "/b"}},
			want: "leads outside the project's folder"},
		{name: "through symlink into other project", entries: []job.Storage{{HostPath: "/project/toBeta/secret", ContainerPath: "/b"}},
			want: "leads outside the project's folder"},
		{name: "symlink to prefix-named project", entries: []job.Storage{{HostPath: "/project/toAlphaB", ContainerPath: "/b"}},
			want: "leads outside the project's folder"},
		{name: "symlink to root", entries: []job.Storage{{HostPath: "/project/toRoot", ContainerPath: "/host"}},
			want: "leads outside the project's folder"},
		{name: "symlink to root, new folder", entries: []job.Storage{{HostPath: "/project/toRoot" + canary, ContainerPath: "/host"}},
			want: "leads outside the project's folder"},
		{name: "dangling symlink", entries: []job.Storage{{HostPath: "/project/dangling/sub", ContainerPath: "/d"}},
			want: "goes through a symbolic link that leads nowhere"},
		{name: "symlink to docker socket", entries: []job.Storage{{HostPath: "/project/toDockerSock", ContainerPath: "/s"}},
			want: "leads outside the project's folder"},
		{name: "symlink to proc", entries: []job.Storage{{HostPath: "/project/toProc", ContainerPath: "/p"}},
			want: "leads outside the project's folder"},
		{name: "socket in project", entries: []job.Storage{{HostPath: "/project/sock", ContainerPath: "/s"}},
			want: "hostPath /project/sock is a socket; only folders and files can be mounted"},
		{name: "other project's folder named directly", entries: []job.Storage{{HostPath: f.path("projects/beta"), ContainerPath: "/b"}},
			want: "unknown storage root /"},
		{name: "unknown root", entries: []job.Storage{{HostPath: "/data/x", ContainerPath: "/data"}},
			want: "unknown storage root /data: this slave offers /project, /project/deep, /project_scratch"},
		{name: "root prefix is not a root", entries: []job.Storage{{HostPath: "/projectx", ContainerPath: "/x"}},
			want: "unknown storage root /projectx"},
		{name: "no storage at all", m: Map{}, entries: []job.Storage{{HostPath: "/project", ContainerPath: "/p"}},
			want: "unknown storage root /project: this slave offers no storage"},
		{name: "docker socket", entries: []job.Storage{{HostPath: "/var/run/docker.sock", ContainerPath: "/var/run/docker.sock"}},
			want: "containerPath /var/run/docker.sock is where the Docker socket lives"},
		{name: "docker socket elsewhere", entries: []job.Storage{{HostPath: "/var/run/docker.sock", ContainerPath: "/d.sock"}},
			want: "hostPath /var/run/docker.sock is the Docker socket, which is never mounted"},
		{name: "docker socket in /run", entries: []job.Storage{{HostPath: "/run/docker.sock", ContainerPath: "/d.sock"}},
			want: "is the Docker socket"},
		{name: "proc", entries: []job.Storage{{HostPath: "/proc/1/root", ContainerPath: "/r"}},
			want: "hostPath /proc/1/root lies in the host's /proc, which is never mounted"},
		{name: "sys", entries: []job.Storage{{HostPath: "/sys", ContainerPath: "/s"}},
			want: "lies in the host's /sys"},
		{name: "dev", entries: []job.Storage{{HostPath: "/dev/sda", ContainerPath: "/s"}},
			want: "lies in the host's /dev"},
		{name: "relative hostPath", entries: []job.Storage{{HostPath: "data", ContainerPath: "/d"}},
			want: `hostPath must be an absolute path`},
		{name: "relative containerPath", entries: []job.Storage{{HostPath: "/project", ContainerPath: "project"}},
			want: `containerPath must be an absolute path, not "project"`},
		{name: "containerPath root", entries: []job.Storage{{HostPath: "/project", ContainerPath: "/"}},
			want: "containerPath / would replace the container's root"},
		{name: "containerPath dotdot", entries: []job.Storage{{HostPath: "/project", ContainerPath: "/a/../b"}},
			want: "must not contain '..'"},
		{name: "containerPath in proc", entries: []job.Storage{{HostPath: "/project", ContainerPath: "/proc/sys"}},
			want: "containerPath /proc/sys lies in /proc"},
		{name: "duplicate containerPath", entries: []job.Storage{
			{HostPath: "/project", ContainerPath: "/data"},
			{HostPath: "/project_scratch", ContainerPath: "/data/"},
		}, index: 1, want: "containerPath /data is mounted twice (also by request.docker.storage[0])"},
		{name: "second entry named", entries: []job.Storage{
			{HostPath: "/project", ContainerPath: "/project"},
			{HostPath: "/etc", ContainerPath: "/etc2"},
		}, index: 1, want: "unknown storage root /etc"},
		{name: "tmpfs without size", entries: []job.Storage{{HostPath: "tmpfs", ContainerPath: "/ram"}},
			want: "a tmpfs RAM disk needs sizeGb of at least 1"},
		{name: "PROJECT_SHARE_AUTO without /project", m: Map{"/scratch": f.path("scratch/{project}")},
			entries: []job.Storage{{HostPath: job.ProjectShareAuto, ContainerPath: "/project"}},
			want:    "PROJECT_SHARE_AUTO needs the storage root /project, which this slave does not offer (it offers /scratch)"},
		{name: ".ssh without scratch folder", scratch: "-", entries: []job.Storage{{HostPath: ".ssh"}},
			want: "this slave has no scratch folder for .ssh"},
		{name: "bad project name", project: "..", entries: []job.Storage{{HostPath: "/project", ContainerPath: "/p"}},
			want: `invalid project name ".."`},
		{name: "project name with slash", project: "a/../../x", entries: []job.Storage{{HostPath: "/project", ContainerPath: "/p"}},
			want: `invalid project name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, scratch, project := tc.m, tc.scratch, tc.project
			if m == nil {
				m = f.m
			}
			switch scratch {
			case "":
				scratch = f.scratch
			case "-":
				scratch = ""
			}
			if project == "" {
				project = "alpha"
			}
			got, err := Resolve(m, project, testJob, scratch, tc.entries)
			if err == nil {
				t.Fatalf("Resolve = %+v, want a refusal", got)
			}
			var se *Error
			if !errors.As(err, &se) {
				t.Fatalf("error %v (%T) is not a *storage.Error", err, err)
			}
			if se.Index != tc.index {
				t.Errorf("index = %d, want %d", se.Index, tc.index)
			}
			prefix := "request.docker.storage[" + string(rune('0'+tc.index)) + "]: "
			if !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %q, want %q…%q", err, prefix, tc.want)
			}
		})
	}
	if _, err := os.Stat(canary); !os.IsNotExist(err) {
		t.Errorf("a refused entry created %s: %v", canary, err)
		_ = os.Remove(canary)
	}
	if _, err := os.Stat(f.path("projects/beta/secret")); err != nil {
		t.Errorf("beta's file: %v", err)
	}
}
