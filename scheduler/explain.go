package scheduler

import (
	"fmt"
	"strings"
	"time"

	"github.com/opengpulab/gpulab/job"
)

// miss is a slave that failed a filter for a job, and how.
type miss struct {
	st *slaveState
	v  verdict
}

// closest is the slave that came nearest to taking the job: it failed the latest filter, with
// the most of what that filter counts; ties go to the first slave (by name).
func closest(ms []miss) miss {
	best := ms[0]
	for _, m := range ms[1:] {
		if m.v.stage > best.v.stage || m.v.stage == best.v.stage && m.v.amount > best.v.amount {
			best = m
		}
	}
	return best
}

// tied counts the slaves of ms as close as c (same stage, same amount).
func tied(c miss, ms []miss) int {
	n := 0
	for _, m := range ms {
		if m.v.stage == c.v.stage && m.v.amount == c.v.amount {
			n++
		}
	}
	return n
}

// hidden says whether a slave that failed an earlier filter has more of what the closest miss
// lacks (CPUs or memory), so that "at most N" must say where it holds. It returns the phrase
// naming what does fit there, or "".
func hidden(n *need, c miss, ms []miss, free bool) string {
	for _, m := range ms {
		if m.v.stage >= c.v.stage {
			continue
		}
		switch {
		case c.v.stage == stageCPU && m.st.cpus(free) > c.v.amount:
			return "the GPUs fit"
		case c.v.stage == stageMemory && m.st.memory(free) > c.v.amount:
			if n.gpus > 0 {
				return "the GPUs and CPUs fit"
			}
			return "the CPUs fit"
		}
	}
	return ""
}

// impossible is the failure reason for a job that no slave in its scope could take even if
// nothing else ran. pinned means the scope is the one slave the job names.
func impossible(n *need, clusterID int, pinned bool, ms []miss) string {
	c := closest(ms)
	name, amt := c.st.s.Name, c.v.amount
	if pinned {
		s := "slave " + name + " does not have "
		switch c.v.stage {
		case stageCUDA:
			return s + fmt.Sprintf("CUDA ≥ %d (it has %s)", n.cuda, cudaName(amt))
		case stageGPU:
			if amt == 0 {
				return s + "a GPU" + gpuWhat(n)
			}
			return s + fmt.Sprintf("%s (it has %d)", plural(n.gpus, "GPU")+gpuWhat(n), amt)
		case stageCPU:
			return s + fmt.Sprintf("%s (it has %d)", plural(n.cpus, "CPU"), amt)
		default:
			return s + fmt.Sprintf("%d GB memory (it has %d GB)", n.memGb, amt)
		}
	}
	s := "no slave"
	if clusterID != 0 {
		s += fmt.Sprintf(" in cluster %d", clusterID)
	}
	s += " has "
	most := "the most is"
	if where := hidden(n, c, ms, false); where != "" {
		most = "the most where " + where + " is"
	}
	switch c.v.stage {
	case stageCUDA:
		if amt == 0 {
			return s + fmt.Sprintf("CUDA ≥ %d (none has CUDA)", n.cuda)
		}
		return s + fmt.Sprintf("CUDA ≥ %d (the newest is CUDA %d on %s)", n.cuda, amt, name)
	case stageGPU:
		if amt == 0 {
			return s + "a GPU" + gpuWhat(n)
		}
		return s + fmt.Sprintf("%s%s (the most is %d on %s)", plural(n.gpus, "GPU"), gpuWhat(n), amt, name)
	case stageCPU:
		return s + fmt.Sprintf("%s (%s %d on %s)", plural(n.cpus, "CPU"), most, amt, name)
	default:
		return s + fmt.Sprintf("%d GB memory (%s %d GB on %s)", n.memGb, most, amt, name)
	}
}

// waiting explains why a job that some slave could take fits on none now: the blocker of the
// closest online accepting slave, then the matching slaves that are offline or draining.
func waiting(n *need, pinned bool, ms []miss, offline, draining []*slaveState) []string {
	if len(ms) == 0 {
		return []string{unavailable(pinned, offline, draining)}
	}
	var lines []string
	c := closest(ms)
	name, amt := c.st.s.Name, c.v.amount
	where := ""
	if w := hidden(n, c, ms, true); w != "" {
		where = " where " + w
	}
	switch c.v.stage {
	case stageGPU:
		matching := ""
		if gpuWhat(n) != "" {
			matching = "matching "
		}
		need := "needs " + plural(n.gpus, "GPU") + gpuWhat(n)
		switch {
		case amt > 0 && tied(c, ms) > 1:
			// Several slaves have that many free: which one is named first changes as GPUs come
			// and go, and a text naming it changed at nearly every pass for every such job (at
			// 5,000 slaves, ~20,000 explanations and events written a pass). The words are those
			// of a single slave, the details in parentheses, so that a job's reason reads the
			// same when one slave or several have the most (the leader writes details less often).
			lines = append(lines, fmt.Sprintf("%s, at most %d free on a %sslave (%d slaves have %d)", need, amt, matching, tied(c, ms), amt))
		case amt > 0:
			lines = append(lines, fmt.Sprintf("%s, at most %d free on a %sslave (%s)", need, amt, matching, name))
		case len(ms) == 1:
			lines = append(lines, fmt.Sprintf("%s, none free (%s)", need, name))
		default:
			lines = append(lines, fmt.Sprintf("%s, none free on the %d %sslaves", need, len(ms), matching))
		}
	case stageCPU:
		lines = append(lines, fmt.Sprintf("needs %s, %s%s (%s)", plural(n.cpus, "CPU"), atMost(amt, ""), where, name))
	default: // stageMemory: CUDA is a property of the slave, checked on its totals already
		lines = append(lines, fmt.Sprintf("needs %d GB memory, %s%s (%s)", n.memGb, atMost(amt, " GB"), where, name))
	}
	if len(offline) > 0 {
		lines = append(lines, fmt.Sprintf("%s offline (%s)", more(len(offline)), names(offline)))
	}
	if len(draining) > 0 {
		lines = append(lines, fmt.Sprintf("%s draining (%s)", more(len(draining)), names(draining)))
	}
	return lines
}

// unavailable explains a job whose matching slaves are all offline or draining.
func unavailable(pinned bool, offline, draining []*slaveState) string {
	switch {
	case len(draining) == 0 && len(offline) == 1 && pinned:
		return fmt.Sprintf("slave %s is offline", offline[0].s.Name)
	case len(draining) == 0 && len(offline) == 1:
		return fmt.Sprintf("the only matching slave, %s, is offline", offline[0].s.Name)
	case len(draining) == 0:
		return fmt.Sprintf("all %d matching slaves are offline", len(offline))
	case len(offline) == 0 && len(draining) == 1:
		return fmt.Sprintf("slave %s does not accept jobs (draining)", draining[0].s.Name)
	case len(offline) == 0:
		return fmt.Sprintf("all %d matching slaves do not accept jobs (draining)", len(draining))
	}
	return fmt.Sprintf("all %d matching slaves are offline (%d) or draining (%d)",
		len(offline)+len(draining), len(offline), len(draining))
}

// gpuWhat is what each GPU must be: " matching V100 or A100 with ≥ 40 GB memory and CUDA ≥ 11".
func gpuWhat(n *need) string {
	s := ""
	if len(n.models) > 0 {
		s = " matching " + strings.Join(n.models, " or ")
	}
	var with []string
	if n.gpuMemGb > 0 {
		with = append(with, fmt.Sprintf("≥ %d GB memory", n.gpuMemGb))
	}
	if n.cuda > 0 {
		with = append(with, fmt.Sprintf("CUDA ≥ %d", n.cuda))
	}
	if len(with) > 0 {
		s += " with " + strings.Join(with, " and ")
	}
	return s
}

func plural(k int, what string) string {
	if k == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", k, what)
}

func atMost(k int, unit string) string {
	if k <= 0 {
		return "none free"
	}
	return fmt.Sprintf("at most %d%s free", k, unit)
}

func more(k int) string {
	if k == 1 {
		return "1 more matching slave is"
	}
	return fmt.Sprintf("%d more matching slaves are", k)
}

// names lists up to three slave names, so that a line stays short on a large cluster.
func names(sts []*slaveState) string {
	var out []string
	for i, st := range sts {
		if i == 3 {
			out = append(out, fmt.Sprintf("and %d more", len(sts)-3))
			break
		}
		out = append(out, st.s.Name)
	}
	return strings.Join(out, ", ")
}

func cudaName(major int) string {
	if major <= 0 {
		return "no CUDA"
	}
	return fmt.Sprintf("CUDA %d", major)
}

func fmtDuration(d time.Duration) string { return job.FormatDuration(d) }
