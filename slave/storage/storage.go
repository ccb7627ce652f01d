// Package storage maps a job's request.docker.storage onto host folders: the security boundary
// of a slave (SPEC section 6).
//
// A slave offers public storage names ("roots": /project, /project_scratch, ...) and maps each
// to a host folder per project through a template ("/srv/gpulab/projects/{project}"). A job may
// only ever reach its own project's folder of a root: every hostPath is cleaned, refused when it
// holds "..", resolved through symbolic links and refused unless the result stays inside that
// folder. The Docker socket, /proc, /sys and /dev are refused by name as well, so that a slave
// misconfigured with a root over them still cannot hand them out.
//
// Everything is decided before any container exists, and refusals are errors that name the
// entry (request.docker.storage[i]) and say why, fit to be shown to the job's owner.
//
// # The swap race, closed by Pin
//
// Resolve hands out a path free of symbolic links, but Docker would open it later, at container
// start. A job that runs at the same time in the same project could, in that window, replace
// a folder on the path with a symbolic link to another project's folder. Docker cannot open a
// source with RESOLVE_BENEATH, so the slave does (Pin): it opens the checked path without
// following links, binds the opened inode onto a staging path of its own and gives Docker that
// path (see pin.go).
package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/opengpulab/gpulab/job"
)

// ProjectPlaceholder is replaced by the job's project name in a template.
const ProjectPlaceholder = "{project}"

// ProjectRoot is the root that PROJECT_SHARE_AUTO stands for.
const ProjectRoot = "/project"

// DefaultSSHContainerPath is where a ".ssh" entry is mounted when it names no containerPath.
const DefaultSSHContainerPath = "/root/.ssh/"

// dockerSockets are the places of the Docker Engine's socket on a host and in a container.
// Mounting it would hand the job the whole host, so it is refused wherever it shows up.
var dockerSockets = []string{"/var/run/docker.sock", "/run/docker.sock"}

// kernelFS are the host's kernel file systems: never a job's business.
var kernelFS = []string{"/proc", "/sys", "/dev"}

// Map maps each public root ("/project") to its host template ("/srv/gpulab/projects/{project}").
// A slave is configured with one; it is read-only once parsed.
type Map map[string]string

// ParseMap reads the slave's storage flags, "ROOT=TEMPLATE" each. Roots and templates must be
// absolute, clean of "..", outside the kernel file systems, and templates must hold {project}:
// a template without it would give every project the same folder.
func ParseMap(specs []string) (Map, error) {
	m := Map{}
	for _, s := range specs {
		root, tmpl, ok := strings.Cut(s, "=")
		if !ok {
			return nil, fmt.Errorf("storage %q: want ROOT=TEMPLATE, e.g. /project=/srv/gpulab/projects/{project}", s)
		}
		root, tmpl = strings.TrimSpace(root), strings.TrimSpace(tmpl)
		if msg := checkConfigPath(root); msg != "" {
			return nil, fmt.Errorf("storage %q: root %s", s, msg)
		}
		root = path.Clean(root)
		if root == "/" {
			return nil, fmt.Errorf("storage %q: root must not be /", s)
		}
		if msg := checkConfigPath(tmpl); msg != "" {
			return nil, fmt.Errorf("storage %q: template %s", s, msg)
		}
		if !strings.Contains(tmpl, ProjectPlaceholder) {
			return nil, fmt.Errorf("storage %q: template must contain %s, or every project would share one folder", s, ProjectPlaceholder)
		}
		if _, dup := m[root]; dup {
			return nil, fmt.Errorf("storage %q: root %s is given twice", s, root)
		}
		m[root] = path.Clean(tmpl)
	}
	return m, nil
}

// checkConfigPath explains why p cannot be a root or template, or returns "".
func checkConfigPath(p string) string {
	switch {
	case !path.IsAbs(p):
		return fmt.Sprintf("must be an absolute path, not %q", p)
	case slices.Contains(strings.Split(p, "/"), ".."):
		return fmt.Sprintf("must not contain '..', not %q", p)
	case forbidden(path.Clean(p)) != "":
		return fmt.Sprintf("%s must never be offered", path.Clean(p))
	}
	return ""
}

// Roots lists the public roots, sorted: what the slave reports to the master and what error
// messages offer.
func (m Map) Roots() []string {
	roots := make([]string, 0, len(m))
	for r := range m {
		roots = append(roots, r)
	}
	slices.Sort(roots)
	return roots
}

// match finds the longest root that p (clean, absolute) is or lies under, and the rest of p
// below it ("" or "/sub/dir").
func (m Map) match(p string) (root, rest string, ok bool) {
	for r := range m {
		if p != r && !strings.HasPrefix(p, r+"/") {
			continue
		}
		if len(r) > len(root) {
			root = r
		}
	}
	if root == "" {
		return "", "", false
	}
	return root, strings.TrimPrefix(p, root), true
}

// Mount is one mount a job's container gets: a bind of a host folder or file, or a tmpfs RAM
// disk. Source is free of symbolic links.
type Mount struct {
	Source    string // host path; empty for tmpfs
	Target    string // absolute path in the container, cleaned
	ReadOnly  bool
	Tmpfs     bool
	SizeBytes int64 // size of a tmpfs
	// Beneath is the project folder (free of links) that Source lies in, "" for the slave's
	// own folders: Pin opens Source below it and never lets the open leave it.
	Beneath string
}

// Error is a refused or unresolvable storage entry. Its text names the entry as the job
// request does (request.docker.storage[i]) so that the owner sees which line to fix.
type Error struct {
	Index  int
	Reason string
	// Err is the underlying cause when the host failed (a folder could not be made), nil when
	// the request itself was refused.
	Err error
}

// Error names the entry and the reason, as the job's owner reads it.
func (e *Error) Error() string {
	return fmt.Sprintf("request.docker.storage[%d]: %s", e.Index, e.Reason)
}

// Unwrap gives the host's error, if any.
func (e *Error) Unwrap() error { return e.Err }

// SSHDir is the per-job folder behind a ".ssh" entry. It lives under the slave's scratch root,
// not in the project, so that one job's keys are never seen by another.
func SSHDir(scratchRoot, jobUUID string) string {
	return filepath.Join(JobDir(scratchRoot, jobUUID), ".ssh")
}

// JobDir is the slave's own per-job folder; it is removed with the job's container.
func JobDir(scratchRoot, jobUUID string) string {
	return filepath.Join(scratchRoot, "jobs", jobUUID)
}

// RemoveJobDir removes a job's per-job folder, if any. A jobUUID that is not a plain name is
// ignored rather than trusted as a path.
func RemoveJobDir(scratchRoot, jobUUID string) error {
	if scratchRoot == "" || !plainName(jobUUID) {
		return nil
	}
	if err := os.RemoveAll(JobDir(scratchRoot, jobUUID)); err != nil {
		return fmt.Errorf("remove job folder of %s: %w", jobUUID, err)
	}
	return nil
}

// plainName reports whether s can be one element of a host path.
func plainName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\\\x00")
}

// Resolve turns a job's request.docker.storage into mounts, or refuses it with an *Error that
// names the entry. It creates the folders the mounts need (the project folder, a sub-folder not
// made yet, the job's .ssh folder) so that Docker never creates host folders itself.
func Resolve(m Map, project, jobUUID, scratchRoot string, entries []job.Storage) ([]Mount, error) {
	var mounts []Mount
	targets := map[string]int{}
	for i, e := range entries {
		mnt, reason, err := resolveOne(m, project, jobUUID, scratchRoot, e)
		if reason != "" {
			return nil, &Error{Index: i, Reason: reason, Err: err}
		}
		if j, dup := targets[mnt.Target]; dup {
			return nil, &Error{Index: i, Reason: fmt.Sprintf("containerPath %s is mounted twice (also by request.docker.storage[%d])", mnt.Target, j)}
		}
		targets[mnt.Target] = i
		mounts = append(mounts, mnt)
	}
	return mounts, nil
}

// resolveOne resolves one entry; a non-empty reason refuses it (err is its cause, if any).
func resolveOne(m Map, project, jobUUID, scratchRoot string, e job.Storage) (Mount, string, error) {
	target := e.ContainerPath
	if target == "" {
		switch e.HostPath {
		case ".ssh":
			target = DefaultSSHContainerPath
		case job.ProjectShareAuto:
			target = ProjectRoot
		default:
			target = e.HostPath
		}
	}
	target, reason := checkTarget(target)
	if reason != "" {
		return Mount{}, reason, nil
	}
	switch e.HostPath {
	case job.TmpfsHostPath:
		if e.SizeGb < 1 {
			return Mount{}, fmt.Sprintf("a tmpfs RAM disk needs sizeGb of at least 1, not %d", e.SizeGb), nil
		}
		return Mount{Target: target, Tmpfs: true, SizeBytes: int64(e.SizeGb) << 30}, "", nil
	case ".ssh":
		src, reason, err := sshDir(scratchRoot, jobUUID)
		return Mount{Source: src, Target: target}, reason, err
	case job.ProjectShareAuto:
		if _, ok := m[ProjectRoot]; !ok {
			return Mount{}, fmt.Sprintf("%s needs the storage root %s, which this slave does not offer (it offers %s)",
				job.ProjectShareAuto, ProjectRoot, offered(m)), nil
		}
		src, beneath, reason, err := hostFolder(m, project, ProjectRoot)
		return Mount{Source: src, Target: target, Beneath: beneath}, reason, err
	case "":
		return Mount{}, "needs a hostPath", nil
	}
	src, beneath, reason, err := hostFolder(m, project, e.HostPath)
	return Mount{Source: src, Target: target, Beneath: beneath}, reason, err
}

// checkTarget cleans a containerPath or explains why it cannot be mounted on.
func checkTarget(p string) (string, string) {
	if !path.IsAbs(p) {
		return "", fmt.Sprintf("containerPath must be an absolute path, not %q", p)
	}
	if slices.Contains(strings.Split(p, "/"), "..") {
		return "", fmt.Sprintf("containerPath %s must not contain '..'", p)
	}
	c := path.Clean(p)
	if c == "/" {
		return "", "containerPath / would replace the container's root file system"
	}
	if slices.Contains(dockerSockets, c) {
		return "", fmt.Sprintf("containerPath %s is where the Docker socket lives; it cannot be mounted on", c)
	}
	for _, k := range kernelFS {
		if c == k || strings.HasPrefix(c, k+"/") {
			return "", fmt.Sprintf("containerPath %s lies in %s, which the container runtime owns", c, k)
		}
	}
	return c, ""
}

// forbidden says why a clean absolute host path may never be mounted, or returns "".
func forbidden(p string) string {
	if slices.Contains(dockerSockets, p) {
		return "is the Docker socket, which is never mounted"
	}
	for _, k := range kernelFS {
		if p == k || strings.HasPrefix(p, k+"/") {
			return fmt.Sprintf("lies in the host's %s, which is never mounted", k)
		}
	}
	return ""
}

func offered(m Map) string {
	if len(m) == 0 {
		return "no storage"
	}
	return strings.Join(m.Roots(), ", ")
}

// sshDir makes the job's own .ssh folder (0700, as sshd requires).
func sshDir(scratchRoot, jobUUID string) (string, string, error) {
	if !filepath.IsAbs(scratchRoot) {
		return "", "this slave has no scratch folder for .ssh", nil
	}
	if !plainName(jobUUID) {
		return "", fmt.Sprintf("invalid job id %q for a .ssh folder", jobUUID), nil
	}
	dir := SSHDir(scratchRoot, jobUUID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "cannot create the job's .ssh folder", fmt.Errorf("create .ssh folder: %w", err)
	}
	// MkdirAll is subject to the umask and leaves an existing folder as it was.
	if err := os.Chmod(dir, 0o700); err != nil {
		return "", "cannot create the job's .ssh folder", fmt.Errorf("chmod .ssh folder: %w", err)
	}
	return dir, "", nil
}

// hostFolder maps a hostPath under a root to a host path inside the project's own folder, and
// returns that folder (resolved) too.
func hostFolder(m Map, project, hostPath string) (src, beneath, reason string, err error) {
	src, reason, err = hostFolderPath(m, project, hostPath)
	if reason != "" || err != nil {
		return "", "", reason, err
	}
	root, _, _ := m.match(path.Clean(hostPath))
	projDir := filepath.Clean(strings.ReplaceAll(m[root], ProjectPlaceholder, project))
	if beneath, err = filepath.EvalSymlinks(projDir); err != nil {
		return "", "", fmt.Sprintf("cannot resolve the project folder of %s", root), fmt.Errorf("resolve project folder: %w", err)
	}
	return src, beneath, "", nil
}

// hostFolderPath checks a hostPath and resolves it to a host path free of links.
func hostFolderPath(m Map, project, hostPath string) (string, string, error) {
	if !path.IsAbs(hostPath) {
		return "", fmt.Sprintf(`hostPath must be an absolute path or one of ".ssh", "tmpfs", %q, not %q`, job.ProjectShareAuto, hostPath), nil
	}
	if slices.Contains(strings.Split(hostPath, "/"), "..") {
		return "", fmt.Sprintf("hostPath %s must not contain '..'", hostPath), nil
	}
	p := path.Clean(hostPath)
	if why := forbidden(p); why != "" {
		return "", fmt.Sprintf("hostPath %s %s", p, why), nil
	}
	root, rest, ok := m.match(p)
	if !ok {
		first := p
		if i := strings.Index(p[1:], "/"); i >= 0 {
			first = p[:i+1]
		}
		return "", fmt.Sprintf("unknown storage root %s: this slave offers %s", first, offered(m)), nil
	}
	if !plainName(project) {
		return "", fmt.Sprintf("invalid project name %q for storage", project), nil
	}
	projDir := filepath.Clean(strings.ReplaceAll(m[root], ProjectPlaceholder, project))
	if err := os.MkdirAll(projDir, 0o770); err != nil {
		return "", fmt.Sprintf("cannot create the project folder of %s", root), fmt.Errorf("create project folder: %w", err)
	}
	realProj, err := filepath.EvalSymlinks(projDir)
	if err != nil {
		return "", fmt.Sprintf("cannot resolve the project folder of %s", root), fmt.Errorf("resolve project folder: %w", err)
	}
	refused := fmt.Sprintf("hostPath %s leads outside the project's folder of %s (through a symbolic link)", p, root)
	want := filepath.Join(projDir, filepath.FromSlash(rest))
	resolved, missing, err := resolveExisting(want)
	if errors.Is(err, errDangling) {
		return "", fmt.Sprintf("hostPath %s goes through a symbolic link that leads nowhere", p), nil
	}
	if err != nil {
		return "", fmt.Sprintf("cannot resolve hostPath %s", p), fmt.Errorf("resolve %s: %w", p, err)
	}
	if !within(resolved, realProj) {
		return "", refused, nil
	}
	if missing {
		if err := os.MkdirAll(resolved, 0o770); err != nil {
			return "", fmt.Sprintf("cannot create the folder for hostPath %s", p), fmt.Errorf("create folder: %w", err)
		}
		// Resolve again: the folders just made must still lie where they were checked.
		if resolved, err = filepath.EvalSymlinks(want); err != nil {
			return "", fmt.Sprintf("cannot resolve hostPath %s", p), fmt.Errorf("resolve %s: %w", p, err)
		}
		if !within(resolved, realProj) {
			return "", refused, nil
		}
	}
	if why := forbidden(resolved); why != "" {
		return "", fmt.Sprintf("hostPath %s %s", p, why), nil
	}
	fi, err := os.Stat(resolved)
	if err != nil {
		return "", fmt.Sprintf("cannot read hostPath %s", p), fmt.Errorf("stat %s: %w", p, err)
	}
	if !fi.IsDir() && !fi.Mode().IsRegular() {
		return "", fmt.Sprintf("hostPath %s is a %s; only folders and files can be mounted", p, kind(fi.Mode())), nil
	}
	return resolved, "", nil
}

// errDangling: a path goes through a symbolic link whose target does not exist.
var errDangling = errors.New("dangling symbolic link")

// resolveExisting follows the symbolic links of the longest existing prefix of p and appends
// the part that does not exist yet; missing reports whether there was such a part.
func resolveExisting(p string) (resolved string, missing bool, err error) {
	cur := p
	var rest []string
	for {
		r, err := filepath.EvalSymlinks(cur)
		if err == nil {
			slices.Reverse(rest)
			return filepath.Join(append([]string{r}, rest...)...), len(rest) > 0, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", false, err
		}
		if _, lerr := os.Lstat(cur); lerr == nil {
			// cur exists, yet following it does not: a link to nowhere. Creating folders
			// through it could land anywhere, so it is refused, not followed.
			return "", false, errDangling
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return "", false, err
		}
		rest = append(rest, filepath.Base(cur))
		cur = parent
	}
}

// within reports whether p is dir or lies under it (both clean and absolute).
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeDevice != 0:
		return "device"
	default:
		return "special file"
	}
}
