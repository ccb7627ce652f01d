package main

import (
	"flag"
	"time"

	"github.com/opengpulab/gpulab/leader"
)

// idleFlags are the idle-GPU check's flags (issue 14).
type idleFlags struct {
	threshold   float64
	after       time.Duration
	action      string
	actionAfter time.Duration
}

func (f *idleFlags) addIdle(fs *flag.FlagSet, getenv func(string) string) {
	fs.Float64Var(&f.threshold, "idle-gpu-threshold", envFloat(getenv, "GPULAB_IDLE_GPU_THRESHOLD", 5),
		"a job's GPU averaging under this utilisation (percent) for --idle-gpu-after is idle (env GPULAB_IDLE_GPU_THRESHOLD)")
	fs.DurationVar(&f.after, "idle-gpu-after", envDuration(getenv, "GPULAB_IDLE_GPU_AFTER", time.Hour),
		"how long a GPU must stay under the threshold before its job is flagged idle and its owner warned; 0 turns the check off (env GPULAB_IDLE_GPU_AFTER)")
	fs.StringVar(&f.action, "idle-gpu-action", envOr(getenv, "GPULAB_IDLE_GPU_ACTION", leader.IdleActionNone),
		"what to do with a job whose GPUs all stayed idle for --idle-gpu-action-after: none, halt (restartable jobs only) or cancel (env GPULAB_IDLE_GPU_ACTION)")
	fs.DurationVar(&f.actionAfter, "idle-gpu-action-after", envDuration(getenv, "GPULAB_IDLE_GPU_ACTION_AFTER", 4*time.Hour),
		"how long all of a job's GPUs must stay idle before --idle-gpu-action is taken (env GPULAB_IDLE_GPU_ACTION_AFTER)")
}

// config is the scheduler's IdleConfig; its error names the flag at fault.
func (f *idleFlags) config() (leader.IdleConfig, error) {
	c := leader.IdleConfig{Threshold: f.threshold, After: f.after, Action: f.action, ActionAfter: f.actionAfter}
	return c, leader.ValidateIdle(c)
}
