package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/opengpulab/gpulab/slave/container"
)

// hardeningValues are the run flags that bound every job container: the operator's, never
// the job's (README, "Containers").
type hardeningValues struct {
	pidsLimit      *int64
	nofile, nproc  *int64
	capabilities   *string
	allowNewPrivs  *bool
	logMaxSize     *string
	logMaxFiles    *int
	rootfsSizeGb   *int
	network        *string
	portRange      *string
	maxPortMapping *int
}

func hardeningFlags(fs *flag.FlagSet) *hardeningValues {
	d := container.DefaultHardening()
	return &hardeningValues{
		pidsLimit:      fs.Int64("pids-limit", d.PidsLimit, "processes and threads one job container may have (0: no limit)"),
		nofile:         fs.Int64("nofile", d.NoFile, "open files ulimit of a job (lowered to this process's hard limit; 0: the engine's)"),
		nproc:          fs.Int64("nproc", d.NProc, "processes ulimit of a job's user (lowered to this process's hard limit; 0: the engine's)"),
		capabilities:   fs.String("capabilities", strings.Join(d.Capabilities, ","), "the only capabilities a job keeps, comma-separated (all others are dropped; empty: none)"),
		allowNewPrivs:  fs.Bool("allow-new-privileges", false, "let setuid programs in jobs gain privileges (turns no-new-privileges off)"),
		logMaxSize:     fs.String("log-max-size", d.LogMaxSize, "size of one file of a job's Docker log on this machine (log driver local), e.g. 20m"),
		logMaxFiles:    fs.Int("log-max-files", d.LogMaxFiles, "files of a job's Docker log kept on this machine"),
		rootfsSizeGb:   fs.Int("rootfs-size-gb", d.RootfsSizeGb, "bound of a job's writable layer in GB, where the storage driver allows it (overlay2 on xfs with pquota; 0: none)"),
		network:        fs.String("network", d.Network, "Docker network of the jobs, created if missing as a bridge with inter-container traffic off (never host)"),
		portRange:      fs.String("port-range", fmt.Sprintf("%d-%d", d.PortLow, d.PortHigh), "host ports jobs may publish on, LOW-HIGH"),
		maxPortMapping: fs.Int("max-port-mappings", d.MaxPortMappings, "port mappings one job may have"),
	}
}

// hardening is the flags' Hardening, checked.
func (v *hardeningValues) hardening() (container.Hardening, error) {
	h := container.Hardening{
		PidsLimit: *v.pidsLimit, NoFile: *v.nofile, NProc: *v.nproc, AllowNewPrivileges: *v.allowNewPrivs,
		LogMaxSize: *v.logMaxSize, LogMaxFiles: *v.logMaxFiles, RootfsSizeGb: *v.rootfsSizeGb,
		Network: *v.network, MaxPortMappings: *v.maxPortMapping,
	}
	for c := range strings.SplitSeq(*v.capabilities, ",") {
		if c = strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(c)), "CAP_"); c != "" {
			h.Capabilities = append(h.Capabilities, c)
		}
	}
	low, high, ok := strings.Cut(*v.portRange, "-")
	var err1, err2 error
	h.PortLow, err1 = strconv.Atoi(strings.TrimSpace(low))
	h.PortHigh, err2 = strconv.Atoi(strings.TrimSpace(high))
	if !ok || err1 != nil || err2 != nil {
		return h, fmt.Errorf("--port-range %q: want LOW-HIGH, e.g. 30000-32767", *v.portRange)
	}
	if err := h.Validate(); err != nil {
		return h, fmt.Errorf("container hardening flags: %w", err)
	}
	return h, nil
}
