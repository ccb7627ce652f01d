package container

import (
	"encoding/base64"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/go-connections/nat"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/slave/storage"
)

const specJob = "a280f7e8-b1e6-11e9-93a1-ffe9aeb472f8"

// specAssignment is imec's documented example job (SPEC section 6, seed 001) on a slave.
func specAssignment() protocol.Assignment {
	return protocol.Assignment{
		Job: job.Job{
			UUID: specJob,
			Request: job.Request{
				Resources: job.Resources{CPUs: 2, CPUMemoryGb: 2},
				Docker: job.Docker{
					Image:   "debian:stable",
					Command: job.Command{Text: `sh -c "echo 'hi there'; env"`},
					Environment: map[string]string{
						"DEMO_B":                 "two",
						"DEMO_A":                 "1",
						"GPULAB_JOB_ID":          "spoofed",
						"NVIDIA_VISIBLE_DEVICES": "all",
					},
					ProjectGidVariableName: "DEMO_PROJECT_GID",
					WorkingDir:             "/work",
					User:                   "nobody",
					GroupAdd:               []string{"users"},
				},
			},
		},
		Attempt:    3,
		Log:        protocol.LogState{NextSeq: 2, Size: 4096},
		CPUIDs:     []int{2, 3},
		MemoryGb:   2,
		UserName:   "wvdemeer",
		UserURN:    "urn:publicid:IDN+ilabt.imec.be+user+wvdemeer",
		UserMiniID: "wvdemeer@ilabt",
		Project:    "ilabt-dev",
		ProjectGID: 6978,
		ClusterID:  1,
		WorkerID:   3,
	}
}

func specConfig() Config {
	return Config{
		SlaveName:       "n085-02",
		SlaveHost:       "n085-02",
		SlaveDNSName:    "n085-02.wall2.ilabt.iminds.be",
		SlaveInstanceID: "af25579982dc3949040",
		Version:         "dev",
		SlavePID:        21924,
	}
}

func TestSpecEnvironment(t *testing.T) {
	cc, _, err := Spec(specAssignment(), specConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"DEMO_A=1",
		"DEMO_B=two",
		"GPULAB_USERNAME=wvdemeer",
		"GPULAB_USER_URN=urn:publicid:IDN+ilabt.imec.be+user+wvdemeer",
		"GPULAB_USER_MINI_ID=wvdemeer@ilabt",
		"GPULAB_PROJECT=ilabt-dev",
		"GPULAB_JOB_ID=" + specJob, // the request's own value is overridden
		"GPULAB_CLUSTER_ID=1",
		"GPULAB_SLAVE_HOSTNAME=n085-02",
		"GPULAB_SLAVE_DNSNAME=n085-02.wall2.ilabt.iminds.be",
		"GPULAB_SLAVE_INSTANCE_ID=af25579982dc3949040",
		"GPULAB_SLAVE_PID=21924",
		"GPULAB_WORKER_ID=3",
		"GPULAB_CPUS_RESERVED=2",
		"GPULAB_GPUS_RESERVED=0",
		"GPULAB_MEM_RESERVED=2048m",
		"GPULAB_VERSION=dev",
		"GPULAB_RESTART_COUNT=0",
		"GPULAB_RESTART_INITIAL_JOB_ID=" + specJob,
		"DEMO_PROJECT_GID=6978",
		"NVIDIA_VISIBLE_DEVICES=void", // no GPUs: none, also under an nvidia default runtime
	}
	if !reflect.DeepEqual(cc.Env, want) {
		t.Errorf("Env =\n%s\nwant\n%s", strings.Join(cc.Env, "\n"), strings.Join(want, "\n"))
	}

	// A restart job names the first job and counts; GPUs are listed by UUID.
	a := specAssignment()
	a.Job.RestartInfo = &job.RestartInfo{InitialJobUUID: "11111111-2222-3333-4444-555555555555", RestartCount: 2}
	a.Job.Request.Resources.GPUs = 2
	a.GPUs = []protocol.GPU{{Index: 0, UUID: "GPU-aaa"}, {Index: 3, UUID: "GPU-ddd"}}
	a.Job.Request.Docker.ProjectGidVariableName = ""
	cc, _, err = Spec(a, specConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, kv := range cc.Env {
		k, v, _ := strings.Cut(kv, "=")
		if _, dup := env[k]; dup {
			t.Errorf("%s is set twice", k)
		}
		env[k] = v
	}
	for k, v := range map[string]string{
		"GPULAB_RESTART_COUNT":          "2",
		"GPULAB_RESTART_INITIAL_JOB_ID": "11111111-2222-3333-4444-555555555555",
		"GPULAB_GPUS_RESERVED":          "2",
		"NVIDIA_VISIBLE_DEVICES":        "GPU-aaa,GPU-ddd",
	} {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	if _, ok := env["DEMO_PROJECT_GID"]; ok {
		t.Error("DEMO_PROJECT_GID set without projectGidVariableName")
	}
}

func TestSpecCommandAndImage(t *testing.T) {
	for _, tc := range []struct {
		name      string
		image     string
		cmd       job.Command
		wantImage string
		wantCmd   []string
	}{
		{"string split like a shell, not run by one", "debian:stable",
			job.Command{Text: `sh -c "echo 'hi there' > /tmp/x"`}, "debian:stable",
			[]string{"sh", "-c", "echo 'hi there' > /tmp/x"}},
		{"no expansion", "debian:stable", job.Command{Text: `echo $HOME *`}, "debian:stable",
			[]string{"echo", "$HOME", "*"}},
		{"list as is", "ubuntu", job.Command{List: []string{"/bin/echo", "a b", "$X"}, IsList: true}, "ubuntu",
			[]string{"/bin/echo", "a b", "$X"}},
		{"empty: image CMD", "ubuntu:22.04", job.Command{}, "ubuntu:22.04", nil},
		{"empty list: image CMD", "ubuntu:22.04", job.Command{IsList: true}, "ubuntu:22.04", nil},
		{"credentials never reach the container config", "deploy:s3cr3t@gitlab.example.org:5000/team/img:1",
			job.Command{}, "gitlab.example.org:5000/team/img:1", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := specAssignment()
			a.Job.Request.Docker.Image = tc.image
			a.Job.Request.Docker.Command = tc.cmd
			cc, _, err := Spec(a, specConfig(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if cc.Image != tc.wantImage {
				t.Errorf("Image = %q, want %q", cc.Image, tc.wantImage)
			}
			if !reflect.DeepEqual([]string(cc.Cmd), tc.wantCmd) {
				t.Errorf("Cmd = %q, want %q", cc.Cmd, tc.wantCmd)
			}
			if len(cc.Entrypoint) != 0 {
				t.Errorf("Entrypoint = %q, want the image's", cc.Entrypoint)
			}
		})
	}
}

func TestSpecResources(t *testing.T) {
	a := specAssignment()
	a.Job.Request.Docker.Storage = []job.Storage{{HostPath: "tmpfs", ContainerPath: "/ram", SizeGb: 1}}
	mounts := []storage.Mount{
		{Source: "/srv/projects/ilabt-dev", Target: "/project"},
		{Target: "/ram", Tmpfs: true, SizeBytes: 1 << 30},
	}
	cfg := specConfig()
	cfg.CancelGrace = 1500 * time.Millisecond
	cc, hc, err := Spec(a, cfg, mounts)
	if err != nil {
		t.Fatal(err)
	}
	if hc.NanoCPUs != 2e9 || hc.CpusetCpus != "2,3" {
		t.Errorf("NanoCPUs = %d, CpusetCpus = %q", hc.NanoCPUs, hc.CpusetCpus)
	}
	// A slave offering more CPUs than its machine has limits CPU time without pinning.
	unpinned := cfg
	unpinned.Unpinned = true
	if _, uhc, err := Spec(a, unpinned, mounts); err != nil || uhc.NanoCPUs != 2e9 || uhc.CpusetCpus != "" {
		t.Errorf("unpinned: NanoCPUs = %d, CpusetCpus = %q, %v", uhc.NanoCPUs, uhc.CpusetCpus, err)
	}
	// The scheduler booked 2 GiB (specAssignment's memoryGb); the RAM disk is not added again.
	if want := int64(2) << 30; hc.Memory != want || hc.MemorySwap != want {
		t.Errorf("Memory = %d, MemorySwap = %d, want both %d (what was booked, no swap)", hc.Memory, hc.MemorySwap, want)
	}
	if hc.ShmSize != 1<<30 {
		t.Errorf("ShmSize = %d", hc.ShmSize)
	}
	wantMounts := []mount.Mount{
		{Type: mount.TypeBind, Source: "/srv/projects/ilabt-dev", Target: "/project"},
		{Type: mount.TypeTmpfs, Target: "/ram", TmpfsOptions: &mount.TmpfsOptions{SizeBytes: 1 << 30}},
	}
	if !reflect.DeepEqual(hc.Mounts, wantMounts) {
		t.Errorf("Mounts = %+v, want %+v", hc.Mounts, wantMounts)
	}
	if len(hc.Binds) != 0 {
		t.Errorf("Binds = %v", hc.Binds)
	}
	if cc.WorkingDir != "/work" || cc.User != "nobody" || !reflect.DeepEqual(hc.GroupAdd, []string{"users"}) {
		t.Errorf("WorkingDir %q User %q GroupAdd %v", cc.WorkingDir, cc.User, hc.GroupAdd)
	}
	if cc.StopSignal != "SIGTERM" || cc.StopTimeout == nil || *cc.StopTimeout != 2 {
		t.Errorf("StopSignal %q StopTimeout %v, want SIGTERM and 2 (1.5 s rounded up)", cc.StopSignal, cc.StopTimeout)
	}
	wantLabels := map[string]string{LabelJob: specJob, LabelSlave: "n085-02", LabelProject: "ilabt-dev", LabelAttempt: "3", LabelLogBase: "4096"}
	if !reflect.DeepEqual(cc.Labels, wantLabels) {
		t.Errorf("Labels = %v", cc.Labels)
	}
	if len(hc.DeviceRequests) != 0 {
		t.Errorf("a job without GPUs got device requests %+v", hc.DeviceRequests)
	}

	// Defaults: the assignment's memory when given, else what the scheduler books (cpuMemoryGb
	// plus the RAM disks); 10 s stop grace.
	a = specAssignment()
	a.MemoryGb = 0
	a.Job.Request.Resources.CPUMemoryGb = 5
	a.Job.Request.Docker.Storage = []job.Storage{{HostPath: "tmpfs", ContainerPath: "/ram", SizeGb: 2}}
	a.CPUIDs = nil
	cc, hc, err = Spec(a, specConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if hc.Memory != 7<<30 || hc.CpusetCpus != "" || *cc.StopTimeout != 10 {
		t.Errorf("Memory %d CpusetCpus %q StopTimeout %d", hc.Memory, hc.CpusetCpus, *cc.StopTimeout)
	}
}

func TestSpecSecurity(t *testing.T) {
	a := specAssignment()
	a.Job.Request.Resources.GPUs = 1
	a.GPUs = []protocol.GPU{{UUID: "GPU-1"}}
	_, hc, err := Spec(a, specConfig(), []storage.Mount{{Source: "/srv/p", Target: "/p"}})
	if err != nil {
		t.Fatal(err)
	}
	if hc.Privileged || hc.NetworkMode.IsHost() || hc.PidMode.IsHost() || hc.IpcMode.IsHost() || hc.UTSMode.IsHost() ||
		hc.UsernsMode.IsHost() || hc.CgroupnsMode.IsHost() {
		t.Errorf("host namespace or privileged: %+v", hc)
	}
	if hc.NetworkMode != DefaultNetwork || hc.PidMode != "" || hc.IpcMode != "" {
		t.Errorf("NetworkMode %q PidMode %q IpcMode %q, want the jobs' network and the engine's defaults", hc.NetworkMode, hc.PidMode, hc.IpcMode)
	}
	if !reflect.DeepEqual([]string(hc.CapDrop), []string{"ALL"}) || !reflect.DeepEqual([]string(hc.CapAdd), DefaultCapabilities) {
		t.Errorf("CapDrop %v CapAdd %v, want ALL dropped and %v added back", hc.CapDrop, hc.CapAdd, DefaultCapabilities)
	}
	if len(hc.Devices) != 0 || len(hc.DeviceCgroupRules) != 0 || !reflect.DeepEqual(hc.SecurityOpt, []string{"no-new-privileges"}) ||
		len(hc.Binds) != 0 || len(hc.VolumesFrom) != 0 || hc.PublishAllPorts {
		t.Errorf("extra privileges: Devices %v rules %v SecurityOpt %v Binds %v", hc.Devices, hc.DeviceCgroupRules, hc.SecurityOpt, hc.Binds)
	}
	if hc.PidsLimit == nil || *hc.PidsLimit != DefaultPidsLimit {
		t.Errorf("PidsLimit %v, want %d", hc.PidsLimit, DefaultPidsLimit)
	}
	wantUlimits := []*container.Ulimit{{Name: "nofile", Soft: DefaultNoFile, Hard: DefaultNoFile}, {Name: "nproc", Soft: DefaultNProc, Hard: DefaultNProc}}
	if !reflect.DeepEqual(hc.Ulimits, wantUlimits) {
		t.Errorf("Ulimits %v, want %v", hc.Ulimits, wantUlimits)
	}
	wantLog := container.LogConfig{Type: "local", Config: map[string]string{"max-size": "20m", "max-file": "5"}}
	if !reflect.DeepEqual(hc.LogConfig, wantLog) {
		t.Errorf("LogConfig %+v, want %+v", hc.LogConfig, wantLog)
	}
	if !reflect.DeepEqual(hc.StorageOpt, map[string]string{"size": "100G"}) {
		t.Errorf("StorageOpt %v, want a 100 GB rootfs", hc.StorageOpt)
	}
	want := []container.DeviceRequest{{Driver: "nvidia", DeviceIDs: []string{"GPU-1"}, Capabilities: [][]string{{"gpu"}}}}
	if !reflect.DeepEqual(hc.DeviceRequests, want) {
		t.Errorf("DeviceRequests = %+v, want %+v", hc.DeviceRequests, want)
	}

	for _, tc := range []struct {
		name   string
		change func(*protocol.Assignment, *Config) []storage.Mount
		want   string
	}{
		{"docker socket as target", func(*protocol.Assignment, *Config) []storage.Mount {
			return []storage.Mount{{Source: "/srv/p/x", Target: "/var/run/docker.sock"}}
		}, "the Docker socket is never mounted"},
		{"docker socket as source", func(*protocol.Assignment, *Config) []storage.Mount {
			return []storage.Mount{{Source: "/run/docker.sock", Target: "/x"}}
		}, "the Docker socket is never mounted"},
		{"gpu count mismatch", func(a *protocol.Assignment, _ *Config) []storage.Mount {
			a.Job.Request.Resources.GPUs = 2
			return nil
		}, "needs 2 GPU(s) but was assigned 0"},
		{"bad job id", func(a *protocol.Assignment, _ *Config) []storage.Mount {
			a.Job.UUID = "../x"
			return nil
		}, "cannot name a container"},
		{"no slave name", func(_ *protocol.Assignment, c *Config) []storage.Mount {
			c.SlaveName = ""
			return nil
		}, "no name"},
		{"bad image", func(a *protocol.Assignment, _ *Config) []storage.Mount {
			a.Job.Request.Docker.Image = "Debian"
			return nil
		}, "image: "},
		{"bad command", func(a *protocol.Assignment, _ *Config) []storage.Mount {
			a.Job.Request.Docker.Command = job.Command{Text: `echo "open`}
			return nil
		}, "command: unterminated double quote"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, cfg := specAssignment(), specConfig()
			mounts := tc.change(&a, &cfg)
			_, _, err := Spec(a, cfg, mounts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Spec = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestSpecPorts(t *testing.T) {
	a := specAssignment()
	a.Job.Request.Docker.PortMappings = []job.PortMapping{
		{ContainerPort: 8888},
		{ContainerPort: 22, HostPort: 2222, HostIP: "127.0.0.1"},
		{ContainerPort: 22, HostPort: 2223},
	}
	cc, hc, err := Spec(a, specConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	wantExposed := nat.PortSet{"8888/tcp": {}, "22/tcp": {}}
	if !reflect.DeepEqual(cc.ExposedPorts, wantExposed) {
		t.Errorf("ExposedPorts = %v", cc.ExposedPorts)
	}
	wantBindings := nat.PortMap{
		"8888/tcp": {{HostIP: "", HostPort: "30000-32767"}}, // Docker picks one in the slave's range
		"22/tcp":   {{HostIP: "127.0.0.1", HostPort: "2222"}, {HostIP: "", HostPort: "2223"}},
	}
	if !reflect.DeepEqual(hc.PortBindings, wantBindings) {
		t.Errorf("PortBindings = %v, want %v", hc.PortBindings, wantBindings)
	}

	cc, hc, err = Spec(specAssignment(), specConfig(), nil)
	if err != nil || cc.ExposedPorts != nil || hc.PortBindings != nil {
		t.Errorf("no ports: %v %v %v", cc.ExposedPorts, hc.PortBindings, err)
	}
}

func TestPublishedPorts(t *testing.T) {
	type pm = job.PortMapping
	type binding = nat.PortBinding
	for _, tc := range []struct {
		name  string
		req   []pm
		ports nat.PortMap
		want  []pm
	}{
		{"IPv4 and IPv6 on the same port: reported once",
			[]pm{{ContainerPort: 8888}},
			nat.PortMap{"8888/tcp": {{HostIP: "0.0.0.0", HostPort: "49153"}, {HostIP: "::", HostPort: "49153"}}},
			[]pm{{ContainerPort: 8888, HostPort: 49153, HostIP: "0.0.0.0"}}},
		{"IPv4 and IPv6 on different ports: the IPv4 one",
			[]pm{{ContainerPort: 8888}},
			nat.PortMap{"8888/tcp": {{HostIP: "0.0.0.0", HostPort: "49153"}, {HostIP: "::", HostPort: "49154"}}},
			[]pm{{ContainerPort: 8888, HostPort: 49153, HostIP: "0.0.0.0"}}},
		{"IPv6 listed first: still the IPv4 one",
			[]pm{{ContainerPort: 8888}},
			nat.PortMap{"8888/tcp": {{HostIP: "::", HostPort: "32770"}, {HostIP: "0.0.0.0", HostPort: "32769"}}},
			[]pm{{ContainerPort: 8888, HostPort: 32769, HostIP: "0.0.0.0"}}},
		{"IPv6 only: the IPv6 one",
			[]pm{{ContainerPort: 8888}},
			nat.PortMap{"8888/tcp": {{HostIP: "::", HostPort: "49154"}}},
			[]pm{{ContainerPort: 8888, HostPort: 49154, HostIP: "::"}}},
		{"an IPv4 address asked for",
			[]pm{{ContainerPort: 22, HostPort: 2222, HostIP: "127.0.0.1"}},
			nat.PortMap{"22/tcp": {{HostIP: "127.0.0.1", HostPort: "2222"}}},
			[]pm{{ContainerPort: 22, HostPort: 2222, HostIP: "127.0.0.1"}}},
		{"an IPv6 address asked for",
			[]pm{{ContainerPort: 22, HostIP: "::1"}},
			nat.PortMap{"22/tcp": {{HostIP: "::1", HostPort: "40001"}}},
			[]pm{{ContainerPort: 22, HostPort: 40001, HostIP: "::1"}}},
		{"several ports in the order of the request; one not bound is left out",
			[]pm{{ContainerPort: 8888}, {ContainerPort: 22, HostPort: 2222, HostIP: "127.0.0.1"}, {ContainerPort: 9}},
			nat.PortMap{
				"8888/tcp": {{HostIP: "0.0.0.0", HostPort: "49153"}, {HostIP: "::", HostPort: "49155"}},
				"22/tcp":   {{HostIP: "127.0.0.1", HostPort: "2222"}},
			},
			[]pm{{ContainerPort: 8888, HostPort: 49153, HostIP: "0.0.0.0"}, {ContainerPort: 22, HostPort: 2222, HostIP: "127.0.0.1"}}},
		{"one container port twice: a named host port and one Docker picked",
			[]pm{{ContainerPort: 22}, {ContainerPort: 22, HostPort: 2222}},
			nat.PortMap{"22/tcp": {
				{HostIP: "0.0.0.0", HostPort: "2222"}, {HostIP: "::", HostPort: "2222"},
				{HostIP: "0.0.0.0", HostPort: "49160"}, {HostIP: "::", HostPort: "49161"},
			}},
			[]pm{{ContainerPort: 22, HostPort: 49160, HostIP: "0.0.0.0"}, {ContainerPort: 22, HostPort: 2222, HostIP: "0.0.0.0"}}},
		{"an unreadable host port is skipped",
			[]pm{{ContainerPort: 8888}},
			nat.PortMap{"8888/tcp": {{HostIP: "0.0.0.0", HostPort: ""}, {HostIP: "::", HostPort: "49154"}}},
			[]pm{{ContainerPort: 8888, HostPort: 49154, HostIP: "::"}}},
		{"nothing bound", []pm{{ContainerPort: 8888}}, nat.PortMap{}, nil},
		{"nothing asked", nil, nat.PortMap{"8888/tcp": {binding{HostIP: "0.0.0.0", HostPort: "1"}}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var info container.InspectResponse
			info.NetworkSettings = &container.NetworkSettings{}
			info.NetworkSettings.Ports = tc.ports
			if got := publishedPorts(tc.req, info); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("publishedPorts = %+v, want %+v", got, tc.want)
			}
		})
	}
	if got := publishedPorts([]pm{{ContainerPort: 8888}}, container.InspectResponse{}); got != nil {
		t.Errorf("without network settings: %+v", got)
	}
}

func TestUsageFromStats(t *testing.T) {
	for _, tc := range []struct {
		name   string
		s      container.StatsResponse
		cpu    float64
		memMiB int64
	}{
		{name: "cgroup v1", s: container.StatsResponse{
			CPUStats:    container.CPUStats{CPUUsage: container.CPUUsage{TotalUsage: 3e9}, SystemUsage: 104e9, OnlineCPUs: 4},
			PreCPUStats: container.CPUStats{CPUUsage: container.CPUUsage{TotalUsage: 2e9}, SystemUsage: 100e9},
			MemoryStats: container.MemoryStats{Usage: 300 << 20, Stats: map[string]uint64{"total_inactive_file": 100 << 20}},
		}, cpu: 100, memMiB: 200},
		{name: "cgroup v2", s: container.StatsResponse{
			CPUStats:    container.CPUStats{CPUUsage: container.CPUUsage{TotalUsage: 4e9, PercpuUsage: []uint64{1, 1}}, SystemUsage: 102e9},
			PreCPUStats: container.CPUStats{CPUUsage: container.CPUUsage{TotalUsage: 3e9}, SystemUsage: 100e9},
			MemoryStats: container.MemoryStats{Usage: 64 << 20, Stats: map[string]uint64{"inactive_file": 16 << 20}},
		}, cpu: 100, memMiB: 48},
		{name: "no previous sample", s: container.StatsResponse{
			CPUStats:    container.CPUStats{CPUUsage: container.CPUUsage{TotalUsage: 4e9}, SystemUsage: 102e9, OnlineCPUs: 2},
			MemoryStats: container.MemoryStats{Usage: 10 << 20},
		}, cpu: 0, memMiB: 10}, // a one-shot sample has no window to measure over
		{name: "stopped", s: container.StatsResponse{}, cpu: 0, memMiB: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := usageFromStats(tc.s)
			if u.CPUPercent != tc.cpu {
				t.Errorf("CPUPercent = %v, want %v", u.CPUPercent, tc.cpu)
			}
			if u.MemoryMiB != tc.memMiB {
				t.Errorf("MemoryMiB = %d, want %d", u.MemoryMiB, tc.memMiB)
			}
		})
	}
}

func TestRegistryAuth(t *testing.T) {
	for _, tc := range []struct {
		image string
		want  string // decoded JSON, "" for no header
	}{
		{"debian:stable", ""},
		{"deploy:s3:cr@t@gitlab.example.org:5000/team/img:1",
			`{"username":"deploy","password":"s3:cr@t","serveraddress":"gitlab.example.org:5000"}`},
		{"me:pw@library/ubuntu", `{"username":"me","password":"pw","serveraddress":"https://index.docker.io/v1/"}`},
	} {
		img, err := job.ParseImage(tc.image)
		if err != nil {
			t.Fatal(err)
		}
		got, err := registryAuth(img)
		if err != nil {
			t.Fatal(err)
		}
		if tc.want == "" {
			if got != "" {
				t.Errorf("%s: auth %q, want none", tc.image, got)
			}
			continue
		}
		b, err := base64.URLEncoding.DecodeString(got)
		if err != nil || string(b) != tc.want {
			t.Errorf("%s: auth decodes to %s (%v), want %s", tc.image, b, err, tc.want)
		}
	}
}

func TestReadPullStream(t *testing.T) {
	for _, tc := range []struct {
		name, stream, want string
	}{
		{"success", `{"status":"Pulling from library/debian","id":"stable"}
{"status":"Digest: sha256:abc"}
{"status":"Status: Downloaded newer image for debian:stable"}
`, ""},
		{"error detail", `{"status":"Pulling from team/img","id":"1"}
{"errorDetail":{"message":"manifest for team/img:1 not found: manifest unknown"},"error":"manifest for team/img:1 not found: manifest unknown"}
`, "manifest for team/img:1 not found: manifest unknown"},
		{"error only", `{"error":"pull access denied"}`, "pull access denied"},
		{"cut short", `{"status":"Pulling`, "read pull progress: unexpected EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := readPullStream(strings.NewReader(tc.stream))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("readPullStream: %v", err)
				}
				return
			}
			if err == nil || err.Error() != tc.want {
				t.Fatalf("readPullStream = %v, want %q", err, tc.want)
			}
		})
	}
}

// Fake GPUs have no device to hand over: by default the container only gets
// NVIDIA_VISIBLE_DEVICES naming them (so demo slaves run GPU jobs on any engine); with
// FakeGPUDeviceRequests they go through Docker's device requests like real GPUs.
func TestSpecFakeGPUs(t *testing.T) {
	a := specAssignment()
	a.Job.Request.Resources.GPUs = 2
	a.GPUs = []protocol.GPU{{Index: 0, UUID: "GPU-fake-a", Fake: true}, {Index: 1, UUID: "GPU-fake-b", Fake: true}}
	for _, withRequests := range []bool{false, true} {
		cfg := specConfig()
		cfg.FakeGPUDeviceRequests = withRequests
		cc, hc, err := Spec(a, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(hc.DeviceRequests) > 0; got != withRequests {
			t.Errorf("FakeGPUDeviceRequests=%v: device requests %+v", withRequests, hc.DeviceRequests)
		}
		found := false
		for _, e := range cc.Env {
			found = found || e == "NVIDIA_VISIBLE_DEVICES=GPU-fake-a,GPU-fake-b"
		}
		if !found {
			t.Errorf("FakeGPUDeviceRequests=%v: env %v lacks the fake GPUs", withRequests, cc.Env)
		}
	}
	a.GPUs[1].Fake = false // a real GPU among them: always a device request
	if _, hc, _ := Spec(a, specConfig(), nil); len(hc.DeviceRequests) != 1 {
		t.Errorf("real GPU without a device request")
	}
}
