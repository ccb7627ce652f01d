package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/views"
)

// The Create Job page: a form for the common fields and a JSON editor for the whole job, in one
// <form>. The form posts back, hidden, the values it was rendered with (its base). Fields the
// user changed since override the editor's JSON; the others leave it alone. So a job pasted
// into the editor is submitted as it is, and a field typed into the form wins over the editor.
// Whatever the user did, the document goes through the API's own submit (SubmitJob), and each
// problem it reports is shown next to the form field its path names, or above the editor.

// formFields maps the paths of job problems (version 2, and version 1 as ConvertV1 reports
// them) to the form field that shows them. The longest matching prefix wins.
var formFields = []struct{ path, field string }{
	{"name", "name"},
	{"description", "description"},
	{"owner.projectUrn", "project"},
	{"owner", "project"},
	{"request.docker.image", "image"},
	{"request.docker.command", "command"},
	{"request.docker.environment", "environment"},
	{"request.docker.portMappings", "ports"},
	{"request.docker.storage", "storage"},
	{"request.resources.cpus", "cpus"},
	{"request.resources.gpus", "gpus"},
	{"request.resources.cpuMemoryGb", "cpuMemoryGb"},
	{"request.resources.gpuModel", "gpuModel"},
	{"request.resources.clusterId", "clusterId"},
	{"request.scheduling.interactive", "interactive"},
	{"request.scheduling.restartable", "restartable"},
	{"request.scheduling.minDuration", "minDuration"},
	{"request.scheduling.killableAfter", "minDuration"},
	{"request.scheduling.maxDuration", "maxDuration"},
	{"jobDefinition.name", "name"},
	{"jobDefinition.description", "description"},
	{"jobDefinition.dockerImage", "image"},
	{"jobDefinition.command", "command"},
	{"jobDefinition.environment", "environment"},
	{"jobDefinition.portMappings", "ports"},
	{"jobDefinition.jobDataLocations", "storage"},
	{"jobDefinition.clusterId", "clusterId"},
	{"jobDefinition.resources.cpuCores", "cpus"},
	{"jobDefinition.resources.gpus", "gpus"},
	{"jobDefinition.resources.systemMemory", "cpuMemoryGb"},
	{"jobDefinition.resources.gpuModel", "gpuModel"},
}

// FormField names the Create Job form field that shows a problem at path, "" when none does
// (the problem is then listed above the JSON editor). A problem below a field's path
// (request.docker.storage[1].containerPath) belongs to that field.
func FormField(path string) string {
	f, _ := fieldOf(path)
	return f
}

// fieldOf finds the field of a path (the longest matching prefix wins) and the rest of the
// path below it.
func fieldOf(path string) (field, rest string) {
	bestLen := -1
	for _, f := range formFields {
		r, ok := strings.CutPrefix(path, f.path)
		if ok && (r == "" || r[0] == '.' || r[0] == '[') && len(f.path) > bestLen {
			field, rest, bestLen = f.field, strings.TrimPrefix(r, "."), len(f.path)
		}
	}
	return field, rest
}

// fieldMessage is a problem as shown next to its field: the part of the path below the field,
// if any, then the message.
func fieldMessage(p job.Problem) string {
	if _, rest := fieldOf(p.Path); rest != "" {
		return rest + ": " + p.Message
	}
	return p.Message
}

// NewJobPage is GET /jobs/new: an empty form, or with ?clone=<id> the form and editor filled
// with that job's submission (its image password hidden, as everywhere it is shown).
func (h *Handlers) NewJobPage(w http.ResponseWriter, r *http.Request) error {
	c, err := requireUser(r)
	if err != nil {
		return err
	}
	v, err := h.jobFormView(r, c)
	if err != nil {
		return err
	}
	var doc map[string]any
	if id := r.URL.Query().Get("clone"); id != "" {
		r.SetPathValue("id", id)
		rec, err := h.findJob(r, c)
		if err != nil {
			return err
		}
		if doc, err = toDoc(job.Submission(rec.Job.Redacted())); err != nil {
			return err
		}
		img, _ := job.ParseImage(rec.Job.Request.Docker.Image)
		v.CloneOf, v.ImagePasswordHidden = rec.Job.UUID, img.HasCredentials()
		v.Notice = "A copy of job " + rec.Job.Name + ": change what you need and submit it as a new job."
	} else {
		doc = newJobDoc(v.Projects)
	}
	v.setDoc(doc)
	return h.render(w, r, http.StatusOK, views.JobFormPage(v.JobFormView))
}

// jobForm is the page's view with its select choices.
type jobForm struct{ views.JobFormView }

func (h *Handlers) jobFormView(r *http.Request, c *Caller) (jobForm, error) {
	v := jobForm{views.JobFormView{Chrome: h.chrome(r, views.NavCreate), FieldErrors: map[string][]string{}}}
	var err error
	if v.Projects, err = h.projectChoices(r, c, true); err != nil {
		return v, err
	}
	if v.Clusters, err = h.clusterChoices(r); err != nil {
		return v, err
	}
	return v, nil
}

// setDoc shows a document in both the editor and the form, the form's base being what it shows.
func (v *jobForm) setDoc(doc map[string]any) {
	v.JSON = encodeDoc(doc)
	v.Form = formFromDoc(doc)
	v.Base = encodeBase(v.Form)
}

// setProblems shows an error: each problem next to its field, the rest above the editor.
func (v *jobForm) setProblems(ev views.ErrorView) {
	if len(ev.Details) == 0 {
		v.Errors = append(v.Errors, ev.Message)
		return
	}
	for _, p := range ev.Details {
		if f := FormField(p.Path); f != "" {
			v.FieldErrors[f] = append(v.FieldErrors[f], fieldMessage(p))
		} else {
			v.Errors = append(v.Errors, p.String())
		}
	}
}

// newJobDoc is the document a new job starts from: the required fields with small defaults,
// one GPU among them (a GPU lab's job wants one; CPU-only jobs set 0).
func newJobDoc(projects []views.Choice) map[string]any {
	doc := map[string]any{
		"name": "",
		"request": map[string]any{
			"resources":  map[string]any{"cpus": json.Number("1"), "gpus": json.Number("1"), "cpuMemoryGb": json.Number("2")},
			"docker":     map[string]any{"image": "", "command": ""},
			"scheduling": map[string]any{"interactive": false, "restartable": false},
		},
	}
	if len(projects) == 1 {
		doc["owner"] = map[string]any{"projectUrn": projects[0].Value}
	}
	return doc
}

// NewJobForm is POST /jobs/new. action=submit (the default) submits through the API's
// SubmitJob and redirects to the new job; convert runs the API's convert on the editor (v1 in,
// v2 out); apply writes the form's changes into the editor without submitting.
func (h *Handlers) NewJobForm(w http.ResponseWriter, r *http.Request) error {
	c, err := requireUser(r)
	if err != nil {
		return err
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	v, err := h.jobFormView(r, c)
	if err != nil {
		return err
	}
	pf := r.PostForm
	form := formFromRequest(pf)
	base := decodeBase(pf.Get("base"))
	text := strings.TrimSpace(pf.Get("json"))
	if text == "" {
		// No JSON: the form is the whole job.
		base = views.JobForm{}
	}
	v.Form, v.Base, v.JSON = form, encodeBase(form), prettyDoc(text)
	v.Hold = pf.Get("hold") == "true"
	v.CloneOf = pf.Get("clone")
	fail := func(err error) error {
		ev := h.errorView(w, r, err)
		v.setProblems(ev)
		return h.render(w, r, ev.Status, views.JobFormPage(v.JobFormView))
	}
	switch action := pf.Get("action"); action {
	case "convert":
		if text == "" {
			return fail(fieldError("json", "the JSON editor is empty: paste a version 1 job (`{\"jobDefinition\": …}`) to convert it"))
		}
		cw, err := apiCall(r, h.Convert, http.MethodPost, "", "", []byte(text))
		if err != nil {
			return fail(err)
		}
		doc, err := decodeDoc(cw.body.String())
		if err != nil {
			return err
		}
		v.setDoc(doc)
		v.Notice = "Converted from version 1: the editor and the form show the version 2 job. Nothing was submitted yet."
		if !job.IsV1([]byte(text)) {
			v.Notice = "This is a version 2 job already: the editor shows it normalised, with the defaults filled in. Nothing was submitted yet."
		}
		return h.render(w, r, http.StatusOK, views.JobFormPage(v.JobFormView))
	case "apply":
		doc, err := h.mergeForm(text, form, base)
		if err != nil {
			return fail(err)
		}
		v.JSON = encodeDoc(doc)
		v.Notice = "The form's changes are in the JSON now. Nothing was submitted yet."
		return h.render(w, r, http.StatusOK, views.JobFormPage(v.JobFormView))
	case "", "submit":
		body := []byte(text)
		if form != base || text == "" {
			doc, err := h.mergeForm(text, form, base)
			if err != nil {
				return fail(err)
			}
			v.JSON = encodeDoc(doc)
			body = []byte(v.JSON)
		} else if doc, err := decodeDoc(text); err == nil {
			// The editor alone is submitted: the form shows what it holds, so problems shown
			// next to a field match what the field says.
			v.Form = formFromDoc(doc)
			v.Base = encodeBase(v.Form)
		}
		query := ""
		if v.Hold {
			query = "hold=true"
		}
		cw, err := apiCall(r, h.SubmitJob, http.MethodPost, "", query, body)
		if err != nil {
			return fail(err)
		}
		id := strings.TrimSpace(cw.body.String())
		return seeOther(w, r, "/jobs/"+id)
	default:
		return fail(fieldError("action", "must be submit, convert or apply, not %q", action))
	}
}

// prettyDoc is the editor's text as the page shows it back: a document pasted on one line is
// laid out one field a line (unreadable otherwise). Text of several lines stays as the user
// laid it out, and text that is no document as it was, so that problems' line numbers match.
func prettyDoc(text string) string {
	if strings.Contains(text, "\n") {
		return text
	}
	doc, err := decodeDoc(text)
	if err != nil {
		return text
	}
	return encodeDoc(doc)
}

// mergeForm is the editor's document with the form fields that changed since the form was
// rendered (base) written into it. A version 1 document is converted first. Problems of the
// form's own notation (an environment line without '=') are reported with the paths of the
// fields they belong to, together with the API's problems of the merged document, and nothing
// is submitted.
func (h *Handlers) mergeForm(text string, form, base views.JobForm) (map[string]any, error) {
	doc := map[string]any{}
	if text != "" {
		var err error
		if doc, err = decodeDoc(text); err != nil {
			// The API's parser says where the fault is (line and column).
			if _, perr := job.Parse([]byte(text), h.cfg.JobOptions); perr != nil {
				var se *job.SyntaxError
				if errors.As(perr, &se) {
					return nil, perr
				}
			}
			return nil, fieldError("json", "the JSON editor does not hold one plain JSON object (%v): fix it, or submit it without changing the form", err)
		}
		if job.IsV1([]byte(text)) {
			j, err := job.Parse([]byte(text), h.cfg.JobOptions)
			if err != nil {
				return nil, err
			}
			if doc, err = toDoc(job.Submission(j)); err != nil {
				return nil, err
			}
		}
	}
	problems := applyForm(doc, form, base)
	if len(problems) > 0 {
		data, err := json.Marshal(doc)
		if err != nil {
			return nil, err
		}
		var ve *job.ValidationError
		if _, err := job.Parse(data, h.cfg.JobOptions); errors.As(err, &ve) {
			seen := map[string]bool{}
			for _, p := range problems {
				seen[FormField(p.Path)] = true
			}
			for _, p := range ve.Problems {
				if f := FormField(p.Path); f == "" || !seen[f] {
					problems = append(problems, p)
				}
			}
		}
		return nil, &job.ValidationError{Problems: problems}
	}
	return doc, nil
}

// formFromRequest reads the form fields of a post; text is normalised as browsers differ
// (CRLF in text areas, surrounding blanks), so an untouched field compares equal to its base.
func formFromRequest(pf map[string][]string) views.JobForm {
	get := func(k string) string {
		if vs := pf[k]; len(vs) > 0 {
			return normText(vs[0])
		}
		return ""
	}
	return views.JobForm{
		Name: get("name"), Description: get("description"), Project: get("project"),
		Image: get("image"), Command: get("command"),
		CPUs: get("cpus"), GPUs: get("gpus"), CPUMemoryGb: get("cpuMemoryGb"), GPUModel: get("gpuModel"), ClusterID: get("clusterId"),
		Interactive: get("interactive") == "true", Restartable: get("restartable") == "true",
		MinDuration: get("minDuration"), MaxDuration: get("maxDuration"),
		Ports: get("ports"), Storage: get("storage"), Environment: get("environment"),
	}
}

func normText(s string) string {
	return strings.TrimSpace(strings.ReplaceAll(s, "\r\n", "\n"))
}

func encodeBase(f views.JobForm) string {
	b, _ := json.Marshal(f)
	return string(b)
}

// decodeBase reads the base a form was rendered with; a missing or broken one is the empty
// form, so every field the user filled counts as changed.
func decodeBase(s string) views.JobForm {
	var f views.JobForm
	if json.Unmarshal([]byte(s), &f) != nil {
		return views.JobForm{}
	}
	return f
}

// decodeDoc reads a JSON object, numbers kept exact.
func decodeDoc(text string) (map[string]any, error) {
	d := json.NewDecoder(strings.NewReader(text))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, errors.New("text after the JSON object")
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("a job must be a JSON object")
	}
	return m, nil
}

// toDoc turns a value into a generic document.
func toDoc(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return decodeDoc(string(b))
}

// docGet reads a value at a dotted path.
func docGet(doc map[string]any, path string) (any, bool) {
	parts := strings.Split(path, ".")
	var cur any = doc
	for _, p := range parts {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[p]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// docSet writes a value at a dotted path, making the objects on the way; nil deletes it.
func docSet(doc map[string]any, path string, v any) {
	parts := strings.Split(path, ".")
	m := doc
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			if v == nil {
				return
			}
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	last := parts[len(parts)-1]
	if v == nil {
		delete(m, last)
		return
	}
	m[last] = v
}

// scalarText shows a scalar of a document as the form does.
func scalarText(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case json.Number:
		return x.String()
	case bool:
		return strconv.FormatBool(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func docText(doc map[string]any, path string) string {
	v, _ := docGet(doc, path)
	return scalarText(v)
}

// formFromDoc shows a document in the form's notation (see applyForm for the way back).
func formFromDoc(doc map[string]any) views.JobForm {
	f := views.JobForm{
		Name:        docText(doc, "name"),
		Description: docText(doc, "description"),
		Project:     docText(doc, "owner.projectUrn"),
		Image:       docText(doc, "request.docker.image"),
		CPUs:        docText(doc, "request.resources.cpus"),
		GPUs:        docText(doc, "request.resources.gpus"),
		CPUMemoryGb: docText(doc, "request.resources.cpuMemoryGb"),
		ClusterID:   docText(doc, "request.resources.clusterId"),
		MinDuration: durationText(doc, "request.scheduling.minDuration", "request.scheduling.killableAfter"),
		MaxDuration: durationText(doc, "request.scheduling.maxDuration"),
	}
	f.Interactive, _ = docGetBool(doc, "request.scheduling.interactive")
	f.Restartable, _ = docGetBool(doc, "request.scheduling.restartable")
	switch cmd, _ := docGet(doc, "request.docker.command"); x := cmd.(type) {
	case []any:
		words := make([]string, len(x))
		for i, w := range x {
			words[i] = shellQuote(scalarText(w))
		}
		f.Command = strings.Join(words, " ")
	default:
		f.Command = scalarText(x)
	}
	switch gm, _ := docGet(doc, "request.resources.gpuModel"); x := gm.(type) {
	case []any:
		models := make([]string, len(x))
		for i, m := range x {
			models[i] = scalarText(m)
		}
		f.GPUModel = strings.Join(models, ", ")
	default:
		f.GPUModel = scalarText(x)
	}
	if ports, ok := docGet(doc, "request.docker.portMappings"); ok {
		if list, ok := ports.([]any); ok {
			parts := make([]string, 0, len(list))
			for _, p := range list {
				parts = append(parts, portText(p))
			}
			f.Ports = strings.Join(parts, ", ")
		}
	}
	if st, ok := docGet(doc, "request.docker.storage"); ok {
		if list, ok := st.([]any); ok {
			lines := make([]string, 0, len(list))
			for _, s := range list {
				lines = append(lines, storageText(s))
			}
			f.Storage = strings.Join(lines, "\n")
		}
	}
	if env, ok := docGet(doc, "request.docker.environment"); ok {
		if m, ok := env.(map[string]any); ok {
			names := make([]string, 0, len(m))
			for k := range m {
				names = append(names, k)
			}
			sort.Strings(names)
			lines := make([]string, len(names))
			for i, k := range names {
				lines[i] = k + "=" + scalarText(m[k])
			}
			f.Environment = strings.Join(lines, "\n")
		}
	}
	return f
}

func docGetBool(doc map[string]any, path string) (bool, bool) {
	v, _ := docGet(doc, path)
	b, ok := v.(bool)
	return b, ok
}

// durationText shows a duration as written; a bare number is seconds.
func durationText(doc map[string]any, paths ...string) string {
	for _, p := range paths {
		if v, ok := docGet(doc, p); ok {
			if n, ok := v.(json.Number); ok {
				return n.String() + "s"
			}
			return scalarText(v)
		}
	}
	return ""
}

func portText(p any) string {
	m, ok := p.(map[string]any)
	if !ok {
		return scalarText(p)
	}
	s := scalarText(m["containerPort"])
	if hp := scalarText(m["hostPort"]); hp != "" {
		s = hp + ":" + s
		if ip := scalarText(m["hostIp"]); ip != "" {
			s = ip + ":" + s
		}
	}
	return s
}

func storageText(s any) string {
	m, ok := s.(map[string]any)
	if !ok {
		return scalarText(s)
	}
	host, ctr := scalarText(m["hostPath"]), scalarText(m["containerPath"])
	switch {
	case host == job.TmpfsHostPath:
		out := "tmpfs:" + ctr
		if size := scalarText(m["sizeGb"]); size != "" {
			out += ":" + size
		}
		return out
	case host == "" || host == ctr:
		if ctr == "" {
			return host
		}
		return ctr
	case ctr == "":
		return host
	}
	return host + ":" + ctr
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// shellQuote writes a word so that the POSIX splitting of a command string gives it back.
func shellQuote(w string) string {
	if shellSafe.MatchString(w) {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}

// applyForm writes into doc the form fields that differ from base, in the document's notation.
// It returns the problems of the form's own notation, with the path of the field.
func applyForm(doc map[string]any, f, base views.JobForm) []job.Problem {
	var problems []job.Problem
	str := func(path, v, old string) {
		if v == old {
			return
		}
		if v == "" {
			docSet(doc, path, nil)
			return
		}
		docSet(doc, path, v)
	}
	num := func(path, v, old string) {
		if v == old {
			return
		}
		switch n, err := strconv.Atoi(v); {
		case v == "":
			docSet(doc, path, nil)
		case err == nil:
			docSet(doc, path, n)
		default:
			// Left as typed: the API's validation names the field and says what is wrong.
			docSet(doc, path, v)
		}
	}
	boolean := func(path string, v, old bool) {
		if v != old {
			docSet(doc, path, v)
		}
	}
	str("name", f.Name, base.Name)
	str("description", f.Description, base.Description)
	str("owner.projectUrn", f.Project, base.Project)
	if owner, ok := doc["owner"].(map[string]any); ok && len(owner) == 0 {
		delete(doc, "owner")
	}
	str("request.docker.image", f.Image, base.Image)
	str("request.docker.command", f.Command, base.Command)
	num("request.resources.cpus", f.CPUs, base.CPUs)
	num("request.resources.gpus", f.GPUs, base.GPUs)
	num("request.resources.cpuMemoryGb", f.CPUMemoryGb, base.CPUMemoryGb)
	num("request.resources.clusterId", f.ClusterID, base.ClusterID)
	if f.GPUModel != base.GPUModel {
		var models []any
		for _, m := range strings.Split(f.GPUModel, ",") {
			if m = strings.TrimSpace(m); m != "" {
				models = append(models, m)
			}
		}
		switch len(models) {
		case 0:
			docSet(doc, "request.resources.gpuModel", nil)
		case 1:
			docSet(doc, "request.resources.gpuModel", models[0])
		default:
			docSet(doc, "request.resources.gpuModel", models)
		}
	}
	boolean("request.scheduling.interactive", f.Interactive, base.Interactive)
	boolean("request.scheduling.restartable", f.Restartable, base.Restartable)
	if f.MinDuration != base.MinDuration {
		docSet(doc, "request.scheduling.killableAfter", nil)
		str("request.scheduling.minDuration", f.MinDuration, base.MinDuration)
	}
	str("request.scheduling.maxDuration", f.MaxDuration, base.MaxDuration)
	if f.Ports != base.Ports {
		ports, ps := parsePorts(f.Ports)
		problems = append(problems, ps...)
		docSet(doc, "request.docker.portMappings", nilIfEmpty(ports))
	}
	if f.Storage != base.Storage {
		st, ps := parseStorage(f.Storage)
		problems = append(problems, ps...)
		docSet(doc, "request.docker.storage", nilIfEmpty(st))
	}
	if f.Environment != base.Environment {
		env, ps := parseEnvironment(f.Environment)
		problems = append(problems, ps...)
		if len(env) == 0 {
			docSet(doc, "request.docker.environment", nil)
		} else {
			docSet(doc, "request.docker.environment", env)
		}
	}
	return problems
}

func nilIfEmpty(list []any) any {
	if len(list) == 0 {
		return nil
	}
	return list
}

// parsePorts reads "8888, 9000:8888, 127.0.0.1:9001:8889" (docker's -p order: host before
// container).
func parsePorts(s string) ([]any, []job.Problem) {
	var out []any
	var problems []job.Problem
	const path = "request.docker.portMappings"
	for _, e := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' }) {
		parts := strings.Split(e, ":")
		nums := make([]int, 0, 2)
		ok := len(parts) <= 3
		for _, p := range parts[max(len(parts)-2, 0):] {
			n, err := strconv.Atoi(p)
			if err != nil {
				ok = false
				break
			}
			nums = append(nums, n)
		}
		if !ok {
			problems = append(problems, job.Problem{Path: path, Message: fmt.Sprintf("%q is not containerPort, hostPort:containerPort or hostIp:hostPort:containerPort", e)})
			continue
		}
		switch len(parts) {
		case 1:
			out = append(out, nums[0])
		case 2:
			out = append(out, map[string]any{"hostPort": nums[0], "containerPort": nums[1]})
		case 3:
			out = append(out, map[string]any{"hostIp": parts[0], "hostPort": nums[0], "containerPort": nums[1]})
		}
	}
	return out, problems
}

// parseStorage reads one mount a line: a path, hostPath:containerPath, or tmpfs:/path:sizeGb.
func parseStorage(s string) ([]any, []job.Problem) {
	var out []any
	var problems []job.Problem
	const path = "request.docker.storage"
	for i, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		parts := strings.Split(line, ":")
		switch {
		case parts[0] == job.TmpfsHostPath:
			if len(parts) < 2 || len(parts) > 3 || parts[1] == "" {
				problems = append(problems, job.Problem{Path: path, Message: fmt.Sprintf("line %d: a RAM disk is tmpfs:/path:sizeGb, not %q", i+1, line)})
				continue
			}
			m := map[string]any{"hostPath": job.TmpfsHostPath, "containerPath": parts[1]}
			if len(parts) == 3 {
				n, err := strconv.Atoi(parts[2])
				if err != nil {
					problems = append(problems, job.Problem{Path: path, Message: fmt.Sprintf("line %d: the size of a RAM disk is a whole number of GB, not %q", i+1, parts[2])})
					continue
				}
				m["sizeGb"] = n
			}
			out = append(out, m)
		case len(parts) == 1:
			out = append(out, line)
		case len(parts) == 2:
			out = append(out, map[string]any{"hostPath": parts[0], "containerPath": parts[1]})
		default:
			problems = append(problems, job.Problem{Path: path, Message: fmt.Sprintf("line %d: expected a path or hostPath:containerPath, not %q", i+1, line)})
		}
	}
	return out, problems
}

// parseEnvironment reads one NAME=value a line.
func parseEnvironment(s string) (map[string]any, []job.Problem) {
	out := map[string]any{}
	var problems []job.Problem
	for i, line := range strings.Split(s, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			problems = append(problems, job.Problem{Path: "request.docker.environment", Message: fmt.Sprintf("line %d: expected NAME=value, not %q", i+1, strings.TrimSpace(line))})
			continue
		}
		out[name] = value
	}
	return out, problems
}

// keyOrder puts a job's keys in the order people read them (name first, the request's parts
// in the order of the documentation); other keys follow alphabetically.
var keyOrder = map[string]int{}

func init() {
	for i, k := range []string{
		"name", "description", "owner", "deploymentEnvironment", "request", "jobDefinition",
		"resources", "docker", "scheduling", "extra",
		"cpus", "gpus", "cpuMemoryGb", "gpuMemoryGb", "gpuModel", "minCudaVersion", "clusterId", "slaveName", "slaveInstanceId", "features",
		"image", "command", "environment", "storage", "portMappings", "projectGidVariableName", "workingDir", "user", "groupAdd",
		"interactive", "restartable", "allowHaltWithoutSignal", "minDuration", "maxDuration", "notBefore", "notAfter", "maxSimultaneousJobs", "reservationIds",
		"projectUrn", "hostPath", "containerPath", "sizeGb", "hostIp", "hostPort", "containerPort", "bucketName", "bucketMax",
	} {
		keyOrder[k] = i + 1
	}
}

// encodeDoc writes a document as indented JSON, keys in keyOrder.
func encodeDoc(doc map[string]any) string {
	var b bytes.Buffer
	writeOrdered(&b, doc, "")
	return b.String()
}

func writeOrdered(b *bytes.Buffer, v any, indent string) {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			b.WriteString("{}")
			return
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			oi, oj := keyOrder[keys[i]], keyOrder[keys[j]]
			switch {
			case oi > 0 && oj > 0:
				return oi < oj
			case oi > 0 || oj > 0:
				return oi > 0
			}
			return keys[i] < keys[j]
		})
		b.WriteString("{\n")
		for i, k := range keys {
			b.WriteString(indent + "  ")
			writeScalar(b, k)
			b.WriteString(": ")
			writeOrdered(b, x[k], indent+"  ")
			if i < len(keys)-1 {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		b.WriteString(indent + "}")
	case []any:
		if len(x) == 0 {
			b.WriteString("[]")
			return
		}
		b.WriteString("[\n")
		for i, e := range x {
			b.WriteString(indent + "  ")
			writeOrdered(b, e, indent+"  ")
			if i < len(x)-1 {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		b.WriteString(indent + "]")
	default:
		writeScalar(b, x)
	}
}

func writeScalar(b *bytes.Buffer, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	b.Write(bytes.TrimRight(buf.Bytes(), "\n"))
}
