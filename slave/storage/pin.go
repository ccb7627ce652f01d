package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Pinning closes the window between the check of a bind source and Docker's opening of it.
//
// Resolve checks a path; Docker opens that path again, later, at container start. A job that
// runs at the same time in the same project could, in between, replace a folder on the path
// with a symbolic link to another project's folder or to /etc. So the checked path is opened
// once, by the slave, without following any link (openat2 with RESOLVE_BENEATH below the
// project's folder and RESOLVE_NO_SYMLINKS: a component swapped for a link makes the open fail),
// the opened folder or file is bind-mounted onto a staging path of the slave's own
// (<scratch>/pins/<job>/<n>), and Docker is given the staging path. What Docker mounts is then
// the very inode that was checked, whatever happens to the path afterwards. After the start,
// Verify compares what the container has at each target (through /proc/<pid>/root) with the
// pinned inode; Release unmounts the staging paths: the container holds its own copy of each
// mount, so nothing needs them once it has started.

// pinsDir is where a job's staging mounts live, under the slave's scratch root and outside
// the per-job folder, which is removed recursively (a recursive removal must never descend
// into a bind of a project folder).
func pinsDir(scratchRoot, jobUUID string) string {
	return filepath.Join(scratchRoot, "pins", jobUUID)
}

// pinned is one staging mount: where it is, what it holds and where the container has it.
type pinned struct {
	staging  string
	target   string
	dev, ino uint64
}

// Pins are a job's staging mounts. The zero value (no bind mounts) is ready to use.
type Pins struct {
	dir  string
	pins []pinned
}

// Pin opens every bind source of mounts without following links, bind-mounts each onto a
// staging path and returns the mounts with the staging paths as sources, for Docker. The
// caller must Release the pins whatever happens next. Tmpfs mounts pass through unchanged.
func Pin(scratchRoot, jobUUID string, mounts []Mount) ([]Mount, *Pins, error) {
	p := &Pins{}
	out := make([]Mount, len(mounts))
	copy(out, mounts)
	var binds []int
	for i, m := range mounts {
		if !m.Tmpfs {
			binds = append(binds, i)
		}
	}
	if len(binds) == 0 {
		return out, p, nil
	}
	if !filepath.IsAbs(scratchRoot) || !plainName(jobUUID) {
		return nil, nil, fmt.Errorf("pin storage: the slave needs a scratch folder (have %q) and a plain job id (have %q)", scratchRoot, jobUUID)
	}
	p.dir = pinsDir(scratchRoot, jobUUID)
	// What a slave killed during an earlier start of this job left behind.
	if err := p.releaseDir(); err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("pin storage: create %s: %w", p.dir, err)
	}
	for n, i := range binds {
		staging := filepath.Join(p.dir, strconv.Itoa(n))
		pn, err := pinOne(mounts[i], staging)
		if err != nil {
			_ = p.Release()
			return nil, nil, fmt.Errorf("pin storage of %s: %w", mounts[i].Target, err)
		}
		p.pins = append(p.pins, pn)
		out[i].Source = staging
	}
	return out, p, nil
}

// ErrMoved: a checked path changed (a folder became a symbolic link) before it could be
// opened. The job's start fails; it is not mounted.
var ErrMoved = errors.New("the folder changed while the job started (a symbolic link appeared on its path)")

// openNoLinks opens m's source without following any symbolic link, below m.Beneath when set.
func openNoLinks(m Mount) (int, error) {
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	open := func(dirfd int, path string, how unix.OpenHow) (int, error) {
		for {
			fd, err := unix.Openat2(dirfd, path, &how)
			if err == unix.EINTR || err == unix.EAGAIN {
				continue
			}
			if err == unix.ELOOP || err == unix.EXDEV {
				return -1, ErrMoved
			}
			return fd, err
		}
	}
	if m.Beneath == "" || !within(m.Source, m.Beneath) {
		return open(unix.AT_FDCWD, m.Source, how)
	}
	root, err := open(unix.AT_FDCWD, m.Beneath, unix.OpenHow{Flags: how.Flags | unix.O_DIRECTORY, Resolve: how.Resolve})
	if err != nil {
		return -1, err
	}
	defer func() { _ = unix.Close(root) }()
	rel := strings.TrimPrefix(strings.TrimPrefix(m.Source, m.Beneath), "/")
	if rel == "" {
		rel = "."
	}
	how.Resolve |= unix.RESOLVE_BENEATH
	return open(root, rel, how)
}

// pinOne opens m's source and binds what it opened onto staging.
func pinOne(m Mount, staging string) (pinned, error) {
	fd, err := openNoLinks(m)
	if err != nil {
		return pinned{}, fmt.Errorf("open %s: %w", m.Source, err)
	}
	defer func() { _ = unix.Close(fd) }()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return pinned{}, fmt.Errorf("stat %s: %w", m.Source, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		err = os.Mkdir(staging, 0o700)
	case unix.S_IFREG:
		var f *os.File
		if f, err = os.OpenFile(staging, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600); err == nil {
			err = f.Close()
		}
	default:
		return pinned{}, fmt.Errorf("%s is no longer a folder or a file", m.Source)
	}
	if err != nil {
		return pinned{}, fmt.Errorf("create staging %s: %w", staging, err)
	}
	// The kernel follows /proc/self/fd/N to the opened inode itself, not to a path.
	if err := unix.Mount("/proc/self/fd/"+strconv.Itoa(fd), staging, "", unix.MS_BIND, ""); err != nil {
		_ = os.Remove(staging)
		return pinned{}, fmt.Errorf("bind %s onto %s: %w", m.Source, staging, err)
	}
	// Private: the staging mount neither propagates to other namespaces nor takes their events.
	if err := unix.Mount("", staging, "", unix.MS_PRIVATE, ""); err != nil {
		_ = unmount(staging)
		return pinned{}, fmt.Errorf("make %s private: %w", staging, err)
	}
	return pinned{staging: staging, target: m.Target, dev: uint64(st.Dev), ino: st.Ino}, nil
}

// Any says whether anything is pinned (a nil Pins: nothing).
func (p *Pins) Any() bool { return p != nil && len(p.pins) > 0 }

// Verify checks, for a started container whose first process is pid, that each pinned target
// in the container is the inode that was checked (through /proc/<pid>/root). A container that has exited already (pid 0,
// or its /proc entry gone) cannot be looked into and passes: the pin alone decided what it got.
func (p *Pins) Verify(pid int) error {
	if p == nil || pid <= 0 {
		return nil
	}
	if len(p.pins) == 0 {
		return nil
	}
	root, err := unix.Open(fmt.Sprintf("/proc/%d/root", pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
		return nil // exited meanwhile
	}
	if err != nil {
		return fmt.Errorf("verify storage: open the container's root: %w", err)
	}
	defer func() { _ = unix.Close(root) }()
	for _, pn := range p.pins {
		// RESOLVE_IN_ROOT: the target resolves as in the container, its absolute links
		// included (an image may have /data as a link), never into the slave's own tree.
		fd, err := unix.Openat2(root, pn.target, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
			if _, perr := os.Stat(fmt.Sprintf("/proc/%d", pid)); perr != nil {
				return nil // exited meanwhile
			}
		}
		if err != nil {
			return fmt.Errorf("verify storage %s in the container: %w", pn.target, err)
		}
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		_ = unix.Close(fd)
		if err != nil {
			return fmt.Errorf("verify storage %s in the container: %w", pn.target, err)
		}
		if uint64(st.Dev) != pn.dev || st.Ino != pn.ino {
			return fmt.Errorf("storage %s in the container is not the folder that was checked (device %d inode %d, want %d %d)",
				pn.target, st.Dev, st.Ino, pn.dev, pn.ino)
		}
	}
	return nil
}

// Release unmounts and removes the staging paths. It is safe to call more than once and on a
// nil Pins.
func (p *Pins) Release() error {
	if p == nil || p.dir == "" {
		return nil
	}
	p.pins = nil
	return p.releaseDir()
}

// releaseDir unmounts every staging path left in the job's pins folder and removes it. It never
// removes recursively: a staging path still mounted would lead into a project's folder.
func (p *Pins) releaseDir() error {
	entries, err := os.ReadDir(p.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("release storage pins: %w", err)
	}
	var errs []error
	for _, e := range entries {
		staging := filepath.Join(p.dir, e.Name())
		if err := unmount(staging); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.Remove(staging); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove %s: %w", staging, err))
		}
	}
	if len(errs) == 0 {
		if err := os.Remove(p.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove %s: %w", p.dir, err))
		}
	}
	return errors.Join(errs...)
}

// unmount detaches whatever is mounted on path (lazily: a busy mount goes once unused); a path
// with nothing mounted is fine.
func unmount(path string) error {
	for {
		err := unix.Unmount(path, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		switch err {
		case nil:
			continue // bound twice (a retried start): unmount again until nothing is left
		case unix.EINVAL, unix.ENOENT:
			return nil
		case unix.EINTR:
			continue
		}
		return fmt.Errorf("unmount %s: %w", path, err)
	}
}

// ReleaseStalePins releases the staging mounts a slave killed during a start left behind (Pin
// releases them as soon as the container has started). Call it at the slave's start, before
// any job starts.
func ReleaseStalePins(scratchRoot string) error {
	if !filepath.IsAbs(scratchRoot) {
		return nil
	}
	entries, err := os.ReadDir(filepath.Join(scratchRoot, "pins"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("release stale storage pins: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if plainName(e.Name()) {
			p := &Pins{dir: pinsDir(scratchRoot, e.Name())}
			errs = append(errs, p.releaseDir())
		}
	}
	return errors.Join(errs...)
}
