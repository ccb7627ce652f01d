package storage

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/opengpulab/gpulab/job"
)

// pinEnv is a storage map with project demo's folder holding data/MARKER and project other's
// folder holding its own MARKER; it needs root (Pin bind-mounts).
func pinEnv(t *testing.T) (Map, string, string, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("pinning bind-mounts: needs root, as a slave runs")
	}
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m := Map{"/project": filepath.Join(base, "projects", ProjectPlaceholder)}
	data := filepath.Join(base, "projects", "demo", "data")
	other := filepath.Join(base, "projects", "other")
	for dir, marker := range map[string]string{data: "demo", other: "other"} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "MARKER"), []byte(marker), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return m, filepath.Join(base, "slave"), data, other
}

func TestPinHoldsTheCheckedFolder(t *testing.T) {
	m, scratch, data, other := pinEnv(t)
	mounts, err := Resolve(m, "demo", "job1", scratch, []job.Storage{{HostPath: "/project/data", ContainerPath: "/data"}, {HostPath: "tmpfs", ContainerPath: "/ram", SizeGb: 1}})
	if err != nil {
		t.Fatal(err)
	}
	pinned, pins, err := Pin(scratch, "job1", mounts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pins.Release() }()
	if pinned[0].Source == data || !pinned[1].Tmpfs || pinned[1].Source != "" {
		t.Fatalf("pinned mounts: %+v", pinned)
	}
	// The job swaps its folder for a link to another project after the pin.
	if err := os.Rename(data, data+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, data); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(pinned[0].Source, "MARKER")); err != nil || string(b) != "demo" {
		t.Fatalf("the staging path shows %q (%v), want demo's folder", b, err)
	}
	if err := pins.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pinsDir(scratch, "job1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pins folder left after Release: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(data+".moved", "MARKER")); err != nil || string(b) != "demo" {
		t.Fatalf("Release touched the project's folder: %q %v", b, err)
	}
}

func TestPinRefusesALinkSwappedInAfterTheCheck(t *testing.T) {
	m, scratch, data, other := pinEnv(t)
	mounts, err := Resolve(m, "demo", "job2", scratch, []job.Storage{{HostPath: "/project/data", ContainerPath: "/data"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(data, data+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, data); err != nil {
		t.Fatal(err)
	}
	_, _, err = Pin(scratch, "job2", mounts)
	if !errors.Is(err, ErrMoved) {
		t.Fatalf("Pin after the swap: %v, want ErrMoved", err)
	}
	if _, err := os.Stat(pinsDir(scratch, "job2")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pins folder left after a refused pin: %v", err)
	}
}

func TestPinVerify(t *testing.T) {
	m, scratch, data, other := pinEnv(t)
	mounts, err := Resolve(m, "demo", "job3", scratch, []job.Storage{{HostPath: "/project/data", ContainerPath: "/data"}})
	if err != nil {
		t.Fatal(err)
	}
	// Verify looks at /proc/<pid>/root<target>: with this process, root is the host's and the
	// target names a host path, the checked folder or another one.
	mounts[0].Target = data
	_, pins, err := Pin(scratch, "job3", mounts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pins.Release() }()
	if err := pins.Verify(os.Getpid()); err != nil {
		t.Fatalf("Verify of the checked folder: %v", err)
	}
	pins.pins[0].target = other
	if err := pins.Verify(os.Getpid()); err == nil {
		t.Fatal("Verify passed another project's folder")
	}
}

func TestReleaseStalePins(t *testing.T) {
	m, scratch, data, _ := pinEnv(t)
	for _, id := range []string{"job4", "job5"} {
		mounts, err := Resolve(m, "demo", id, scratch, []job.Storage{{HostPath: "/project/data", ContainerPath: "/data"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := Pin(scratch, id, mounts); err != nil { // a slave killed before Release
			t.Fatal(err)
		}
	}
	if err := ReleaseStalePins(scratch); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(filepath.Join(scratch, "pins")); len(entries) != 0 {
		t.Fatalf("left in pins: %v", entries)
	}
	if b, err := os.ReadFile(filepath.Join(data, "MARKER")); err != nil || string(b) != "demo" {
		t.Fatalf("the project's folder was touched: %q %v", b, err)
	}
}
