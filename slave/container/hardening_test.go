package container

import (
	"errors"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/system"

	"github.com/opengpulab/gpulab/job"
)

func TestCheckAssignment(t *testing.T) {
	h := DefaultHardening()
	many := make([]job.PortMapping, DefaultMaxPortMappings+1)
	for i := range many {
		many[i] = job.PortMapping{ContainerPort: 8000 + i}
	}
	for _, tc := range []struct {
		name string
		pms  []job.PortMapping
		want string // "" : accepted
	}{
		{"none", nil, ""},
		{"docker picks", []job.PortMapping{{ContainerPort: 8888}}, ""},
		{"range edges", []job.PortMapping{{ContainerPort: 1, HostPort: 30000}, {ContainerPort: 2, HostPort: 32767}}, ""},
		{"the maximum", many[:DefaultMaxPortMappings], ""},
		{"one too many", many, "request.docker.portMappings: 17 port mappings, this slave publishes at most 16"},
		{"privileged port", []job.PortMapping{{ContainerPort: 22, HostPort: 22}},
			"request.docker.portMappings[0].hostPort: 22 is outside this slave's host ports 30000-32767"},
		{"above the range", []job.PortMapping{{ContainerPort: 80}, {ContainerPort: 80, HostPort: 32768}},
			"request.docker.portMappings[1].hostPort: 32768 is outside"},
		{"container port", []job.PortMapping{{ContainerPort: 70000}}, "request.docker.portMappings[0].containerPort: 70000 is not a port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := specAssignment()
			a.Job.Request.Docker.PortMappings = tc.pms
			err := checkAssignment(a, h)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)) {
				t.Errorf("checkAssignment = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestHardeningValidate(t *testing.T) {
	if err := DefaultHardening().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*Hardening)
		want   string
	}{
		{"host network", func(h *Hardening) { h.Network = "host" }, "never run in the host's network"},
		{"another container's network", func(h *Hardening) { h.Network = "container:abc" }, "never share"},
		{"privileged ports", func(h *Hardening) { h.PortLow = 22 }, "port range 22-32767"},
		{"reversed range", func(h *Hardening) { h.PortLow, h.PortHigh = 40000, 30000 }, "port range 40000-30000"},
		{"all capabilities", func(h *Hardening) { h.Capabilities = append(h.Capabilities, "ALL") }, `capability "ALL"`},
		{"sys_admin", func(h *Hardening) { h.Capabilities = []string{"SYS_ADMIN"} }, `capability "SYS_ADMIN"`},
		{"log size", func(h *Hardening) { h.LogMaxSize = "20 MB" }, `log max size "20 MB"`},
		{"negative", func(h *Hardening) { h.PidsLimit = -1 }, "must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := DefaultHardening()
			tc.change(&h)
			if err := h.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %v, want %q", err, tc.want)
			}
			// Spec refuses to build a container under it.
			cfg := specConfig()
			cfg.Hardening = &h
			if _, _, err := Spec(specAssignment(), cfg, nil); err == nil {
				t.Errorf("Spec accepted hardening %+v", h)
			}
		})
	}
}

func TestHardeningOff(t *testing.T) {
	// An operator may loosen the bounds, never past the job's fixed ones.
	cfg := specConfig()
	cfg.Hardening = &Hardening{AllowNewPrivileges: true, PortLow: 1024, PortHigh: 65535}
	_, hc, err := Spec(specAssignment(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if hc.PidsLimit != nil || len(hc.Ulimits) != 0 || len(hc.SecurityOpt) != 0 || hc.StorageOpt != nil || hc.NetworkMode != "" {
		t.Errorf("loosened hardening still set: %+v", hc)
	}
	if hc.Privileged || len(hc.CapAdd) != 0 || len(hc.CapDrop) != 1 || hc.CapDrop[0] != "ALL" {
		t.Errorf("Privileged %v CapAdd %v CapDrop %v", hc.Privileged, hc.CapAdd, hc.CapDrop)
	}
}

func TestRootfsUnsupported(t *testing.T) {
	for _, tc := range []struct {
		info system.Info
		ok   bool
	}{
		{system.Info{Driver: "overlay2", DriverStatus: [][2]string{{"Backing Filesystem", "xfs"}, {"Supports d_type", "true"}}}, true},
		{system.Info{Driver: "overlay2", DriverStatus: [][2]string{{"Backing Filesystem", "extfs"}}}, false},
		{system.Info{Driver: "btrfs"}, true},
		{system.Info{Driver: "zfs"}, true},
		{system.Info{Driver: "vfs"}, false},
		{system.Info{Driver: "fuse-overlayfs"}, false},
	} {
		if why := rootfsUnsupported(tc.info); (why == "") != tc.ok {
			t.Errorf("%s %v: %q, want supported=%v", tc.info.Driver, tc.info.DriverStatus, why, tc.ok)
		}
	}
	for _, msg := range []string{
		"--storage-opt is supported only for overlay over xfs with 'pquota' mount option",
		"Failed to enable quota for btrfs",
	} {
		if !isStorageOptRefusal(errors.New(msg)) {
			t.Errorf("%q not taken for a refused size limit", msg)
		}
	}
}
