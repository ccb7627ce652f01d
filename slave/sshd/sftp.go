package sshd

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"syscall"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/sys/unix"
)

// serveSFTP serves the sftp subsystem over the job container's file system, as the container
// sees it (its root, its mounts: /project is the project's storage). Every path resolves below
// /proc/<pid>/root with openat2 RESOLVE_IN_ROOT, so neither "..", nor a link the job made,
// absolute or not, can reach the slave's own files.
func serveSFTP(t *target, rw io.ReadWriteCloser) error {
	if t.pid <= 0 {
		return errors.New("the job's container has no process")
	}
	root, err := unix.Open(fmt.Sprintf("/proc/%d/root", t.pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the container's root: %w", err)
	}
	fsys := &rootFS{root: root}
	defer func() { _ = unix.Close(root) }()
	start := t.workDir
	if start == "" {
		start = "/"
	}
	srv := sftp.NewRequestServer(rw, sftp.Handlers{FileGet: fsys, FilePut: fsys, FileCmd: fsys, FileList: fsys}, sftp.WithStartDirectory(start))
	defer func() { _ = srv.Close() }()
	return srv.Serve()
}

// rootFS is the sftp handlers over a root directory file descriptor.
type rootFS struct{ root int }

// open opens p (an absolute path in the container) below the root.
func (r *rootFS) open(p string, flags int, mode uint32) (*os.File, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	if flags&unix.O_CREAT != 0 {
		how.Mode = uint64(mode)
	}
	for {
		fd, err := unix.Openat2(r.root, p, &how)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: p, Err: err}
		}
		return os.NewFile(uintptr(fd), p), nil
	}
}

// parent opens the folder of p and returns it with p's last name, for the calls that act on
// a name in a folder (mkdir, unlink, rename, lstat) and must not follow a last link.
func (r *rootFS) parent(p string) (*os.File, string, error) {
	p = path.Clean("/" + p)
	if p == "/" {
		return nil, "", &fs.PathError{Op: "open", Path: p, Err: unix.EPERM}
	}
	dir, err := r.open(path.Dir(p), unix.O_PATH|unix.O_DIRECTORY, 0)
	return dir, path.Base(p), err
}

// Fileread opens a file to read.
func (r *rootFS) Fileread(req *sftp.Request) (io.ReaderAt, error) {
	return r.open(req.Filepath, unix.O_RDONLY, 0)
}

// Filewrite opens a file to write, as the client's flags ask.
func (r *rootFS) Filewrite(req *sftp.Request) (io.WriterAt, error) {
	pf := req.Pflags()
	flags := unix.O_WRONLY
	if pf.Read {
		flags = unix.O_RDWR
	}
	if pf.Creat {
		flags |= unix.O_CREAT
	}
	if pf.Trunc {
		flags |= unix.O_TRUNC
	}
	if pf.Excl {
		flags |= unix.O_EXCL
	}
	// O_APPEND is left out: sftp writes at offsets (WriteAt refuses an O_APPEND file).
	return r.open(req.Filepath, flags, 0o644)
}

// Filecmd runs the commands that change the tree.
func (r *rootFS) Filecmd(req *sftp.Request) error {
	switch req.Method {
	case "Setstat":
		return r.setstat(req)
	case "Rename", "PosixRename":
		from, fromName, err := r.parent(req.Filepath)
		if err != nil {
			return err
		}
		defer func() { _ = from.Close() }()
		to, toName, err := r.parent(req.Target)
		if err != nil {
			return err
		}
		defer func() { _ = to.Close() }()
		return unix.Renameat(int(from.Fd()), fromName, int(to.Fd()), toName)
	case "Rmdir", "Remove", "Mkdir", "Symlink":
		p := req.Filepath
		if req.Method == "Symlink" {
			p = req.Target // the link's own path; Filepath is what it points to
		}
		dir, name, err := r.parent(p)
		if err != nil {
			return err
		}
		defer func() { _ = dir.Close() }()
		switch req.Method {
		case "Rmdir":
			return unix.Unlinkat(int(dir.Fd()), name, unix.AT_REMOVEDIR)
		case "Remove":
			return unix.Unlinkat(int(dir.Fd()), name, 0)
		case "Mkdir":
			return unix.Mkdirat(int(dir.Fd()), name, 0o755)
		default:
			// The link's text is stored as given; it resolves in the container's root when used.
			return unix.Symlinkat(req.Filepath, int(dir.Fd()), name)
		}
	}
	return sftp.ErrSSHFxOpUnsupported // Link (hard links) and anything else
}

func (r *rootFS) setstat(req *sftp.Request) error {
	attrs, flags := req.Attributes(), req.AttrFlags()
	f, err := r.open(req.Filepath, unix.O_RDONLY, 0)
	if flags.Size {
		f, err = r.open(req.Filepath, unix.O_WRONLY, 0)
	}
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	if flags.Size {
		if err := f.Truncate(int64(attrs.Size)); err != nil {
			return err
		}
	}
	if flags.Permissions {
		if err := f.Chmod(attrs.FileMode().Perm()); err != nil {
			return err
		}
	}
	if flags.Acmodtime {
		ts := []unix.Timespec{unix.NsecToTimespec(attrs.AccessTime().UnixNano()), unix.NsecToTimespec(attrs.ModTime().UnixNano())}
		if err := unix.UtimesNanoAt(int(f.Fd()), "", ts, unix.AT_EMPTY_PATH); err != nil {
			return err
		}
	}
	return nil
}

// Filelist lists a folder, stats a path, or reads a link.
func (r *rootFS) Filelist(req *sftp.Request) (sftp.ListerAt, error) {
	switch req.Method {
	case "List":
		d, err := r.open(req.Filepath, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return nil, err
		}
		defer func() { _ = d.Close() }()
		entries, err := d.ReadDir(-1)
		if err != nil {
			return nil, err
		}
		infos := make([]os.FileInfo, 0, len(entries))
		for _, e := range entries {
			if fi, err := statAt(int(d.Fd()), e.Name(), unix.AT_SYMLINK_NOFOLLOW); err == nil {
				infos = append(infos, fi)
			}
		}
		return lister(infos), nil
	case "Stat":
		f, err := r.open(req.Filepath, unix.O_PATH, 0)
		if err != nil {
			return nil, err
		}
		defer func() { _ = f.Close() }()
		fi, err := statAt(int(f.Fd()), "", unix.AT_EMPTY_PATH)
		if err != nil {
			return nil, err
		}
		fi.name = path.Base(req.Filepath)
		return lister{fi}, nil
	case "Readlink":
		dir, name, err := r.parent(req.Filepath)
		if err != nil {
			return nil, err
		}
		defer func() { _ = dir.Close() }()
		buf := make([]byte, 4096)
		n, err := unix.Readlinkat(int(dir.Fd()), name, buf)
		if err != nil {
			return nil, err
		}
		return lister{&fileInfo{name: string(buf[:n])}}, nil
	}
	return nil, sftp.ErrSSHFxOpUnsupported
}

// Lstat stats a path without following its last link.
func (r *rootFS) Lstat(req *sftp.Request) (sftp.ListerAt, error) {
	dir, name, err := r.parent(req.Filepath)
	if err != nil {
		if path.Clean(req.Filepath) == "/" {
			req.Method = "Stat"
			return r.Filelist(req)
		}
		return nil, err
	}
	defer func() { _ = dir.Close() }()
	fi, err := statAt(int(dir.Fd()), name, unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return nil, err
	}
	return lister{fi}, nil
}

// statAt is fstatat as an os.FileInfo (with a *syscall.Stat_t, which sftp reads the owner from).
func statAt(dirfd int, name string, flags int) (*fileInfo, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, flags); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	mode := fs.FileMode(st.Mode & 0o777)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	}
	if st.Mode&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if st.Mode&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if st.Mode&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return &fileInfo{name: name, size: st.Size, mode: mode, mtime: time.Unix(st.Mtim.Unix()),
		sys: &syscall.Stat_t{Uid: st.Uid, Gid: st.Gid, Mode: st.Mode, Size: st.Size}}, nil
}

type fileInfo struct {
	name  string
	size  int64
	mode  fs.FileMode
	mtime time.Time
	sys   *syscall.Stat_t
}

func (f *fileInfo) Name() string       { return f.name }
func (f *fileInfo) Size() int64        { return f.size }
func (f *fileInfo) Mode() fs.FileMode  { return f.mode }
func (f *fileInfo) ModTime() time.Time { return f.mtime }
func (f *fileInfo) IsDir() bool        { return f.mode.IsDir() }
func (f *fileInfo) Sys() any {
	if f.sys == nil {
		return nil
	}
	return f.sys
}

// lister serves a list of file infos page by page.
type lister []os.FileInfo

func (l lister) ListAt(out []os.FileInfo, offset int64) (int, error) {
	if offset >= int64(len(l)) {
		return 0, io.EOF
	}
	n := copy(out, l[offset:])
	if n < len(out) {
		return n, io.EOF
	}
	return n, nil
}

var _ sftp.LstatFileLister = (*rootFS)(nil)
