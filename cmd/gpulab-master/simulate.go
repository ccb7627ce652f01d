package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/scheduler/sim"
)

// phillyAttribution must accompany any result from the Philly trace (shared/traces/README.md).
const phillyAttribution = `Trace: Microsoft Philly (msr-fiddle/philly-traces, CC BY 4.0; Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN Training Workloads", USENIX ATC 2019), job list as published in the Pollux artifact (petuum/adaptdl, osdi21-artifact, simulator/traces/philly.csv, Apache-2.0).`

// simulate replays a workload trace through the scheduler's Plan in simulated time (SPEC 7.5)
// and prints one markdown table row per policy; it needs no database.
func simulate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	trace := fs.String("trace", "", "trace CSV in the Philly format (required), e.g. ../shared/traces/philly.csv")
	policy := fs.String("policy", "all", "queue order: fair, fifo, sjf-oracle or all (the three, one row each)")
	slaves := fs.Int("slaves", 80, "number of simulated slaves (80 × 8 GPUs loads the Philly trace to about 50 %)")
	perSlave := fs.Int("gpus-per-slave", 8, "GPUs per slave; jobs needing more are dropped (a job runs on one slave)")
	jobs := fs.Int("jobs", 0, "replay only the first N jobs in submission order (0: all)")
	from := fs.String("from", "", "replay only jobs submitted at or after this time (YYYY-MM-DD or RFC 3339)")
	to := fs.String("to", "", "replay only jobs submitted before this time (YYYY-MM-DD or RFC 3339)")
	halfLife := fs.Duration("half-life", sim.DefaultHalfLife, "half-life of the usage tallies of the fair policy")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: %w", fs.Arg(0), errUsage)
	}
	if *trace == "" {
		return fmt.Errorf("--trace is required: %w", errUsage)
	}
	if *slaves < 1 || *perSlave < 1 || *jobs < 0 || *halfLife <= 0 {
		return fmt.Errorf("--slaves and --gpus-per-slave must be ≥ 1, --jobs ≥ 0, --half-life > 0: %w", errUsage)
	}
	var policies []scheduler.Policy
	if *policy == "all" {
		policies = []scheduler.Policy{scheduler.PolicyFIFO, scheduler.PolicyFair, scheduler.PolicySJFOracle}
	} else {
		p, err := scheduler.ParsePolicy(*policy)
		if err != nil {
			return fmt.Errorf("--policy: %w: %w", err, errUsage)
		}
		policies = []scheduler.Policy{p}
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
	tj, st, err := sim.ReadTraceFile(*trace, opt)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Trace %s: %d rows, %d malformed skipped, %d jobs replayed; cluster %d slaves × %d GPUs = %d GPUs; tally half-life %s.\n\n",
		*trace, st.Rows, st.Malformed, st.Kept, *slaves, *perSlave, *slaves**perSlave, *halfLife)
	fmt.Fprintln(stdout, "| policy | jobs | dropped | avg JCT | p99 JCT | avg wait | p99 wait | GPU util | makespan | Jain | wall |")
	fmt.Fprintln(stdout, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, p := range policies {
		if err := ctx.Err(); err != nil {
			return err
		}
		r := sim.Run(sim.Config{Policy: p, Slaves: *slaves, GPUsPerSlave: *perSlave, HalfLife: *halfLife}, tj)
		m := r.Metrics
		fmt.Fprintf(stdout, "| %s | %d | %d | %s | %s | %s | %s | %.1f %% | %s | %.3f | %s |\n", p, m.Jobs, r.Dropped,
			secs(m.AvgJCT), secs(m.P99JCT), secs(m.AvgWait), secs(m.P99Wait), 100*m.Utilisation, fmtSpan(m.Makespan), m.Jain,
			r.Wall.Round(10*time.Millisecond))
		if r.Failed > 0 || r.Stuck > 0 {
			fmt.Fprintf(stderr, "policy %s: %d jobs failed by Plan, %d never started\n", p, r.Failed, r.Stuck)
		}
	}
	fmt.Fprintf(stdout, "\nJCT and wait in seconds; Jain's index over users (trace: virtual clusters) of their mean bounded slowdown; maxDuration is the real run time rounded up to 1h/2h/4h/8h/1d/2d/1w/2w.\n%s\n", phillyAttribution)
	return nil
}

func secs(d time.Duration) string { return fmt.Sprintf("%.0f s", d.Seconds()) }

func fmtSpan(d time.Duration) string { return fmt.Sprintf("%.1f d", d.Hours()/24) }
