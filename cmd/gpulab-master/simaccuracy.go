package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/opengpulab/gpulab/scheduler/sim"
)

// accuracyRow is one policy's row of the estimate table.
func accuracyRow(name string, a sim.Accuracy) string {
	var h []string
	for _, b := range a.ByHorizon {
		if b.N == 0 {
			h = append(h, "–")
			continue
		}
		h = append(h, fmt.Sprintf("%s / %.0f %%", secs(b.MedianErr), 100*b.InRange))
	}
	return fmt.Sprintf("| %s | %d | %d | %d | %s | %s | %.3f | %.1f %% | %.1f %% | %.1f %% | %s | %s |",
		name, a.Waited, a.AtOnce, a.NoRange, secs(a.MedianErr), secs(a.P90Err), a.MedianRel,
		100*a.InRange, 100*a.Early, 100*a.Late, secs(a.MedianWidth), strings.Join(h, " | "))
}

// printAccuracy prints the estimate table: the goals are err/wait p50 ≤ 0.30 and ≥ 80 % in range.
func printAccuracy(w io.Writer, rows []string) {
	fmt.Fprintln(w, "\nStart estimates (Plan's forecast range at each job's first pass after submission, against its first start; then the estimates made as it waited, by time left to its start: err p50 / share in range):")
	fmt.Fprintln(w, "\n| policy | waited | started at once | no range | err p50 | err p90 | err/wait p50 | in range | before early | after late | range width p50 | left ≤ 10 min | ≤ 1 h | ≤ 4 h | ≤ 12 h | > 12 h |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Fprintln(w, r)
	}
}

// scenarioRow is one policy's row of the scenario table.
func scenarioRow(name string, r sim.Result) string {
	s := r.Scenario
	return fmt.Sprintf("| %s | %d | %s | %s | %d | %d | %d | %d | %d |", name, s.Holders, secs(s.HolderAvgWait), secs(s.HolderP99Wait),
		s.HolderOutside, s.Expired, s.ReservationFailed, s.Guests, s.EarlyStarts)
}

// printScenario states the scenario and prints its table.
func printScenario(w io.Writer, sc *sim.Scenario, rows []string) {
	fmt.Fprintf(w, "\nScenario: %s.\n\n", sc)
	fmt.Fprintln(w, "| policy | holders' jobs | holders' avg wait | holders' p99 wait | started outside reservation | expired at notAfter | failed at reservation end | guest jobs on private clusters | started before notBefore |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Fprintln(w, r)
	}
}
