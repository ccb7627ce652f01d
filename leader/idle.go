package leader

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
)

// Idle-GPU actions (--idle-gpu-action).
const (
	IdleActionNone   = "none"
	IdleActionHalt   = "halt"   // restartable jobs only: halted, then restarted by the queue
	IdleActionCancel = "cancel" // any job
)

// EventIdleGPU is the kind of the event a job gets when its GPUs are found idle (one per idle
// episode); the mail outbox sends its owner the warning on it.
const EventIdleGPU = "idle-gpu"

// IdleConfig is the idle-GPU check (issue 14): a RUNNING job with a GPU that averaged under
// Threshold percent over the last After is flagged (event EventIdleGPU, the job's idle flag);
// when all of its GPUs stayed under it for ActionAfter, Action is taken. A zero After turns the
// check off.
type IdleConfig struct {
	Threshold   float64
	After       time.Duration
	Action      string // IdleActionNone, IdleActionHalt or IdleActionCancel
	ActionAfter time.Duration
}

// ValidateIdle checks an IdleConfig as the master's flags give it; errors name the flag.
func ValidateIdle(c IdleConfig) error {
	switch {
	case c.Threshold < 0 || c.Threshold > 100:
		return fmt.Errorf("--idle-gpu-threshold: %v is not a percentage (0 to 100)", c.Threshold)
	case c.After < 0:
		return fmt.Errorf("--idle-gpu-after: %s is negative", c.After)
	case !slices.Contains([]string{"", IdleActionNone, IdleActionHalt, IdleActionCancel}, c.Action):
		return fmt.Errorf("--idle-gpu-action: %q is not none, halt or cancel", c.Action)
	case c.Action != "" && c.Action != IdleActionNone && c.ActionAfter < c.After:
		return fmt.Errorf("--idle-gpu-action-after: %s is shorter than --idle-gpu-after (%s)", c.ActionAfter, c.After)
	}
	return nil
}

// UsageFlush is how long the master may sum a job's usage samples before writing them
// (store.SetUsageFlush), given the configured interval and the idle check: the check averages
// the rows written over its window and judges a job only when they cover half of it, so a row
// may stand for at most a quarter of the window.
func UsageFlush(configured time.Duration, c IdleConfig) time.Duration {
	if c.After > 0 && c.After/4 < configured {
		return c.After / 4
	}
	return configured
}

// IdleVerdict is what the idle check does to one job.
type IdleVerdict struct {
	JobUUID   string
	Attempt   int
	SlaveName string
	// Flag are the idle GPUs to flag; Event says they start an idle episode (the job was not
	// flagged): the job gets the EventIdleGPU event with Message.
	Flag    []int
	Event   bool
	Message string
	// Clear says the job was flagged and none of its GPUs is idle any more.
	Clear bool
	// Action is the action to take now (halt or cancel), "" for none.
	Action string
}

// JudgeIdle decides, from each running job's per-GPU averages (rows ordered by job), which jobs
// to flag, clear or act on. A job is judged only once it has run for cfg.After and its samples
// cover at least half of that window: a job without samples (a slave that cannot read its GPUs)
// is never called idle.
func JudgeIdle(rows []store.IdleGPURow, cfg IdleConfig) []IdleVerdict {
	var out []IdleVerdict
	for len(rows) > 0 {
		n := 1
		for n < len(rows) && rows[n].JobUUID == rows[0].JobUUID {
			n++
		}
		if v, ok := judgeJob(rows[:n], cfg); ok {
			out = append(out, v)
		}
		rows = rows[n:]
	}
	return out
}

func judgeJob(gpus []store.IdleGPURow, cfg IdleConfig) (IdleVerdict, bool) {
	j := gpus[0]
	v := IdleVerdict{JobUUID: j.JobUUID, Attempt: j.Attempt, SlaveName: j.SlaveName}
	if j.RunningS < cfg.After.Seconds() || j.Secs < cfg.After.Seconds()/2 {
		return v, false
	}
	var idle []int
	var sum float64
	allIdleLong := j.RunningS >= cfg.ActionAfter.Seconds()
	for _, g := range gpus {
		if g.Avg >= 0 && g.Avg < cfg.Threshold {
			idle = append(idle, g.GPU)
			sum += g.Avg
		}
		if g.ActionAvg < 0 || g.ActionAvg >= cfg.Threshold {
			allIdleLong = false
		}
	}
	flagged := make([]int, len(j.Flagged))
	for i, g := range j.Flagged {
		flagged[i] = int(g)
	}
	switch {
	case len(idle) == 0 && !j.IsFlagged:
		return v, false
	case len(idle) == 0:
		v.Clear = true
		return v, true
	}
	if !j.IsFlagged || !slices.Equal(idle, flagged) {
		v.Flag = idle
	}
	if !j.IsFlagged {
		v.Event = true
		v.Message = IdleMessage(idle, cfg.Threshold, cfg.After, sum/float64(len(idle)))
	}
	if len(idle) == len(gpus) && allIdleLong {
		switch {
		case cfg.Action == IdleActionCancel, cfg.Action == IdleActionHalt && j.Restartable:
			v.Action = cfg.Action
		}
	}
	return v, v.Flag != nil || v.Action != ""
}

// IdleMessage is the idle-gpu event's text: "GPU 0,1 under 5 % for 1 hour (averaged 2 %): the
// GPUs are idle".
func IdleMessage(gpus []int, threshold float64, after time.Duration, avg float64) string {
	ids := make([]string, len(gpus))
	for i, g := range gpus {
		ids[i] = strconv.Itoa(g)
	}
	return fmt.Sprintf("GPU %s under %s %% for %s (averaged %s %%): the GPUs are idle", strings.Join(ids, ","),
		pct(threshold), job.FormatDuration(after.Round(time.Second)), pct(avg))
}

// pct writes a percentage without needless decimals.
func pct(v float64) string {
	if v == math.Trunc(v) || v >= 10 {
		return strconv.FormatFloat(math.Round(v), 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// idleGPUs runs the idle check as part of the housekeeping (in the leader's transaction): it
// flags and clears jobs, adds their events and takes the configured action through act.
func (l *Loop) idleGPUs(ctx context.Context, tx *store.Store, act func(store.LiveJob, store.Change, string) error) error {
	cfg := l.cfg.Idle
	rows, err := tx.IdleGPUCandidates(ctx, cfg.After, max(cfg.ActionAfter, cfg.After))
	if err != nil {
		return err
	}
	for _, v := range JudgeIdle(rows, cfg) {
		if v.Clear {
			if err := tx.SetIdleGPUs(ctx, v.JobUUID, nil); err != nil {
				return err
			}
			if err := tx.AddJobEvent(ctx, store.Event{JobUUID: v.JobUUID, Kind: store.EventInfo, Actor: string(job.ActorScheduler),
				Message: "the GPUs are in use again"}); err != nil {
				return err
			}
			continue
		}
		if v.Flag != nil {
			if err := tx.SetIdleGPUs(ctx, v.JobUUID, v.Flag); err != nil {
				return err
			}
		}
		if v.Event {
			if err := tx.AddJobEvent(ctx, store.Event{JobUUID: v.JobUUID, Kind: EventIdleGPU, Actor: string(job.ActorScheduler),
				Message: v.Message}); err != nil {
				return err
			}
			l.log.Info("idle GPUs", "job", v.JobUUID, "slave", v.SlaveName, "message", v.Message)
		}
		if v.Action == "" {
			continue
		}
		lj := store.LiveJob{UUID: v.JobUUID, Status: job.StatusRunning, Attempt: v.Attempt, SlaveName: v.SlaveName}
		why := fmt.Sprintf("the GPUs stayed idle (under %s %%) for %s", pct(cfg.Threshold), job.FormatDuration(cfg.ActionAfter.Round(time.Second)))
		var ch store.Change
		if v.Action == IdleActionHalt {
			ch = store.Change{To: job.StatusMustHalt, Event: store.Event{Message: "halt: " + why}}
		} else {
			ch = store.Change{To: job.StatusCancelled, Event: store.Event{Message: "cancelled: " + why}}
		}
		if err := act(lj, ch, "idle GPUs: "+v.Action); err != nil && !errors.Is(err, store.ErrStateConflict) {
			return err
		}
	}
	return nil
}
