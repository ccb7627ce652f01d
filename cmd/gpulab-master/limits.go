package main

import (
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/web"
)

// limitFlags are the master's bounds on what users and clients send (README "Limits").
type limitFlags struct {
	Job       job.Limits
	HostPorts string
	Web       web.Limits
}

// addLimits registers the limit flags, each with an environment variable.
func (l *limitFlags) addLimits(fs *flag.FlagSet, getenv func(string) string) {
	jd, wd := job.DefaultLimits(), web.DefaultLimits()
	l.Job = jd
	intFlag := func(p *int, name, env string, def int, usage string) {
		fs.IntVar(p, name, envInt(getenv, env, def), usage+" (env "+env+")")
	}
	intFlag(&l.Job.GPUs, "max-job-gpus", "GPULAB_MAX_JOB_GPUS", jd.GPUs, "most GPUs one job may ask for (also never more than the largest slave has)")
	intFlag(&l.Job.CPUs, "max-job-cpus", "GPULAB_MAX_JOB_CPUS", jd.CPUs, "most CPUs one job may ask for (also never more than the largest slave has)")
	intFlag(&l.Job.MemoryGb, "max-job-memory-gb", "GPULAB_MAX_JOB_MEMORY_GB", jd.MemoryGb, "most memory (GB) one job may ask for (also never more than the largest slave has)")
	intFlag(&l.Job.TmpfsGb, "max-job-tmpfs-gb", "GPULAB_MAX_JOB_TMPFS_GB", jd.TmpfsGb, "most RAM disk (tmpfs) GB one job may ask for, all its RAM disks together")
	intFlag(&l.Job.PortMappings, "max-port-mappings", "GPULAB_MAX_PORT_MAPPINGS", jd.PortMappings, "most port mappings of one job (keep equal to the slaves' limit)")
	intFlag(&l.Job.EnvVars, "max-env-vars", "GPULAB_MAX_ENV_VARS", jd.EnvVars, "most environment variables of one job")
	intFlag(&l.Job.Storage, "max-storage", "GPULAB_MAX_STORAGE", jd.Storage, "most storage entries (mounts and RAM disks) of one job")
	fs.StringVar(&l.HostPorts, "host-ports", envOr(getenv, "GPULAB_HOST_PORTS", fmt.Sprintf("%d-%d", jd.HostPortMin, jd.HostPortMax)),
		"host ports a job may ask for, LOW-HIGH (keep equal to the slaves' range; env GPULAB_HOST_PORTS)")
	fs.DurationVar(&l.Web.ReadHeaderTimeout, "read-header-timeout", envDuration(getenv, "GPULAB_READ_HEADER_TIMEOUT", wd.ReadHeaderTimeout),
		"time a client has to send a request's headers (env GPULAB_READ_HEADER_TIMEOUT)")
	fs.DurationVar(&l.Web.BodyTimeout, "body-timeout", envDuration(getenv, "GPULAB_BODY_TIMEOUT", wd.BodyTimeout),
		"time a client has to send a request's body; 408 after it (env GPULAB_BODY_TIMEOUT)")
	fs.DurationVar(&l.Web.IdleTimeout, "idle-timeout", envDuration(getenv, "GPULAB_IDLE_TIMEOUT", wd.IdleTimeout),
		"an idle kept-alive connection is closed after this (env GPULAB_IDLE_TIMEOUT)")
	intFlag(&l.Web.MaxHeaderBytes, "max-header-bytes", "GPULAB_MAX_HEADER_BYTES", wd.MaxHeaderBytes, "largest request headers accepted")
	intFlag(&l.Web.MaxConnsPerIP, "max-conns-per-ip", "GPULAB_MAX_CONNS_PER_IP", wd.MaxConnsPerIP, "most connections open at once from one client address; more are closed")
	intFlag(&l.Web.MaxStreamsPerConn, "max-streams-per-conn", "GPULAB_MAX_STREAMS_PER_CONN", wd.MaxStreamsPerConn,
		"most requests one HTTP/2 connection carries at once; a client wanting more opens another connection")
}

// jobLimits returns the job limits of the flags, checked.
func (l *limitFlags) jobLimits() (job.Limits, error) {
	lim := l.Job
	for _, f := range []struct {
		name string
		v    int
	}{{"--max-job-gpus", lim.GPUs}, {"--max-job-cpus", lim.CPUs}, {"--max-job-memory-gb", lim.MemoryGb}, {"--max-job-tmpfs-gb", lim.TmpfsGb},
		{"--max-port-mappings", lim.PortMappings}, {"--max-env-vars", lim.EnvVars}, {"--max-storage", lim.Storage}} {
		if f.v < 1 {
			return lim, fmt.Errorf("%s must be at least 1, not %d", f.name, f.v)
		}
	}
	lo, hi, err := job.ParsePortRange(l.HostPorts)
	if err != nil {
		return lim, fmt.Errorf("--host-ports: %w", err)
	}
	lim.HostPortMin, lim.HostPortMax = lo, hi
	return lim, nil
}

// webLimits returns the server limits of the flags, checked.
func (l *limitFlags) webLimits() (web.Limits, error) {
	w := l.Web
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--read-header-timeout", w.ReadHeaderTimeout}, {"--body-timeout", w.BodyTimeout}, {"--idle-timeout", w.IdleTimeout}} {
		if d.v <= 0 {
			return w, fmt.Errorf("%s must be positive, not %s", d.name, d.v)
		}
	}
	if w.MaxHeaderBytes < 4096 {
		return w, fmt.Errorf("--max-header-bytes must be at least 4096, not %d", w.MaxHeaderBytes)
	}
	if w.MaxConnsPerIP < 1 {
		return w, fmt.Errorf("--max-conns-per-ip must be at least 1, not %d", w.MaxConnsPerIP)
	}
	if w.MaxStreamsPerConn < 1 {
		return w, fmt.Errorf("--max-streams-per-conn must be at least 1, not %d", w.MaxStreamsPerConn)
	}
	return w, nil
}

// envInt reads an integer environment variable, or def (see envDuration: a bad value is refused
// by parseFlags).
func envInt(getenv func(string) string, key string, def int) int {
	if n, err := strconv.Atoi(getenv(key)); err == nil {
		return n
	}
	return def
}
