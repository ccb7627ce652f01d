package leader

import (
	"reflect"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/opengpulab/gpulab/store"
)

func TestJudgeIdle(t *testing.T) {
	cfg := IdleConfig{Threshold: 5, After: time.Hour, Action: IdleActionCancel, ActionAfter: 4 * time.Hour}
	row := func(id string, gpu int, avg, actionAvg float64, mut ...func(*store.IdleGPURow)) store.IdleGPURow {
		r := store.IdleGPURow{JobUUID: id, GPU: gpu, Avg: avg, ActionAvg: actionAvg, RunningS: 2 * 3600, Secs: 3600, SlaveName: "s1"}
		for _, m := range mut {
			m(&r)
		}
		return r
	}
	flagged := func(gpus ...int64) func(*store.IdleGPURow) {
		return func(r *store.IdleGPURow) { r.IsFlagged, r.Flagged = true, pq.Int64Array(gpus) }
	}
	long := func(r *store.IdleGPURow) { r.RunningS = 5 * 3600 }
	tests := []struct {
		name string
		cfg  IdleConfig
		rows []store.IdleGPURow
		want []IdleVerdict
	}{
		{name: "busy job: nothing", rows: []store.IdleGPURow{row("a", 0, 80, 80), row("a", 1, 50, 50)}},
		{name: "one idle GPU of two: flagged with an event", rows: []store.IdleGPURow{row("a", 0, 2, 2), row("a", 1, 85, 85)},
			want: []IdleVerdict{{JobUUID: "a", SlaveName: "s1", Flag: []int{0}, Event: true,
				Message: "GPU 0 under 5 % for 1 hour (averaged 2 %): the GPUs are idle"}}},
		{name: "already flagged: no second event", rows: []store.IdleGPURow{row("a", 0, 2, 2, flagged(0)), row("a", 1, 85, 85, flagged(0))}},
		{name: "busy again: cleared", rows: []store.IdleGPURow{row("a", 0, 40, 3, flagged(0))},
			want: []IdleVerdict{{JobUUID: "a", SlaveName: "s1", Clear: true}}},
		{name: "not running long enough", rows: []store.IdleGPURow{row("a", 0, 0, 0, func(r *store.IdleGPURow) { r.RunningS = 1800 })}},
		{name: "too few samples: never idle on no data", rows: []store.IdleGPURow{row("a", 0, 0, 0, func(r *store.IdleGPURow) { r.Secs = 600 })}},
		{name: "no sample in the window", rows: []store.IdleGPURow{row("a", 0, -1, -1)}},
		{name: "all idle for the action time: cancel", rows: []store.IdleGPURow{row("a", 0, 0, 0.5, flagged(0, 1), long), row("a", 1, 1, 1, flagged(0, 1), long)},
			want: []IdleVerdict{{JobUUID: "a", SlaveName: "s1", Action: IdleActionCancel}}},
		{name: "one GPU busy: no action", rows: []store.IdleGPURow{row("a", 0, 0, 0, flagged(0), long), row("a", 1, 90, 90, flagged(0), long)}},
		{name: "halt only restartable jobs", cfg: IdleConfig{Threshold: 5, After: time.Hour, Action: IdleActionHalt, ActionAfter: 4 * time.Hour},
			rows: []store.IdleGPURow{row("a", 0, 0, 0, flagged(0), long), row("b", 0, 0, 0, flagged(0), long, func(r *store.IdleGPURow) { r.Restartable = true })},
			want: []IdleVerdict{{JobUUID: "b", SlaveName: "s1", Action: IdleActionHalt}}},
		{name: "two jobs", rows: []store.IdleGPURow{row("a", 0, 3.25, 3), row("b", 0, 1, 1), row("b", 1, 4, 4)},
			want: []IdleVerdict{
				{JobUUID: "a", SlaveName: "s1", Flag: []int{0}, Event: true, Message: "GPU 0 under 5 % for 1 hour (averaged 3.2 %): the GPUs are idle"},
				{JobUUID: "b", SlaveName: "s1", Flag: []int{0, 1}, Event: true, Message: "GPU 0,1 under 5 % for 1 hour (averaged 2.5 %): the GPUs are idle"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cfg
			if tt.cfg.After != 0 {
				c = tt.cfg
			}
			if got := JudgeIdle(tt.rows, c); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestValidateIdle(t *testing.T) {
	for _, c := range []IdleConfig{
		{Threshold: 101, After: time.Hour},
		{Threshold: 5, After: -time.Second},
		{Threshold: 5, After: time.Hour, Action: "kill"},
		{Threshold: 5, After: time.Hour, Action: IdleActionCancel, ActionAfter: time.Minute},
	} {
		if ValidateIdle(c) == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if err := ValidateIdle(IdleConfig{Threshold: 5, After: time.Hour, Action: IdleActionHalt, ActionAfter: 4 * time.Hour}); err != nil {
		t.Error(err)
	}
}
