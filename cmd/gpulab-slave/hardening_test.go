package main

import (
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/slave/container"
)

func parseHardening(t *testing.T, args ...string) (container.Hardening, error) {
	t.Helper()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	v := hardeningFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return v.hardening()
}

func TestHardeningFlags(t *testing.T) {
	h, err := parseHardening(t)
	if err != nil || !reflect.DeepEqual(h, container.DefaultHardening()) {
		t.Errorf("no flags: %+v, %v; want the defaults %+v", h, err, container.DefaultHardening())
	}
	h, err = parseHardening(t, "--capabilities", "cap_chown, KILL", "--port-range", "40000-40100", "--pids-limit", "0",
		"--allow-new-privileges", "--network", "bridge", "--rootfs-size-gb", "0", "--max-port-mappings", "2")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(h.Capabilities, []string{"CHOWN", "KILL"}) || h.PortLow != 40000 || h.PortHigh != 40100 ||
		h.PidsLimit != 0 || !h.AllowNewPrivileges || h.Network != "bridge" || h.RootfsSizeGb != 0 || h.MaxPortMappings != 2 {
		t.Errorf("flags: %+v", h)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--network", "host"}, "host's network"},
		{[]string{"--port-range", "30000"}, `--port-range "30000"`},
		{[]string{"--port-range", "80-90"}, "port range 80-90"},
		{[]string{"--capabilities", "SYS_ADMIN"}, `capability "SYS_ADMIN"`},
		{[]string{"--log-max-size", "big"}, `log max size "big"`},
	} {
		if _, err := parseHardening(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}
