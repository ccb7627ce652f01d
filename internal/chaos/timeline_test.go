package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
)

// span is the life of one job container, from the engine's events: when it started and died,
// the job, attempt and slave of its labels, and the GPUs it was given.
type span struct {
	id, job, slave, attempt string
	gpus                    []string
	start, end              time.Time // end zero: still running
}

// timeline records the containers of the scenario's slaves from the Docker Engine's event
// stream (not by polling: a short job's container must not be missed).
type timeline struct {
	docker *client.Client
	prefix string // slave names start with it
	mu     sync.Mutex
	spans  map[string]*span
	errs   []string
}

func watchContainers(t *testing.T, docker *client.Client, prefix string) *timeline {
	t.Helper()
	tl := &timeline{docker: docker, prefix: prefix, spans: map[string]*span{}}
	ctx, cancel := context.WithCancel(context.Background())
	msgs, errs := docker.Events(ctx, events.ListOptions{Filters: filters.NewArgs(filters.Arg("type", "container"))})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case m := <-msgs:
				tl.event(ctx, m)
			case err := <-errs:
				if ctx.Err() == nil {
					tl.mu.Lock()
					tl.errs = append(tl.errs, "event stream: "+err.Error())
					tl.mu.Unlock()
				}
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return tl
}

func (tl *timeline) event(ctx context.Context, m events.Message) {
	slave := m.Actor.Attributes["gpulab.slave"]
	if !strings.HasPrefix(slave, tl.prefix) {
		return
	}
	at := time.Unix(0, m.TimeNano)
	id := m.Actor.ID
	switch m.Action {
	case events.ActionStart:
		s := &span{id: id, job: m.Actor.Attributes["gpulab.job"], slave: slave, attempt: m.Actor.Attributes["gpulab.attempt"], start: at}
		if info, err := tl.docker.ContainerInspect(ctx, id); err == nil && info.Config != nil {
			for _, e := range info.Config.Env {
				if v, ok := strings.CutPrefix(e, "NVIDIA_VISIBLE_DEVICES="); ok && v != "" && v != "void" && v != "none" {
					s.gpus = strings.Split(v, ",")
				}
			}
		}
		tl.mu.Lock()
		tl.spans[id] = s
		tl.mu.Unlock()
	case events.ActionDie:
		tl.mu.Lock()
		if s := tl.spans[id]; s != nil && s.end.IsZero() {
			s.end = at
		}
		tl.mu.Unlock()
	}
}

func (tl *timeline) all() []span {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	out := make([]span, 0, len(tl.spans))
	for _, s := range tl.spans {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b span) int { return a.start.Compare(b.start) })
	return out
}

// overlaps lists the pairs of containers alive at the same time that share a key (keys gives
// each container's keys, e.g. its slave's GPUs, or its job's lineage).
func (tl *timeline) overlaps(keys func(span) []string) []string {
	by := map[string][]span{}
	for _, s := range tl.all() {
		for _, k := range keys(s) {
			by[k] = append(by[k], s)
		}
	}
	var out []string
	for k, ss := range by {
		for i := range ss {
			for j := i + 1; j < len(ss); j++ {
				a, b := ss[i], ss[j]
				aEnd, bEnd := a.end, b.end
				if aEnd.IsZero() {
					aEnd = time.Now().Add(time.Hour)
				}
				if bEnd.IsZero() {
					bEnd = time.Now().Add(time.Hour)
				}
				if a.start.Before(bEnd) && b.start.Before(aEnd) {
					out = append(out, fmt.Sprintf("%s: container of job %s (attempt %s, slave %s, %s–%s) and of job %s (attempt %s, slave %s, %s–%s)",
						k, a.job, a.attempt, a.slave, a.start.Format("15:04:05.000"), fmtEnd(a.end),
						b.job, b.attempt, b.slave, b.start.Format("15:04:05.000"), fmtEnd(b.end)))
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

func fmtEnd(t time.Time) string {
	if t.IsZero() {
		return "alive"
	}
	return t.Format("15:04:05.000")
}

// gpuKeys are a container's GPUs, each named with its slave (fake GPUs of two slaves share
// UUIDs).
func gpuKeys(s span) []string {
	out := make([]string, len(s.gpus))
	for i, g := range s.gpus {
		out[i] = s.slave + "/" + g
	}
	return out
}

// leftovers lists the containers of the scenario's slaves still on the engine.
func (tl *timeline) leftovers(ctx context.Context) ([]string, error) {
	cs, err := tl.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "gpulab.job"))})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range cs {
		if strings.HasPrefix(c.Labels["gpulab.slave"], tl.prefix) {
			out = append(out, fmt.Sprintf("%s (job %s, %s)", c.Names, c.Labels["gpulab.job"], c.State))
		}
	}
	return out, nil
}

// removeAll removes the scenario's containers (cleanup after a failed scenario).
func (tl *timeline) removeAll() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := tl.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "gpulab.job"))})
	if err != nil {
		return
	}
	for _, c := range cs {
		if strings.HasPrefix(c.Labels["gpulab.slave"], tl.prefix) {
			_ = tl.docker.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
		}
	}
}
