package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/opengpulab/gpulab/internal/faults"
	"github.com/opengpulab/gpulab/internal/testenv"
)

// Slurm on this machine, run as B1 and B2 are (issue 16: "against Slurm measured by us on the
// same machine"): Debian's Slurm 22.05, a slurmctld and one slurmd a node, all on loopback (the
// multiple-slurmd set-up Slurm's developers test with: each slurmd its own port and spool). A
// node is B1's slave: 8 GPUs (count-only GRES on stand-in device files), 32 CPUs, 256 GiB, in
// one of 5 clusters (a node feature). Jobs are real: slurmd launches each one's batch script,
// where GPULab's simulated slaves only say they started a container. Slurm is tuned for the
// burst and for latency as its scheduling and high-throughput guides describe (every queued job
// looked at in each scheduling cycle, a cycle every 5 s, backfill every second over every job,
// a batch job tried at its submission), which favours it.

// slurmSched is the scheduler's settings: how often the main and backfill schedulers run and how
// deep they look (every job queued, up to maxJobs).
func slurmSched(maxJobs int) string {
	return fmt.Sprintf("sched_interval=5,default_queue_depth=%d,bf_interval=1,bf_max_job_test=%d,bf_continue,batch_sched_delay=0,sched_min_interval=0", maxJobs, maxJobs)
}

// slurmQuiet is how long no job is allocated before a burst that has not filled every GPU counts
// as placed. Slurm paused for over 15 s in the middle of a burst on this machine (its nodes'
// launches loading it), so it is long.
const slurmQuiet = time.Minute

// slurmJobSleep is how long a job's script sleeps: past any scenario's end (slurmCluster.stop
// kills the jobs then), bounded so that nothing outlives a test killed before its clean-up.
const slurmJobSleep = "1800"

// slurmCluster is a Slurm controller and its nodes' slurmd processes, each a faults.Process
// (killed with what stays in its process group at the test's end, or when the test process
// dies; its output in the test's output folder).
type slurmCluster struct {
	t     testing.TB
	dir   string
	log   string   // slurmctld's
	env   []string // added to the environment of every command and daemon: SLURM_CONF
	ctld  *faults.Process
	nodes []*faults.Process
}

// slurmBin finds a Slurm or MUNGE program (the daemons live in /usr/sbin, which a test's PATH
// may lack).
func slurmBin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	p := filepath.Join("/usr/sbin", name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s not found", name)
	}
	return p, nil
}

// requireSlurm fails (GPULAB_REQUIRE_SERVICES=1) or skips the test when Slurm or MUNGE is not
// installed or the test cannot run their daemons (they run as root).
func requireSlurm(t testing.TB) {
	t.Helper()
	for _, name := range []string{"slurmctld", "slurmd", "sbatch", "sinfo", "scontrol", "sdiag", "munged", "munge", "unmunge", "nice"} {
		if _, err := slurmBin(name); err != nil {
			testenv.Missing(t, "Slurm", fmt.Sprintf("%v: apt-get install slurm-wlm slurm-client munge (scripts/deps.sh)", err))
		}
	}
	if os.Geteuid() != 0 {
		testenv.Missing(t, "Slurm", "its daemons run as root")
	}
}

// munging says whether MUNGE's daemon answers: a credential made and read back.
func munging() error {
	munge, err := slurmBin("munge")
	if err != nil {
		return err
	}
	unmunge, err := slurmBin("unmunge")
	if err != nil {
		return err
	}
	cred, err := exec.Command(munge, "-n").Output()
	if err != nil {
		return fmt.Errorf("munge -n: %w", err)
	}
	cmd := exec.Command(unmunge)
	cmd.Stdin = bytes.NewReader(cred)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("unmunge: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// ensureMunge starts MUNGE's daemon, which Slurm authenticates every message with, when none
// answers. It is the machine's one daemon (its socket in /run/munge), shared with any other
// test process, and left running, as `make test` leaves dockerd.
func ensureMunge(t testing.TB) {
	t.Helper()
	if munging() == nil {
		return
	}
	munged, err := slurmBin("munged")
	if err != nil {
		testenv.Missing(t, "MUNGE", err.Error())
	}
	if _, err := os.Stat("/etc/munge/munge.key"); err != nil {
		if out, err := exec.Command("runuser", "-u", "munge", "--", "/usr/sbin/mungekey", "--create").CombinedOutput(); err != nil {
			t.Fatalf("create MUNGE's key: %v: %s", err, out)
		}
	}
	if err := os.MkdirAll("/run/munge", 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chown", "munge:munge", "/run/munge").CombinedOutput(); err != nil {
		t.Fatalf("chown /run/munge: %v: %s", err, out)
	}
	// It daemonizes; another test process may start one at the same time (one of the two
	// keeps the socket), so what counts is that one answers.
	out, startErr := exec.Command("runuser", "-u", "munge", "--", munged).CombinedOutput()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := munging()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("MUNGE does not answer: %v (munged: %v: %s)", err, startErr, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// slurmConf is slurm.conf for nodes of spec's shape, slurmd i (1-based) on port firstPort+i-1.
func slurmConf(dir, ctldLog string, spec fleetSpec, ctldPort, firstPort, maxJobs int, partition string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `ClusterName=bench
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=%d
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=%[2]s/state
SlurmdSpoolDir=%[2]s/spool/%%n
SlurmctldPidFile=%[2]s/slurmctld.pid
SlurmdPidFile=%[2]s/spool/%%n.pid
SlurmctldLogFile=%[5]s
SlurmctldDebug=info
SlurmdLogFile=%[2]s/spool/%%n.log
SlurmdDebug=error
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
SchedulerType=sched/backfill
PriorityType=priority/basic
SchedulerParameters=%[3]s
MaxJobCount=%[4]d
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=600
MessageTimeout=60
KillWait=5
`, ctldPort, dir, slurmSched(maxJobs), max(maxJobs+1000, 10000), ctldLog)
	for i := 1; i <= spec.Slaves; i++ {
		fmt.Fprintf(&b, "NodeName=n%d NodeHostname=localhost NodeAddr=127.0.0.1 Port=%d CPUs=%d RealMemory=%d Gres=gpu:%d Features=cluster%d\n",
			i, firstPort+i-1, spec.CPUs, spec.MemoryGiB<<10, spec.GPUs, 1+(i-1)%max(spec.Clusters, 1))
	}
	fmt.Fprintf(&b, "PartitionName=all Nodes=ALL Default=YES MaxTime=INFINITE State=%s\n", partition)
	return b.String()
}

// startSlurm starts a controller and spec.Slaves nodes and waits for every node to be idle;
// with down, the partition takes jobs but starts none until slurmCluster.release.
func startSlurm(t testing.TB, spec fleetSpec, maxJobs int, down bool) *slurmCluster {
	t.Helper()
	requireSlurm(t)
	ensureMunge(t)
	dir := t.TempDir()
	for _, d := range []string{"state", "spool", "dev", "out"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Stand-ins for the GPUs' device files: character devices as /dev/null is, which Slurm
	// accepts as a GPU's File (a plain file draws an error a node at every start).
	var files []string
	for g := range spec.GPUs {
		p := filepath.Join(dir, "dev", fmt.Sprintf("nvidia%d", g))
		if err := syscall.Mknod(p, syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
			if err := os.WriteFile(p, nil, 0o666); err != nil {
				t.Fatal(err)
			}
		}
		files = append(files, p)
	}
	gres := "AutoDetect=off\n"
	for _, f := range files {
		gres += "Name=gpu File=" + f + "\n"
	}
	partition := "UP"
	if down {
		partition = "DOWN"
	}
	// slurmctld's log is kept with the masters' (outDir): it is what the allocations are read
	// from, and what to look at when Slurm's figures surprise.
	ctldLog := filepath.Join(outDir(t), safeName(t.Name())+"-slurmctld.log")
	if err := os.Remove(ctldLog); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "slurm.conf")
	if err := os.WriteFile(conf, []byte(slurmConf(dir, ctldLog, spec, testenv.FreePort(t), testenv.FreePorts(t, spec.Slaves), maxJobs, partition)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "gres.conf"), []byte(gres), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &slurmCluster{t: t, dir: dir, log: ctldLog, env: []string{"SLURM_CONF=" + conf}}
	t.Cleanup(s.stop)
	ctld, _ := slurmBin("slurmctld")
	s.ctld = s.daemon("slurmctld", ctld, "-D", "-i", "-f", conf)
	slurmd, _ := slurmBin("slurmd")
	for i := 1; i <= spec.Slaves; i++ {
		// Its spool folder made for it: one slurmd exited at its start without it ("Domain
		// socket directory … No such file or directory").
		if err := os.MkdirAll(filepath.Join(dir, "spool", fmt.Sprintf("n%d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
		// At the lowest priority, with what they start: on a real cluster a node's launches
		// run on the node, not beside the controller; here they would take the controller's
		// cores (at B2's 50 jobs a second they took both, and submissions timed out).
		s.nodes = append(s.nodes, s.daemon(fmt.Sprintf("n%d", i), slurmd, "-D", "-n", "19", "-f", conf, "-N", fmt.Sprintf("n%d", i)))
		if i%50 == 0 {
			time.Sleep(200 * time.Millisecond) // registrations in waves, as a fleet's boot
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		idle, err := s.idleNodes()
		if err == nil && idle == spec.Slaves {
			break
		}
		for _, d := range append(s.nodes, s.ctld) {
			if d.Exited() {
				t.Fatalf("Slurm's %s exited at its start (%v): %s", filepath.Base(d.LogPath()), d.Wait(context.Background()), s.daemonLog(d))
			}
		}
		if time.Now().After(deadline) {
			out, _ := s.run(context.Background(), "sinfo", "-h", "-N", "-t", "ALLOC,DOWN,DRAIN,FAIL,UNKNOWN,NO_RESPOND,INVALID_REG", "-o", "%N %T %E")
			t.Fatalf("%d of %d Slurm nodes idle after 3 minutes (%v); the others: %s; slurmctld's log: %s", idle, spec.Slaves, err, out, s.logTail(20))
		}
		time.Sleep(500 * time.Millisecond)
	}
	// Slurm starts no job until its main scheduler's first cycle, a few seconds after the
	// controller's start: a job submitted before it waited for it (1.9 s in S2's first try).
	for {
		got, err := s.sdiag()
		if n, _ := strconv.Atoi(got["main Total cycles"]); err == nil && n > 0 {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("Slurm's main scheduler has not run 3 minutes after its start (%v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// daemon starts one of Slurm's daemons in the foreground (it logs to its file; what it says
// before it has opened that is in the process's output).
func (s *slurmCluster) daemon(name, bin string, args ...string) *faults.Process {
	// With SIGPIPE ignored, as a shell's trap leaves it through exec: slurmd wrote to a socket
	// slurmctld had closed before it ignored the signal itself, and a few of 500 died of it at
	// their start.
	return faults.StartProcess(s.t, faults.Command{Path: "/bin/sh", Args: append([]string{"-c", `trap "" PIPE; exec "$0" "$@"`, bin}, args...),
		Env: s.env, Dir: s.dir, Name: "slurm-" + name})
}

// run runs one of Slurm's commands against this cluster and returns its output.
func (s *slurmCluster) run(ctx context.Context, name string, args ...string) (string, error) {
	bin, err := slurmBin(name)
	if err != nil {
		return "", err
	}
	// At the lowest priority, as the nodes: on a real cluster sbatch runs on a login node.
	// Here each one parses slurm.conf's 500 nodes, and at B2's 50 a second they took most of
	// both cores from slurmctld.
	cmd := exec.CommandContext(ctx, "nice", append([]string{"-n", "19", bin}, args...)...)
	cmd.Env, cmd.Dir = append(os.Environ(), s.env...), s.dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return string(out), nil
}

// idleNodes counts the nodes idle (registered and free).
func (s *slurmCluster) idleNodes() (int, error) {
	out, err := s.run(context.Background(), "sinfo", "-h", "-t", "idle", "-o", "%D")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, f := range strings.Fields(out) {
		v, err := strconv.Atoi(f)
		if err != nil {
			return 0, fmt.Errorf("sinfo: %q", out)
		}
		n += v
	}
	return n, nil
}

// sbatch submits a batch job and returns its id.
func (s *slurmCluster) sbatch(ctx context.Context, args ...string) (string, error) {
	out, err := s.run(ctx, "sbatch", append([]string{"--parsable"}, args...)...)
	if err != nil {
		return "", err
	}
	id, _, _ := strings.Cut(strings.TrimSpace(out), ";")
	if _, err := strconv.Atoi(id); err != nil {
		return "", fmt.Errorf("sbatch answered %q", out)
	}
	return id, nil
}

// jobArgs are sbatch's options for a job of sh's shape (as B1's jobs ask: 2 CPUs and 8 GB a
// GPU), working in dir (the cluster's: stop finds its processes there), its output to out.
func jobArgs(sh burstShape, dir, out, script string) []string {
	args := []string{fmt.Sprintf("--gres=gpu:%d", sh.GPUs), "-c", strconv.Itoa(2 * sh.GPUs), fmt.Sprintf("--mem=%dG", 8*sh.GPUs), "-o", out, "--chdir", dir}
	if sh.Cluster > 0 {
		args = append(args, "--constraint", fmt.Sprintf("cluster%d", sh.Cluster))
	}
	return append(args, "--wrap", script)
}

// release opens the partition: the queued jobs may start.
func (s *slurmCluster) release() error {
	_, err := s.run(context.Background(), "scontrol", "update", "PartitionName=all", "State=UP")
	return err
}

// allocationLine is how slurmctld logs a job's allocation, by its main scheduler or backfill.
var allocationLine = regexp.MustCompile(`^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})\] (?:sched: Allocate|.*backfill.*Started) JobId=(\d+) `)

// submitLine is how slurmctld logs a batch job's submission, at the end of its handling, with
// how long the handling took.
var submitLine = regexp.MustCompile(`^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})\] _slurm_rpc_submit_batch_job: JobId=(\d+) .*usec=(\d+)`)

// received reads slurmctld's log: when it received each job's submission (its log line's time
// less the handling's, the line's third group).
func (s *slurmCluster) received() (map[string]time.Time, error) {
	return s.logTimes(submitLine, func(m []string) (time.Duration, error) {
		us, err := strconv.ParseInt(m[3], 10, 64)
		return -time.Duration(us) * time.Microsecond, err
	})
}

// allocations reads slurmctld's log: when each job was allocated its node.
func (s *slurmCluster) allocations() (map[string]time.Time, error) {
	return s.logTimes(allocationLine, nil)
}

// slurmLogTime is the layout of the time that begins each line of Slurm's logs.
const slurmLogTime = "2006-01-02T15:04:05.000"

// logTimes reads slurmctld's log: for each job, the time of the first line re matches (its
// first group the line's time, its second the job's id), moved by what shift reads in the
// match (nil: not moved).
func (s *slurmCluster) logTimes(re *regexp.Regexp, shift func(m []string) (time.Duration, error)) (map[string]time.Time, error) {
	f, err := os.Open(s.log)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	out := map[string]time.Time{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := re.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		if _, seen := out[m[2]]; seen {
			continue
		}
		at, err := time.ParseInLocation(slurmLogTime, m[1], time.Local)
		if err != nil {
			return nil, err
		}
		if shift != nil {
			d, err := shift(m)
			if err != nil {
				return nil, err
			}
			at = at.Add(d)
		}
		out[m[2]] = at
	}
	return out, sc.Err()
}

// daemonLog is the end of a daemon's output and log, for a failure's message.
func (s *slurmCluster) daemonLog(d *faults.Process) string {
	if d == s.ctld {
		return lastLines(d.Output(), 10) + "\n" + s.logTail(20)
	}
	data, _ := os.ReadFile(filepath.Join(s.dir, "spool", strings.TrimPrefix(filepath.Base(d.LogPath()), "slurm-")))
	return lastLines(d.Output(), 10) + "\n" + lastLines(string(data), 20)
}

// lastLines is the last n lines of text.
func lastLines(text string, n int) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// logTail is the end of slurmctld's log, for a failure's message.
func (s *slurmCluster) logTail(n int) string {
	data, _ := os.ReadFile(s.log)
	return lastLines(string(data), n)
}

// stop kills what the daemons started, once they are killed (their faults.Process clean-ups
// run before it): every process working in the cluster's folder, where the jobs' slurmstepd,
// scripts and sleeps run (they leave the daemons' process groups). Cancelling thousands of
// jobs through Slurm first took minutes on the loaded machine (scancel held back by
// slurmctld's RPC rate limit) and left them running when it timed out.
func (s *slurmCluster) stop() {
	for range 20 {
		if killUnder(s.dir) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Errorf("processes of the Slurm cluster in %s still running after 20 rounds of kills", s.dir)
}

// killUnder kills (SIGKILL) every process whose working directory is dir or below it, and
// says how many it found.
func killUnder(dir string) int {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	n := 0
	for _, p := range procs {
		cwd, err := os.Readlink(filepath.Join(p, "cwd"))
		if err != nil || (cwd != dir && !strings.HasPrefix(cwd, dir+"/")) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil || pid == os.Getpid() {
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
		n++
	}
	return n
}

// runS1 is B1's burst placed by Slurm: as many nodes as B1's slaves, B1's jobs in its order,
// all queued while the partition is down; from its opening to the last job's allocation.
func runS1(t *testing.T, rep *report, sz sizes) {
	spec := b1Fleet(sz.b1Slaves)
	s := startSlurm(t, spec, sz.b1Jobs, true)
	shapes := burstMix(sz.b1Jobs, spec.Clusters, burstUsers(sz.b1Jobs))
	ids := make([]string, len(shapes))
	start := time.Now()
	// In B1's order: Slurm's basic priority is the submission's.
	var g errgroup.Group
	g.SetLimit(8)
	for i, sh := range shapes {
		g.Go(func() error {
			id, err := s.sbatch(context.Background(), jobArgs(sh, s.dir, "/dev/null", "sleep "+slurmJobSleep)...)
			ids[i] = id
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("submit to Slurm: %v", err)
	}
	submitted := time.Since(start)
	gpus := make(map[string]int, len(ids))
	demand := 0
	for i, id := range ids {
		gpus[id] = shapes[i].GPUs
		demand += shapes[i].GPUs
	}
	cpu := newSlurmCPU(s)
	opened := time.Now()
	if err := s.release(); err != nil {
		t.Fatal(err)
	}
	quiet := slurmQuiet
	if sz.smoke {
		quiet = 10 * time.Second
	}
	var allocs map[string]time.Time
	var last time.Time
	limit := 10 * time.Minute
	if sz.smoke {
		limit = 2 * time.Minute
	}
	deadline := opened.Add(limit)
	for {
		time.Sleep(time.Second)
		var err error
		if allocs, err = s.allocations(); err != nil {
			t.Fatal(err)
		}
		last = time.Time{}
		used := 0
		for id, at := range allocs {
			if g, ours := gpus[id]; ours {
				used += g
				if at.After(last) {
					last = at
				}
			}
		}
		if used == spec.Slaves*spec.GPUs || (!last.IsZero() && time.Since(last) > quiet) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Slurm's burst not placed within %s: %d allocated; slurmctld's log: %s", limit, len(allocs), s.logTail(20))
		}
	}
	rep.note("S1", "during the burst: %s; %s", cpu, s.schedStats())
	placed, used := 0, 0
	var after []time.Duration // each allocation's time since the opening
	for id, at := range allocs {
		if g, ok := gpus[id]; ok {
			placed++
			used += g
			after = append(after, at.Sub(opened))
		}
	}
	burst := last.Sub(opened)
	floor, ratioText := "", ""
	if b1, ok := rep.ref("B1 burst"); ok {
		floor, ratioText = "GPULab's B1 in this run: "+secs(b1), ratio(burst.Seconds(), b1.Seconds())
	}
	rep.add(result{Scenario: "S1", Measure: fmt.Sprintf("Slurm: partition opened → last allocation (%d nodes × %d GPUs, %d queued jobs, B1's)", spec.Slaves, spec.GPUs, len(ids)),
		Value: secs(burst), Floor: floor, Ratio: ratioText})
	rep.note("S1", "Slurm %s: %d jobs allocated (a tenth by %s, half by %s, nine tenths by %s), %d of %d GPUs (demand %d GPUs); submitted with sbatch, 8 at a time, in %s before the partition opened; the scheduler: %s (the burst counted as placed when every GPU was, or when no job had been allocated for %s)",
		slurmVersion(s), placed, secs(percentile(after, 10)), secs(percentile(after, 50)), secs(percentile(after, 90)), used, spec.Slaves*spec.GPUs, demand, secs(submitted), slurmSched(sz.b1Jobs), quiet)
}

// runS2 is B2 on Slurm: as many nodes as B2's slaves, jobs of one GPU submitted with sbatch at
// B2's rate; to each job's allocation (slurmctld's log) from sbatch's start and from the
// controller's receipt of the submission, and to its script's first line on its node. Slurm's
// own failures (submissions timed out, jobs not started) are noted, not failed: they are what
// is measured. Only the smoke run, which checks the harness, fails on them.
func runS2(t *testing.T, rep *report, sz sizes) {
	spec := b1Fleet(sz.b2Slaves)
	s := startSlurm(t, spec, sz.b2Jobs, false)
	submitted := newTimeMap()
	var errs counter
	var firstErr error
	out := filepath.Join(s.dir, "out")
	cpu := newSlurmCPU(s)
	start := time.Now()
	openLoop(sz.b2Rate, sz.b2Jobs, func(i int) {
		t0 := time.Now()
		id, err := s.sbatch(context.Background(), jobArgs(burstShape{GPUs: 1}, s.dir, filepath.Join(out, "%j"), "date +%s.%N; sleep "+slurmJobSleep)...)
		if err != nil {
			if errs.Add(1) == 1 {
				firstErr = err // the only writer; read once openLoop has waited for every call
			}
			return
		}
		submitted.set(id, t0)
	})
	rep.note("S2", "while submitting: %s", cpu)
	var toAlloc, fromReceipt, toStart []time.Duration
	deadline := time.Now().Add(2 * time.Minute)
	for {
		allocs, err := s.allocations()
		if err != nil {
			t.Fatal(err)
		}
		received, err := s.received()
		if err != nil {
			t.Fatal(err)
		}
		toAlloc, fromReceipt, toStart = toAlloc[:0], fromReceipt[:0], toStart[:0]
		submitted.mu.Lock()
		for id, t0 := range submitted.m {
			if at, ok := allocs[id]; ok {
				toAlloc = append(toAlloc, at.Sub(t0))
				if got, ok := received[id]; ok {
					fromReceipt = append(fromReceipt, at.Sub(got))
				}
			}
			if at, err := scriptStarted(filepath.Join(out, id)); err == nil {
				toStart = append(toStart, at.Sub(t0))
			}
		}
		n := len(submitted.m)
		submitted.mu.Unlock()
		if len(toStart) == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	took := time.Since(start)
	n := submitted.len()
	failures := fmt.Sprintf("%d of %d submissions failed", errs.Load(), sz.b2Jobs)
	if firstErr != nil {
		failures += fmt.Sprintf(" (the first: %v)", firstErr)
	}
	failures += fmt.Sprintf("; %d submitted jobs not running 2 minutes after the last submission", n-len(toStart))
	if sz.smoke && (errs.Load() > 0 || len(toStart) < n) {
		t.Error(failures)
	}
	compare := func(name string, p99 time.Duration) (string, string) {
		b50, ok50 := rep.ref("B2 " + name + " p50")
		b99, ok99 := rep.ref("B2 " + name + " p99")
		if !ok50 || !ok99 {
			return "", ""
		}
		return fmt.Sprintf("GPULab's B2 in this run: %s / %s", ms(b50), ms(b99)), ratio(p99.Seconds(), b99.Seconds())
	}
	row := func(measure, ref string, ds []time.Duration) {
		p50, p99 := percentile(ds, 50), percentile(ds, 99)
		floor, r := compare(ref, p99)
		rep.add(result{Scenario: "S2", Measure: measure, Value: ms(p50) + " / " + ms(p99), Floor: floor, Ratio: r})
	}
	row(fmt.Sprintf("Slurm: sbatch started → allocation, p50 / p99 (%d jobs at %.0f/s, %d nodes; B2's submit → ASSIGNED committed)", n, sz.b2Rate, spec.Slaves), "assigned", toAlloc)
	row("Slurm: submission received by slurmctld → allocation, p50 / p99 (without sbatch's own start and its request)", "assigned", fromReceipt)
	row("Slurm: sbatch started → the job's script runs on its node, p50 / p99 (B2's submit → RUNNING committed; here a real launch)", "running", toStart)
	rep.note("S2", "Slurm %s: %d jobs submitted in %s; %s; ratios are of the p99s; the scheduler: %s; %s",
		slurmVersion(s), n, secs(took), failures, slurmSched(sz.b2Jobs), s.schedStats())
}

// scriptStarted reads the time a job's script wrote as its first line (date +%s.%N).
func scriptStarted(file string) (time.Time, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return time.Time{}, err
	}
	line, _, found := strings.Cut(string(data), "\n")
	if !found {
		return time.Time{}, errors.New("no line yet")
	}
	sec, frac, _ := strings.Cut(strings.TrimSpace(line), ".")
	si, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	ns, err := strconv.ParseInt((frac + "000000000")[:9], 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(si, ns), nil
}

// slurmVersion is the controller's version ("22.05.8").
func slurmVersion(s *slurmCluster) string {
	out, err := s.run(context.Background(), "sinfo", "-V")
	if err != nil {
		return "(version unknown)"
	}
	return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out), "slurm-wlm"))
}

// slurmCPU measures the CPU Slurm's daemons use (the controller; the nodes' slurmd and what
// they started: launched jobs' slurmstepd are their children until they exit) and the machine's.
type slurmCPU struct {
	s               *slurmCluster
	at              time.Time
	ctld, all, busy time.Duration
}

func newSlurmCPU(s *slurmCluster) *slurmCPU {
	c := &slurmCPU{s: s, at: time.Now()}
	c.ctld, c.all = c.sample()
	c.busy = machineBusy()
	return c
}

func (c *slurmCPU) sample() (ctld, all time.Duration) {
	ctld, _, _ = cpuTimes(c.s.ctld.Pid(), true)
	all = ctld
	for _, n := range c.s.nodes {
		d, _, _ := cpuTimes(n.Pid(), true)
		all += d
	}
	return ctld, all
}

func (c *slurmCPU) String() string {
	wall := time.Since(c.at).Seconds()
	ctld, all := c.sample()
	busy := machineBusy() - c.busy
	return fmt.Sprintf("CPU in cores: slurmctld %.2f, slurmd %.2f, the machine %.2f",
		(ctld-c.ctld).Seconds()/wall, (all-ctld-(c.all-c.ctld)).Seconds()/wall, busy.Seconds()/wall)
}

// schedStats summarises sdiag: how often and how long Slurm's main and backfill schedulers ran
// and how many jobs the backfill started, to say where a burst's time went.
func (s *slurmCluster) schedStats() string {
	got, err := s.sdiag()
	if err != nil {
		return err.Error()
	}
	us := func(k string) string {
		v, err := strconv.ParseFloat(got[k], 64)
		if err != nil {
			return "?"
		}
		return fmt.Sprintf("%.0f ms", v/1000)
	}
	return fmt.Sprintf("main scheduler %s cycles (mean %s, max %s); backfill %s cycles (mean %s, max %s), %s jobs started by it",
		got["main Total cycles"], us("main Mean cycle"), us("main Max cycle"),
		got["backfill Total cycles"], us("backfill Mean cycle"), us("backfill Max cycle"),
		got["backfill Total backfilled jobs (since last slurm start)"])
}

// sdiag reads the schedulers' figures out of sdiag's report (parseSdiag).
func (s *slurmCluster) sdiag() (map[string]string, error) {
	out, err := s.run(context.Background(), "sdiag")
	if err != nil {
		return nil, err
	}
	return parseSdiag(out), nil
}

// parseSdiag reads sdiag's report: its schedulers' figures by section ("main", "backfill") and
// name, "main Total cycles".
func parseSdiag(out string) map[string]string {
	var section string
	got := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "Main schedule statistics"):
			section = "main"
			continue
		case strings.HasPrefix(line, "Backfilling stats"):
			section = "backfill"
			continue
		case !strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, " "):
			section = ""
		}
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if section == "" || !ok {
			continue
		}
		got[section+" "+strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return got
}
