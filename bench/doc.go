// Package bench measures the master end to end (issue 6): placement speed, submit-to-running
// latency, real Docker overhead, API throughput, trace replay and a short soak, each beside the
// local floor it is compared with (a raw `docker run`, a bare Postgres insert, an empty HTTPS
// handler over the same TLS set-up), so that results read as ratios. S1 and S2 run Slurm on the
// same machine as B1 and B2 run the master (slurm_test.go), for the comparison issue 16 asks.
//
// The scenarios are tests, gated by GPULAB_BENCH (a comma-separated list such as "B1,B2", or
// "all"), so they can reuse the test helpers (a fresh database, the Docker Engine, the local
// busybox image) and never run in a plain `go test ./...`. `make bench` runs them all against
// a Postgres cluster with fsync on, prints a table and appends it to RESULTS.md with the date,
// the commit and the machine. TestSmoke runs every scenario at toy sizes in `make test`, to
// keep the harness working.
//
// The master under test runs in a process of its own (the test binary started again in the
// master role, see master_test.go), wired exactly as `gpulab-master serve` wires it, so its
// memory and CPU profile are its own and not the load generator's.
package bench
