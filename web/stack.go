package web

import (
	"net/http"

	"github.com/opengpulab/gpulab/protocol"
)

// growStacks grows the stack of each HTTP/2 request's goroutine once, at its start, to what a
// request of the slave protocol needs (growStack), except a long poll's.
//
// HTTP/2 runs every request in a goroutine of its own, which starts with a small stack and
// grows it by doubling, each time copying the stack with every frame on it and adjusting
// them: a heartbeat grew its stack at its deepest, checking its body's JSON (job.CheckJSON)
// below the dozen frames of the middleware and the server, two or three times over. That was
// 1.9–2.9 % of the master's CPU in B8x's soak at 2,000 slaves (runtime.newstack, 0.5–0.9 s a
// minute, 30 Nov). Grown here, a stack is copied once, with a few frames on it: newstack took
// 0.33 s a minute, the long polls' included (1 Dec; BenchmarkGrowStacks shows it in small).
// HTTP/1.1 requests run in their connection's goroutine, grown by its first request.
//
// A long poll (the slave's next) waits up to half a minute with its goroutine parked, one for
// each slave: its stack keeps the size it needs.
func growStacks(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && r.URL.Path != protocol.NextPath {
			growStack()
		}
		next.ServeHTTP(w, r)
	})
}

// growStack has a frame of 8 KiB, for which the runtime grows a goroutine's stack at once to
// 16 KiB (the largest size it keeps per processor for reuse) when it is smaller.
//
//go:noinline
func growStack() {
	var frame [8 << 10]byte
	keepFrame(frame[:])
}

// keepFrame keeps growStack's frame from being optimised away.
//
//go:noinline
func keepFrame(b []byte) { _ = b }
