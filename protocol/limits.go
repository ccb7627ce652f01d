package protocol

import (
	"strings"
	"unicode/utf8"
)

// Limits the master enforces on what slaves send (README "Limits"): a message beyond one is
// refused with 400 naming the field. The client keeps its own messages within them.
const (
	// MaxHeartbeatJobs bounds the jobs of a heartbeat, a long poll or a registration.
	MaxHeartbeatJobs = 1000
	// MaxInventoryGPUs bounds the GPUs of an inventory (indexes 0 to MaxInventoryGPUs-1).
	MaxInventoryGPUs = 64
	// MaxReasonBytes bounds the free text of a state change or a completion.
	MaxReasonBytes = 4 << 10
	// MaxLogChunk bounds the data of one log chunk.
	MaxLogChunk = 1 << 20
)

// CleanReason makes a free text acceptable to the master: NUL characters removed, invalid
// UTF-8 replaced, cut at MaxReasonBytes on a character boundary. A reason comes from Docker's
// error messages, and a job must not lose its outcome over the text that explains it.
func CleanReason(s string) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
	if len(s) <= MaxReasonBytes {
		return s
	}
	const more = "…"
	cut := MaxReasonBytes - len(more)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + more
}
