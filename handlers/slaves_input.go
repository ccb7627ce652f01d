package handlers

import (
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"golang.org/x/crypto/ssh"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
)

// The slave protocol's messages are checked field by field before anything is stored or looked
// up: a slave's certificate can be stolen, and what it sends must not reach Postgres as a 500
// (a NUL, a path for a UUID) nor cost the master memory (a million jobs in a heartbeat). Every
// refusal is a 400 naming the field, like a job's.

// Protocol limits of the master's own (protocol/README.md); those a slave keeps to as well are
// in package protocol.
const (
	// maxSlaveText bounds names, versions, hosts and ids a slave sends.
	maxSlaveText = 256
	// maxStorageRoots bounds the storage names a slave reports.
	maxStorageRoots = 64
	// maxSlaveCPUs and maxSlaveMemoryMiB bound what a slave may claim to have (a claim of more
	// would attract every job).
	maxSlaveCPUs      = 4096
	maxSlaveMemoryMiB = 64 << 20 // 64 TiB
)

// validator is a protocol message that checks its own fields.
type validator interface{ validate() error }

// The message types as the handlers decode them, each with its checks.
type (
	joinRequest   protocol.JoinRequest
	inventory     protocol.Inventory
	heartbeat     protocol.Heartbeat
	nextRequest   protocol.NextRequest
	stateUpdate   protocol.StateUpdate
	logChunk      protocol.LogChunk
	logStateQuery struct {
		JobUUID string `json:"jobUuid"`
	}
	completion protocol.Completion
)

func (m *joinRequest) validate() error {
	if err := checkText("token", m.Token, maxSlaveText); err != nil {
		return err
	}
	return checkText("csr", m.CSR, 16<<10)
}

func (m *inventory) validate() error {
	for _, f := range []struct{ name, v string }{{"name", m.Name}, {"instanceId", m.InstanceID}, {"host", m.Host}, {"dnsName", m.DNSName},
		{"version", m.Version}, {"driverVersion", m.DriverVersion}, {"cudaVersion", m.CudaVersion}} {
		if err := checkText(f.name, f.v, maxSlaveText); err != nil {
			return err
		}
	}
	// gpuStatus may carry an NVML error: a reason's bound.
	if err := checkText("gpuStatus", m.GPUStatus, protocol.MaxReasonBytes); err != nil {
		return err
	}
	switch {
	case m.CPUs < 0 || m.CPUs > maxSlaveCPUs:
		return fieldError("cpus", "must be from 0 to %d, not %d", maxSlaveCPUs, m.CPUs)
	case m.MemoryMiB < 0 || m.MemoryMiB > maxSlaveMemoryMiB:
		return fieldError("memoryMiB", "must be from 0 to %d, not %d", maxSlaveMemoryMiB, m.MemoryMiB)
	case len(m.GPUs) > protocol.MaxInventoryGPUs:
		return fieldError("gpus", "has %d entries: at most %d are accepted", len(m.GPUs), protocol.MaxInventoryGPUs)
	case len(m.StorageRoots) > maxStorageRoots:
		return fieldError("storageRoots", "has %d entries: at most %d are accepted", len(m.StorageRoots), maxStorageRoots)
	}
	for i, g := range m.GPUs {
		p := fmt.Sprintf("gpus[%d]", i)
		if g.Index < 0 || g.Index >= protocol.MaxInventoryGPUs {
			return fieldError(p+".index", "must be from 0 to %d, not %d", protocol.MaxInventoryGPUs-1, g.Index)
		}
		if g.MemoryMiB < 0 || g.MemoryMiB > 1<<30 {
			return fieldError(p+".memoryMiB", "must be from 0 to %d, not %d", 1<<30, g.MemoryMiB)
		}
		if err := checkText(p+".uuid", g.UUID, maxSlaveText); err != nil {
			return err
		}
		if err := checkText(p+".model", g.Model, maxSlaveText); err != nil {
			return err
		}
	}
	for i, s := range m.StorageRoots {
		if err := checkText(fmt.Sprintf("storageRoots[%d]", i), s, 4096); err != nil {
			return err
		}
	}
	if err := checkSSHEndpoint("ssh", m.SSH); err != nil {
		return err
	}
	return checkRunningJobs("containers", m.Containers)
}

// checkSSHEndpoint checks a slave's SSH endpoint (nil: none): the job JSON sends users there
// and the master publishes its host key, so a host, a port and a parsable key are required.
func checkSSHEndpoint(p string, e *protocol.SSHEndpoint) error {
	if e == nil {
		return nil
	}
	if err := checkText(p+".host", e.Host, maxSlaveText); err != nil {
		return err
	}
	if e.Host == "" || strings.ContainsAny(e.Host, " \t[]@/") {
		return fieldError(p+".host", "must be a host name or address")
	}
	if e.Port < 1 || e.Port > 65535 {
		return fieldError(p+".port", "must be from 1 to 65535, not %d", e.Port)
	}
	if err := checkText(p+".hostKey", e.HostKey, 16<<10); err != nil {
		return err
	}
	if _, _, _, rest, err := ssh.ParseAuthorizedKey([]byte(e.HostKey)); err != nil || len(strings.TrimSpace(string(rest))) > 0 {
		return fieldError(p+".hostKey", "must be one public key in authorized_keys form")
	}
	return nil
}

func (m *heartbeat) validate() error {
	if err := checkText("instanceId", m.InstanceID, maxSlaveText); err != nil {
		return err
	}
	return checkRunningJobs("jobs", m.Jobs)
}

func (m *nextRequest) validate() error {
	if err := checkText("instanceId", m.InstanceID, maxSlaveText); err != nil {
		return err
	}
	if m.Wait < 0 {
		return fieldError("wait", "must not be negative")
	}
	return checkRunningJobs("jobs", m.Jobs)
}

func (m *stateUpdate) validate() error {
	if err := checkJobRef("", m.JobUUID, m.Attempt); err != nil {
		return err
	}
	if err := checkStatus("from", m.From); err != nil {
		return err
	}
	if err := checkStatus("to", m.To); err != nil {
		return err
	}
	if err := checkText("reason", m.Reason, protocol.MaxReasonBytes); err != nil {
		return err
	}
	if res := m.Resources; res != nil {
		switch {
		case len(res.PortMappings) > job.DefaultMaxPortMappings*4:
			return fieldError("resources.portMappings", "has %d entries: at most %d are accepted", len(res.PortMappings), job.DefaultMaxPortMappings*4)
		case len(res.GPUIDs) > protocol.MaxInventoryGPUs:
			return fieldError("resources.gpuIds", "has %d entries: at most %d are accepted", len(res.GPUIDs), protocol.MaxInventoryGPUs)
		case len(res.CPUIDs) > maxSlaveCPUs:
			return fieldError("resources.cpuIds", "has %d entries: at most %d are accepted", len(res.CPUIDs), maxSlaveCPUs)
		case len(res.GPUDetails) > 64<<10:
			return fieldError("resources.gpuDetails", "is %d bytes long: at most %d bytes are accepted", len(res.GPUDetails), 64<<10)
		}
		for i, pm := range res.PortMappings {
			p := fmt.Sprintf("resources.portMappings[%d]", i)
			if pm.ContainerPort < 1 || pm.ContainerPort > 65535 {
				return fieldError(p+".containerPort", "must be a port number from 1 to 65535, not %d", pm.ContainerPort)
			}
			if pm.HostPort < 0 || pm.HostPort > 65535 {
				return fieldError(p+".hostPort", "must be a port number from 1 to 65535, not %d", pm.HostPort)
			}
			if err := checkText(p+".hostIp", pm.HostIP, 64); err != nil {
				return err
			}
		}
		for _, f := range []struct{ name, v string }{{"resources.slaveName", res.SlaveName}, {"resources.slaveHost", res.SlaveHost},
			{"resources.slaveInstanceId", res.SlaveInstanceID}} {
			if err := checkText(f.name, f.v, maxSlaveText); err != nil {
				return err
			}
		}
	}
	return nil
}

func (m *logChunk) validate() error {
	if err := checkJobRef("", m.JobUUID, m.Attempt); err != nil {
		return err
	}
	switch {
	case m.Seq < 0:
		return fieldError("seq", "must not be negative, not %d", m.Seq)
	case len(m.Data) > protocol.MaxLogChunk:
		return fieldError("data", "is %d bytes long: at most %d bytes are accepted in one chunk", len(m.Data), protocol.MaxLogChunk)
	}
	return nil
}

func (m *logStateQuery) validate() error { return checkJobUUID("jobUuid", m.JobUUID) }

func (m *completion) validate() error {
	if err := checkJobRef("", m.JobUUID, m.Attempt); err != nil {
		return err
	}
	if err := checkStatus("from", m.From); err != nil {
		return err
	}
	if err := checkStatus("to", m.To); err != nil {
		return err
	}
	if err := checkText("reason", m.Reason, protocol.MaxReasonBytes); err != nil {
		return err
	}
	return checkUsage("usage", m.Usage)
}

// checkRunningJobs checks the jobs a slave says it holds.
func checkRunningJobs(field string, jobs []protocol.RunningJob) error {
	if len(jobs) > protocol.MaxHeartbeatJobs {
		return fieldError(field, "has %d entries: at most %d are accepted", len(jobs), protocol.MaxHeartbeatJobs)
	}
	for i, j := range jobs {
		p := fmt.Sprintf("%s[%d]", field, i)
		if err := checkJobRef(p+".", j.JobUUID, j.Attempt); err != nil {
			return err
		}
		if err := checkText(p+".containerId", j.ContainerID, 128); err != nil {
			return err
		}
		if j.Status != "" {
			if err := checkStatus(p+".status", j.Status); err != nil {
				return err
			}
		}
		if err := checkUsage(p+".usage", j.Usage); err != nil {
			return err
		}
	}
	return nil
}

// checkJobRef checks a job's UUID and attempt; prefix is the path of the object holding them.
func checkJobRef(prefix, id string, attempt int) error {
	if err := checkJobUUID(prefix+"jobUuid", id); err != nil {
		return err
	}
	if attempt < 0 {
		return fieldError(prefix+"attempt", "must not be negative, not %d", attempt)
	}
	return nil
}

// checkJobUUID refuses anything but a UUID where a job's is expected ("../../x" is not a job).
func checkJobUUID(field, id string) error {
	if len(id) != 36 {
		return fieldError(field, "must be a job UUID like f6dbca7b-58fd-47e3-9ac4-9ad33e7f6030, not %.64q", id)
	}
	if _, err := uuid.Parse(id); err != nil {
		return fieldError(field, "must be a job UUID like f6dbca7b-58fd-47e3-9ac4-9ad33e7f6030, not %.64q", id)
	}
	return nil
}

// checkStatus refuses a job state that does not exist.
func checkStatus(field string, s job.Status) error {
	if !slices.Contains(job.AllStatuses, s) {
		return fieldError(field, "must be a job state, not %.64q", string(s))
	}
	return nil
}

// checkUsage bounds a usage sample.
func checkUsage(field string, u *protocol.Usage) error {
	if u == nil {
		return nil
	}
	switch {
	case u.CPUPercent < 0 || u.CPUPercent > 100*maxSlaveCPUs:
		return fieldError(field+".cpuPercent", "must be from 0 to %d, not %g", 100*maxSlaveCPUs, u.CPUPercent)
	case u.MemoryMiB < 0 || u.MemoryMiB > maxSlaveMemoryMiB:
		return fieldError(field+".memoryMiB", "must be from 0 to %d, not %d", maxSlaveMemoryMiB, u.MemoryMiB)
	case len(u.GPUs) > protocol.MaxInventoryGPUs:
		return fieldError(field+".gpus", "has %d entries: at most %d are accepted", len(u.GPUs), protocol.MaxInventoryGPUs)
	}
	for i, g := range u.GPUs {
		p := fmt.Sprintf("%s.gpus[%d]", field, i)
		if g.Index < 0 || g.Index >= protocol.MaxInventoryGPUs {
			return fieldError(p+".index", "must be from 0 to %d, not %d", protocol.MaxInventoryGPUs-1, g.Index)
		}
		if g.UtilPercent < 0 || g.UtilPercent > 100 {
			return fieldError(p+".utilPercent", "must be from 0 to 100, not %g", g.UtilPercent)
		}
		if g.MemoryUsedMiB < 0 {
			return fieldError(p+".memoryUsedMiB", "must not be negative, not %d", g.MemoryUsedMiB)
		}
	}
	return nil
}
