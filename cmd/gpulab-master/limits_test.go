package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/web"
)

// parseLimits parses the limit flags of serve with the given environment.
func parseLimits(t *testing.T, env map[string]string, args ...string) (*limitFlags, error) {
	t.Helper()
	var l limitFlags
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	l.addLimits(fs, func(k string) string { return env[k] })
	return &l, fs.Parse(args)
}

func TestLimitFlags(t *testing.T) {
	l, err := parseLimits(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	jl, err := l.jobLimits()
	if err != nil || jl != job.DefaultLimits() {
		t.Errorf("default job limits = %+v, %v; want %+v", jl, err, job.DefaultLimits())
	}
	if wl, err := l.webLimits(); err != nil || wl != web.DefaultLimits() {
		t.Errorf("default web limits = %+v, %v", wl, err)
	}

	l, err = parseLimits(t, map[string]string{"GPULAB_MAX_JOB_GPUS": "8", "GPULAB_HOST_PORTS": "40000-40100"},
		"--max-port-mappings", "4", "--body-timeout", "5s", "--max-conns-per-ip", "32")
	if err != nil {
		t.Fatal(err)
	}
	jl, err = l.jobLimits()
	if err != nil || jl.GPUs != 8 || jl.PortMappings != 4 || jl.HostPortMin != 40000 || jl.HostPortMax != 40100 {
		t.Errorf("job limits = %+v, %v", jl, err)
	}
	if wl, err := l.webLimits(); err != nil || wl.BodyTimeout.Seconds() != 5 || wl.MaxConnsPerIP != 32 {
		t.Errorf("web limits = %+v, %v", wl, err)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--host-ports", "5-1"}, "--host-ports"},
		{[]string{"--host-ports", "22"}, "--host-ports"},
		{[]string{"--max-job-gpus", "0"}, "--max-job-gpus"},
		{[]string{"--max-port-mappings", "-1"}, "--max-port-mappings"},
		{[]string{"--body-timeout", "0s"}, "--body-timeout"},
		{[]string{"--max-conns-per-ip", "0"}, "--max-conns-per-ip"},
		{[]string{"--max-header-bytes", "100"}, "--max-header-bytes"},
	} {
		l, err := parseLimits(t, nil, tt.args...)
		if err != nil {
			t.Fatal(err)
		}
		_, jerr := l.jobLimits()
		_, werr := l.webLimits()
		if got := errText(jerr) + errText(werr); !strings.Contains(got, tt.want) {
			t.Errorf("%v: errors %q, want one naming %s", tt.args, got, tt.want)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
