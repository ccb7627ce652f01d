// Package faults holds the building blocks of the chaos tests: tools that run a real master,
// real slaves, real Postgres and the real Docker Engine, break them in controlled ways, and
// record what happened so that a scenario can check its invariants afterwards.
//
//   - Proxy: a TCP proxy that passes, drops replies after the server did the work,
//     partitions (blackhole) or refuses, switchable at run time.
//   - SlowDocker: a Unix-socket proxy in front of the Docker Engine that delays requests.
//   - Postgres: a private, throwaway cluster a test can stop, crash and start again.
//   - Timeline: records job containers from the engine's event stream and checks, after the
//     fact, that no two held the same GPU (or any key) at the same time.
//   - Process: a built binary run as a child that can be killed, paused and restarted.
//
// Every tool is safe for concurrent use, holds no package-level state, and has a Close that
// t.Cleanup can call. See README.md for how a scenario combines them.
package faults
