// Package chaos is the fault suite: it runs GPULab as it is deployed (gpulab-master and
// gpulab-slave binaries as processes, a Postgres cluster of their own, the real Docker Engine),
// injects the faults a real cluster meets (replies lost after the master acted, a master killed
// with SIGKILL mid-pass, a slave agent
// killed and started again, Postgres restarted and stopped under submit load, a slave frozen or cut
// off while its jobs run, two masters with the leader killed, a slow Docker Engine under a slave
// with many containers) and checks, after each scenario, the invariants the lifecycle promises:
// every job reaches exactly one end state, no job runs twice unless restarted, no GPU is held by
// two live containers at once, no job stays in an in-between state past its lease, no container
// is left behind, every accepted submission exists.
//
// `make test` runs every scenario at a small size; `make chaos` runs them at full size and
// writes the table of figures to .tmp/chaos/results.md. The scenarios are tests (the package
// holds nothing else); see chaos_test.go.
package chaos
