package container

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	"golang.org/x/sys/unix"

	"github.com/opengpulab/gpulab/protocol"
)

// Hardening is what the operator decides about every job container (gpulab-slave run flags),
// never the job: a job's request cannot loosen any of it. Each bound keeps one job, careless or
// hostile, from taking the slave (or its Docker Engine) from everybody else.
type Hardening struct {
	// PidsLimit bounds the processes and threads of one container (a fork bomb stays inside
	// it); 0 leaves the engine's default (none).
	PidsLimit int64
	// NoFile and NProc are the nofile and nproc ulimits (soft = hard); 0 leaves the engine's.
	// A value above the engine's own hard limit makes runc refuse to start the container, so
	// CapUlimits lowers them to the slave process's hard limits.
	NoFile, NProc int64
	// Capabilities are the only ones a job keeps: every other is dropped (CapDrop ALL).
	Capabilities []string
	// AllowNewPrivileges turns "no-new-privileges" off: setuid programs (sudo, ping) in an
	// image then gain their privileges again. Off: a process cannot gain more than it started with.
	AllowNewPrivileges bool
	// LogMaxSize and LogMaxFiles bound the output Docker keeps on the slave's disk per
	// container (log driver "local", compressed, rotated); the master has its own copy.
	LogMaxSize  string
	LogMaxFiles int
	// RootfsSizeGb bounds a container's writable layer, where the storage driver can (overlay2
	// on xfs mounted with pquota): Runtime.Prepare clears it, with a log line, elsewhere. 0: none.
	RootfsSizeGb int
	// Network is the Docker network jobs run in, created by the slave when missing as a bridge
	// with inter-container traffic off, so that a job cannot reach another job's unpublished
	// ports. Empty: the engine's default bridge (jobs reach each other).
	Network string
	// PortLow..PortHigh is where host ports come from: a job's own hostPort must lie in it and
	// Docker picks the others in it (never a privileged port nor one of the host's services).
	PortLow, PortHigh int
	// MaxPortMappings bounds a job's published ports: each costs the engine a proxy process.
	MaxPortMappings int
}

// Defaults of Hardening (and of the gpulab-slave flags that set it).
const (
	DefaultPidsLimit       = 4096
	DefaultNoFile          = 65536
	DefaultNProc           = 65536
	DefaultLogMaxSize      = "20m"
	DefaultLogMaxFiles     = 5
	DefaultRootfsSizeGb    = 100
	DefaultNetwork         = "gpulab-jobs"
	DefaultPortLow         = 30000
	DefaultPortHigh        = 32767
	DefaultMaxPortMappings = 16
	// LogDriver keeps a container's output compressed and rotated on the slave's disk, and
	// still readable by `docker logs` (which the slave follows).
	LogDriver = "local"
	// iccOption is the bridge driver's option that turns inter-container traffic on or off.
	iccOption = "com.docker.network.bridge.enable_icc"
)

// DefaultCapabilities are the capabilities a job keeps: those of Docker's default set that
// ordinary images need to install packages, change file owners, switch users (su, gosu) and
// serve on a low port inside the container. Left out of Docker's default set: MKNOD, NET_RAW
// (raw sockets: ARP and DNS spoofing on the bridge), SETPCAP and SETFCAP.
var DefaultCapabilities = []string{
	"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL",
	"NET_BIND_SERVICE", "SETGID", "SETUID", "SYS_CHROOT",
}

// DefaultHardening is the hardening a slave applies when its operator changes nothing.
func DefaultHardening() Hardening {
	return Hardening{
		PidsLimit: DefaultPidsLimit, NoFile: DefaultNoFile, NProc: DefaultNProc,
		Capabilities: slices.Clone(DefaultCapabilities),
		LogMaxSize:   DefaultLogMaxSize, LogMaxFiles: DefaultLogMaxFiles,
		RootfsSizeGb: DefaultRootfsSizeGb, Network: DefaultNetwork,
		PortLow: DefaultPortLow, PortHigh: DefaultPortHigh, MaxPortMappings: DefaultMaxPortMappings,
	}
}

// Validate refuses a hardening that would give jobs the host, or that Docker would refuse on
// every start.
func (h Hardening) Validate() error {
	var errs []error
	if h.PidsLimit < 0 || h.NoFile < 0 || h.NProc < 0 || h.LogMaxFiles < 0 || h.RootfsSizeGb < 0 || h.MaxPortMappings < 0 {
		errs = append(errs, errors.New("limits must not be negative (0: none)"))
	}
	switch n := container.NetworkMode(h.Network); {
	case n.IsHost():
		errs = append(errs, errors.New("network: jobs never run in the host's network"))
	case n.IsContainer():
		errs = append(errs, errors.New("network: jobs never share another container's network"))
	}
	if h.PortLow < 1024 || h.PortHigh > 65535 || h.PortLow > h.PortHigh {
		errs = append(errs, fmt.Errorf("port range %d-%d: must lie within 1024-65535, low to high", h.PortLow, h.PortHigh))
	}
	for _, c := range h.Capabilities {
		if c == "" || strings.EqualFold(c, "ALL") || strings.EqualFold(c, "SYS_ADMIN") || strings.EqualFold(c, "CAP_SYS_ADMIN") {
			errs = append(errs, fmt.Errorf("capability %q cannot be given to jobs", c))
		}
	}
	if h.LogMaxSize != "" {
		if _, err := parseSize(h.LogMaxSize); err != nil {
			errs = append(errs, fmt.Errorf("log max size %q: %w", h.LogMaxSize, err))
		}
	}
	return errors.Join(errs...)
}

// parseSize checks a size as Docker's log options take it ("20m", "1g", "512k").
func parseSize(s string) (int64, error) {
	num, mult := s, int64(1)
	switch strings.ToLower(s[len(s)-1:]) {
	case "k":
		num, mult = s[:len(s)-1], 1<<10
	case "m":
		num, mult = s[:len(s)-1], 1<<20
	case "g":
		num, mult = s[:len(s)-1], 1<<30
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 {
		return 0, errors.New("a positive number with an optional k, m or g")
	}
	return n * mult, nil
}

// CapUlimits lowers the nofile and nproc ulimits to the hard limits of this process (those the
// engine most likely has too): above them runc refuses to start any container. It returns what
// it lowered, for a log line.
func (h *Hardening) CapUlimits() []string {
	var lowered []string
	for _, l := range []struct {
		name     string
		resource int
		v        *int64
	}{{"nofile", unix.RLIMIT_NOFILE, &h.NoFile}, {"nproc", unix.RLIMIT_NPROC, &h.NProc}} {
		var rl unix.Rlimit
		if err := unix.Getrlimit(l.resource, &rl); err != nil || rl.Max == unix.RLIM_INFINITY {
			continue
		}
		if *l.v > 0 && uint64(*l.v) > rl.Max {
			lowered = append(lowered, fmt.Sprintf("%s %d -> %d", l.name, *l.v, rl.Max))
			*l.v = int64(rl.Max)
		}
	}
	return lowered
}

// apply sets the hardening on a job's host configuration.
func (h Hardening) apply(hc *container.HostConfig) {
	if h.PidsLimit > 0 {
		hc.PidsLimit = &h.PidsLimit
	}
	if h.NoFile > 0 {
		hc.Ulimits = append(hc.Ulimits, &container.Ulimit{Name: "nofile", Soft: h.NoFile, Hard: h.NoFile})
	}
	if h.NProc > 0 {
		hc.Ulimits = append(hc.Ulimits, &container.Ulimit{Name: "nproc", Soft: h.NProc, Hard: h.NProc})
	}
	hc.CapDrop = []string{"ALL"}
	hc.CapAdd = slices.Clone(h.Capabilities)
	if !h.AllowNewPrivileges {
		hc.SecurityOpt = append(hc.SecurityOpt, "no-new-privileges")
	}
	hc.LogConfig = container.LogConfig{Type: LogDriver, Config: map[string]string{}}
	if h.LogMaxSize != "" {
		hc.LogConfig.Config["max-size"] = h.LogMaxSize
	}
	if h.LogMaxFiles > 0 {
		hc.LogConfig.Config["max-file"] = strconv.Itoa(h.LogMaxFiles)
	}
	if h.RootfsSizeGb > 0 {
		hc.StorageOpt = map[string]string{"size": strconv.Itoa(h.RootfsSizeGb) + "G"}
	}
	if h.Network != "" {
		hc.NetworkMode = container.NetworkMode(h.Network)
	}
}

// hostPortRange is the HostPort Docker picks a port in for a mapping without its own.
func (h Hardening) hostPortRange() string {
	if h.PortLow == 0 && h.PortHigh == 0 {
		return ""
	}
	return fmt.Sprintf("%d-%d", h.PortLow, h.PortHigh)
}

// checkAssignment refuses, before anything is pulled or created, a job that breaks the
// slave's bounds: the master checks them at submit, but a master of another version (or
// configured otherwise) may let one through, and Docker's own failure would be a hang.
func checkAssignment(a protocol.Assignment, h Hardening) error {
	pms := a.Job.Request.Docker.PortMappings
	if h.MaxPortMappings > 0 && len(pms) > h.MaxPortMappings {
		return fmt.Errorf("request.docker.portMappings: %d port mappings, this slave publishes at most %d", len(pms), h.MaxPortMappings)
	}
	for i, pm := range pms {
		if pm.ContainerPort < 1 || pm.ContainerPort > 65535 {
			return fmt.Errorf("request.docker.portMappings[%d].containerPort: %d is not a port", i, pm.ContainerPort)
		}
		if pm.HostPort != 0 && (h.PortLow != 0 || h.PortHigh != 0) && (pm.HostPort < h.PortLow || pm.HostPort > h.PortHigh) {
			return fmt.Errorf("request.docker.portMappings[%d].hostPort: %d is outside this slave's host ports %d-%d", i, pm.HostPort, h.PortLow, h.PortHigh)
		}
	}
	return nil
}
