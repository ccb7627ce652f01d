// Package mail sends the job mails of SPEC 10: the request.extra emailOn* lists (queued,
// running, ended, halted, restarted), the long-running reminder and the idle-GPU warning.
//
// Mails are never sent from the code that changes a job. A database trigger queues each job
// event that may cause a mail (migrations/0012_mail.sql) in the transaction that adds the event;
// the Service of any master with SMTP configured turns queued events into outbox rows
// (Compose, pure), and sends the outbox with retries and a lease on the database clock
// (store.ClaimMails), so a mail survives an SMTP outage and a master restart, and two masters
// never send it twice.
package mail

import (
	"fmt"
	"net/mail"
	"slices"
	"strings"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
)

// IdleGPUEvent is the kind of the job event the idle-GPU detection adds when a job's GPUs
// stayed idle; its owner gets a warning (the database trigger of migrations/0012_mail.sql
// queues it under this name).
const IdleGPUEvent = "idle-gpu"

// Category is a kind of mail; users turn categories off on their Profile.
type Category string

// The mail categories.
const (
	Queue    Category = "queue"
	Run      Category = "run"
	End      Category = "end"
	Halt     Category = "halt"
	Restart  Category = "restart"
	Reminder Category = "reminder"
	Idle     Category = "idle"
)

// Categories lists every category with the words the Profile page shows.
var Categories = []struct {
	Category Category
	Label    string
}{
	{Queue, "a job is queued (emailOnQueue)"},
	{Run, "a job starts running (emailOnRun)"},
	{End, "a job ends: finished, failed or cancelled (emailOnEnd)"},
	{Halt, "a job is halted (emailOnHalt)"},
	{Restart, "a halted job is restarted (emailOnRestart)"},
	{Reminder, "a job runs past most of its maxDuration"},
	{Idle, "a job's GPUs stay idle"},
}

// ValidCategory reports whether c names a category.
func ValidCategory(c string) bool {
	return slices.ContainsFunc(Categories, func(x struct {
		Category Category
		Label    string
	}) bool {
		return string(x.Category) == c
	})
}

// CategoryOf is the category of a job event ("" for none). A job is "queued" when submitted
// or released from hold, not when it goes back to the queue after a lost assignment (that
// would mail on every scheduling hiccup); the first QUEUED of a restart job is its restart.
func CategoryOf(kind, from, to string, restartCount int) Category {
	switch kind {
	case IdleGPUEvent:
		return Idle
	case store.EventReminder:
		return Reminder
	case store.EventStatus:
	default:
		return ""
	}
	switch job.Status(to) {
	case job.StatusQueued:
		switch {
		case from == "" && restartCount > 0:
			return Restart
		case from == "" || job.Status(from) == job.StatusOnHold:
			return Queue
		}
	case job.StatusRunning:
		return Run
	case job.StatusHalted:
		return Halt
	case job.StatusFinished, job.StatusFailed, job.StatusCancelled:
		return End
	}
	return ""
}

// Recipients are the addresses a mail of category c about a job goes to: the job's emailOn*
// list of c, or its owner for reminders and idle-GPU warnings; each address once
// (case-insensitively), invalid ones left out.
func Recipients(c Category, extra job.Extra, owner string) []string {
	var list []string
	switch c {
	case Queue:
		list = extra.EmailOnQueue
	case Run:
		list = extra.EmailOnRun
	case End:
		list = extra.EmailOnEnd
	case Halt:
		list = extra.EmailOnHalt
	case Restart:
		list = extra.EmailOnRestart
	case Reminder, Idle:
		list = []string{owner}
	}
	var out []string
	for _, a := range list {
		a = strings.TrimSpace(a)
		if addr, err := mail.ParseAddress(a); err != nil || addr.Address != a {
			continue
		}
		if !slices.ContainsFunc(out, func(b string) bool { return strings.EqualFold(a, b) }) {
			out = append(out, a)
		}
	}
	return out
}

// Compose makes the outbox mails of queued events; publicURL is the portal's root for links.
func Compose(evs []store.MailEvent, publicURL string) []store.OutMail {
	var out []store.OutMail
	for _, ev := range evs {
		c := CategoryOf(ev.Kind, ev.FromStatus, ev.ToStatus, ev.RestartCount)
		if c == "" {
			continue
		}
		subject, body := Text(c, ev, publicURL)
		for _, r := range Recipients(c, ev.Extra, ev.OwnerEmail) {
			out = append(out, store.OutMail{EventID: ev.EventID, JobUUID: ev.JobUUID, Category: string(c), Recipient: r, Subject: subject, Body: body})
		}
	}
	return out
}

// JobURL is the job's page in the portal.
func JobURL(publicURL, uuid string) string {
	return strings.TrimRight(publicURL, "/") + "/jobs/" + uuid
}

// Text is the subject and plain-text body of a mail: it names the job (name and short id),
// its state, the reason (the event's message), the project, and links to the job page.
func Text(c Category, ev store.MailEvent, publicURL string) (subject, body string) {
	short := ev.JobUUID
	if len(short) > 8 {
		short = short[:8]
	}
	state := ev.ToStatus
	if state == "" {
		state = ev.JobStatus
	}
	var what string
	switch c {
	case Queue:
		what = "is queued"
	case Run:
		what = "is running"
	case End:
		what = "ended " + state
	case Halt:
		what = "was halted"
	case Restart:
		what = "was restarted"
	case Reminder:
		what = "is running long"
	case Idle:
		what = "is not using its GPUs"
	}
	subject = fmt.Sprintf("[GPULab] Job %s (%s) %s", ev.JobName, short, what)
	var b strings.Builder
	fmt.Fprintf(&b, "Job %q (%s) %s.\n\n", ev.JobName, short, what)
	fmt.Fprintf(&b, "Job:     %s\n", ev.JobUUID)
	fmt.Fprintf(&b, "State:   %s\n", state)
	fmt.Fprintf(&b, "Project: %s\n", ev.Project)
	fmt.Fprintf(&b, "Owner:   %s\n", ev.Owner)
	fmt.Fprintf(&b, "When:    %s\n", ev.At.UTC().Format("2006-01-02 15:04:05 UTC"))
	if ev.Message != "" {
		fmt.Fprintf(&b, "Reason:  %s\n", ev.Message)
	}
	if publicURL != "" {
		fmt.Fprintf(&b, "\nJob page: %s\n", JobURL(publicURL, ev.JobUUID))
	}
	fmt.Fprintf(&b, "\nYou get this mail %s. Turn these mails off on your Profile page.\n", reasonFor(c))
	return subject, b.String()
}

func reasonFor(c Category) string {
	switch c {
	case Queue:
		return "because this address is in the job's emailOnQueue list"
	case Run:
		return "because this address is in the job's emailOnRun list"
	case End:
		return "because this address is in the job's emailOnEnd list"
	case Halt:
		return "because this address is in the job's emailOnHalt list"
	case Restart:
		return "because this address is in the job's emailOnRestart list"
	}
	return "as the job's owner"
}
