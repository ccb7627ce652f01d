package protocol

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCleanReason(t *testing.T) {
	if got := CleanReason("pull failed"); got != "pull failed" {
		t.Errorf("CleanReason kept text = %q", got)
	}
	if got := CleanReason("a\x00b\xffc"); got != "ab\uFFFDc" {
		t.Errorf("CleanReason = %q", got)
	}
	long := CleanReason(strings.Repeat("é", MaxReasonBytes))
	if len(long) > MaxReasonBytes || !utf8.ValidString(long) || !strings.HasSuffix(long, "…") {
		t.Errorf("long reason: %d bytes, valid %v", len(long), utf8.ValidString(long))
	}
}
