// Command gpulab-slave runs jobs on one GPU machine for a GPULab master.
//
//	gpulab-slave join --master URL --ca CA.pem --token TOKEN [--state-dir DIR]
//	gpulab-slave [run] --master URL [--storage /project=/srv/projects/{project}] [--fake-gpus 2xV100-32GB]
//
// `join` exchanges a one-time token (`gpulab-master slave-token`) for the slave's certificate,
// kept in the state folder with the master's CA; `run` registers the inventory and runs the
// jobs the master assigns, as Docker containers.
package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/docker/docker/client"

	"github.com/opengpulab/gpulab/internal/secretfile"
	"github.com/opengpulab/gpulab/metrics"
	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/slave"
	"github.com/opengpulab/gpulab/slave/container"
	"github.com/opengpulab/gpulab/slave/gpu"
	"github.com/opengpulab/gpulab/slave/sshd"
	"github.com/opengpulab/gpulab/slave/storage"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cmd := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "join":
		err = join(ctx, args, getenv, stdout, stderr)
	case "run":
		err = runSlave(ctx, args, getenv, stderr)
	case "config":
		err = configCmd(args, getenv, stdout, stderr)
	case "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "gpulab-slave: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "gpulab-slave %s: %v\n", cmd, err)
	if errors.Is(err, errUsage) {
		return 2
	}
	return 1
}

const usage = `Usage: gpulab-slave COMMAND [flags]

Commands:
  join --master URL --ca CA.pem --token TOKEN   get this slave's certificate (once)
  run  --master URL [flags]                     run jobs (the default command)
  config check FILE [flags]                     validate a configuration file, print the settings
  config example                                print a configuration file of every setting

Every flag is also a key of the TOML file named by --config (env GPULAB_CONFIG) and an
environment variable; precedence: flag > environment > file > default.

Run 'gpulab-slave COMMAND -h' for the flags.
`

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

// identity is what join leaves in the state folder besides the key and certificates.
type identity struct {
	Name      string `json:"name"`
	ClusterID int    `json:"clusterId"`
	Master    string `json:"master"`
}

func join(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("join", flag.ContinueOnError)
	fs.SetOutput(stderr)
	jf := addJoinFlags(fs, getenv)
	if err := parseFlags(fs, args, getenv); err != nil {
		return err
	}
	master, caFile, token, tokenFile, stateDir := jf.master, jf.caFile, jf.token, jf.tokenFile, jf.stateDir
	if *token == "" && *tokenFile == "" {
		*token = getenv("GPULAB_JOIN_TOKEN") // read after parsing: -h never shows it
	}
	var err error
	if *token, err = secretfile.Either("--token", *token, *tokenFile); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if *master == "" || *caFile == "" || *token == "" {
		return fmt.Errorf("--master, --ca and --token are required: %w", errUsage)
	}
	caPEM, err := os.ReadFile(*caFile)
	if err != nil {
		return fmt.Errorf("read --ca: %w", err)
	}
	cl, err := protocol.NewClient(*master, caPEM, nil)
	if err != nil {
		return err
	}
	csr, key, err := pki.NewCSR("gpulab-slave")
	if err != nil {
		return err
	}
	reply, err := cl.Join(ctx, protocol.JoinRequest{Token: *token, CSR: string(csr)})
	if err != nil {
		return fmt.Errorf("join %s: %w", *master, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("encode key: %w", err)
	}
	if err := os.MkdirAll(*stateDir, 0o700); err != nil {
		return fmt.Errorf("state folder: %w", err)
	}
	id, _ := json.MarshalIndent(identity{Name: reply.Name, ClusterID: reply.ClusterID, Master: *master}, "", "  ")
	files := []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{"slave-key.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600},
		{"slave.pem", []byte(reply.Certificate), 0o644},
		{"ca.pem", []byte(reply.CA), 0o644},
		{"slave.json", append(id, '\n'), 0o644},
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(*stateDir, f.name), f.data, f.mode); err != nil {
			return fmt.Errorf("write %s: %w", f.name, err)
		}
	}
	fmt.Fprintf(stdout, "joined as slave %s in cluster %d; credentials in %s\n", reply.Name, reply.ClusterID, *stateDir)
	return nil
}

// joinFlags are the flags of `join`.
type joinFlags struct {
	master, caFile, token, tokenFile, stateDir *string
}

func addJoinFlags(fs *flag.FlagSet, getenv func(string) string) joinFlags {
	return joinFlags{
		master:    fs.String("master", getenv("GPULAB_MASTER_URL"), "master URL, https://host:port (env GPULAB_MASTER_URL)"),
		caFile:    fs.String("ca", getenv("GPULAB_MASTER_CA"), "the master's CA certificate, to trust it (env GPULAB_MASTER_CA)"),
		token:     fs.String("token", "", "one-time join token from `gpulab-master slave-token`; prefer --token-file or the env GPULAB_JOIN_TOKEN (flags show in ps)"),
		tokenFile: fs.String("token-file", getenv("GPULAB_JOIN_TOKEN_FILE"), "file (mode 0600) holding the join token (env GPULAB_JOIN_TOKEN_FILE)"),
		stateDir:  fs.String("state-dir", envOr(getenv, "GPULAB_SLAVE_DIR", "/var/lib/gpulab-slave"), "where the key and certificates are kept (env GPULAB_SLAVE_DIR)"),
	}
}

// listFlag is a repeatable flag; one value may also list several, comma-separated (as the
// environment and the configuration file give them).
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// runFlags are the flags of `run`, the slave's settings.
type runFlags struct {
	master, stateDir, scratch, fakeGPUs, fakeUtil, fakeCuda, dnsName *string
	storage                                                          listFlag
	cpus                                                             *int
	logLevel, logFormat, sshListen, sshAdvertise                     *string
	metricsListen                                                    *string
	hard                                                             *hardeningValues
}

func addRunFlags(fs *flag.FlagSet, getenv func(string) string) *runFlags {
	f := &runFlags{}
	f.master = fs.String("master", getenv("GPULAB_MASTER_URL"), "master URL, https://host:port, or several separated by commas: the slave moves to the next when one does not answer (env GPULAB_MASTER_URL; default: the one joined)")
	f.stateDir = fs.String("state-dir", envOr(getenv, "GPULAB_SLAVE_DIR", "/var/lib/gpulab-slave"), "the folder `join` filled (env GPULAB_SLAVE_DIR)")
	fs.Var(&f.storage, "storage", "public storage root and its host folder per project, ROOT=TEMPLATE with {project}, e.g. /project=/srv/gpulab/projects/{project} (repeatable or comma-separated; env GPULAB_SLAVE_STORAGE)")
	f.scratch = fs.String("scratch-root", envOr(getenv, "GPULAB_SLAVE_SCRATCH", "/var/lib/gpulab-slave/scratch"), "per-job scratch folders (.ssh) (env GPULAB_SLAVE_SCRATCH)")
	f.fakeGPUs = fs.String("fake-gpus", getenv("GPULAB_FAKE_GPUS"), "simulate GPUs for demos and tests, e.g. 2xV100-32GB (env GPULAB_FAKE_GPUS); marked fake everywhere")
	f.fakeUtil = fs.String("fake-gpu-util", getenv("GPULAB_SLAVE_FAKE_GPU_UTIL"), "utilisation the fake GPUs report, percent per GPU in index order, e.g. 0,85 (fewer values repeat the last; env GPULAB_SLAVE_FAKE_GPU_UTIL; default 0)")
	f.fakeCuda = fs.String("fake-cuda-version", "", "CUDA version the fake GPUs claim (default "+gpu.DefaultFakeCudaVersion+")")
	f.dnsName = fs.String("dns-name", getenv("GPULAB_SLAVE_DNSNAME"), "the name users reach published ports at (default: the host name; env GPULAB_SLAVE_DNSNAME)")
	f.cpus = fs.Int("cpus", 0, "CPUs to offer (default: the machine's); more than the machine has leaves jobs unpinned, limited by CPU time only")
	f.logLevel = fs.String("log-level", envOr(getenv, "GPULAB_LOG_LEVEL", "info"), "debug, info, warn or error (env GPULAB_LOG_LEVEL)")
	f.logFormat = fs.String("log-format", envOr(getenv, "GPULAB_LOG_FORMAT", "text"), "text (key=value lines) or json (one JSON object a line) (env GPULAB_LOG_FORMAT)")
	f.sshListen = fs.String("ssh-listen", getenv("GPULAB_SLAVE_SSH_LISTEN"), "address the SSH server for jobs listens on, e.g. :2222 (env GPULAB_SLAVE_SSH_LISTEN; empty: no SSH)")
	f.sshAdvertise = fs.String("ssh-advertise", getenv("GPULAB_SLAVE_SSH_ADVERTISE"), "HOST:PORT users connect to for SSH (env GPULAB_SLAVE_SSH_ADVERTISE; default: --dns-name and the listen port)")
	f.metricsListen = fs.String("metrics-listen", getenv("GPULAB_SLAVE_METRICS_LISTEN"), "address of the slave's Prometheus /metrics, e.g. 127.0.0.1:9101 (plain HTTP without authentication: keep it local or firewalled; empty: none) (env GPULAB_SLAVE_METRICS_LISTEN)")
	f.hard = hardeningFlags(fs)
	return f
}

func runSlave(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rf := addRunFlags(fs, getenv)
	if err := parseFlags(fs, args, getenv); err != nil {
		return err
	}
	master, stateDir, scratch, fakeGPUs, fakeUtil, fakeCuda, dnsName := rf.master, rf.stateDir, rf.scratch, rf.fakeGPUs, rf.fakeUtil, rf.fakeCuda, rf.dnsName
	cpus, sshListen, sshAdvertise, hard, storageSpecs := rf.cpus, rf.sshListen, rf.sshAdvertise, rf.hard, rf.storage
	log, err := newLogger(stderr, *rf.logLevel, *rf.logFormat)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	h, err := hard.hardening()
	if err != nil {
		return fmt.Errorf("%w: %w", err, errUsage)
	}
	if lowered := h.CapUlimits(); len(lowered) > 0 {
		log.Warn("job ulimits lowered to this process's hard limits (the engine refuses more)", "lowered", lowered)
	}
	storageMap, err := storage.ParseMap(storageSpecs)
	if err != nil {
		return fmt.Errorf("--storage: %w: %w", err, errUsage)
	}
	var id identity
	if data, err := os.ReadFile(filepath.Join(*stateDir, "slave.json")); err != nil {
		return fmt.Errorf("not joined yet (run `gpulab-slave join` first): %w", err)
	} else if err := json.Unmarshal(data, &id); err != nil {
		return fmt.Errorf("read slave.json: %w", err)
	}
	if *master == "" {
		*master = id.Master
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(*stateDir, "slave.pem"), filepath.Join(*stateDir, "slave-key.pem"))
	if err != nil {
		return fmt.Errorf("load the slave certificate: %w", err)
	}
	caPEM, err := os.ReadFile(filepath.Join(*stateDir, "ca.pem"))
	if err != nil {
		return fmt.Errorf("read the master CA: %w", err)
	}
	mc, err := protocol.NewClient(*master, caPEM, &cert)
	if err != nil {
		return err
	}

	var gi gpu.Inventory
	var sampler *gpu.Sampler
	if *fakeGPUs != "" {
		gi, err = gpu.Fake(*fakeGPUs, *fakeCuda)
		if err != nil {
			return fmt.Errorf("--fake-gpus: %w: %w", err, errUsage)
		}
		sampler = gpu.NewSampler(nil, gi.GPUs)
		util, err := gpu.ParseFakeUtil(*fakeUtil, len(gi.GPUs))
		if err != nil {
			return fmt.Errorf("--fake-gpu-util: %w: %w", err, errUsage)
		}
		sampler.SetFakeUtil(util)
		log.Warn("this slave offers FAKE GPUs (simulated, for demos and tests)", "gpus", len(gi.GPUs), "spec", *fakeGPUs)
	} else {
		if *fakeUtil != "" {
			return fmt.Errorf("--fake-gpu-util needs --fake-gpus: real GPUs report what NVML measures: %w", errUsage)
		}
		lib := gpu.Real()
		gi = gpu.Discover(lib, log)
		sampler = gpu.NewSampler(lib, gi.GPUs)
	}
	defer sampler.Close()

	host, _ := os.Hostname()
	if *dnsName == "" {
		*dnsName = host
	}
	instance := make([]byte, 8)
	_, _ = rand.Read(instance)
	inv := protocol.Inventory{
		Name: id.Name, InstanceID: hex.EncodeToString(instance), ClusterID: id.ClusterID, Host: host, DNSName: *dnsName,
		Version: version, PID: os.Getpid(), CPUs: cmp.Or(*cpus, runtime.NumCPU()), MemoryMiB: memTotalMiB(),
		GPUs: gi.GPUs, DriverVersion: gi.DriverVersion, CudaVersion: gi.CudaVersion, GPUStatus: gi.Status,
		StorageRoots: storageMap.Roots(),
	}
	var agentRef atomic.Pointer[slave.Agent]
	mets := metrics.NewSlave(func() int64 {
		if a := agentRef.Load(); a != nil {
			return a.LogBacklog()
		}
		return 0
	})
	if *rf.metricsListen != "" {
		if _, err := serveMetrics(ctx, *rf.metricsListen, mets, log); err != nil {
			return err
		}
	}
	mc.WrapTransport(mets.MasterTransport)
	dc, err := client.NewClientWithOpts(client.FromEnv, timeDocker(mets), client.WithAPIVersionNegotiation())
	if err != nil {
		return fmt.Errorf("docker client: %w", err)
	}
	defer func() { _ = dc.Close() }()
	ping, err := dc.Ping(ctx)
	if err != nil {
		return fmt.Errorf("the Docker Engine does not answer (is dockerd running?): %w", err)
	}
	// Settle the API version before the agent's goroutines share the client (moby/moby#50448).
	dc.NegotiateAPIVersionPing(ping)
	unpinned := inv.CPUs > runtime.NumCPU()
	if unpinned {
		log.Warn("offering more CPUs than the machine has: jobs are not pinned to CPUs, only limited in CPU time", "cpus", inv.CPUs, "machine", runtime.NumCPU())
	}
	if err := storage.ReleaseStalePins(*scratch); err != nil {
		log.Warn("staging mounts of an earlier run left", "err", err)
	}
	rt := container.New(dc, container.Config{Storage: storageMap, ScratchRoot: *scratch, SlaveName: id.Name, SlaveHost: host,
		SlaveDNSName: *dnsName, SlaveInstanceID: inv.InstanceID, SlavePID: inv.PID, Version: version, Unpinned: unpinned,
		Hardening: &h, PrivateImages: filepath.Join(*stateDir, "private-images.json")}, log)
	if err := rt.Prepare(ctx); err != nil {
		return err
	}
	log.Info("job containers", "network", h.Network, "pids_limit", h.PidsLimit, "nofile", h.NoFile, "nproc", h.NProc,
		"capabilities", strings.Join(h.Capabilities, ","), "no_new_privileges", !h.AllowNewPrivileges,
		"host_ports", fmt.Sprintf("%d-%d", h.PortLow, h.PortHigh), "max_port_mappings", h.MaxPortMappings)
	var sshSrv *sshd.Server
	var sshLn net.Listener
	if *sshListen != "" {
		if sshLn, err = net.Listen("tcp", *sshListen); err != nil {
			return fmt.Errorf("--ssh-listen: %w", err)
		}
		defer func() { _ = sshLn.Close() }()
		adv, err := sshAdvertiseAddr(*sshAdvertise, *dnsName, sshLn.Addr())
		if err != nil {
			return fmt.Errorf("--ssh-advertise: %w: %w", err, errUsage)
		}
		sshSrv, err = sshd.New(sshd.Config{Advertise: adv, HostKeyFile: filepath.Join(*stateDir, "ssh_host_ed25519_key"), Network: h.Network},
			mc, dc, log.With("part", "sshd"))
		if err != nil {
			return err
		}
		if inv.SSH, err = sshSrv.Endpoint(); err != nil {
			return fmt.Errorf("--ssh-advertise: %w: %w", err, errUsage)
		}
		log.Info("ssh into jobs", "listen", sshLn.Addr().String(), "advertise", adv, "host_key", inv.SSH.HostKey)
	}
	log.Info("slave starting", "name", id.Name, "cluster", id.ClusterID, "master", *master, "cpus", inv.CPUs, "memory_mib", inv.MemoryMiB,
		"gpus", len(inv.GPUs), "gpu_status", inv.GPUStatus, "storage", inv.StorageRoots)
	agent := slave.New(mc, rt, sampler, inv, slave.Config{}, log)
	agentRef.Store(agent)
	if sshSrv == nil {
		return agent.Run(ctx)
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	sshDone := make(chan error, 1)
	go func() { sshDone <- sshSrv.Serve(ctx, sshLn) }()
	err = agent.Run(ctx)
	stop()
	if serr := <-sshDone; err == nil && serr != nil {
		err = serr
	}
	return err
}

// timeDocker makes the Docker client time its calls for /metrics: it wraps the transport
// FromEnv configured (keeping https for a TLS engine, which the client would otherwise no
// longer see).
func timeDocker(mets *metrics.Slave) client.Opt {
	return func(c *client.Client) error {
		hc := c.HTTPClient()
		if tr, ok := hc.Transport.(*http.Transport); ok && tr.TLSClientConfig != nil {
			if err := client.WithScheme("https")(c); err != nil {
				return err
			}
		}
		hc.Transport = mets.DockerTransport(hc.Transport)
		return client.WithHTTPClient(hc)(c)
	}
}

// serveMetrics serves the slave's /metrics in plain HTTP on addr until ctx ends. The address
// should be local or firewalled: the metrics name no user, but nothing authenticates.
func serveMetrics(ctx context.Context, addr string, mets *metrics.Slave, log *slog.Logger) (net.Addr, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", mets.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	log.Info("metrics", "url", "http://"+l.Addr().String()+"/metrics")
	return l.Addr(), nil
}

// sshAdvertiseAddr is where users reach the SSH server: the flag's HOST:PORT, or the slave's
// DNS name with the port it listens on.
func sshAdvertiseAddr(flagValue, dnsName string, listen net.Addr) (string, error) {
	if flagValue != "" {
		if _, _, err := net.SplitHostPort(flagValue); err != nil {
			return "", err
		}
		return flagValue, nil
	}
	_, port, err := net.SplitHostPort(listen.String())
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(dnsName, port), nil
}

// memTotalMiB reads the machine's memory from /proc/meminfo.
func memTotalMiB() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			return kb / 1024
		}
	}
	return 0
}
