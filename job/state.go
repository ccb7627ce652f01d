package job

import (
	"fmt"
	"strings"
)

// Status is a job state. It marshals as its NAME ("RUNNING") and is read case-insensitively.
type Status string

// The job states of SPEC section 4, in lifecycle order.
const (
	StatusOnHold    Status = "ONHOLD"
	StatusQueued    Status = "QUEUED"
	StatusAssigned  Status = "ASSIGNED"
	StatusStarting  Status = "STARTING"
	StatusRunning   Status = "RUNNING"
	StatusMustHalt  Status = "MUSTHALT"
	StatusHalting   Status = "HALTING"
	StatusHalted    Status = "HALTED"
	StatusFinished  Status = "FINISHED"
	StatusFailed    Status = "FAILED"
	StatusCancelled Status = "CANCELLED"
	StatusDeleted   Status = "DELETED"
)

// AllStatuses lists every state in lifecycle order.
var AllStatuses = []Status{
	StatusOnHold, StatusQueued, StatusAssigned, StatusStarting, StatusRunning, StatusMustHalt,
	StatusHalting, StatusHalted, StatusFinished, StatusFailed, StatusCancelled, StatusDeleted,
}

// The state groups used by the list filters (`pending`, `running`, `finished`, `deleted`).
var (
	PendingStatuses  = []Status{StatusOnHold, StatusQueued}
	RunningStatuses  = []Status{StatusAssigned, StatusStarting, StatusRunning, StatusMustHalt, StatusHalting}
	FinishedStatuses = []Status{StatusFinished, StatusFailed, StatusCancelled, StatusHalted}
	DeletedStatuses  = []Status{StatusDeleted}
)

// ParseStatus reads a state name case-insensitively ("running", "Running", "RUNNING").
func ParseStatus(s string) (Status, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	for _, st := range AllStatuses {
		if string(st) == t {
			return st, nil
		}
	}
	return "", fmt.Errorf("unknown job state %q (one of %s)", s, joinStatuses(AllStatuses))
}

// Ended reports whether a job in this state will never run again: it may only be deleted.
func (s Status) Ended() bool {
	switch s {
	case StatusFinished, StatusFailed, StatusCancelled, StatusHalted, StatusDeleted:
		return true
	}
	return false
}

// Actor is who asks for a state change. The transition table says who may do what, so the
// API cannot let an owner do what only a slave should.
type Actor string

// The actors of SPEC section 4.
const (
	ActorOwner     Actor = "owner"     // the job's owner (or an admin acting as one)
	ActorAdmin     Actor = "admin"     // an admin
	ActorScheduler Actor = "scheduler" // the master's scheduler and housekeeping
	ActorSlave     Actor = "slave"     // the slave the job is assigned to
)

// Transition is one allowed state change and who may make it.
type Transition struct {
	From, To Status
	By       []Actor
}

// Transitions is the allowed-transition table of SPEC section 4. job/README.md draws it.
// Any change not listed here is refused, whoever asks.
var Transitions = []Transition{
	{StatusOnHold, StatusQueued, []Actor{ActorOwner, ActorAdmin}},
	{StatusQueued, StatusOnHold, []Actor{ActorOwner, ActorAdmin}},
	{StatusQueued, StatusAssigned, []Actor{ActorScheduler}},
	{StatusQueued, StatusFailed, []Actor{ActorScheduler}},
	{StatusAssigned, StatusStarting, []Actor{ActorSlave}},
	{StatusAssigned, StatusQueued, []Actor{ActorScheduler}},
	{StatusAssigned, StatusFailed, []Actor{ActorSlave, ActorScheduler}},
	{StatusStarting, StatusRunning, []Actor{ActorSlave}},
	{StatusStarting, StatusQueued, []Actor{ActorScheduler}},
	{StatusStarting, StatusFailed, []Actor{ActorSlave, ActorScheduler}},
	{StatusRunning, StatusFinished, []Actor{ActorSlave}},
	{StatusRunning, StatusFailed, []Actor{ActorSlave, ActorScheduler}},
	{StatusRunning, StatusMustHalt, []Actor{ActorScheduler, ActorAdmin, ActorOwner}},
	{StatusMustHalt, StatusHalting, []Actor{ActorSlave}},
	{StatusMustHalt, StatusFailed, []Actor{ActorSlave, ActorScheduler}},
	{StatusMustHalt, StatusFinished, []Actor{ActorSlave}},
	{StatusHalting, StatusHalted, []Actor{ActorSlave}},
	{StatusHalting, StatusFailed, []Actor{ActorSlave, ActorScheduler}},
	{StatusHalting, StatusFinished, []Actor{ActorSlave}},
	{StatusOnHold, StatusCancelled, []Actor{ActorOwner, ActorAdmin}},
	{StatusQueued, StatusCancelled, []Actor{ActorOwner, ActorAdmin}},
	{StatusAssigned, StatusCancelled, []Actor{ActorOwner, ActorAdmin, ActorScheduler}},
	{StatusStarting, StatusCancelled, []Actor{ActorOwner, ActorAdmin, ActorScheduler}},
	{StatusRunning, StatusCancelled, []Actor{ActorOwner, ActorAdmin, ActorScheduler}},
	{StatusMustHalt, StatusCancelled, []Actor{ActorOwner, ActorAdmin, ActorScheduler}},
	{StatusHalting, StatusCancelled, []Actor{ActorOwner, ActorAdmin, ActorScheduler}},
	{StatusFinished, StatusDeleted, []Actor{ActorOwner, ActorAdmin}},
	{StatusFailed, StatusDeleted, []Actor{ActorOwner, ActorAdmin}},
	{StatusCancelled, StatusDeleted, []Actor{ActorOwner, ActorAdmin}},
	{StatusHalted, StatusDeleted, []Actor{ActorOwner, ActorAdmin}},
}

// CanTransition reports whether actor may move a job from one state to another, and if not,
// a reason fit to show the user (it names both states).
func CanTransition(from, to Status, by Actor) (bool, string) {
	for _, t := range Transitions {
		if t.From != from || t.To != to {
			continue
		}
		for _, a := range t.By {
			if a == by {
				return true, ""
			}
		}
		return false, fmt.Sprintf("only %s may change a job from %s to %s", joinActors(t.By), from, to)
	}
	if from == to {
		return false, fmt.Sprintf("job is already %s", from)
	}
	if from.Ended() {
		return false, fmt.Sprintf("job is %s: an ended job cannot become %s", from, to)
	}
	return false, fmt.Sprintf("a %s job cannot become %s", from, to)
}

// SourcesOf lists the states from which actor may move a job to `to`. The store uses it to
// make a state write conditional on the state it leaves (`WHERE status = ANY(...)`).
func SourcesOf(to Status, by Actor) []Status {
	var out []Status
	for _, t := range Transitions {
		if t.To != to {
			continue
		}
		for _, a := range t.By {
			if a == by {
				out = append(out, t.From)
				break
			}
		}
	}
	return out
}

func joinStatuses(ss []Status) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = string(s)
	}
	return strings.Join(parts, ", ")
}

func joinActors(as []Actor) string {
	parts := make([]string, len(as))
	for i, a := range as {
		parts[i] = string(a)
	}
	return strings.Join(parts, " or ")
}
