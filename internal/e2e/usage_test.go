package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/leader"
)

// jobEvent is an event of GET jobs/{id}/debug as the tests read it.
type jobEvent struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Message string `json:"message"`
}

func (e *env) eventList(id string) []jobEvent {
	e.t.Helper()
	var evs []jobEvent
	if err := json.Unmarshal([]byte(e.events(id)), &evs); err != nil {
		e.t.Fatalf("events of %s: %v", id, err)
	}
	return evs
}

func countKind(evs []jobEvent, kind string) int {
	n := 0
	for _, ev := range evs {
		if ev.Type == kind {
			n++
		}
	}
	return n
}

// jobUsage is GET jobs/{id}/usage as the tests read it.
type jobUsage struct {
	IdleGPUs []int  `json:"idleGpus"`
	Verdict  string `json:"verdict"`
	Averages struct {
		Seconds float64 `json:"seconds"`
		GPUs    []struct {
			Index       int     `json:"index"`
			UtilPercent float64 `json:"utilPercent"`
		} `json:"gpus"`
	} `json:"averages"`
	Points []json.RawMessage `json:"points"`
}

func (e *env) usage(id string) jobUsage {
	e.t.Helper()
	status, data, _ := e.m.Do(e.alice, "GET", v31+"/jobs/"+id+"/usage", nil)
	if status != 200 {
		e.t.Fatalf("usage of %s: %d %s", id, status, data)
	}
	var u jobUsage
	if err := json.Unmarshal(data, &u); err != nil {
		e.t.Fatalf("decode usage: %v", err)
	}
	return u
}

// A slave with two fake GPUs scripted at 0 % and 85 % runs two one-GPU jobs. The one on the
// idle GPU gets one idle-gpu event and the idle flag (API, CLI, Jobs page, job page charts); the
// busy one none. When its GPU gets busy the flag clears, when idle again a second event comes;
// once idle for the action time (back-dated: an hour is too long for a test), it is cancelled.
func TestIdleGPUJobIsFlaggedChartedAndCancelled(t *testing.T) {
	idle := leader.IdleConfig{Threshold: 5, After: 3 * time.Second, Action: leader.IdleActionCancel, ActionAfter: time.Hour}
	e := newEnvWith(t, testmaster.Options{Loop: leader.Config{Idle: idle},
		DevIdP: []testmaster.IdPUser{{Name: "alice", Email: "alice@example.org", Password: alicePassword}}})
	s := e.startSlave(slaveOpts{name: "usage", cluster: 1, fakeGPUs: "2xV100-32GB", fakeGPUUtil: []float64{0, 85}, cpus: 2})
	oneGPU := func(r map[string]any) { r["resources"].(map[string]any)["gpus"] = 1 }
	a := e.submit(e.jobFile("train-a", "sleep 600", oneGPU))
	b := e.submit(e.jobFile("train-b", "sleep 600", oneGPU))
	ja, jb := e.waitFor(a, job.StatusRunning), e.waitFor(b, job.StatusRunning)
	idleJob, busyJob := a, b
	if slices.Contains(jb.State.Resources.GPUIDs, 0) {
		idleJob, busyJob = b, a
	} else if !slices.Contains(ja.State.Resources.GPUIDs, 0) {
		t.Fatalf("neither job holds GPU 0: %v %v", ja.State.Resources.GPUIDs, jb.State.Resources.GPUIDs)
	}

	waitUntil(t, "the idle-gpu event of the job on the idle GPU", func() bool { return countKind(e.eventList(idleJob), leader.EventIdleGPU) > 0 })
	// The busy job has had more than twice the idle time of samples, and the checks since: no flag.
	waitUntil(t, "two idle windows of samples of the busy job", func() bool { return e.usage(busyJob).Averages.Seconds >= 2*idle.After.Seconds() })
	time.Sleep(2 * time.Second) // a few more checks (every 750 ms), to see that none adds a second event
	evs := e.eventList(idleJob)
	if n := countKind(evs, leader.EventIdleGPU); n != 1 {
		t.Errorf("%d idle-gpu events, want one per idle episode: %+v", n, evs)
	}
	var msg string
	for _, ev := range evs {
		if ev.Type == leader.EventIdleGPU {
			msg = ev.Message
		}
	}
	if want := "GPU 0 under 5 % for 3 seconds (averaged 0 %): the GPUs are idle"; msg != want {
		t.Errorf("idle-gpu event %q, want %q", msg, want)
	}
	if j := e.job(idleJob); !slices.Equal(j.State.IdleGPUs, []int{0}) || j.State.IdleSince == nil {
		t.Errorf("idle job's flag: %v since %v", j.State.IdleGPUs, j.State.IdleSince)
	}
	if j := e.job(busyJob); len(j.State.IdleGPUs) > 0 || countKind(e.eventList(busyJob), leader.EventIdleGPU) > 0 {
		t.Errorf("the busy job was flagged idle: %v\n%s", j.State.IdleGPUs, e.events(busyJob))
	}

	// The API's series and verdict.
	ui, ub := e.usage(idleJob), e.usage(busyJob)
	t.Logf("idle job: %d points, verdict %q; busy job: %d points, verdict %q", len(ui.Points), ui.Verdict, len(ub.Points), ub.Verdict)
	if len(ui.Points) < 6 || len(ui.Averages.GPUs) != 1 || ui.Averages.GPUs[0].Index != 0 || ui.Averages.GPUs[0].UtilPercent != 0 ||
		!strings.HasPrefix(ui.Verdict, "GPU 0 averaged 0 % over the last") || !strings.HasSuffix(ui.Verdict, "its GPUs are idle.") {
		t.Errorf("idle job usage: %+v", ui)
	}
	if len(ub.Averages.GPUs) != 1 || ub.Averages.GPUs[0].Index != 1 || ub.Averages.GPUs[0].UtilPercent != 85 || len(ub.IdleGPUs) != 0 {
		t.Errorf("busy job usage: %+v", ub)
	}

	// The CLI: the job view shows the averages and the warning, the listing warns.
	cli := filepath.Join(t.TempDir(), "gpulab-cli")
	if out, err := exec.Command("go", "build", "-o", cli, "../../cmd/gpulab-cli").CombinedOutput(); err != nil {
		t.Fatalf("build gpulab-cli: %v %s", err, out)
	}
	runCLI := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(cli, append([]string{"--cert", e.alice.CertFile, "--servercert", e.m.CAFile, "--custom-master-url", e.m.APIBase}, args...)...).CombinedOutput()
		t.Logf("$ gpulab-cli %s\n%s", strings.Join(args, " "), out)
		if err != nil {
			t.Fatalf("gpulab-cli %s: %v", strings.Join(args, " "), err)
		}
		return string(out)
	}
	out := runCLI("jobs", idleJob)
	for _, want := range []string{"GPU usage: GPU 0: 0 % last hour, 0 % whole run", "WARNING: idle GPUs: GPU 0 under 5 % busy"} {
		if !strings.Contains(out, want) {
			t.Errorf("gpulab-cli jobs %s does not show %q", idleJob, want)
		}
	}
	if out := runCLI("jobs", busyJob); !strings.Contains(out, "GPU usage: GPU 1: 85 % last hour, 85 % whole run, 27.2 GiB memory") || strings.Contains(out, "WARNING") {
		t.Errorf("gpulab-cli jobs %s: want GPU 1 at 85 %% and no warning", busyJob)
	}
	if out := runCLI("jobs"); !strings.Contains(out, "Warning: job "+idleJob+" holds idle GPUs (GPU 0)") || strings.Contains(out, "job "+busyJob+" holds") {
		t.Errorf("gpulab-cli jobs: want a warning about %s only", idleJob)
	}

	// The portal: charts on the job pages, the badge on the Jobs page, idle GPU-hours on Usage.
	p := &portal{env: e, ctx: testenv.Browser(t)}
	p.login("alice", alicePassword)
	p.do(testenv.Navigate(e.m.URL+"/jobs/"+idleJob), chromedp.WaitVisible(chromedp.CSS(`[data-testid="chart-gpu-util"] path[data-series="GPU 0"]`)))
	p.waitText(`[data-testid="usage-verdict"]`, "GPU 0 averaged 0 %")
	p.waitText(`[data-testid="usage-idle-warning"]`, "GPU 0 of this job is idle")
	for _, id := range []string{"chart-gpu-util", "chart-gpu-mem", "chart-cpu", "chart-mem"} {
		p.eval(`!!document.querySelector('[data-testid="` + id + `"] svg path') || (() => { throw new Error("no line in ` + id + `") })()`)
	}
	// Flat on the bottom axis: every vertex of GPU 0's line at y = 128 (0 %).
	p.eval(`(() => { const d = document.querySelector('[data-testid="chart-gpu-util"] path[data-series="GPU 0"]').getAttribute('d');
		const ys = [...d.matchAll(/[ML][\d.]+ ([\d.]+)/g)].map(m => m[1]);
		if (ys.length < 2 || ys.some(y => y !== '128')) throw new Error('GPU 0 line not flat at 0 %: ' + d); return true })()`)
	testenv.Screenshot(t, p.ctx, "01-idle-job-charts")
	// htmx refreshes the charts while the job runs: the line grows without a reload.
	gpu0 := `document.querySelector('[data-testid="chart-gpu-util"] path[data-series="GPU 0"]').getAttribute('d').length`
	p.eval(`(window.usageLen = ` + gpu0 + `) > 0`)
	waitUntil(t, "the chart to grow without a reload", func() bool {
		grown, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](gpu0+` > window.usageLen`))
		return err == nil && grown
	})
	p.do(testenv.Navigate(e.m.URL+"/jobs/"+busyJob), chromedp.WaitVisible(chromedp.CSS(`[data-testid="chart-gpu-util"] path[data-series="GPU 1"]`)))
	p.waitText(`[data-testid="usage-verdict"]`, "GPU 1 averaged 85 %")
	testenv.Screenshot(t, p.ctx, "02-busy-job-charts")
	p.do(testenv.Navigate(e.m.URL+"/jobs"), chromedp.WaitVisible(chromedp.CSS(`[data-testid="idle-badge"]`)))
	p.eval(`document.querySelectorAll('[data-testid="idle-badge"]').length === 1 || (() => { throw new Error("want one idle badge") })()`)
	testenv.Screenshot(t, p.ctx, "03-jobs-idle-badge")
	p.do(testenv.Navigate(e.m.URL+"/usage"), chromedp.WaitVisible(chromedp.CSS(`[data-testid="usage-idle-gpu-hours"]`)))
	hours := p.text(`[data-testid="usage-idle-gpu-hours"]`)
	t.Logf("Usage page idle GPU-hours: %q", hours)
	testenv.Screenshot(t, p.ctx, "04-usage-idle-gpu-hours")

	// Busy again: the flag clears; idle again: a second event.
	s.gpus.SetFakeUtil([]float64{60, 85})
	waitUntil(t, "the idle flag to clear", func() bool { return len(e.job(idleJob).State.IdleGPUs) == 0 })
	s.gpus.SetFakeUtil([]float64{0, 85})
	waitUntil(t, "a second idle-gpu event", func() bool { return countKind(e.eventList(idleJob), leader.EventIdleGPU) == 2 })

	// Idle for the action time (an hour): back-dated, and the busy minute left out of its series.
	if _, err := e.m.Store.DB().ExecContext(context.Background(),
		`UPDATE jobs SET event_times = jsonb_set(event_times, '{RUNNING}', to_jsonb(now() - interval '2 hours')) WHERE uuid = $1`, idleJob); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Store.DB().ExecContext(context.Background(), `DELETE FROM job_usage WHERE job_uuid = $1 AND gpu_util[1] >= 5`, idleJob); err != nil {
		t.Fatal(err)
	}
	e.waitFor(idleJob, job.StatusCancelled)
	var cancelled string
	for _, ev := range e.eventList(idleJob) {
		if ev.Status == string(job.StatusCancelled) {
			cancelled = ev.Message
		}
	}
	if !strings.Contains(cancelled, "idle") {
		t.Errorf("the cancellation's event %q does not say the GPUs were idle", cancelled)
	}
	if j := e.job(busyJob); j.State.Status != job.StatusRunning {
		t.Errorf("the busy job is %s, want RUNNING", j.State.Status)
	}
}

// With --idle-gpu-action halt, a restartable job whose only GPU stayed idle for the action time
// is halted (its event says why) and its restart job queued; a job that is not restartable is
// only flagged.
func TestIdleGPUHaltsRestartableJob(t *testing.T) {
	idle := leader.IdleConfig{Threshold: 5, After: 2 * time.Second, Action: leader.IdleActionHalt, ActionAfter: 4 * time.Second}
	e := newEnvWith(t, testmaster.Options{Loop: leader.Config{Idle: idle}})
	e.startSlave(slaveOpts{name: "idlehalt", cluster: 1, fakeGPUs: "2xV100-32GB", cpus: 2}) // both GPUs at 0 %
	restartable := e.submit(e.jobFile("restartable", haltScript, func(r map[string]any) {
		r["resources"].(map[string]any)["gpus"] = 1
		r["scheduling"] = map[string]any{"restartable": true}
	}))
	plain := e.submit(e.jobFile("plain", "sleep 600", func(r map[string]any) { r["resources"].(map[string]any)["gpus"] = 1 }))
	e.waitFor(plain, job.StatusRunning)
	e.waitFor(restartable, job.StatusHalted)
	var halt string
	for _, ev := range e.eventList(restartable) {
		if ev.Status == string(job.StatusMustHalt) {
			halt = ev.Message
		}
	}
	if !strings.Contains(halt, "idle") || countKind(e.eventList(restartable), leader.EventIdleGPU) != 1 {
		t.Errorf("halt event %q, want the idle GPUs as the reason after one idle-gpu event:\n%s", halt, e.events(restartable))
	}
	e.waitRestartOf(restartable)
	waitUntil(t, "the plain job's idle flag", func() bool { return len(e.job(plain).State.IdleGPUs) == 1 })
	// Past the action time too, yet not restartable: it keeps running.
	waitUntil(t, "the action time of the plain job", func() bool { return e.usage(plain).Averages.Seconds >= 2*idle.ActionAfter.Seconds() })
	if j := e.job(plain); j.State.Status != job.StatusRunning {
		t.Errorf("the plain job is %s, want RUNNING (halt is for restartable jobs only)", j.State.Status)
	}
}
