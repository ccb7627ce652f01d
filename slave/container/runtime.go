// Package container runs a slave's jobs as Docker containers: it pulls images, turns an
// assignment into a container (Spec, pure and table-tested), starts, watches, stops, halts and
// removes it, and samples what it uses.
//
// It talks to the Docker Engine through Docker, the few client calls it needs (Nomad's
// per-call-site interfaces); *client.Client satisfies it and tests use the real engine.
// Containers are named gpulab-<job uuid> and labelled with the job and the slave, so that a
// restarted slave finds its jobs again with List instead of losing them.
package container

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/registry"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/docker/go-connections/nat"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/slave/storage"
)

// Docker is the part of the Docker Engine API this package uses, declared here so that the
// seam is exactly as wide as the calls made through it.
type Docker interface {
	ImageInspect(ctx context.Context, imageID string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
	ImagePull(ctx context.Context, ref string, options image.PullOptions) (io.ReadCloser, error)
	ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig,
		networkingConfig *network.NetworkingConfig, platform *ocispec.Platform, containerName string) (container.CreateResponse, error)
	ContainerStart(ctx context.Context, containerID string, options container.StartOptions) error
	ContainerInspect(ctx context.Context, containerID string) (container.InspectResponse, error)
	ContainerWait(ctx context.Context, containerID string, condition container.WaitCondition) (<-chan container.WaitResponse, <-chan error)
	ContainerLogs(ctx context.Context, containerID string, options container.LogsOptions) (io.ReadCloser, error)
	ContainerStop(ctx context.Context, containerID string, options container.StopOptions) error
	ContainerKill(ctx context.Context, containerID, signal string) error
	ContainerRemove(ctx context.Context, containerID string, options container.RemoveOptions) error
	ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error)
	ContainerStats(ctx context.Context, containerID string, stream bool) (container.StatsResponseReader, error)
	Info(ctx context.Context) (system.Info, error)
	DistributionInspect(ctx context.Context, imageRef, encodedRegistryAuth string) (registry.DistributionInspect, error)
	NetworkInspect(ctx context.Context, networkID string, options network.InspectOptions) (network.Inspect, error)
	NetworkCreate(ctx context.Context, name string, options network.CreateOptions) (network.CreateResponse, error)
	NetworkList(ctx context.Context, options network.ListOptions) ([]network.Summary, error)
	NetworkRemove(ctx context.Context, networkID string) error
}

var _ Docker = (*client.Client)(nil)

// Defaults of Config: the times SPEC section 4 promises users.
const (
	DefaultCancelGrace = 10 * time.Second
	DefaultHaltGrace   = 15 * time.Second
	DefaultPullTimeout = 10 * time.Minute
)

// createTimeout bounds a container's create, which a stopping slave does not cut short.
const createTimeout = 2 * time.Minute

// HaltExitCode is the exit code by which a job says it halted cleanly after SIGUSR1.
const HaltExitCode = 123

// ErrNotFound: the container does not exist (removed meanwhile, or never created). Callers
// branch on it to tell a lost container from an engine failure.
var ErrNotFound = errors.New("container not found")

// Config is the slave's side of every container: its storage map, its identity for the
// GPULAB_* variables and the labels, and the times of the stop procedures (fields rather than
// constants so that tests run in seconds, not minutes).
type Config struct {
	Storage     storage.Map
	ScratchRoot string // the slave's own folder; per-job folders (.ssh) live under it
	SlaveName   string // labels containers; List finds this slave's containers by it
	SlaveHost   string
	// SlaveDNSName is where published ports are reached (GPULAB_SLAVE_DNSNAME).
	SlaveDNSName    string
	SlaveInstanceID string
	Version         string
	SlavePID        int
	// CancelGrace is the time between SIGTERM and SIGKILL (default 10 s), rounded up to
	// whole seconds as Docker counts them.
	CancelGrace time.Duration
	// HaltGrace is the time a job has after SIGUSR1 to exit with 123 (default 15 s).
	HaltGrace time.Duration
	// PullTimeout bounds one image pull (default 10 min).
	PullTimeout time.Duration
	// Unpinned leaves jobs unpinned to their CPU ids (only their CPU time is limited): for a
	// slave that declares more CPUs than its machine has (gpulab-slave run --cpus).
	Unpinned bool
	// FakeGPUDeviceRequests hands fake GPUs over with Docker device requests like real ones.
	// Off by default: an engine without the NVIDIA runtime refuses them, and a demo slave with
	// fake GPUs must run GPU jobs there. Tests of the hand-off turn it on (stub-hook engine).
	FakeGPUDeviceRequests bool
	// Hardening is the operator's bounds on every job container; nil: DefaultHardening().
	Hardening *Hardening
	// PrivateImages is the file that records the images pulled with credentials
	// (<state-dir>/private-images.json), so that they stay private across slave restarts;
	// empty: kept in memory only.
	PrivateImages string
}

// hardening is the hardening in force: the operator's, else the defaults.
func (c Config) hardening() Hardening {
	if c.Hardening != nil {
		return *c.Hardening
	}
	return DefaultHardening()
}

func (c Config) withDefaults() Config {
	if c.CancelGrace <= 0 {
		c.CancelGrace = DefaultCancelGrace
	}
	if c.HaltGrace <= 0 {
		c.HaltGrace = DefaultHaltGrace
	}
	if c.PullTimeout <= 0 {
		c.PullTimeout = DefaultPullTimeout
	}
	return c
}

// Runtime runs jobs on one Docker Engine. It keeps no state of its own: the engine's containers
// and their labels are the truth, which is what lets a restarted slave carry on.
type Runtime struct {
	d   Docker
	cfg Config
	log *slog.Logger
	// prep is what Prepare found out: the hardening in force on this engine.
	prep struct {
		sync.Mutex
		done      bool
		h         Hardening
		warnedICC bool // guarded by networkMu
	}
	// knownNetwork is the jobs' network once a start found or made it (see ensureNetwork).
	knownNetwork atomic.Pointer[string]
	private      *privateImages
}

// New returns a Runtime; zero durations in cfg take their defaults and a nil log discards.
func New(d Docker, cfg Config, log *slog.Logger) *Runtime {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Runtime{d: d, cfg: cfg.withDefaults(), log: log, private: newPrivateImages(cfg.PrivateImages)}
}

// StartError is a job that could not be started. Reason is written for the job's owner (it
// becomes the FAILED event): which step failed and the engine's or registry's own words,
// never the image's credentials.
type StartError struct {
	Reason string
	Err    error
}

// Error is the Reason: what the owner reads.
func (e *StartError) Error() string { return e.Reason }

// Unwrap gives the cause, for errors.Is and errors.As.
func (e *StartError) Unwrap() error { return e.Err }

func startError(step string, err error) *StartError {
	return &StartError{Reason: step + ": " + engineMessage(err), Err: err}
}

// engineMessage is an error's text without the client's "Error response from daemon: "
// prefix, which tells a user nothing.
func engineMessage(err error) string {
	return strings.TrimPrefix(err.Error(), "Error response from daemon: ")
}

// Started is a running job's container and the host ports it really got (Docker picks the
// ones a job left to it), to be reported in state.resources.portMappings.
type Started struct {
	ContainerID string
	Ports       []job.PortMapping
}

// Start runs an assignment: it resolves the storage (a refusal costs no pull), pulls the image
// if missing, creates and starts the container. Every failure is a *StartError; once a
// container exists, a failure removes it, so a failed job leaves nothing behind.
func (r *Runtime) Start(ctx context.Context, a protocol.Assignment) (*Started, error) {
	j := a.Job
	img, err := job.ParseImage(j.Request.Docker.Image)
	if err != nil {
		return nil, &StartError{Reason: "image: " + err.Error(), Err: err}
	}
	h, err := r.prepare(ctx)
	if err != nil {
		return nil, &StartError{Reason: "slave: " + err.Error(), Err: err}
	}
	if err := checkAssignment(a, h); err != nil {
		return nil, &StartError{Reason: err.Error(), Err: err}
	}
	// The job's own folder (.ssh) goes with a failed start; Resolve may have made it for an
	// entry before refusing a later one.
	keepJobDir := false
	defer func() {
		if !keepJobDir {
			if err := storage.RemoveJobDir(r.cfg.ScratchRoot, j.UUID); err != nil {
				r.log.Warn("remove job folder after failed start", "job", j.UUID, "err", err)
			}
		}
	}()
	mounts, err := storage.Resolve(r.cfg.Storage, a.Project, j.UUID, r.cfg.ScratchRoot, j.Request.Docker.Storage)
	if err != nil {
		// "storage request.docker.storage[0]: unknown storage root /data: ..."
		return nil, &StartError{Reason: "storage " + err.Error(), Err: err}
	}
	if err := r.writeSSHKeys(a, mounts); err != nil {
		return nil, &StartError{Reason: "storage: cannot write the job's SSH keys", Err: err}
	}
	cfg := r.cfg
	cfg.Hardening = &h
	cc, hc, err := Spec(a, cfg, mounts)
	if err != nil {
		return nil, &StartError{Reason: "container: " + err.Error(), Err: err}
	}
	if err := r.ensureImage(ctx, img); err != nil {
		return nil, err
	}
	if err := r.ensureNetwork(ctx, h.Network); err != nil {
		return nil, startError("network", err)
	}

	// Storage pinning (storage.Pin): Docker gets staging paths bound to the inodes checked,
	// opened only now, after the pull, so that what was checked is what is mounted.
	pins, err := r.pinStorage(a, cfg, mounts, &cc, &hc)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := pins.Release(); err != nil {
			r.log.Warn("release storage pins", "job", j.UUID, "err", err)
		}
	}()
	// A create is never abandoned half-way when the slave stops (ctx ends): the engine would
	// finish it anyway and leave a container nobody removes. It completes; the start below
	// then fails on the ended ctx and removes it.
	cctx, cancelCreate := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
	defer cancelCreate()
	id, err := r.create(cctx, j.UUID, cc, hc)
	if err != nil && cerrdefs.IsNotFound(err) {
		// The jobs' network (or the image) went away since it was checked: checked again,
		// and made again if it is the network, once.
		if nerr := r.networkAgain(ctx, h.Network); nerr != nil {
			return nil, startError("network", nerr)
		}
		id, err = r.create(cctx, j.UUID, cc, hc)
	}
	if err != nil && hc.StorageOpt != nil && isStorageOptRefusal(err) {
		r.dropRootfsSize(err)
		hc.StorageOpt = nil
		id, err = r.create(cctx, j.UUID, cc, hc)
	}
	if errors.Is(err, errJobRunning) {
		keepJobDir = true // the folder belongs to the running container
		return nil, &StartError{Reason: "create: " + err.Error(), Err: err}
	}
	if err != nil {
		r.forgetNetwork()
		return nil, startError("create", err)
	}
	fail := func(step string, err error) (*Started, error) {
		r.removeAfterFailure(id, j.UUID)
		r.forgetNetwork()
		return nil, startError(step, err)
	}
	if err := r.d.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		if !cerrdefs.IsNotFound(err) {
			return fail("start", err)
		}
		// The jobs' network went away since it was checked (this engine checks it at the
		// start, not the create): the container is made again in the network made again, once.
		r.removeAfterFailure(id, j.UUID)
		if nerr := r.networkAgain(ctx, h.Network); nerr != nil {
			return nil, startError("network", nerr)
		}
		if id, err = r.create(cctx, j.UUID, cc, hc); err != nil {
			return nil, startError("create", err)
		}
		if err := r.d.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
			return fail("start", err)
		}
	}
	// The started container is read back only where something needs it: the host ports the
	// engine chose, and the pid whose view of the pinned storage is checked. The engine answers
	// an inspect of a container that is just starting or exiting slowly (B3: about 100 ms alone,
	// seconds among 20 starts), and most jobs publish no port and mount no storage.
	var ports []job.PortMapping
	if len(j.Request.Docker.PortMappings) > 0 || pins.Any() {
		info, err := r.d.ContainerInspect(ctx, id)
		if err != nil {
			return fail("inspect", err)
		}
		if info.State != nil {
			if err := pins.Verify(info.State.Pid); err != nil {
				return fail("storage", err)
			}
		}
		ports = publishedPorts(j.Request.Docker.PortMappings, info)
	}
	keepJobDir = true
	r.log.Info("job container started", "job", j.UUID, "container", shortID(id), "image", img.Reference(), "ports", ports)
	return &Started{ContainerID: id, Ports: ports}, nil
}

// unpinnedStorage turns pinning off: only the storage race test sets it, to show that the
// race is won without it.
var unpinnedStorage = false

// pinStorage pins the job's bind sources (storage.Pin) and makes the container's spec again
// with the staging paths. The caller releases the pins once the container has started (or
// failed to): the container holds its own copy of each mount.
func (r *Runtime) pinStorage(a protocol.Assignment, cfg Config, mounts []storage.Mount, cc **container.Config, hc **container.HostConfig) (*storage.Pins, error) {
	if unpinnedStorage {
		return nil, nil
	}
	pinned, pins, err := storage.Pin(r.cfg.ScratchRoot, a.Job.UUID, mounts)
	if err != nil {
		return nil, &StartError{Reason: "storage: " + err.Error(), Err: err}
	}
	if *cc, *hc, err = Spec(a, cfg, pinned); err != nil {
		_ = pins.Release()
		return nil, &StartError{Reason: "container: " + err.Error(), Err: err}
	}
	return pins, nil
}

// writeSSHKeys puts request.extra.sshPubKeys in the authorized_keys of the job's .ssh folder,
// when the job mounts one: that is what the folder is for.
func (r *Runtime) writeSSHKeys(a protocol.Assignment, mounts []storage.Mount) error {
	keys := a.Job.Request.Extra.SSHPubKeys
	if len(keys) == 0 || r.cfg.ScratchRoot == "" {
		return nil
	}
	dir := storage.SSHDir(r.cfg.ScratchRoot, a.Job.UUID)
	for _, m := range mounts {
		if m.Source != dir {
			continue
		}
		body := strings.Join(keys, "\n") + "\n"
		if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), []byte(body), 0o600); err != nil {
			return fmt.Errorf("write authorized_keys: %w", err)
		}
		return nil
	}
	return nil
}

// ensureImage makes the image available to the job. An image with credentials is pulled with
// them on every start, also when the engine has it: the registry, not the engine's cache,
// decides whether they may read it. It is recorded private when the registry refuses to
// describe it without credentials (a public image pulled with credentials stays public, so
// nobody can make "ubuntu" private by naming it with a password). An image without credentials
// is pulled only when missing, and refused when its repository is recorded private, or when it
// is a private image named by its id: nobody runs an image he has no credentials for. The
// whole progress stream of a pull is read: it fails inside the stream as often as in the answer.
func (r *Runtime) ensureImage(ctx context.Context, img job.Image) error {
	ref := img.Reference()
	repo := repository(img)
	if img.HasCredentials() {
		private := !r.anonymouslyReadable(ctx, ref)
		added := false
		if private {
			// Recorded before the pull, so that a slave that dies during it leaves the image
			// private; taken back if the pull fails (nothing was proven then).
			var err error
			if added, err = r.private.add(repo, ""); err != nil {
				return &StartError{Reason: "image " + ref + ": the slave cannot record it as private", Err: err}
			}
		}
		if err := r.pull(ctx, img); err != nil {
			if added {
				if rerr := r.private.remove(repo); rerr != nil {
					r.log.Warn("take back a private image record", "image", ref, "err", rerr)
				}
			}
			return err
		}
		if !private {
			return nil
		}
		info, err := r.d.ImageInspect(ctx, ref)
		if err != nil {
			return startError("image "+ref, err)
		}
		if _, err := r.private.add(repo, info.ID); err != nil {
			return &StartError{Reason: "image " + ref + ": the slave cannot record it as private", Err: err}
		}
		r.log.Info("image recorded private", "image", ref, "id", shortID(strings.TrimPrefix(info.ID, "sha256:")))
		return nil
	}
	if r.private.hasRepo(repo) {
		return privateImageError(ref)
	}
	info, err := r.d.ImageInspect(ctx, ref)
	if err == nil {
		if r.private.hasID(info.ID) && !r.private.anyPublic(append(info.RepoTags, info.RepoDigests...)) {
			return privateImageError(ref)
		}
		return nil
	}
	if !cerrdefs.IsNotFound(err) {
		return startError("image "+ref, err)
	}
	return r.pull(ctx, img)
}

// anonymouslyReadable asks the registry, through the engine, for the image's manifest without
// credentials: a private image's registry refuses.
func (r *Runtime) anonymouslyReadable(ctx context.Context, ref string) bool {
	dctx, cancel := context.WithTimeout(ctx, r.cfg.PullTimeout)
	defer cancel()
	_, err := r.d.DistributionInspect(dctx, ref, "")
	return err == nil
}

// privateImageError refuses a job without credentials that names a private image.
func privateImageError(ref string) error {
	return &StartError{Reason: "image " + ref + " is private on this slave (it was pulled with registry credentials): " +
		"give the job's image with the registry credentials (user:password@registry/repository:tag)"}
}

// pull pulls the image with the image string's credentials, bounded by PullTimeout.
func (r *Runtime) pull(ctx context.Context, img job.Image) error {
	ref := img.Reference()
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PullTimeout)
	defer cancel()
	auth, err := registryAuth(img)
	if err != nil {
		return &StartError{Reason: "pull " + ref + ": cannot encode the registry credentials", Err: err}
	}
	opts := image.PullOptions{RegistryAuth: auth}
	r.log.Info("pulling image", "image", ref, "credentials", img.HasCredentials())
	start := time.Now()
	err = pull(pctx, r.d, ref, opts)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return &StartError{Reason: fmt.Sprintf("pull %s: timed out after %s", ref, r.cfg.PullTimeout), Err: err}
		}
		return startError("pull "+ref, err)
	}
	r.log.Info("pulled image", "image", ref, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// pullMessage is one line of a pull's progress stream; only errors matter here.
type pullMessage struct {
	Error       string `json:"error"`
	ErrorDetail *struct {
		Message string `json:"message"`
	} `json:"errorDetail"`
}

// registryAuth is the X-Registry-Auth value for an image's credentials ("" without any).
func registryAuth(img job.Image) (string, error) {
	if !img.HasCredentials() {
		return "", nil
	}
	server := img.Registry
	if server == "" {
		server = "https://index.docker.io/v1/" // Docker Hub, as the docker CLI names it
	}
	auth, err := registry.EncodeAuthConfig(registry.AuthConfig{Username: img.User, Password: img.Password, ServerAddress: server})
	if err != nil {
		return "", fmt.Errorf("encode registry credentials: %w", err)
	}
	return auth, nil
}

func pull(ctx context.Context, d Docker, ref string, opts image.PullOptions) error {
	rc, err := d.ImagePull(ctx, ref, opts)
	if err != nil {
		return err
	}
	defer func() { _ = rc.Close() }()
	if err := readPullStream(rc); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	return nil
}

// readPullStream reads a pull's progress to its end and returns the first error reported in
// it: the registry's own words ("pull access denied", "manifest unknown", ...).
func readPullStream(r io.Reader) error {
	dec := json.NewDecoder(r)
	for {
		var msg pullMessage
		if err := dec.Decode(&msg); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read pull progress: %w", err)
		}
		if msg.ErrorDetail != nil && msg.ErrorDetail.Message != "" {
			return errors.New(msg.ErrorDetail.Message)
		}
		if msg.Error != "" {
			return errors.New(msg.Error)
		}
	}
}

// create creates the job's container. A stopped container of the same job and slave is left
// over from an earlier attempt at this assignment (the slave restarted before reporting it):
// it is replaced. A running one is not touched: the caller must re-attach to it.
func (r *Runtime) create(ctx context.Context, jobUUID string, cc *container.Config, hc *container.HostConfig) (string, error) {
	name := ContainerName(jobUUID)
	resp, err := r.d.ContainerCreate(ctx, cc, hc, nil, nil, name)
	if err == nil {
		return resp.ID, nil
	}
	if !cerrdefs.IsConflict(err) {
		return "", err
	}
	old, ierr := r.d.ContainerInspect(ctx, name)
	if ierr != nil || old.Config == nil || old.State == nil ||
		old.Config.Labels[LabelJob] != jobUUID || old.Config.Labels[LabelSlave] != r.cfg.SlaveName {
		return "", err
	}
	if old.State.Running {
		return "", fmt.Errorf("%w: container %s (%s)", errJobRunning, name, shortID(old.ID))
	}
	r.log.Info("replacing a stopped container of the same job", "job", jobUUID, "container", shortID(old.ID))
	if rerr := r.d.ContainerRemove(ctx, old.ID, container.RemoveOptions{Force: true}); rerr != nil {
		return "", fmt.Errorf("remove the job's earlier container: %w", rerr)
	}
	resp, err = r.d.ContainerCreate(ctx, cc, hc, nil, nil, name)
	if err != nil {
		return "", err
	}
	return resp.ID, nil
}

// errJobRunning: the job already has a running container on this slave.
var errJobRunning = errors.New("the job already runs in a container of this slave")

// removeAfterFailure removes a container that never ran its job, also when the caller's
// context has ended (a half-made container must not outlive the attempt).
func (r *Runtime) removeAfterFailure(id, jobUUID string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.d.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		r.log.Warn("remove container after failed start", "job", jobUUID, "container", shortID(id), "err", err)
	}
}

// publishedPorts reads the host ports Docker really bound: one mapping per requested port, in
// the order of the request. An engine binds a port on 0.0.0.0 and on :: alike, and may give the
// two different host ports: the IPv4 binding is reported (0.0.0.0 or an IPv4 hostIp), the IPv6
// one only when there is no IPv4 binding. A request that names a host port (and address) takes
// the binding of that port (and address); requests of the same container port take different
// host ports, those naming one choosing first.
func publishedPorts(req []job.PortMapping, info container.InspectResponse) []job.PortMapping {
	if len(req) == 0 || info.NetworkSettings == nil {
		return nil
	}
	found := make([]*job.PortMapping, len(req))
	taken := map[[2]int]bool{} // container port, host port
	pick := func(i int) {
		pm := req[i]
		var best *job.PortMapping
		bestV4 := false
		for _, b := range info.NetworkSettings.Ports[containerPort(pm.ContainerPort)] {
			hp, err := strconv.Atoi(b.HostPort)
			if err != nil || taken[[2]int{pm.ContainerPort, hp}] ||
				pm.HostPort != 0 && hp != pm.HostPort || pm.HostIP != "" && b.HostIP != pm.HostIP {
				continue
			}
			v4 := !strings.Contains(b.HostIP, ":") // an IPv4 address, 0.0.0.0 or none
			if best == nil || v4 && !bestV4 {
				best, bestV4 = &job.PortMapping{ContainerPort: pm.ContainerPort, HostPort: hp, HostIP: b.HostIP}, v4
			}
		}
		if best != nil {
			taken[[2]int{best.ContainerPort, best.HostPort}] = true
			found[i] = best
		}
	}
	for i, pm := range req { // named host ports first: theirs are known
		if pm.HostPort != 0 {
			pick(i)
		}
	}
	for i, pm := range req {
		if pm.HostPort == 0 {
			pick(i)
		}
	}
	var out []job.PortMapping
	for _, pm := range found {
		if pm != nil {
			out = append(out, *pm)
		}
	}
	return out
}

// Wait blocks until the container is not running and returns its exit code (-1 with an error).
func (r *Runtime) Wait(ctx context.Context, containerID string) (int, error) {
	respC, errC := r.d.ContainerWait(ctx, containerID, container.WaitConditionNotRunning)
	select {
	case resp := <-respC:
		if resp.Error != nil && resp.Error.Message != "" {
			return -1, fmt.Errorf("wait for container %s: %s", shortID(containerID), resp.Error.Message)
		}
		return int(resp.StatusCode), nil
	case err := <-errC:
		return -1, wrap("wait for container", containerID, err)
	}
}

// Logs streams the container's stdout and stderr from its start, as one stream in the order
// the engine recorded them (what `docker logs` shows), following the container until it exits
// when follow is set. Closing the reader stops the stream.
func (r *Runtime) Logs(ctx context.Context, containerID string, follow bool) (io.ReadCloser, error) {
	rc, err := r.d.ContainerLogs(ctx, containerID, container.LogsOptions{ShowStdout: true, ShowStderr: true, Follow: follow})
	if err != nil {
		return nil, wrap("logs of container", containerID, err)
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, pw, rc)
		_ = rc.Close()
		_ = pw.CloseWithError(err)
	}()
	return &logReader{PipeReader: pr, src: rc}, nil
}

// logReader closes the engine's stream with the pipe, so that a reader that stops early does
// not leave the copier blocked on a followed container.
type logReader struct {
	*io.PipeReader
	src io.Closer
}

func (l *logReader) Close() error {
	err := l.PipeReader.Close()
	_ = l.src.Close()
	return err
}

// Cancel stops a job as SPEC section 4 promises: SIGTERM, CancelGrace, SIGKILL. A container
// already stopped is not an error.
func (r *Runtime) Cancel(ctx context.Context, containerID string) error {
	secs := graceSeconds(r.cfg.CancelGrace)
	if err := r.d.ContainerStop(ctx, containerID, container.StopOptions{Signal: "SIGTERM", Timeout: &secs}); err != nil {
		return wrap("stop container", containerID, err)
	}
	return nil
}

// Halt asks a job to halt: SIGUSR1 to its main process, then HaltGrace to exit with 123. A job
// that exits with 123 in time halted (halted=true); one that exits otherwise did not, and one
// still running after the grace is killed (halted=false, its exit code 137). The exit code is
// returned either way, for the job's state.
func (r *Runtime) Halt(ctx context.Context, containerID string) (halted bool, exitCode int, err error) {
	if err := r.d.ContainerKill(ctx, containerID, "SIGUSR1"); err != nil && !cerrdefs.IsConflict(err) {
		// Conflict: not running any more; Wait below returns how it ended.
		return false, -1, wrap("send SIGUSR1 to container", containerID, err)
	}
	wctx, cancel := context.WithTimeout(ctx, r.cfg.HaltGrace)
	code, err := r.Wait(wctx, containerID)
	cancel()
	if err == nil {
		return code == HaltExitCode, code, nil
	}
	if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
		return false, -1, err
	}
	r.log.Info("job ignored the halt signal; killing it", "container", shortID(containerID), "grace", r.cfg.HaltGrace)
	if err := r.d.ContainerKill(ctx, containerID, "SIGKILL"); err != nil && !cerrdefs.IsConflict(err) {
		return false, -1, wrap("kill container", containerID, err)
	}
	code, err = r.Wait(ctx, containerID)
	if err != nil {
		return false, -1, err
	}
	// 123 can only come from the job itself: it exited just as the grace ended.
	return code == HaltExitCode, code, nil
}

// Remove removes the container, running or not, and the job's own folder on the slave. A
// container already gone is not an error: removal is what a restarted slave retries.
func (r *Runtime) Remove(ctx context.Context, containerID string) error {
	info, err := r.d.ContainerInspect(ctx, containerID)
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return wrap("inspect container", containerID, err)
	}
	if err := r.d.ContainerRemove(ctx, info.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return wrap("remove container", containerID, err)
	}
	if info.Config != nil && info.Config.Labels[LabelSlave] == r.cfg.SlaveName {
		if err := storage.RemoveJobDir(r.cfg.ScratchRoot, info.Config.Labels[LabelJob]); err != nil {
			return fmt.Errorf("remove container %s: %w", shortID(containerID), err)
		}
	}
	return nil
}

// Container is one of this slave's job containers as found on the engine.
type Container struct {
	ID      string
	JobUUID string
	// Attempt and LogBase are the labels LabelAttempt and LabelLogBase (0 when absent).
	Attempt int
	LogBase int64
	Running bool
	// State is Docker's word: "created" (never started: a start cut short), "running",
	// "paused", "exited", "dead".
	State string
}

// List finds this slave's job containers, running or not, by their labels, in one engine call
// (the slave lists them at every start and then periodically, also while the engine is slow):
// after a restart this is how the slave learns which jobs it still runs and which ended while
// it was away.
func (r *Runtime) List(ctx context.Context) ([]Container, error) {
	if r.cfg.SlaveName == "" {
		return nil, errors.New("list containers: the slave has no name")
	}
	if err := r.settleAPIVersion(ctx); err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	f := filters.NewArgs(filters.Arg("label", LabelSlave+"="+r.cfg.SlaveName), filters.Arg("label", LabelJob))
	list, err := r.d.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	out := make([]Container, 0, len(list))
	for _, s := range list {
		c := Container{ID: s.ID, JobUUID: s.Labels[LabelJob], State: s.State, Running: s.State == "running" || s.State == "paused"}
		c.Attempt, _ = strconv.Atoi(s.Labels[LabelAttempt])
		c.LogBase, _ = strconv.ParseInt(s.Labels[LabelLogBase], 10, 64)
		out = append(out, c)
	}
	return out, nil
}

// settleAPIVersion makes the client negotiate its API version (when it negotiates) before a
// call that reads the version before making its request. The Docker client negotiates on its
// first request, under its own lock, but ContainerList with filters encodes them with the
// version it has *before* that request (still so in docker/docker v28.5.2; see
// moby/moby#50448): on a fresh client shared by several goroutines (two slaves of one test, a
// test and its slave) that unguarded read races with the negotiation another call is making.
// Any unfiltered call negotiates first, so this cheap one (at most one container) orders every
// later read after the negotiation. List runs once per agent start.
func (r *Runtime) settleAPIVersion(ctx context.Context) error {
	_, err := r.d.ContainerList(ctx, container.ListOptions{Limit: 1})
	return err
}

// Usage takes one sample of the container's CPU and memory use. The engine measures CPU over
// about a second, so a call takes that long.
func (r *Runtime) Usage(ctx context.Context, containerID string) (protocol.Usage, error) {
	resp, err := r.d.ContainerStats(ctx, containerID, false)
	if err != nil {
		return protocol.Usage{}, wrap("stats of container", containerID, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var s container.StatsResponse
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return protocol.Usage{}, fmt.Errorf("stats of container %s: %w", shortID(containerID), err)
	}
	return usageFromStats(s), nil
}

// usageFromStats computes what `docker stats` shows: CPU time used over host CPU time elapsed,
// scaled to CPUs (100 = one CPU), and memory without the page cache the kernel can drop.
func usageFromStats(s container.StatsResponse) protocol.Usage {
	var u protocol.Usage
	cpuDelta := float64(s.CPUStats.CPUUsage.TotalUsage) - float64(s.PreCPUStats.CPUUsage.TotalUsage)
	sysDelta := float64(s.CPUStats.SystemUsage) - float64(s.PreCPUStats.SystemUsage)
	online := float64(s.CPUStats.OnlineCPUs)
	if online == 0 {
		online = float64(len(s.CPUStats.CPUUsage.PercpuUsage))
	}
	// Without a previous sample (a one-shot answer) there is no window to measure over.
	if s.PreCPUStats.SystemUsage > 0 && cpuDelta > 0 && sysDelta > 0 {
		u.CPUPercent = cpuDelta / sysDelta * online * 100
	}
	mem := s.MemoryStats.Usage
	if v, ok := s.MemoryStats.Stats["total_inactive_file"]; ok && v < mem { // cgroup v1
		mem -= v
	} else if v := s.MemoryStats.Stats["inactive_file"]; v < mem { // cgroup v2
		mem -= v
	}
	u.MemoryMiB = int64(mem >> 20)
	return u
}

// wrap adds the operation and container to an engine error, and ErrNotFound when the engine
// says the container does not exist.
func wrap(op, containerID string, err error) error {
	if cerrdefs.IsNotFound(err) {
		return fmt.Errorf("%s %s: %w: %w", op, shortID(containerID), ErrNotFound, err)
	}
	return fmt.Errorf("%s %s: %w", op, shortID(containerID), err)
}

// shortID is the 12-character id Docker shows, for logs and messages.
func shortID(id string) string {
	if len(id) > 12 && !strings.HasPrefix(id, NamePrefix) {
		return id[:12]
	}
	return id
}

func containerPort(p int) nat.Port { return nat.Port(strconv.Itoa(p) + "/tcp") }
