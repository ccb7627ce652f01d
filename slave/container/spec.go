package container

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/go-connections/nat"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/slave/storage"
)

// Labels every job container carries. The slave finds its containers by them after a restart
// (re-attach instead of losing jobs), and an operator can tell with `docker ps` whose they are.
const (
	LabelJob     = "gpulab.job"
	LabelSlave   = "gpulab.slave"
	LabelProject = "gpulab.project"
	// LabelAttempt is the job's attempt the container runs for (protocol.Assignment.Attempt):
	// a container of an earlier attempt is never taken for the current one.
	LabelAttempt = "gpulab.attempt"
	// LabelLogBase is how much of the job's log the master had when the container started (an
	// earlier attempt's output): after a slave restart, the master's log size minus it is how
	// much of this container's output the master has.
	LabelLogBase = "gpulab.log-base"
)

// NamePrefix starts every job container's name, "gpulab-<job uuid>": the engine then refuses a
// second container for one job, and `docker ps` reads naturally.
const NamePrefix = "gpulab-"

// ContainerName is the name of a job's container.
func ContainerName(jobUUID string) string { return NamePrefix + jobUUID }

// NvidiaDriver is the Docker device driver that hands GPUs to a container.
const NvidiaDriver = "nvidia"

// dockerSockets are refused as mount source or target even if storage let one through: the
// socket would hand the job the whole host.
var dockerSockets = []string{"/var/run/docker.sock", "/run/docker.sock"}

// nameRe is what Docker accepts in a container name (the UUID becomes part of it).
var nameRe = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)

// Environment variables the slave sets; the request's own environment cannot override them,
// so a job cannot lie to itself (or to tools that trust them) about who and where it is.
const (
	envUsername      = "GPULAB_USERNAME"
	envUserURN       = "GPULAB_USER_URN"
	envUserMiniID    = "GPULAB_USER_MINI_ID"
	envProject       = "GPULAB_PROJECT"
	envJobID         = "GPULAB_JOB_ID"
	envClusterID     = "GPULAB_CLUSTER_ID"
	envSlaveHostname = "GPULAB_SLAVE_HOSTNAME"
	envSlaveDNSName  = "GPULAB_SLAVE_DNSNAME"
	envSlaveInstance = "GPULAB_SLAVE_INSTANCE_ID"
	envSlavePID      = "GPULAB_SLAVE_PID"
	envWorkerID      = "GPULAB_WORKER_ID"
	envCPUs          = "GPULAB_CPUS_RESERVED"
	envGPUs          = "GPULAB_GPUS_RESERVED"
	envMem           = "GPULAB_MEM_RESERVED"
	envVersion       = "GPULAB_VERSION"
	envRestartCount  = "GPULAB_RESTART_COUNT"
	envRestartFirst  = "GPULAB_RESTART_INITIAL_JOB_ID"
	// envNvidiaDevices selects the GPUs an NVIDIA runtime hands to a container. The slave
	// always sets it: "void" without GPUs, the assigned UUIDs with; otherwise an image's own
	// `ENV NVIDIA_VISIBLE_DEVICES=all` (as nvidia/cuda images have) would give every GPU of
	// the host to a job on a host whose default runtime is nvidia.
	envNvidiaDevices = "NVIDIA_VISIBLE_DEVICES"
)

// Spec turns an assignment into the container's configuration. It is pure (no Docker, no
// files), so that everything a job gets (and everything it is denied) is table-tested; the
// mounts come from storage.Resolve, which is where host paths are checked.
//
// What a job never gets, whatever it asks: privileged mode, capabilities beyond
// Hardening.Capabilities, devices other than its GPUs, the host's network, PID or IPC namespace,
// or the Docker socket. What bounds it is the operator's Hardening (Config.Hardening, default
// DefaultHardening): pids, ulimits, no-new-privileges, a bounded log, its network, its host ports.
//
// Left at Docker's defaults on purpose: no init process (the job's command is PID 1, so SIGUSR1
// and SIGTERM reach it exactly as under `docker run`).
func Spec(a protocol.Assignment, cfg Config, mounts []storage.Mount) (*container.Config, *container.HostConfig, error) {
	cfg = cfg.withDefaults()
	j := a.Job
	d := j.Request.Docker
	if !nameRe.MatchString(j.UUID) {
		return nil, nil, fmt.Errorf("job id %q cannot name a container", j.UUID)
	}
	if cfg.SlaveName == "" {
		return nil, nil, errors.New("the slave has no name to label its containers with")
	}
	img, err := job.ParseImage(d.Image)
	if err != nil {
		return nil, nil, fmt.Errorf("image: %w", err)
	}
	args, err := d.Command.Args()
	if err != nil {
		return nil, nil, fmt.Errorf("command: %w", err)
	}
	if want := j.Request.Resources.GPUs; want != len(a.GPUs) {
		return nil, nil, fmt.Errorf("the job needs %d GPU(s) but was assigned %d", want, len(a.GPUs))
	}

	h := cfg.hardening()
	if err := h.Validate(); err != nil {
		return nil, nil, fmt.Errorf("the slave's hardening: %w", err)
	}
	var mnts []mount.Mount
	for _, m := range mounts {
		if slices.Contains(dockerSockets, path.Clean(m.Target)) || (!m.Tmpfs && slices.Contains(dockerSockets, path.Clean(m.Source))) {
			return nil, nil, fmt.Errorf("mount %s -> %s: the Docker socket is never mounted", m.Source, m.Target)
		}
		if m.Tmpfs {
			mnts = append(mnts, mount.Mount{
				Type: mount.TypeTmpfs, Target: m.Target, ReadOnly: m.ReadOnly,
				TmpfsOptions: &mount.TmpfsOptions{SizeBytes: m.SizeBytes},
			})
			continue
		}
		mnts = append(mnts, mount.Mount{Type: mount.TypeBind, Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	// Exactly what the scheduler booked (cpuMemoryGb plus the tmpfs RAM disks, which count
	// against the container's memory as they fill): adding the RAM disks again would
	// over-commit the slave by their size.
	memory := int64(bookedMemoryGb(a)) << 30

	exposed, bindings := ports(d.PortMappings, h.hostPortRange())
	stopTimeout := graceSeconds(cfg.CancelGrace)

	cc := &container.Config{
		Image:        img.Reference(),
		Cmd:          args, // nil: the image's CMD
		Env:          environment(a, cfg),
		WorkingDir:   d.WorkingDir,
		User:         d.User,
		ExposedPorts: exposed,
		Labels: map[string]string{
			LabelJob:     j.UUID,
			LabelSlave:   cfg.SlaveName,
			LabelProject: a.Project,
			LabelAttempt: strconv.Itoa(a.Attempt),
			LabelLogBase: strconv.FormatInt(a.Log.Size, 10),
		},
		// Cancel is SIGTERM then SIGKILL after the grace, also when an operator runs
		// `docker stop`, and whatever STOPSIGNAL the image declares (engines before API 1.42
		// ignore the signal given to a stop call and use this one).
		StopSignal:  "SIGTERM",
		StopTimeout: &stopTimeout,
	}
	hc := &container.HostConfig{
		PortBindings: bindings,
		Mounts:       mnts,
		GroupAdd:     slices.Clone(d.GroupAdd),
		// PyTorch data loaders and other multi-process tools share tensors through /dev/shm;
		// Docker's 64 MiB default makes them die with "bus error". Shared memory counts
		// against the container's memory limit, so a larger size grants nothing extra.
		ShmSize: int64(j.Request.Resources.CPUMemoryGb) << 30 / 2,
		Resources: container.Resources{
			NanoCPUs:   int64(j.Request.Resources.CPUs) * 1e9,
			CpusetCpus: cpuset(a.CPUIDs, cfg),
			Memory:     memory,
			MemorySwap: memory, // equal to Memory: no swap
		},
		Privileged: false,
	}
	h.apply(hc)
	if len(a.GPUs) > 0 && (!allFake(a.GPUs) || cfg.FakeGPUDeviceRequests) {
		ids := make([]string, len(a.GPUs))
		for i, g := range a.GPUs {
			ids[i] = g.UUID
		}
		hc.DeviceRequests = []container.DeviceRequest{{
			Driver:       NvidiaDriver,
			DeviceIDs:    ids,
			Capabilities: [][]string{{"gpu"}},
		}}
	}
	return cc, hc, nil
}

// allFake reports whether every GPU is simulated (--fake-gpus): there is no device to hand
// over, so the container only gets NVIDIA_VISIBLE_DEVICES naming them, unless
// Config.FakeGPUDeviceRequests asks for the real hand-off (on an engine with a stub hook).
func allFake(gpus []protocol.GPU) bool {
	for _, g := range gpus {
		if !g.Fake {
			return false
		}
	}
	return true
}

// environment is the request's environment plus what the slave sets (which wins on a clash),
// in a stable order: the request's variables sorted by name, then the slave's.
func environment(a protocol.Assignment, cfg Config) []string {
	j := a.Job
	restartCount, initial := 0, j.UUID
	if ri := j.RestartInfo; ri != nil {
		restartCount = ri.RestartCount
		if ri.InitialJobUUID != "" {
			initial = ri.InitialJobUUID
		}
	}
	memGb := j.Request.Resources.CPUMemoryGb
	gpus := make([]string, len(a.GPUs))
	for i, g := range a.GPUs {
		gpus[i] = g.UUID
	}
	nvidia := "void"
	if len(gpus) > 0 {
		nvidia = strings.Join(gpus, ",")
	}
	own := [][2]string{
		{envUsername, a.UserName},
		{envUserURN, a.UserURN},
		{envUserMiniID, a.UserMiniID},
		{envProject, a.Project},
		{envJobID, j.UUID},
		{envClusterID, strconv.Itoa(a.ClusterID)},
		{envSlaveHostname, cfg.SlaveHost},
		{envSlaveDNSName, cfg.SlaveDNSName},
		{envSlaveInstance, cfg.SlaveInstanceID},
		{envSlavePID, strconv.Itoa(cfg.SlavePID)},
		{envWorkerID, strconv.Itoa(a.WorkerID)},
		{envCPUs, strconv.Itoa(j.Request.Resources.CPUs)},
		{envGPUs, strconv.Itoa(len(a.GPUs))},
		// As imec's slaves write it ("2048m"): the job's cpuMemoryGb, without its RAM disks,
		// which is what a program may size its own buffers by.
		{envMem, strconv.Itoa(memGb*1024) + "m"},
		{envVersion, cfg.Version},
		{envRestartCount, strconv.Itoa(restartCount)},
		{envRestartFirst, initial},
	}
	if name := j.Request.Docker.ProjectGidVariableName; name != "" {
		own = append(own, [2]string{name, strconv.Itoa(a.ProjectGID)})
	}
	own = append(own, [2]string{envNvidiaDevices, nvidia})

	taken := map[string]bool{}
	for _, kv := range own {
		taken[kv[0]] = true
	}
	env := make([]string, 0, len(j.Request.Docker.Environment)+len(own))
	for _, k := range slices.Sorted(maps.Keys(j.Request.Docker.Environment)) {
		if !taken[k] {
			env = append(env, k+"="+j.Request.Docker.Environment[k])
		}
	}
	for _, kv := range own {
		env = append(env, kv[0]+"="+kv[1])
	}
	return env
}

// bookedMemoryGb is the memory the scheduler booked for the job (the assignment's), or, from a
// master that does not say, what it books: cpuMemoryGb plus the tmpfs RAM disks.
func bookedMemoryGb(a protocol.Assignment) int {
	if a.MemoryGb > 0 {
		return a.MemoryGb
	}
	return a.Job.Request.TotalMemoryGb()
}

// ports publishes each mapping on TCP: host port 0 lets Docker pick a free one in hostRange
// ("low-high"; empty: anywhere), an empty host IP publishes on every address.
func ports(pms []job.PortMapping, hostRange string) (nat.PortSet, nat.PortMap) {
	if len(pms) == 0 {
		return nil, nil
	}
	exposed, bindings := nat.PortSet{}, nat.PortMap{}
	for _, pm := range pms {
		p := containerPort(pm.ContainerPort)
		exposed[p] = struct{}{}
		hp := hostRange
		if pm.HostPort != 0 {
			hp = strconv.Itoa(pm.HostPort)
		}
		bindings[p] = append(bindings[p], nat.PortBinding{HostIP: pm.HostIP, HostPort: hp})
	}
	return exposed, bindings
}

// cpuset pins a job to its CPU ids, unless the slave offers more CPUs than its machine has
// (Config.Unpinned): a job then gets its share of CPU time (NanoCPUs) wherever it runs.
func cpuset(ids []int, cfg Config) string {
	if cfg.Unpinned {
		return ""
	}
	return cpuList(ids)
}

func cpuList(ids []int) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(id)
	}
	return strings.Join(s, ",")
}

// graceSeconds rounds a grace up to the whole seconds Docker's stop timeout counts in, so that
// a job never gets less than its grace.
func graceSeconds(d time.Duration) int {
	return int(math.Ceil(d.Seconds()))
}
