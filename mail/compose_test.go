package mail

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
)

func TestCategoryOf(t *testing.T) {
	for _, c := range []struct {
		kind, from, to string
		restarts       int
		want           Category
	}{
		{"status", "", "QUEUED", 0, Queue},
		{"status", "ONHOLD", "QUEUED", 0, Queue},
		{"status", "ASSIGNED", "QUEUED", 0, ""}, // back to the queue after a lost assignment
		{"status", "", "QUEUED", 1, Restart},
		{"status", "STARTING", "RUNNING", 0, Run},
		{"status", "RUNNING", "FINISHED", 0, End},
		{"status", "RUNNING", "FAILED", 0, End},
		{"status", "QUEUED", "CANCELLED", 0, End},
		{"status", "HALTING", "HALTED", 0, Halt},
		{"status", "RUNNING", "MUSTHALT", 0, ""},
		{"status", "", "ONHOLD", 0, ""},
		{"idle-gpu", "", "", 0, Idle},
		{"reminder", "", "", 0, Reminder},
		{"info", "", "", 0, ""},
	} {
		if got := CategoryOf(c.kind, c.from, c.to, c.restarts); got != c.want {
			t.Errorf("CategoryOf(%q, %q, %q, %d) = %q, want %q", c.kind, c.from, c.to, c.restarts, got, c.want)
		}
	}
}

func TestRecipients(t *testing.T) {
	extra := job.Extra{EmailOnEnd: []string{"a@example.org", "A@example.org", "not an address", " b@example.org "}, EmailOnRun: []string{"c@example.org"}}
	if got := Recipients(End, extra, "owner@example.org"); !slices.Equal(got, []string{"a@example.org", "b@example.org"}) {
		t.Errorf("end recipients: %v", got)
	}
	if got := Recipients(Queue, extra, "owner@example.org"); len(got) != 0 {
		t.Errorf("queue recipients without a list: %v", got)
	}
	if got := Recipients(Idle, extra, "owner@example.org"); !slices.Equal(got, []string{"owner@example.org"}) {
		t.Errorf("idle recipients: %v", got)
	}
	if got := Recipients(Reminder, extra, ""); len(got) != 0 {
		t.Errorf("reminder to an owner without an address: %v", got)
	}
}

func TestTextNamesJobStateReasonProjectAndLink(t *testing.T) {
	ev := store.MailEvent{Kind: "status", FromStatus: "RUNNING", ToStatus: "FAILED", Message: "exit code 3", At: time.Now(),
		JobUUID: "0123456789ab-cdef", JobName: "train", Project: "vision", Owner: "alice"}
	subject, body := Text(End, ev, "https://gpulab.example.org/")
	for _, want := range []string{"train", "01234567", "FAILED"} {
		if !strings.Contains(subject, want) {
			t.Errorf("subject %q lacks %q", subject, want)
		}
	}
	for _, want := range []string{"0123456789ab-cdef", "State:   FAILED", "Project: vision", "Reason:  exit code 3",
		"https://gpulab.example.org/jobs/0123456789ab-cdef", "emailOnEnd"} {
		if !strings.Contains(body, want) {
			t.Errorf("body lacks %q:\n%s", want, body)
		}
	}
}
