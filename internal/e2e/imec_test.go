package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/imecschema"
	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/job"
)

// imecV40 is the base imec's client calls.
const imecV40 = "/api/gpulab/v4.0"

// imecCheck fetches v4.0 answers of a real master and validates them against our schemas of
// imec's models, remembering which parts of the model each state exercised.
type imecCheck struct {
	e       *env
	schemas *imecschema.Schemas
	// seen: case label -> model parts present in its answer (the coverage log).
	seen  map[string][]string
	order []string
}

// job validates GET v4.0 jobs/{id} as u sees it, in state want (any when empty), and returns it
// decoded loosely, for the checks of the part the case is about.
func (c *imecCheck) job(label string, u *testmaster.User, id string, want job.Status) map[string]any {
	t := c.e.t
	t.Helper()
	status, data, _ := c.e.m.Do(u, "GET", imecV40+"/jobs/"+id, nil)
	if status != 200 {
		t.Fatalf("%s: GET v4.0 jobs/%s: %d %s", label, id, status, data)
	}
	if err := c.schemas.Validate("job.json#/$defs/Job", data); err != nil {
		t.Errorf("%s: GET v4.0 jobs/%s is not imec's Job:\n%v\n%s", label, id, err, data)
	}
	var j map[string]any
	if err := json.Unmarshal(data, &j); err != nil {
		t.Fatal(err)
	}
	st, _ := j["state"].(map[string]any)
	got := fmt.Sprint(st["status"])
	if want != "" && got != string(want) {
		t.Fatalf("%s: job %s is %s, want %s", label, id, got, want)
	}
	c.note(label+" ("+got+")", j)
	return j
}

// note records which of imec's models a job answer filled.
func (c *imecCheck) note(label string, j map[string]any) {
	parts := []string{"Job", "JobRequest", "JobOwner", "JobState", "JobStateScheduling", "JobEventTimes"}
	st := j["state"].(map[string]any)
	if ri, ok := j["restartInfo"].(map[string]any); ok {
		parts = append(parts, fmt.Sprintf("RestartInfo(count %v)", ri["restartCount"]))
	}
	if res, ok := st["resources"].(map[string]any); ok {
		parts = append(parts, "JobStateResources")
		if pm, _ := res["portMappings"].([]any); len(pm) > 0 {
			parts = append(parts, "JobPortMapping")
		}
		if _, ok := res["gpuDetails"].(map[string]any); ok {
			parts = append(parts, "GpuOverview+GpuInfo")
		}
	}
	sch := st["scheduling"].(map[string]any)
	if he, _ := sch["haltEvents"].([]any); len(he) > 0 {
		parts = append(parts, "HaltInfo")
	}
	if qe, _ := sch["queuedExplanations"].([]any); len(qe) > 0 {
		parts = append(parts, "queuedExplanations")
	}
	if _, ok := st["finalUsageStatistics"].(map[string]any); ok {
		parts = append(parts, "GPULabUsageStatistics+Container+Gpu")
	}
	if _, ok := c.seen[label]; !ok {
		c.order = append(c.order, label)
	}
	c.seen[label] = parts
}

// list validates GET v4.0 jobs with a query as imec's client reads it ({"items": [Job...]}) and
// returns the statuses listed by job id.
func (c *imecCheck) list(u *testmaster.User, query url.Values) map[string]string {
	t := c.e.t
	t.Helper()
	status, data, _ := c.e.m.Do(u, "GET", imecV40+"/jobs?"+query.Encode(), nil)
	if status != 200 {
		t.Fatalf("GET v4.0 jobs?%s: %d %s", query.Encode(), status, data)
	}
	if err := c.schemas.Validate("job.json#/$defs/JobList", data); err != nil {
		t.Errorf("GET v4.0 jobs?%s is not imec's list of Job:\n%v\n%s", query.Encode(), err, data)
	}
	var l struct {
		Items []struct {
			UUID  string `json:"uuid"`
			State struct {
				Status string `json:"status"`
			} `json:"state"`
		} `json:"items"`
	}
	if err := json.Unmarshal(data, &l); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, it := range l.Items {
		out[it.UUID] = it.State.Status
	}
	return out
}

// TestImecJobModelConformance runs jobs into every state a user can see for long on a real
// master and slave (Postgres, Docker, a fake GPU) and checks that every v4.0 answer about them,
// GET jobs/{id} and GET jobs as imec's client asks for it, is exactly imec's Job model.
func TestImecJobModelConformance(t *testing.T) {
	schemas, err := imecschema.Load()
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	c := &imecCheck{e: e, schemas: schemas, seen: map[string][]string{}}
	bob := e.m.AddUser("bob", false, "", "vision")
	e.startSlave(slaveOpts{name: "s1", cluster: 1, fakeGPUs: "1xV100-32GB"})
	gpu := func(r map[string]any) { r["resources"].(map[string]any)["gpus"] = 1 }

	// Held and queued (not before an hour from now).
	status, data, _ := e.m.Do(e.alice, "POST", v31+"/jobs?hold=true", strings.NewReader(e.jobFile("held", "echo held", nil)))
	if status != 201 {
		t.Fatalf("submit on hold: %d %s", status, data)
	}
	held := strings.TrimSpace(string(data))
	c.job("held", e.alice, held, job.StatusOnHold)
	queued := e.submit(e.jobFile("queued", "echo later", func(r map[string]any) {
		r["scheduling"] = map[string]any{"notBefore": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}
	}))
	e.waitFor(queued, job.StatusQueued)
	waitUntil(t, "the scheduler's explanation for "+queued, func() bool { return len(e.job(queued).State.Scheduling.QueuedExplanations) > 0 })
	c.job("queued (notBefore)", e.alice, queued, job.StatusQueued)

	// Running with a published port and the GPU: bob's restartable job.
	status, data, _ = e.m.Do(bob, "POST", v31+"/jobs", strings.NewReader(e.jobFile("heavy", haltScript, func(r map[string]any) {
		gpu(r)
		r["docker"].(map[string]any)["portMappings"] = []any{8080}
		r["scheduling"] = map[string]any{"restartable": true, "minDuration": "1 minute", "maxDuration": "1 day"}
	})))
	if status != 201 {
		t.Fatalf("bob submit: %d %s", status, data)
	}
	heavy := strings.TrimSpace(string(data))
	waitUntil(t, "heavy running with its port published", func() bool {
		j := e.job(heavy)
		return j.State.Status == job.StatusRunning && len(j.State.Resources.PortMappings) == 1 && j.State.Resources.PortMappings[0].HostPort != 0
	})
	j := c.job("running with ports", bob, heavy, job.StatusRunning)
	res := j["state"].(map[string]any)["resources"].(map[string]any)
	if pm := res["portMappings"].([]any); len(pm) != 1 || res["gpuDetails"] == nil {
		t.Errorf("running job's resources: %v", res)
	}
	// imec's `jobs -u`: the caller's jobs and everybody's running ones, page_size as -c.
	imecQuery := url.Values{"user_urn": {e.alice.URN}, "other_user_running": {"True"}, "page_size": {"50"}}
	if got := c.list(e.alice, imecQuery); got[held] != "ONHOLD" || got[queued] != "QUEUED" || got[heavy] != "RUNNING" {
		t.Errorf("imec's jobs -u listing: %v", got)
	}
	// Someone outside the project sees bob's running job sanitized, still imec's Job.
	carol := e.m.AddUser("carol", false, "", "elsewhere")
	if got := c.list(carol, url.Values{"user_urn": {carol.URN}, "other_user_running": {"True"}}); got[heavy] != "RUNNING" {
		t.Errorf("carol's jobs -u listing lacks bob's running job: %v", got)
	}

	// A score halt (as in TestScoreHaltWithRestart): bob used a lot and his job is past its
	// minDuration (back-dated), so alice's job halts it; bob's job is restarted.
	if _, err := e.m.Store.DB().Exec(`INSERT INTO user_tallies (user_id, tally) VALUES ($1, 500)
		ON CONFLICT (user_id) DO UPDATE SET tally = 500, updated_at = now()`, bob.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Store.DB().Exec(`UPDATE jobs SET event_times = jsonb_set(event_times, '{RUNNING}', to_jsonb(now() - interval '10 minutes')) WHERE uuid = $1`, heavy); err != nil {
		t.Fatal(err)
	}
	light := e.submit(e.jobFile("light", "sleep 4; echo light done", gpu))
	e.waitFor(heavy, job.StatusHalted)
	j = c.job("halted by the scheduler", bob, heavy, job.StatusHalted)
	if he := j["state"].(map[string]any)["scheduling"].(map[string]any)["haltEvents"].([]any); len(he) == 0 || he[0].(map[string]any)["reason"] != "SCORE" {
		t.Errorf("halted job's haltEvents: %v", he)
	}
	// Finished, with the usage its slave measured.
	waitUntil(t, "light finished with its usage", func() bool {
		j := e.job(light)
		if j.State.Status.Ended() && j.State.Status != job.StatusFinished {
			t.Fatalf("light ended %s: %s", j.State.Status, e.events(light))
		}
		return j.State.Status == job.StatusFinished && len(j.State.FinalUsageStatistics) > 0
	})
	j = c.job("finished with usage", e.alice, light, job.StatusFinished)
	if _, ok := j["state"].(map[string]any)["finalUsageStatistics"].(map[string]any); !ok {
		t.Errorf("finished job without finalUsageStatistics")
	}

	// The restart job, then cancelled.
	var restart string
	waitUntil(t, "the restart job of "+heavy, func() bool {
		_, data, _ := e.m.Do(bob, "GET", v31+"/jobs?pending=true&running=true", nil)
		var list []job.Job
		_ = json.Unmarshal(data, &list)
		for _, r := range list {
			if r.RestartInfo != nil && r.RestartInfo.InitialJobUUID == heavy {
				restart = r.UUID
			}
		}
		return restart != ""
	})
	j = c.job("restarted", bob, restart, "") // queued or on its way to run: it moves on its own
	if ri := j["restartInfo"].(map[string]any); ri["initialJobUuid"] != heavy || ri["restartCount"] != 1.0 {
		t.Errorf("restart job's restartInfo: %v", ri)
	}
	code, data, _ := e.m.Do(bob, "PUT", imecV40+"/jobs/"+restart+"/state/status", strings.NewReader("CANCELLED"))
	if code != 200 {
		t.Fatalf("cancel through v4.0: %d %s", code, data)
	}
	if err := schemas.Validate("job.json#/$defs/Job", data); err != nil {
		t.Errorf("PUT v4.0 state/status answer is not imec's Job: %v\n%s", err, data)
	}
	e.waitFor(restart, job.StatusCancelled)
	c.job("cancelled", bob, restart, job.StatusCancelled)

	// Failed, then deleted.
	failed := e.submit(e.jobFile("failing", "exit 3", nil))
	e.waitFor(failed, job.StatusFailed)
	c.job("failed", e.alice, failed, job.StatusFailed)
	if code, data, _ := e.m.Do(e.alice, "DELETE", imecV40+"/jobs/"+failed, nil); code != 200 {
		t.Fatalf("delete: %d %s", code, data)
	}
	c.job("deleted", e.alice, failed, job.StatusDeleted)

	// Every job in every list form imec's client uses, and all states at once.
	all := url.Values{"pending": {"true"}, "running": {"true"}, "finished": {"true"}, "deleted": {"true"}, "page_size": {"200"}}
	for _, u := range []*testmaster.User{e.alice, bob} {
		got := c.list(u, all)
		c.list(u, url.Values{})
		c.list(u, imecQuery)
		if u == e.alice {
			for id, want := range map[string]string{held: "ONHOLD", queued: "QUEUED", light: "FINISHED", failed: "DELETED"} {
				if got[id] != want {
					t.Errorf("alice's full list has %s as %q, want %s: %v", id, got[id], want, got)
				}
			}
		}
	}
	if got := c.list(bob, all); got[heavy] != "HALTED" || got[restart] != "CANCELLED" {
		t.Errorf("bob's full list: %v", got)
	}

	// The coverage: which of imec's models each state's answer filled.
	var b strings.Builder
	for _, label := range c.order {
		fmt.Fprintf(&b, "\n  %-34s %s", label, strings.Join(c.seen[label], ", "))
	}
	t.Logf("imec Job model coverage (GET jobs/{id}; GET jobs lists validated too):%s", b.String())
	for _, must := range []string{"JobPortMapping", "GpuOverview+GpuInfo", "HaltInfo", "GPULabUsageStatistics+Container+Gpu", "RestartInfo(count 1)"} {
		covered := false
		for _, parts := range c.seen {
			covered = covered || slices.Contains(parts, must)
		}
		if !covered {
			t.Errorf("no answer exercised %s", must)
		}
	}
}
