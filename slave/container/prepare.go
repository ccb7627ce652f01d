package container

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	"golang.org/x/sys/unix"
)

// LabelNetwork marks the jobs' network the slave created, for an operator reading
// `docker network ls`.
const LabelNetwork = "gpulab.network"

// Prepare checks the slave's hardening against the engine once: it drops the rootfs size
// where the storage driver cannot bound it (with a log line: jobs still run), loads the
// record of private images and finds (or makes) the jobs' network. Start does the same
// lazily; gpulab-slave calls it at start-up so that a mistake shows before the first job, and
// so that a slave's first jobs do not each wait for these engine calls (the network's check
// runs under a lock shared by the host's slaves: B3's ten slaves, all taking their first job
// at once, waited for one another's docker info and network inspect).
func (r *Runtime) Prepare(ctx context.Context) error {
	h, err := r.prepare(ctx)
	if err != nil {
		return err
	}
	if err := r.ensureNetwork(ctx, h.Network); err != nil {
		return fmt.Errorf("the jobs' network: %w", err)
	}
	return nil
}

// prepare returns the hardening in force, finding it out on the first call that succeeds.
func (r *Runtime) prepare(ctx context.Context) (Hardening, error) {
	r.prep.Lock()
	defer r.prep.Unlock()
	if r.prep.done {
		return r.prep.h, nil
	}
	h := r.cfg.hardening()
	if err := h.Validate(); err != nil {
		return h, fmt.Errorf("the slave's hardening: %w", err)
	}
	if h.RootfsSizeGb > 0 {
		info, err := r.d.Info(ctx)
		if err != nil {
			return h, fmt.Errorf("docker info: %w", err)
		}
		if why := rootfsUnsupported(info); why != "" {
			r.log.Warn("the job containers' rootfs size is not limited", "why", why, "rootfs_size_gb", h.RootfsSizeGb)
			h.RootfsSizeGb = 0
		}
	}
	if err := r.private.load(); err != nil {
		return h, err
	}
	r.prep.h, r.prep.done = h, true
	return h, nil
}

// rootfsUnsupported says why the engine's storage driver cannot bound a container's writable
// layer (--storage-opt size), or "" when it can: overlay2 only on xfs (mounted with pquota,
// which the engine does not report: a create that fails on it drops the limit then).
func rootfsUnsupported(info system.Info) string {
	switch info.Driver {
	case "overlay2":
		for _, kv := range info.DriverStatus {
			if kv[0] == "Backing Filesystem" && kv[1] == "xfs" {
				return ""
			}
		}
		return "storage driver overlay2 limits sizes only on xfs with pquota"
	case "btrfs", "zfs", "devicemapper", "windowsfilter":
		return ""
	}
	return "storage driver " + info.Driver + " cannot limit a container's size"
}

// isStorageOptRefusal is the engine refusing a size limit it cannot apply (overlay2 on xfs
// without pquota, btrfs without quotas).
func isStorageOptRefusal(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "storage-opt") || strings.Contains(msg, "quota")
}

// dropRootfsSize turns the rootfs limit off for the rest of the slave's life after the engine
// refused it.
func (r *Runtime) dropRootfsSize(err error) {
	r.prep.Lock()
	defer r.prep.Unlock()
	if r.prep.h.RootfsSizeGb > 0 {
		r.log.Warn("the job containers' rootfs size is not limited: the engine refused it", "err", err)
		r.prep.h.RootfsSizeGb = 0
	}
}

// networkMu serialises the check-and-create of the jobs' network within a process (several
// runtimes in tests): an engine before API 1.44 would otherwise create two networks of one
// name, and a name then no longer says which.
var networkMu sync.Mutex

// ensureNetwork creates the jobs' network when it is missing: a bridge with inter-container
// traffic off, so that a job reaches other jobs only through their published ports. An
// existing network is the operator's; one that lets jobs reach each other is logged (once).
//
// Once found or made, the network is taken to exist for the next starts (knownNetwork) until a
// start fails (forgetNetwork): the check runs under a lock shared by every slave process of
// the host, and checking it at every start made concurrent starts wait for one another's
// engine call (B3: 20 jobs starting at once on 10 slaves took twice as long as 20 `docker run`).
func (r *Runtime) ensureNetwork(ctx context.Context, name string) error {
	if mode := container.NetworkMode(name); name == "" || mode.IsDefault() || mode.IsBridge() || mode.IsNone() {
		return nil
	}
	if known := r.knownNetwork.Load(); known != nil && *known == name {
		return nil
	}
	if err := r.checkNetwork(ctx, name); err != nil {
		return err
	}
	r.knownNetwork.Store(&name)
	return nil
}

// forgetNetwork makes the next start check the jobs' network again (an operator, or an engine
// restarted without its state, may have removed it).
func (r *Runtime) forgetNetwork() { r.knownNetwork.Store(nil) }

// networkAgain checks the jobs' network with the engine again, and makes it if it is gone: the
// engine refused a create or a start for something not found.
func (r *Runtime) networkAgain(ctx context.Context, name string) error {
	r.forgetNetwork()
	return r.ensureNetwork(ctx, name)
}

// checkNetwork is ensureNetwork's check with the engine, under the locks.
func (r *Runtime) checkNetwork(ctx context.Context, name string) error {
	networkMu.Lock()
	defer networkMu.Unlock()
	// Docker (before API 1.44) lets two creates of one name race into two networks, after
	// which every container naming it fails ("ambiguous"); slave processes sharing an engine
	// (tests, a slave restarted while its old process ends) take a lock on the host too.
	unlock, err := lockHostWide("gpulab-network-" + name)
	if err != nil {
		return err
	}
	defer unlock()
	n, err := r.d.NetworkInspect(ctx, name, network.InspectOptions{})
	if err != nil && !cerrdefs.IsNotFound(err) && strings.Contains(err.Error(), "ambiguous") {
		// Left by an earlier race: keep the oldest, remove the others not in use.
		if err := r.dedupeNetwork(ctx, name); err != nil {
			return err
		}
		n, err = r.d.NetworkInspect(ctx, name, network.InspectOptions{})
	}
	if err == nil {
		if n.Driver == "bridge" && n.Options[iccOption] != "false" && !r.prep.warnedICC {
			r.prep.warnedICC = true
			r.log.Warn("the jobs' network lets jobs reach each other's ports (inter-container traffic is on)", "network", name)
		}
		return nil
	}
	if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("inspect the jobs' network %s: %w", name, err)
	}
	_, err = r.d.NetworkCreate(ctx, name, network.CreateOptions{
		Driver:  "bridge",
		Options: map[string]string{iccOption: "false"},
		Labels:  map[string]string{LabelNetwork: "jobs"},
	})
	if err != nil && !cerrdefs.IsConflict(err) {
		return fmt.Errorf("create the jobs' network %s: %w", name, err)
	}
	r.log.Info("created the jobs' network (inter-container traffic off)", "network", name)
	return nil
}

// dedupeNetwork leaves one network of the name: the oldest (then the smallest id, so that
// every slave picks the same), removing the others that no container uses.
func (r *Runtime) dedupeNetwork(ctx context.Context, name string) error {
	list, err := r.d.NetworkList(ctx, network.ListOptions{Filters: filters.NewArgs(filters.Arg("name", name))})
	if err != nil {
		return fmt.Errorf("list the jobs' networks %s: %w", name, err)
	}
	var same []network.Summary
	for _, n := range list {
		if n.Name == name { // the filter matches substrings
			same = append(same, n)
		}
	}
	slices.SortFunc(same, func(a, b network.Summary) int {
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.ID, b.ID))
	})
	for _, n := range same[min(1, len(same)):] {
		if err := r.d.NetworkRemove(ctx, n.ID); err != nil {
			r.log.Warn("remove a duplicate of the jobs' network", "network", name, "id", n.ID, "err", err)
			continue
		}
		r.log.Warn("removed a duplicate of the jobs' network", "network", name, "id", n.ID)
	}
	return nil
}

// lockHostWide takes an exclusive lock shared by every process of the host (a lock file in
// the temporary folder), released by the function it returns.
func lockHostWide(name string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), name+".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	return func() { _ = f.Close() }, nil // closing releases the lock
}
