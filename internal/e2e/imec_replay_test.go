package e2e

// The closest we can come, without Python, to running imec's own gpulab-cli (imecilabt-gpulab-cli
// 3.11) against our master: for every command of imec's client, the HTTP calls it makes, in its
// order, with its query parameters, headers and body (its submit body is what its NewJobV4 model
// dumps: camelCase, defaults included, None left out), each answer checked the way the client
// reads it: r.ok (any status below 400) unless it tests a status itself, bodies validated by our
// schemas of imec's models that refuse unknown fields (internal/imecschema, the mirrors of
// imec_info_test.go), and the headers it reads (Content-Range, Content-Length). Written from
// reading imec's client (cli/__init__.py and apiclient.py); nothing of it is copied.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/opengpulab/gpulab/internal/imecschema"
	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/job"
)

// replayCmd is one imec command and what became of it.
type replayCmd struct {
	name  string
	calls []string
	err   error
	na    string // why the command is not replayed (it needs what this master does not have)
}

// imecReplay replays imec's client as one user against a real master.
type imecReplay struct {
	e       *env
	schemas *imecschema.Schemas
	u       *testmaster.User
	cur     *replayCmd
	cmds    []*replayCmd
}

// run replays one command: f makes the calls and returns why the client would fail.
func (r *imecReplay) run(name string, f func() error) {
	r.cur = &replayCmd{name: name}
	r.cur.err = f()
	r.cmds = append(r.cmds, r.cur)
	r.cur = nil
}

func (r *imecReplay) notApplicable(name, why string) {
	r.cmds = append(r.cmds, &replayCmd{name: name, na: why})
}

// do sends one call below v4.0 as imec's requests session would, and records it.
func (r *imecReplay) do(method, path string, body io.Reader, header ...string) (int, []byte, http.Header) {
	if r.cur != nil {
		r.cur.calls = append(r.cur.calls, method+" "+path)
	}
	// requests sends Accept: */* on every call.
	header = append([]string{"Accept", "*/*"}, header...)
	return r.e.m.Do(r.u, method, v40+path, body, header...)
}

// ok is requests' Response.ok: every status below 400.
func ok(status int) bool { return status < 400 }

// imecNewJob is the body imec's `submit` posts: the user's job file as imec's NewJobV4 model
// dumps it (serialize_by_alias, exclude_none: every default list and flag present), with owner
// only {projectUrn} (the user fields are excluded from the dump) and the SSH key the client adds
// from ~/.ssh/id_rsa.pub. Storage paths get imec's trailing slash and hostPath defaults to
// containerPath.
func imecNewJob(name, image string, command any, projectURN string, scheduling map[string]any) map[string]any {
	sched := map[string]any{"interactive": false, "restartable": false, "allowHaltWithoutSignal": false, "reservationIds": []any{}}
	for k, v := range scheduling {
		sched[k] = v
	}
	return map[string]any{
		"name": name,
		"request": map[string]any{
			"resources": map[string]any{"cpus": 1, "gpus": 0, "cpuMemoryGb": 1, "features": []any{}, "gpuModel": []any{}},
			"docker": map[string]any{"image": image, "command": command, "environment": map[string]any{},
				"storage":      []any{map[string]any{"containerPath": "/project/", "hostPath": "/project/"}},
				"portMappings": []any{}, "groupAdd": []any{}},
			"scheduling": sched,
			"extra": map[string]any{"sshPubKeys": []any{imecTestSSHKey}, "emailOnQueue": []any{}, "emailOnRun": []any{},
				"emailOnEnd": []any{}, "emailOnHalt": []any{}, "emailOnRestart": []any{}},
		},
		"owner":                 map[string]any{"projectUrn": projectURN},
		"deploymentEnvironment": "production",
	}
}

// imecTestSSHKey is a public key (its private half was thrown away) as ~/.ssh/id_rsa.pub holds it.
const imecTestSSHKey = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQCp9wsMSJK4rWgbkzCduPtCEXPPCAbfcbFB9gSYDUU9m4zR9QXNRvKSE4Rhhb5sW8naAruU6LhvCiMozEe4UvdZ9Nyu8f94vvrb9Rh005yY0nP+X41mbEB2+sx1M26ZnBd9QH29KQLJIaXJM/862dcR7oSc4fatf05B1VonmPZRow== alice@laptop"

// submit is imec's POST jobs: the answer's text is the job id the client prints and puts in the
// URLs of what follows (`--wait-run`), so it must be the bare UUID.
func (r *imecReplay) submit(body map[string]any, hold bool) (string, error) {
	b, _ := json.Marshal(body)
	path := "/jobs"
	if hold {
		path += "?hold=true"
	}
	status, data, _ := r.do("POST", path, strings.NewReader(string(b)), "Content-Type", "application/json")
	if !ok(status) {
		return "", fmt.Errorf("submit answered %d: %s", status, data)
	}
	id := string(data)
	if _, err := uuid.Parse(id); err != nil || len(id) != 36 {
		return "", fmt.Errorf("submit answered %q, not the bare job id imec's client prints and puts in its URLs", id)
	}
	return id, nil
}

// getJob is imec's GET jobs/{id} read as its Job model.
func (r *imecReplay) getJob(id string) (string, error) {
	status, data, _ := r.do("GET", "/jobs/"+id, nil)
	if !ok(status) {
		return "", fmt.Errorf("GET jobs/%s answered %d: %s", id, status, data)
	}
	if err := r.schemas.Validate("job.json#/$defs/Job", data); err != nil {
		return "", err
	}
	var j struct {
		State struct {
			Status string `json:"status"`
		} `json:"state"`
	}
	if err := json.Unmarshal(data, &j); err != nil {
		return "", err
	}
	return j.State.Status, nil
}

// wait is imec's actual_wait: GET jobs/{id} until the job left QUEUED, ASSIGNED and STARTING
// (--wait-run), then until it left STARTING, RUNNING, MUSTHALT and HALTING (--wait-done). imec
// polls every 2 s; the replay polls faster. A failed GET makes imec's client give up waiting.
func (r *imecReplay) wait(id string, done bool) (string, error) {
	stages := [][]string{{"QUEUED", "ASSIGNED", "STARTING"}}
	if done {
		stages = append(stages, []string{"STARTING", "RUNNING", "MUSTHALT", "HALTING"})
	}
	var st string
	for _, waitWhile := range stages {
		deadline := time.Now().Add(waitLimit)
		for {
			var err error
			if st, err = r.getJob(id); err != nil {
				return st, err
			}
			if !strings.Contains(" "+strings.Join(waitWhile, " ")+" ", " "+st+" ") {
				break
			}
			if time.Now().After(deadline) {
				return st, fmt.Errorf("job %s still %s after %s", id, st, waitLimit)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return st, nil
}

// list is imec's `jobs` without an id: GET version (its upgrade check), then GET jobs read as
// {"items": [Job...]}; it compares every listed owner's userUrn with its own.
func (r *imecReplay) list(q url.Values) (map[string]string, error) {
	status, data, _ := r.do("GET", "/version", nil)
	var v map[string]any
	if !ok(status) || json.Unmarshal(data, &v) != nil {
		return nil, fmt.Errorf("GET version answered %d %s: imec's client says it could not check for a new version", status, data)
	}
	if latest, _ := v["latest_client_version"].(string); imecNags("3.11", latest) {
		return nil, fmt.Errorf("GET version advertises %q: imec's client 3.11 asks every user to upgrade", latest)
	}
	path := "/jobs"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	status, data, _ = r.do("GET", path, nil)
	if !ok(status) {
		return nil, fmt.Errorf("GET %s answered %d: %s", path, status, data)
	}
	if err := r.schemas.Validate("job.json#/$defs/JobList", data); err != nil {
		return nil, err
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
		return nil, err
	}
	out := map[string]string{}
	for _, it := range l.Items {
		out[it.UUID] = it.State.Status
	}
	return out, nil
}

var contentRangeEnd = regexp.MustCompile(`^bytes ([0-9]+)-([0-9]+)/([0-9]+)`)

// logPiece is one GET of imec's `log` loop: the bytes it prints and where it asks next. It
// sends Range only once it has a non-zero end; a 200 or 206 gives the next end from
// Content-Range, else Content-Length, else 0; a 204 leaves the end as it was.
func (r *imecReplay) logPiece(id string, end *int64) ([]byte, int, error) {
	var header []string
	if *end > 0 {
		header = []string{"Range", fmt.Sprintf("bytes=%d-", *end)}
	}
	status, data, h := r.do("GET", "/jobs/"+id+"/log", nil, header...)
	if !ok(status) {
		return nil, status, fmt.Errorf("GET jobs/%s/log answered %d: %s", id, status, data)
	}
	switch status {
	case 200, 206:
		if cr := h.Get("Content-Range"); cr != "" {
			m := contentRangeEnd.FindStringSubmatch(cr)
			if m == nil {
				return nil, status, fmt.Errorf("Content-Range %q is not of the form imec's client parses", cr)
			}
			*end, _ = strconv.ParseInt(m[2], 10, 64)
		} else if cl := h.Get("Content-Length"); cl != "" {
			*end, _ = strconv.ParseInt(cl, 10, 64)
		} else {
			*end = 0
		}
	}
	return data, status, nil
}

// logOnce is imec's `log` without -f: it asks until it has an end (a 204 without one makes it
// ask again, forever); the replay allows one answer.
func (r *imecReplay) logOnce(id string) ([]byte, error) {
	var end int64
	data, status, err := r.logPiece(id, &end)
	if err != nil {
		return nil, err
	}
	if status == 204 {
		return nil, errors.New("an empty log answered 204 to a GET without Range: imec's client (without -f) asks again, forever")
	}
	if status == 200 && end != int64(len(data)) {
		return nil, fmt.Errorf("a 200 of %d bytes gave Content-Length %d", len(data), end)
	}
	return data, nil
}

// follow is imec's `log -f` until the output holds want: every piece printed once, in order.
func (r *imecReplay) follow(id, want string) (string, error) {
	var end int64
	var out []byte
	deadline := time.Now().Add(waitLimit)
	for {
		data, _, err := r.logPiece(id, &end)
		if err != nil {
			return string(out), err
		}
		out = append(out, data...)
		if strings.Contains(string(out), want) {
			break
		}
		if time.Now().After(deadline) {
			return string(out), fmt.Errorf("log -f did not show %q within %s: it printed %q, the log is %q", want, waitLimit, out, r.e.logOf(id))
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Once more from the end: nothing new is a 204 (which imec's -f skips), not the last byte again.
	data, status, err := r.logPiece(id, &end)
	if err != nil {
		return string(out), err
	}
	if status != 204 && len(data) > 0 && !strings.HasPrefix(r.e.logOf(id), string(out)+string(data)) {
		return string(out), fmt.Errorf("log -f printed %q again", data)
	}
	if full := r.e.logOf(id); !strings.HasPrefix(full, string(out)) {
		return string(out), fmt.Errorf("log -f printed %q, the log is %q", out, full)
	}
	return string(out), nil
}

// put is imec's halt, cancel, hold and release: PUT state/status with the bare status name.
func (r *imecReplay) put(id, status string) error {
	code, data, _ := r.do("PUT", "/jobs/"+id+"/state/status", strings.NewReader(status))
	if !ok(code) {
		return fmt.Errorf("PUT %s answered %d: %s", status, code, data)
	}
	return nil
}

// rm is imec's rm: DELETE jobs/{id}, with finished=true for -f.
func (r *imecReplay) rm(id string, finished bool) error {
	path := "/jobs/" + id
	if finished {
		path += "?finished=true"
	}
	code, data, _ := r.do("DELETE", path, nil)
	if !ok(code) {
		return fmt.Errorf("DELETE %s answered %d: %s", path, code, data)
	}
	return nil
}

// clusters is imec's `clusters` (and `slaves`, which imec's client maps to it): GET clusters
// read as a list of ClusterInfo, whose gpu and cpu it prints.
func (r *imecReplay) clusters() error {
	status, data, _ := r.do("GET", "/clusters", nil)
	if !ok(status) {
		return fmt.Errorf("GET clusters answered %d: %s", status, data)
	}
	var cs []confClusterInfo
	if err := decodeConform(data, &cs); err != nil {
		return err
	}
	if len(cs) == 0 {
		return errors.New("no cluster listed")
	}
	for _, c := range cs {
		if err := c.valid(); err != nil {
			return err
		}
		if c.GPU == nil || c.CPU == nil {
			return fmt.Errorf("cluster %d has no gpu or cpu, which imec's table prints", *c.ClusterID)
		}
	}
	return nil
}

// slaves is imec's `clusters ID`, `clusters --all` and `--short`: GET slaves read as a list of
// SlaveInfo2, kept to the cluster asked for.
func (r *imecReplay) slaves(cluster int) error {
	status, data, _ := r.do("GET", "/slaves", nil)
	if !ok(status) {
		return fmt.Errorf("GET slaves answered %d: %s", status, data)
	}
	var ss []confSlaveInfo2
	if err := decodeConform(data, &ss); err != nil {
		return err
	}
	n := 0
	for _, s := range ss {
		if err := s.valid(); err != nil {
			return err
		}
		if cluster == 0 || *s.ClusterID == cluster {
			n++
		}
	}
	if n == 0 {
		return fmt.Errorf("no slave of cluster %d listed", cluster)
	}
	return nil
}

// debug is imec's `debug`: GET jobs/{id}/debug read as a list of JobEvent.
func (r *imecReplay) debug(id string) error {
	status, data, _ := r.do("GET", "/jobs/"+id+"/debug", nil)
	if !ok(status) {
		return fmt.Errorf("GET debug answered %d: %s", status, data)
	}
	var evs []confJobEvent
	if err := decodeConform(data, &evs); err != nil {
		return err
	}
	if len(evs) == 0 {
		return errors.New("no events")
	}
	return nil
}

func expectStatus(got, want string) error {
	if got != want {
		return fmt.Errorf("job is %s, want %s", got, want)
	}
	return nil
}

// TestImecClientReplay replays every command of imec's gpulab-cli against a real master and
// slave and logs which work: the goal is all of them.
func TestImecClientReplay(t *testing.T) {
	schemas, err := imecschema.Load()
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	e.startSlave(slaveOpts{name: "replay", cluster: 1, fakeGPUs: "1xV100-32GB", cpus: 2})
	if err := os.MkdirAll(filepath.Join(e.projects, "vision"), 0o770); err != nil {
		t.Fatal(err)
	}
	r := &imecReplay{e: e, schemas: schemas, u: e.alice}
	project := e.alice.URN[:strings.Index(e.alice.URN, "+user+")] + "+project+vision"
	sh := func(script string) []any { return []any{"sh", "-c", script} }
	later := map[string]any{"notBefore": time.Now().Add(time.Hour).UTC().Format("2006-01-02T15:04:05Z")}

	r.run("clusters", r.clusters)
	r.run("slaves", r.clusters)
	r.run("clusters 1", func() error { return r.slaves(1) })
	r.run("clusters --all --short", func() error { return r.slaves(0) })

	var done, running, held, queued, halter string
	r.run("submit --wait-done", func() error {
		if done, err = r.submit(imecNewJob("imec-done", e.image, "echo imec-done", project, nil), false); err != nil {
			return err
		}
		st, err := r.wait(done, true)
		if err != nil {
			return err
		}
		return expectStatus(st, "FINISHED")
	})
	// A log of more than Go's response buffer, which imec's `log -f` must get with its length.
	r.run("submit --wait-run", func() error {
		script := "i=0; while [ $i -lt 100 ]; do echo line-$i-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; i=$((i+1)); done; echo imec-up; sleep 600"
		if running, err = r.submit(imecNewJob("imec-running", e.image, sh(script), project, nil), false); err != nil {
			return err
		}
		st, err := r.wait(running, false)
		if err != nil {
			return err
		}
		return expectStatus(st, "RUNNING")
	})
	r.run("submit --hold", func() error {
		held, err = r.submit(imecNewJob("imec-held", e.image, "echo held", project, nil), true)
		return err
	})
	r.run("submit", func() error {
		queued, err = r.submit(imecNewJob("imec-queued", e.image, sh("echo later"), project, later), false)
		return err
	})
	if held == "" || queued == "" || running == "" || done == "" {
		t.Fatalf("submissions failed; the rest needs their jobs:\n%s", r.table())
	}

	r.run("jobs ID", func() error {
		st, err := r.getJob(running)
		if err != nil {
			return err
		}
		return expectStatus(st, "RUNNING")
	})
	r.run("jobs -r ID", func() error {
		status, data, _ := r.do("GET", "/jobs/"+running, nil)
		if !ok(status) || !json.Valid(data) {
			return fmt.Errorf("GET jobs/%s: %d %s", running, status, data)
		}
		return nil
	})
	r.notApplicable("jobs -d ID", "imec's client 3.11 prints job.nvdocker_data, which its own Job model lacks: it fails before any answer matters")
	listHas := func(q url.Values, want ...string) func() error {
		return func() error {
			got, err := r.list(q)
			if err != nil {
				return err
			}
			for _, id := range want {
				if _, ok := got[id]; !ok {
					return fmt.Errorf("job %s not listed (%d listed)", id, len(got))
				}
			}
			return nil
		}
	}
	// Someone else's job, in another project: imec's plain `jobs` shows the whole queue.
	bob := e.m.AddUser("bob", false, "", "elsewhere")
	status, data, _ := e.m.Do(bob, "POST", v31+"/jobs?hold=true", strings.NewReader(e.jobFile("bobs", "echo bob", nil)))
	if status != 201 {
		t.Fatalf("bob's submit: %d %s", status, data)
	}
	bobs := strings.TrimSpace(string(data))
	r.run("jobs", listHas(url.Values{}, running, queued, held, bobs))
	r.run("jobs -u", listHas(url.Values{"user_urn": {e.alice.URN}, "other_user_running": {"True"}, "page_size": {"50"}}, running, queued, held, done))
	r.run("jobs -U", listHas(url.Values{"user_urn": {e.alice.URN}, "page_size": {"50"}}, running, queued, held, done))
	r.run("jobs -c 2", func() error {
		got, err := r.list(url.Values{"page_size": {"2"}})
		if err == nil && len(got) != 2 {
			err = fmt.Errorf("%d jobs listed, want 2", len(got))
		}
		return err
	})
	r.run("debug ID", func() error { return r.debug(done) })
	r.run("log ID", func() error {
		data, err := r.logOnce(running)
		if err == nil && !strings.Contains(string(data), "imec-up") {
			waitUntil(t, "imec-up in the log", func() bool { return strings.Contains(e.logOf(running), "imec-up") })
			if data, err = r.logOnce(running); err == nil && !strings.Contains(string(data), "imec-up") {
				err = fmt.Errorf("log is %q", data)
			}
		}
		return err
	})
	r.run("log ID (nothing logged yet)", func() error { _, err := r.logOnce(queued); return err })
	r.run("log -f ID", func() error { _, err := r.follow(running, "imec-up"); return err })
	// A log that grows while imec's `log -f` follows it, from before the job starts.
	ticker := e.submit(e.jobFile("imec-ticker", "sleep 1; for i in 1 2 3 4 5 6; do echo tick-$i; sleep 0.4; done", nil))
	r.run("log -f ID (growing)", func() error {
		out, err := r.follow(ticker, "tick-6")
		if err == nil && out != "tick-1\ntick-2\ntick-3\ntick-4\ntick-5\ntick-6\n" {
			err = fmt.Errorf("log -f printed %q", out)
		}
		return err
	})
	r.run("hold ID", func() error { return r.put(queued, "ONHOLD") })
	r.run("release ID", func() error { return r.put(queued, "QUEUED") })
	r.run("rm ID", func() error { return r.rm(queued, false) })
	r.run("rm -f ID", func() error { return r.rm(done, true) })
	r.run("cancel ID", func() error { return r.put(running, "CANCELLED") })
	r.run("wait --wait-done ID", func() error {
		st, err := r.wait(running, true)
		if err != nil {
			return err
		}
		return expectStatus(st, "CANCELLED")
	})
	halter = e.submit(e.jobFile("imec-halter", haltScript, func(req map[string]any) {
		req["scheduling"] = map[string]any{"restartable": true}
	}))
	r.run("wait --wait-run ID", func() error {
		st, err := r.wait(halter, false)
		if err != nil {
			return err
		}
		return expectStatus(st, "RUNNING")
	})
	r.run("halt ID", func() error { return r.put(halter, "MUSTHALT") })
	e.waitFor(halter, job.StatusHalted)
	r.run("release ID (held at submit)", func() error { return r.put(held, "QUEUED") })

	// A job file using every request field imec's model has, as imec's client dumps it
	// (a tmpfs storage, the project share by its magic name, ports as objects, typed environment).
	r.run("submit --wait-done (every request field)", func() error {
		body := imecNewJob("imec-full", e.image, "sh -c 'echo full; ls -d /project /scratch'", project,
			map[string]any{"minDuration": "1 minute", "maxDuration": "10 minutes", "restartable": true, "allowHaltWithoutSignal": true})
		req := body["request"].(map[string]any)
		req["resources"] = map[string]any{"cpus": 1, "gpus": 1, "cpuMemoryGb": 1, "gpuMemoryGb": 8, "features": []any{},
			"gpuModel": []any{"V100"}, "minCudaVersion": 11, "clusterId": 1}
		d := req["docker"].(map[string]any)
		d["storage"] = []any{map[string]any{"hostPath": "PROJECT_SHARE_AUTO", "containerPath": "/project/"},
			map[string]any{"hostPath": "tmpfs", "containerPath": "/scratch/", "sizeGb": 1}}
		d["portMappings"] = []any{map[string]any{"containerPort": 8080}}
		d["environment"] = map[string]any{"IMEC_A": "a", "IMEC_B": 2, "IMEC_C": true}
		d["projectGidVariableName"] = "IMEC_GID"
		d["workingDir"] = "/tmp/"
		body["description"] = "every field imec's client sends"
		id, err := r.submit(body, false)
		if err != nil {
			return err
		}
		st, err := r.wait(id, true)
		if err != nil {
			return err
		}
		return expectStatus(st, "FINISHED")
	})
	// --email-queued sets the three lists to the address in the user's certificate.
	r.run("submit --email-queued --email-run --email-done", func() error {
		body := imecNewJob("imec-mail", e.image, "echo mail", project, nil)
		x := body["request"].(map[string]any)["extra"].(map[string]any)
		for _, k := range []string{"emailOnQueue", "emailOnRun", "emailOnEnd"} {
			x[k] = []any{e.alice.Email}
		}
		_, err := r.submit(body, false)
		return err
	})

	r.notApplicable("submit --ssh-pub-key KEY", "imec's client 3.11 adds the option's tuple inside the key list: it sends a list where a key should be, which imec's own master refuses too")
	r.notApplicable("ssh --show ID", "needs SSH access to jobs (a later issue)")
	r.notApplicable("sftp --show ID", "needs SSH access to jobs (a later issue)")
	r.notApplicable("interactive", "opens SSH into the job (a later issue); imec's 3.11 also builds its request as a full Job, which its own model refuses before any call")

	t.Logf("imec's gpulab-cli 3.11 replayed against this master:\n%s", r.table())
	for _, c := range r.cmds {
		if c.err != nil {
			t.Errorf("imec's `%s` fails: %v", c.name, c.err)
		}
	}
}

// table is the replay's log: command, calls, works, and the count.
func (r *imecReplay) table() string {
	var b strings.Builder
	works, total := 0, 0
	for _, c := range r.cmds {
		verdict := "yes"
		switch {
		case c.na != "":
			verdict = "n/a: " + c.na
		case c.err != nil:
			verdict = "NO: " + c.err.Error()
			if len(verdict) > 300 {
				verdict = verdict[:300] + "…"
			}
		}
		if c.na == "" {
			total++
			if c.err == nil {
				works++
			}
		}
		fmt.Fprintf(&b, "  %-28s %-60s %s\n", c.name, strings.Join(compressCalls(c.calls), ", "), verdict)
	}
	fmt.Fprintf(&b, "%d of %d imec commands work", works, total)
	return b.String()
}

// compressCalls writes a run of the same call once, with its count (a wait's polling).
func compressCalls(calls []string) []string {
	var out []string
	for i := 0; i < len(calls); {
		j := i
		for j < len(calls) && calls[j] == calls[i] {
			j++
		}
		if j-i > 1 {
			out = append(out, fmt.Sprintf("%s ×%d", calls[i], j-i))
		} else {
			out = append(out, calls[i])
		}
		i = j
	}
	return out
}
