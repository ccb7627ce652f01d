package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/job"
)

// formOf is the Create Job form as the page rendered it: every named control with its value,
// as a browser would post it untouched.
func formOf(t *testing.T, r *pageResponse) url.Values {
	t.Helper()
	form := r.one("id", "job-form")
	v := url.Values{}
	for _, n := range findAll(form, "name", "") {
		name := attrOf(n, "name")
		switch {
		case n.Data == "button":
			continue
		case n.Data == "textarea":
			v.Set(name, strings.ReplaceAll(strings.TrimPrefix(textOf(n), "\n"), "\n", "\r\n")) // as browsers post text areas
		case n.Data == "select":
			v.Set(name, r.fieldValue(attrOf(n, "id")))
		case attrOf(n, "type") == "checkbox":
			for _, a := range n.Attr {
				if a.Key == "checked" {
					v.Set(name, attrOf(n, "value"))
				}
			}
		default:
			v.Set(name, attrOf(n, "value"))
		}
	}
	return v
}

func (p *portal) jobAt(location string) *job.Job {
	p.t.Helper()
	id, ok := strings.CutPrefix(location, "/jobs/")
	if !ok {
		p.t.Fatalf("redirected to %q, not to a job", location)
	}
	rec, err := p.m.Store.GetJob(context.Background(), id)
	if err != nil {
		p.t.Fatal(err)
	}
	return rec.Job
}

func fieldErrors(r *pageResponse) map[string]string {
	out := map[string]string{}
	for _, n := range r.find("data-testid", "") {
		if f, ok := strings.CutPrefix(attrOf(n, "data-testid"), "error-"); ok && f != "page" && f != "message" {
			out[f] = strings.TrimSpace(textOf(n))
		}
	}
	return out
}

func TestCreateJobForm(t *testing.T) {
	p := newPortal(t)
	alice := p.m.AddUser("alice", false, "", "demo")
	multi := p.m.AddUser("multi", false, "", "demo", "ml")

	t.Run("new form", func(t *testing.T) {
		r := p.get(alice, "/jobs/new").expect(http.StatusOK)
		if r.fieldValue("field-project") != projectURN("demo") || r.fieldValue("field-cpus") != "1" {
			t.Errorf("defaults: project %q cpus %q", r.fieldValue("field-project"), r.fieldValue("field-cpus"))
		}
		var doc map[string]any
		if err := json.Unmarshal([]byte(r.fieldValue("field-json")), &doc); err != nil {
			t.Errorf("editor does not hold JSON: %v", err)
		}
	})

	t.Run("form fields", func(t *testing.T) {
		form := formOf(t, p.get(alice, "/jobs/new").expect(http.StatusOK))
		form.Set("name", "from-form")
		form.Set("image", "debian:stable")
		form.Set("command", "python3 train.py --epochs '10 20'")
		form.Set("cpus", "4")
		form.Set("gpus", "2")
		form.Set("cpuMemoryGb", "16")
		form.Set("gpuModel", "V100, A100")
		form.Set("ports", "8888, 30900:6006")
		form.Set("storage", "/project\r\ntmpfs:/scratch:4")
		form.Set("environment", "EPOCHS=10\r\nMODE=fast")
		form.Set("interactive", "true")
		form.Set("maxDuration", "2 days")
		r := p.post(alice, "/jobs/new", form).expect(http.StatusSeeOther)
		j := p.jobAt(r.header().Get("Location"))
		req := j.Request
		if j.Name != "from-form" || req.Resources.CPUs != 4 || req.Resources.GPUs != 2 || req.Resources.CPUMemoryGb != 16 ||
			!slices.Equal(req.Resources.GPUModel, []string{"V100", "A100"}) || !req.Scheduling.Interactive ||
			req.Docker.Environment["MODE"] != "fast" || len(req.Docker.PortMappings) != 2 || req.Docker.PortMappings[1].HostPort != 30900 ||
			len(req.Docker.Storage) != 2 || req.Docker.Storage[1].SizeGb != 4 || req.Docker.Command.Text != "python3 train.py --epochs '10 20'" {
			t.Errorf("job from the form: %+v", req)
		}
		if j.State.Status != job.StatusQueued || j.Owner.ProjectURN != projectURN("demo") {
			t.Errorf("status %s project %s", j.State.Status, j.Owner.ProjectURN)
		}
	})

	t.Run("errors next to fields", func(t *testing.T) {
		form := formOf(t, p.get(alice, "/jobs/new").expect(http.StatusOK))
		form.Set("cpus", "0")
		form.Set("maxDuration", "forever")
		form.Set("environment", "NOEQUALS")
		r := p.post(alice, "/jobs/new", form).expect(http.StatusBadRequest)
		errs := fieldErrors(r)
		for _, f := range []string{"name", "image", "cpus", "maxDuration", "environment"} {
			if errs[f] == "" {
				t.Errorf("no error next to %s (errors: %v)", f, errs)
			}
		}
		if !strings.Contains(errs["maxDuration"], "Invalid duration") {
			t.Errorf("duration error %q", errs["maxDuration"])
		}
		if r.fieldValue("field-cpus") != "0" || r.fieldValue("field-maxDuration") != "forever" {
			t.Errorf("typed values are lost")
		}
		r.one("data-testid", "form-errors")
	})

	t.Run("editor as is", func(t *testing.T) {
		form := formOf(t, p.get(alice, "/jobs/new").expect(http.StatusOK))
		form.Set("json", `{"name": "from-json", "description": "pasted", "request": {"resources": {"cpus": 3, "gpus": 0, "cpuMemoryGb": 5, "gpuMemoryGb": 8},
			"docker": {"image": "busybox", "command": ["sh", "-c", "echo a b"]}, "scheduling": {"minDuration": "5 min"}}}`)
		form.Set("hold", "true")
		r := p.post(alice, "/jobs/new", form).expect(http.StatusSeeOther)
		j := p.jobAt(r.header().Get("Location"))
		if j.Name != "from-json" || j.Request.Resources.CPUs != 3 || j.Request.Resources.GPUMemoryGb != 8 ||
			!j.Request.Docker.Command.IsList || j.State.Status != job.StatusOnHold {
			t.Errorf("job from the editor: %+v %s", j.Request, j.State.Status)
		}
	})

	t.Run("editor and form", func(t *testing.T) {
		// The form's changed field wins; the editor supplies the rest.
		form := formOf(t, p.get(alice, "/jobs/new").expect(http.StatusOK))
		form.Set("json", `{"name": "x", "request": {"resources": {"cpus": 3, "gpus": 0, "cpuMemoryGb": 5}, "docker": {"image": "busybox"},
			"extra": {"sshPubKeys": ["ssh-ed25519 AAAA"]}}}`)
		form.Set("name", "renamed")
		r := p.post(alice, "/jobs/new", form).expect(http.StatusSeeOther)
		j := p.jobAt(r.header().Get("Location"))
		if j.Name != "renamed" || j.Request.Resources.CPUs != 3 || len(j.Request.Extra.SSHPubKeys) != 1 || j.Owner.ProjectURN != projectURN("demo") {
			t.Errorf("merged job: %s %+v", j.Name, j.Request)
		}
	})

	t.Run("other problems above the editor", func(t *testing.T) {
		form := formOf(t, p.get(alice, "/jobs/new").expect(http.StatusOK))
		form.Set("json", `{"name": "x", "request": {"resourcs": {}, "docker": {"image": "busybox"}}}`)
		r := p.post(alice, "/jobs/new", form).expect(http.StatusBadRequest)
		if !strings.Contains(textOf(r.one("data-testid", "json-errors")), `request.resourcs`) {
			t.Errorf("unknown key not listed above the editor: %s", textOf(r.one("data-testid", "json-errors")))
		}
		// The editor keeps what the user wrote.
		if !strings.Contains(r.fieldValue("field-json"), "resourcs") {
			t.Errorf("editor lost the text")
		}
	})

	t.Run("syntax error", func(t *testing.T) {
		form := formOf(t, p.get(alice, "/jobs/new").expect(http.StatusOK))
		form.Set("json", "{\n  \"name\": \"x\"\n  \"request\": {}\n}")
		form.Set("name", "changed")
		r := p.post(alice, "/jobs/new", form).expect(http.StatusBadRequest)
		if msg := textOf(r.one("data-testid", "json-errors")); !strings.Contains(msg, "line 3") {
			t.Errorf("syntax error %q", msg)
		}
	})

	t.Run("project required", func(t *testing.T) {
		r := p.get(multi, "/jobs/new").expect(http.StatusOK)
		form := formOf(t, r)
		if form.Get("project") != "" {
			t.Fatalf("a member of two projects gets %q preselected", form.Get("project"))
		}
		form.Set("name", "n")
		form.Set("image", "busybox")
		r = p.post(multi, "/jobs/new", form).expect(http.StatusBadRequest)
		if !strings.Contains(fieldErrors(r)["project"], "is required") {
			t.Errorf("project error: %v", fieldErrors(r))
		}
		form.Set("project", projectURN("ml"))
		r = p.post(multi, "/jobs/new", form).expect(http.StatusSeeOther)
		if j := p.jobAt(r.header().Get("Location")); j.Owner.ProjectURN != projectURN("ml") {
			t.Errorf("project %s", j.Owner.ProjectURN)
		}
	})

	t.Run("convert v1", func(t *testing.T) {
		form := formOf(t, p.get(alice, "/jobs/new").expect(http.StatusOK))
		form.Set("json", `{"jobDefinition": {"name": "old", "dockerImage": "debian:stable", "command": "echo v1",
			"resources": {"systemMemory": 3000, "cpuCores": 2, "gpus": 1}, "jobDataLocations": [{"mountPoint": "/project"}]}}`)
		form.Set("action", "convert")
		r := p.post(alice, "/jobs/new", form).expect(http.StatusOK)
		var doc job.SubmissionDoc
		if err := json.Unmarshal([]byte(r.fieldValue("field-json")), &doc); err != nil {
			t.Fatalf("converted editor: %v", err)
		}
		if doc.Request.Docker.Image != "debian:stable" || doc.Request.Resources.CPUMemoryGb != 3 || doc.Request.Resources.CPUs != 2 {
			t.Errorf("converted: %+v", doc.Request)
		}
		if r.fieldValue("field-image") != "debian:stable" || r.fieldValue("field-name") != "old" {
			t.Errorf("form not filled from the conversion")
		}
		r.one("data-testid", "form-notice")
		// Submitting the converted page as it is gives the job.
		r = p.post(alice, "/jobs/new", formOf(t, r)).expect(http.StatusSeeOther)
		if j := p.jobAt(r.header().Get("Location")); j.Name != "old" || j.Request.Resources.GPUs != 1 {
			t.Errorf("converted job %+v", j.Request)
		}
		// A bad v1 document: its problems with the v1 paths, next to the fields.
		form.Set("json", `{"jobDefinition": {"name": "old", "resources": {"cpuCores": "many"}}}`)
		r = p.post(alice, "/jobs/new", form).expect(http.StatusBadRequest)
		if errs := fieldErrors(r); errs["image"] == "" || errs["cpus"] == "" {
			t.Errorf("v1 problems: %v", errs)
		}
	})

	t.Run("apply", func(t *testing.T) {
		form := formOf(t, p.get(alice, "/jobs/new").expect(http.StatusOK))
		form.Set("gpus", "3")
		form.Set("action", "apply")
		r := p.post(alice, "/jobs/new", form).expect(http.StatusOK)
		if !strings.Contains(r.fieldValue("field-json"), `"gpus": 3`) {
			t.Errorf("editor after apply: %s", r.fieldValue("field-json"))
		}
	})

	t.Run("clone", func(t *testing.T) {
		id := p.submit(alice, `{"name": "private", "owner": {"projectUrn": "`+projectURN("demo")+`"}, "request": {"resources": {"cpus": 2, "gpus": 0, "cpuMemoryGb": 1},
			"docker": {"image": "me:s3cret@reg.example.org/team/img:1", "environment": {"A": "1"}}}}`)
		r := p.get(alice, "/jobs/new?clone="+id[:8]).expect(http.StatusOK)
		if strings.Contains(r.body(), "s3cret") {
			t.Fatalf("the clone shows the image password")
		}
		r.one("data-testid", "image-password-hidden")
		if r.fieldValue("field-name") != "private" || r.fieldValue("field-image") != "me:XXXX@reg.example.org/team/img:1" ||
			r.fieldValue("field-environment") != "A=1" || r.fieldValue("field-cpus") != "2" {
			t.Errorf("clone form: name %q image %q", r.fieldValue("field-name"), r.fieldValue("field-image"))
		}
		if !strings.Contains(r.fieldValue("field-json"), `"me:XXXX@reg.example.org/team/img:1"`) {
			t.Errorf("clone editor")
		}
		form := formOf(t, r)
		form.Set("image", "me:newpass@reg.example.org/team/img:1")
		r = p.post(alice, "/jobs/new", form).expect(http.StatusSeeOther)
		if j := p.jobAt(r.header().Get("Location")); j.Request.Docker.Image != "me:newpass@reg.example.org/team/img:1" || j.Request.Docker.Environment["A"] != "1" {
			t.Errorf("cloned job %+v", j.Request.Docker)
		}
		// Only jobs the user may see can be cloned.
		other := p.m.AddUser("other", false, "", "elsewhere")
		p.get(other, "/jobs/new?clone="+id).expect(http.StatusNotFound)
	})

	t.Run("no projects", func(t *testing.T) {
		lone := p.m.AddUser("lone", false, "")
		r := p.get(lone, "/jobs/new").expect(http.StatusOK)
		r.one("data-testid", "no-projects")
		form := formOf(t, r)
		form.Set("name", "n")
		form.Set("image", "busybox")
		r = p.post(lone, "/jobs/new", form).expect(http.StatusForbidden)
		if !strings.Contains(textOf(r.one("data-testid", "json-errors")), "not a member of any project") {
			t.Errorf("403 message")
		}
	})
}
