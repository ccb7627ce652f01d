package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"time"

	"github.com/opengpulab/gpulab/scheduler/sim"
)

// phillyAttribution must accompany any result from the Philly trace (shared/traces/README.md).
const phillyAttribution = `Trace: Microsoft Philly (msr-fiddle/philly-traces, CC BY 4.0; Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN Training Workloads", USENIX ATC 2019), job list as published in the Pollux artifact (petuum/adaptdl, osdi21-artifact, simulator/traces/philly.csv, Apache-2.0).`

// simulate replays a workload trace through the scheduler's Plan in simulated time (SPEC 7.5)
// and prints one markdown table row per policy; it needs no database.
func simulate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	trace := fs.String("trace", "", "trace CSV in the Philly format (required), e.g. ../shared/traces/philly.csv")
	policy := fs.String("policy", "all", "policy: fifo, fair (no halting), fair-halt (fair with SCORE halting), sjf-oracle, las (least attained service with halting) or all (one row each)")
	slaves := fs.Int("slaves", 80, "number of simulated slaves (80 × 8 GPUs loads the Philly trace to about 50 %)")
	perSlave := fs.Int("gpus-per-slave", 8, "GPUs per slave; jobs needing more are dropped (a job runs on one slave)")
	jobs := fs.Int("jobs", 0, "replay only the first N jobs in submission order (0: all)")
	from := fs.String("from", "", "replay only jobs submitted at or after this time (YYYY-MM-DD or RFC 3339)")
	to := fs.String("to", "", "replay only jobs submitted before this time (YYYY-MM-DD or RFC 3339)")
	halfLife := fs.Duration("half-life", sim.DefaultHalfLife, "half-life of the usage tallies of the fair policy")
	grace := fs.Duration("halt-grace", sim.DefaultHaltGrace, "time a halted job takes to stop (the slave's halt grace)")
	haltFactor := fs.Float64("halt-factor", sim.DefaultHaltFactor, "a SCORE halt needs the victim's fair rank (owner's tally × maxDuration left) at this many times the starter's (1: any higher rank; default: the master's)")
	restartableOnly := fs.Bool("halt-restartable-only", true, "SCORE halts spare non-restartable jobs (as the master; false: they only come last among victims)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the replays to this file (go tool pprof)")
	rules := sim.DefaultRules
	fs.Uint64Var(&rules.Seed, "seed", rules.Seed, "seed of the rules that fill the trace's missing columns")
	fs.Float64Var(&rules.Restartable, "restartable", rules.Restartable, "share of jobs that are restartable (0..1)")
	fs.Float64Var(&rules.MinFraction, "min-fraction", rules.MinFraction, "minDuration as a fraction of maxDuration (0..1)")
	fs.DurationVar(&rules.MinFloor, "min-floor", rules.MinFloor, "shortest minDuration")
	fs.Float64Var(&rules.Interactive, "interactive", rules.Interactive, "share of short one-GPU jobs that are interactive (0..1)")
	estimates := fs.Bool("estimates", true, "measure every job's start estimate (Plan's forecast range) at submission and as it waits against its real start: a second table")
	overtaking := fs.Bool("overtaking", true, "let the forecast stretch estimates by what recent arrivals ranked ahead would bring (scheduler.Snapshot.Arrivals), as the master does; false: the queue as it stands")
	scenario := fs.String("scenario", "", "TOML file declaring reservations, private clusters, notBefore/notAfter windows and the rules for missing columns (see bench/scenarios/philly-example.toml)")
	estEvery := fs.Int("estimate-every", 10, "measure the estimates of one job in N (by trace order; 1: every job, slower: each costs a forecast of the whole queue)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: %w", fs.Arg(0), errUsage)
	}
	if *trace == "" {
		return fmt.Errorf("--trace is required: %w", errUsage)
	}
	if *estEvery < 1 {
		return fmt.Errorf("--estimate-every %d: want ≥ 1: %w", *estEvery, errUsage)
	}
	if *slaves < 1 || *perSlave < 1 || *jobs < 0 || *halfLife <= 0 || *grace <= 0 || *haltFactor < 1 {
		return fmt.Errorf("--slaves and --gpus-per-slave must be ≥ 1, --jobs ≥ 0, --half-life and --halt-grace > 0, --halt-factor ≥ 1: %w", errUsage)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"--restartable", rules.Restartable}, {"--min-fraction", rules.MinFraction}, {"--interactive", rules.Interactive}} {
		if f.v < 0 || f.v > 1 {
			return fmt.Errorf("%s %v: want a share from 0 to 1: %w", f.name, f.v, errUsage)
		}
	}
	policies, err := simPolicies(*policy)
	if err != nil {
		return err
	}
	// A replay allocates a planner per event and keeps little: collecting garbage less often
	// saves a good part of its CPU time for a few hundred MB more memory at most.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	if *cpuProfile != "" {
		f, ferr := os.Create(*cpuProfile)
		if ferr != nil {
			return fmt.Errorf("--cpuprofile: %w", ferr)
		}
		if perr := pprof.StartCPUProfile(f); perr != nil {
			_ = f.Close()
			return fmt.Errorf("--cpuprofile: %w", perr)
		}
		defer func() {
			pprof.StopCPUProfile()
			if cerr := f.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("--cpuprofile: %w", cerr)
			}
		}()
	}
	opt := sim.TraceOptions{Limit: *jobs}
	for _, b := range []struct {
		s   string
		dst *time.Time
	}{{*from, &opt.From}, {*to, &opt.To}} {
		if b.s == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, b.s)
		if err != nil {
			t, err = time.Parse(time.DateOnly, b.s)
		}
		if err != nil {
			return fmt.Errorf("--from/--to %q: want YYYY-MM-DD or RFC 3339: %w", b.s, errUsage)
		}
		*b.dst = t
	}
	var sc *sim.Scenario
	if *scenario != "" {
		if sc, err = sim.ReadScenario(*scenario); err != nil {
			return fmt.Errorf("--scenario: %w: %w", err, errUsage)
		}
		rules = sc.Apply(rules)
	}
	tj, st, err := sim.ReadTraceFile(*trace, opt)
	if err != nil {
		return err
	}
	tj = sc.ApplyJobs(sim.Assign(tj, rules), rules.Seed)
	fmt.Fprintf(stdout, "Trace %s: %d rows, %d malformed skipped, %d jobs replayed; cluster %d slaves × %d GPUs = %d GPUs; tally half-life %s; halt grace %s.\n",
		*trace, st.Rows, st.Malformed, st.Kept, *slaves, *perSlave, *slaves**perSlave, *halfLife, *grace)
	fmt.Fprintf(stdout, "Missing columns: %s.\nHalting (fair-halt, las): halt factor %g, restartable victims only: %v.\n\n", rules, *haltFactor, *restartableOnly)
	fmt.Fprintln(stdout, "| policy | jobs | avg JCT | p50 JCT | p95 JCT | p99 JCT | avg wait | p50 wait | p95 wait | p99 wait | bounded slowdown | GPU util | makespan | Jain | halts/job | halted < min | lost jobs | lost GPU-h | grace GPU-h | interactive failed | est. jobs | est. err p50 | est. err p90 | err/wait p50 | wall |")
	fmt.Fprintln(stdout, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var accRows, scRows []string
	for _, p := range policies {
		if err := ctx.Err(); err != nil {
			return err
		}
		r := sim.Run(sim.Config{Policy: p.Policy, Halting: p.Halting, HaltGrace: *grace,
			HaltFactor: *haltFactor, HaltRestartableOnly: *restartableOnly, Slaves: *slaves, GPUsPerSlave: *perSlave, HalfLife: *halfLife, NoEstimates: !*estimates, EstimateEvery: *estEvery, NoOvertaking: !*overtaking, Scenario: sc}, tj)
		scRows = append(scRows, scenarioRow(p.Name, r))
		accRows = append(accRows, accuracyRow(p.Name, r.Accuracy))
		m := r.Metrics
		est := "| – | – | –"
		if m.Estimates > 0 {
			est = fmt.Sprintf("| %s | %s | %.2f", secs(m.EstMedianErr), secs(m.EstP90Err), m.EstMedianRel)
		}
		fmt.Fprintf(stdout, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %.2f | %.1f %% | %s | %.3f | %.3f | %d | %d | %.0f | %.1f | %d | %d %s | %s |\n",
			p.Name, m.Jobs, secs(m.AvgJCT), secs(m.P50JCT), secs(m.P95JCT), secs(m.P99JCT),
			secs(m.AvgWait), secs(m.P50Wait), secs(m.P95Wait), secs(m.P99Wait), m.AvgSlowdown,
			100*m.Utilisation, fmtSpan(m.Makespan), m.Jain, m.HaltsPerJob, r.HaltedEarly, r.Lost,
			r.LostGPUTime.Hours(), r.GraceGPUTime.Hours(), r.InteractiveFailed, m.Estimates, est,
			r.Wall.Round(10*time.Millisecond))
		if r.Failed > 0 || r.Stuck > 0 {
			fmt.Fprintf(stderr, "policy %s: %d jobs failed by Plan, %d never started\n", p.Name, r.Failed, r.Stuck)
		}
	}
	if *estimates {
		printAccuracy(stdout, accRows)
	}
	if sc != nil {
		printScenario(stdout, sc, scRows)
	}
	fmt.Fprintf(stdout, "\n%d jobs needing more GPUs than a slave has were dropped. JCT and wait in seconds (wait: JCT − run time); "+
		"Jain's index over users (trace: virtual clusters) of their mean bounded slowdown (floor %s); "+
		"lost jobs: halted and not restartable (or with less than a minute of maxDuration left); "+
		"estimates: Plan's estimated start at a job's first pass against its first start.\n%s\n",
		dropped(tj, *perSlave), sim.SlowdownFloor, phillyAttribution)
	return nil
}

// simPolicies reads --policy.
func simPolicies(s string) ([]sim.NamedPolicy, error) {
	if s == "all" {
		return sim.Policies, nil
	}
	for _, p := range sim.Policies {
		if p.Name == s {
			return []sim.NamedPolicy{p}, nil
		}
	}
	return nil, fmt.Errorf("--policy %q: want fifo, fair, fair-halt, sjf-oracle, las or all: %w", s, errUsage)
}

// dropped counts the jobs too large for one slave.
func dropped(jobs []sim.TraceJob, perSlave int) int {
	n := 0
	for _, j := range jobs {
		if j.GPUs > perSlave {
			n++
		}
	}
	return n
}

func secs(d time.Duration) string { return fmt.Sprintf("%.0f s", d.Seconds()) }

func fmtSpan(d time.Duration) string { return fmt.Sprintf("%.1f d", d.Hours()/24) }
