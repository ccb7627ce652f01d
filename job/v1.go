package job

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"strconv"
	"strings"
)

// V1DefaultSystemMemoryMB is the memory a version 1 job gets when it names none: imec's own
// example value (2000 MB, "2GB"), which becomes cpuMemoryGb 2.
const V1DefaultSystemMemoryMB = 2000

// IsV1 reports whether data is a version 1 job (an object with a "jobDefinition" or an
// "nvdocker_data" key), so that callers can say "converted from version 1" or offer the
// conversion.
func IsV1(data []byte) bool {
	tree, _, err := decodeDocument(data, Limits{})
	if err != nil {
		return false
	}
	top, ok := tree.(map[string]any)
	return ok && isV1Tree(top)
}

// isV1Tree reports whether a document is a version 1 job by imec's own test: it has a
// jobDefinition, or the nvdocker_data that wraps one in the jobs imec's v1 master stored.
func isV1Tree(top map[string]any) bool {
	_, def := top["jobDefinition"]
	_, nv := top["nvdocker_data"]
	return def || nv
}

// ConvertV1 converts a version 1 job (`{"jobDefinition": {...}}`) to a version 2 job and
// validates it, like Parse; it refuses a version 2 document, for callers (the CLI's convert)
// that must be sure they were given the old format. Problems are reported with the version 1
// paths the user wrote (`jobDefinition.dockerImage`, `jobDefinition.resources.cpuCores`).
func ConvertV1(data []byte, opts Options) (*Job, error) {
	tree, pre, err := decodeDocument(data, opts.Limits)
	if err != nil {
		return nil, err
	}
	r := newReader(opts)
	r.problems = pre
	top, ok := tree.(map[string]any)
	if !ok {
		r.add("", "a job must be a JSON object, not "+describe(tree))
		return r.finish(nil)
	}
	if !isV1Tree(top) {
		r.add("jobDefinition", "is required: this is not a version 1 job")
		return r.finish(nil)
	}
	return r.convertV1(top)
}

// onlyKeysV1 is onlyKeys with imec's version 1 message, capital K included.
func (r *reader) onlyKeysV1(p string, m map[string]any, allowed ...string) {
	for _, k := range sortedKeys(m) {
		if !slices.Contains(allowed, k) {
			kp := joinPath(p, k)
			r.add(kp, fmt.Sprintf("Invalid Key %q", kp))
		}
	}
}

// v1TopKeys are the top-level keys of a version 1 file besides its jobDefinition: imec's old
// clients wrote the project and the e-mail wishes next to it, and imec's Job1 carries the
// e-mail lists and SSH keys at the top.
var v1TopKeys = []string{"jobDefinition", "nvdocker_data", "owner", "project", "email_run", "email_done",
	"emails_queue", "emails_run", "emails_end", "ssh_pubkeys"}

// v1EmailSources are, per version 2 e-mail list, the version 1 keys (top level or in
// nvdocker_data) that fill it, as imec's convert_job1_to_job2 fills them.
var v1EmailSources = []struct{ to, from string }{
	{"emailOnQueue", "emails_queue"},
	{"emailOnRun", "email_run"}, {"emailOnRun", "emails_run"},
	{"emailOnEnd", "email_done"}, {"emailOnEnd", "emails_end"},
}

// convertV1 rewrites the version 1 tree into a version 2 tree, then validates that with the
// version 2 rules, translating problem paths back to where the user wrote each value.
func (r *reader) convertV1(top map[string]any) (*Job, error) {
	jd := "jobDefinition"
	r.legacy = true
	for _, k := range sortedKeys(top) {
		switch {
		case slices.Contains(v1TopKeys, k):
		case k == "request":
			r.add("request", "a version 2 request cannot be combined with a version 1 jobDefinition")
		default:
			r.add(k, fmt.Sprintf("Invalid Key %q", k))
		}
	}
	// nvdocker_data wraps the jobDefinition (and may carry the e-mail wishes and SSH keys)
	// in the jobs imec's v1 master stored and its clients printed.
	var nv map[string]any
	if v, ok := get(top, "nvdocker_data"); ok {
		if nv, ok = r.object("nvdocker_data", v); !ok {
			return r.finish(nil)
		}
		r.onlyKeysV1("nvdocker_data", nv, "jobDefinition", "ssh_pubkeys", "email_run", "email_done",
			"emails_queue", "emails_run", "emails_end")
		if _, both := top["jobDefinition"]; both {
			r.add("nvdocker_data.jobDefinition", "give the jobDefinition once: at the top or in nvdocker_data, not both")
			return r.finish(nil)
		}
		jd = "nvdocker_data.jobDefinition"
	}
	v, ok := get(top, "jobDefinition")
	if nv != nil {
		v, ok = get(nv, "jobDefinition")
	}
	if !ok {
		r.add(jd, "is required")
		return r.finish(nil)
	}
	def, ok := r.object(jd, v)
	if !ok {
		return r.finish(nil)
	}
	// jobType ("BATCH") is stored by imec and never read; userUidVariableName is deprecated
	// and does nothing (imec says so): both are accepted, checked to be strings, and dropped.
	r.onlyKeysV1(jd, def, "name", "description", "dockerImage", "command", "clusterId", "resources",
		"jobDataLocations", "portMappings", "environment", "projectGidVariableName", "workingDir",
		"dockerUser", "dockerGroupAdd", "ssh_pubkeys", "jobType", "userUidVariableName")
	for _, k := range []string{"jobType", "userUidVariableName"} {
		if v, ok := get(def, k); ok {
			r.str(joinPath(jd, k), v)
		}
	}

	// Paths in the version 2 tree → paths in the user's document; longest match wins.
	paths := map[string]string{
		"name":                                  jd + ".name",
		"description":                           jd + ".description",
		"request":                               jd,
		"request.resources":                     jd + ".resources",
		"request.resources.cpus":                jd + ".resources.cpuCores",
		"request.resources.cpuMemoryGb":         jd + ".resources.systemMemory",
		"request.resources.clusterId":           jd + ".clusterId",
		"request.docker":                        jd,
		"request.docker.image":                  jd + ".dockerImage",
		"request.docker.storage":                jd + ".jobDataLocations",
		"request.docker.user":                   jd + ".dockerUser",
		"request.docker.groupAdd":               jd + ".dockerGroupAdd",
		"request.extra":                         jd,
		"request.extra.sshPubKeys":              jd + ".ssh_pubkeys",
		"request.scheduling":                    jd,
		"request.docker.portMappings":           jd + ".portMappings",
		"request.docker.environment":            jd + ".environment",
		"request.docker.command":                jd + ".command",
		"request.docker.workingDir":             jd + ".workingDir",
		"request.docker.projectGidVariableName": jd + ".projectGidVariableName",
	}
	for _, k := range []string{"gpus", "gpuModel", "minCudaVersion"} {
		paths["request.resources."+k] = jd + ".resources." + k
	}

	docker := map[string]any{}
	resources := map[string]any{
		"cpus":        json.Number("1"),
		"gpus":        json.Number("0"),
		"cpuMemoryGb": json.Number(strconv.Itoa(memoryGb(V1DefaultSystemMemoryMB))),
	}
	extra := map[string]any{}
	v2 := map[string]any{
		"request": map[string]any{"resources": resources, "docker": docker, "extra": extra},
	}
	copyKey := func(dst map[string]any, to, from string) {
		if v, ok := get(def, from); ok {
			dst[to] = v
		}
	}
	copyKey(v2, "name", "name")
	copyKey(v2, "description", "description")
	copyKey(docker, "image", "dockerImage")
	copyKey(docker, "command", "command")
	copyKey(docker, "environment", "environment")
	copyKey(docker, "projectGidVariableName", "projectGidVariableName")
	copyKey(docker, "workingDir", "workingDir")
	copyKey(docker, "user", "dockerUser")
	copyKey(docker, "groupAdd", "dockerGroupAdd")
	copyKey(extra, "sshPubKeys", "ssh_pubkeys")
	r.v1Extra(top, nv, extra, paths)
	r.v1Project(top, v2, paths)

	// clusterId: an int, a string, or a list of which the first counts.
	if c, ok := get(def, "clusterId"); ok {
		if list, isList := c.([]any); isList {
			if len(list) > 0 && list[0] != nil {
				resources["clusterId"] = list[0]
				paths["request.resources.clusterId"] = jd + ".clusterId[0]"
			}
		} else if s, isStr := c.(string); !isStr || strings.TrimSpace(s) != "" {
			resources["clusterId"] = c
		}
	}

	if rv, ok := get(def, "resources"); ok {
		rp := jd + ".resources"
		if rm, ok := r.object(rp, rv); ok {
			r.onlyKeysV1(rp, rm, "systemMemory", "cpuCores", "gpus", "gpuModel", "minCudaVersion")
			copyFrom := func(to, from string) {
				if v, ok := get(rm, from); ok {
					resources[to] = v
				}
			}
			copyFrom("cpus", "cpuCores")
			copyFrom("gpus", "gpus")
			copyFrom("gpuModel", "gpuModel")
			copyFrom("minCudaVersion", "minCudaVersion")
			if mv, ok := get(rm, "systemMemory"); ok {
				if gb, ok := r.systemMemory(rp+".systemMemory", mv); ok {
					resources["cpuMemoryGb"] = json.Number(strconv.Itoa(gb))
				}
			}
		}
	}

	if lv, ok := get(def, "jobDataLocations"); ok {
		lp := jd + ".jobDataLocations"
		if list, ok := lv.([]any); !ok {
			r.add(lp, "must be a list, not "+describe(lv))
		} else {
			var storage []any
			for i, e := range list {
				ep := indexPath(lp, i)
				var entry any
				switch x := e.(type) {
				case string:
					entry = x
				case map[string]any:
					// protocol and shareHost name how imec's v1 slaves reached a share;
					// imec's converter drops them ("never used anyway"), and so do we.
					r.onlyKeysV1(ep, x, "mountPoint", "sharePath", "protocol", "shareHost")
					for _, k := range []string{"protocol", "shareHost"} {
						if v, ok := get(x, k); ok {
							r.str(joinPath(ep, k), v)
						}
					}
					m := map[string]any{}
					if v, ok := get(x, "mountPoint"); ok {
						m["containerPath"] = v
					}
					if v, ok := get(x, "sharePath"); ok {
						m["hostPath"] = v
					}
					if len(m) == 0 {
						r.add(ep, "needs a mountPoint or a sharePath")
						continue
					}
					entry = m
				default:
					r.add(ep, "must be an object {mountPoint, sharePath}, not "+describe(e))
					continue
				}
				sp := indexPath("request.docker.storage", len(storage))
				paths[sp] = ep
				paths[sp+".containerPath"] = ep + ".mountPoint"
				paths[sp+".hostPath"] = ep + ".sharePath"
				storage = append(storage, entry)
			}
			if len(storage) > 0 {
				docker["storage"] = storage
			}
		}
	}

	if pv, ok := get(def, "portMappings"); ok {
		if list, ok := pv.([]any); ok {
			// Same entries (the version 2 rules read "8888/tcp" strings), unknown keys
			// reported here with the version 1 message and left out.
			ports := make([]any, len(list))
			for i, e := range list {
				ports[i] = e
				if m, ok := e.(map[string]any); ok {
					known := []string{"containerPort", "hostPort", "hostIp"}
					r.onlyKeysV1(indexPath(jd+".portMappings", i), m, known...)
					clean := map[string]any{}
					for _, k := range known {
						if v, ok := m[k]; ok {
							clean[k] = v
						}
					}
					ports[i] = clean
				}
			}
			pv = ports
		}
		docker["portMappings"] = pv
	}

	r.rewrite = func(p string) string {
		// The longest prefix of p, ending at a path boundary, that has a mapping.
		for end := len(p); end > 0; end = strings.LastIndexAny(p[:end], ".[") {
			if to, ok := paths[p[:end]]; ok {
				return to + p[end:]
			}
		}
		return p
	}
	return r.finish(r.job(v2))
}

// systemMemory reads a version 1 systemMemory (MB, a number or a numeric string) and returns
// GiB, rounded up so a job never gets less than it asked for.
func (r *reader) systemMemory(p string, v any) (int, bool) {
	var text string
	switch x := v.(type) {
	case json.Number:
		text = string(x)
	case string:
		text = strings.TrimSpace(x)
	default:
		r.add(p, "must be a number of megabytes, not "+describe(v))
		return 0, false
	}
	mb, ok := parseDecimal(text)
	if !ok {
		r.add(p, "must be a number of megabytes, not "+describe(v))
		return 0, false
	}
	if mb.Cmp(big.NewRat(1, 1)) < 0 {
		r.add(p, "must be at least 1 (megabyte), not "+describe(v))
		return 0, false
	}
	gb := new(big.Rat).Quo(mb, big.NewRat(1024, 1))
	q := new(big.Int).Quo(gb.Num(), gb.Denom())
	if !gb.IsInt() {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsInt64() || q.Int64() > 1<<31-1 {
		r.add(p, "is too large")
		return 0, false
	}
	return int(q.Int64()), true
}

// memoryGb converts megabytes to GiB, rounding up.
func memoryGb(mb int) int { return (mb + 1023) / 1024 }

// v1Extra fills the version 2 e-mail lists from a version 1 file's e-mail wishes, at the top or
// in nvdocker_data: email_run and email_done (true: the submitter's address, Options.
// SubmitterEmail; or an address, or a list of them) and imec's lists emails_queue, emails_run,
// emails_end. SSH keys may also sit at the top or in nvdocker_data (ssh_pubkeys).
func (r *reader) v1Extra(top, nv map[string]any, extra map[string]any, paths map[string]string) {
	type source struct {
		m      map[string]any
		prefix string
	}
	sources := []source{{top, ""}}
	if nv != nil {
		sources = append(sources, source{nv, "nvdocker_data"})
	}
	lists := map[string][]any{}
	for _, src := range sources {
		for _, es := range v1EmailSources {
			v, ok := get(src.m, es.from)
			if !ok {
				continue
			}
			kp := joinPath(src.prefix, es.from)
			if _, set := paths["request.extra."+es.to]; !set {
				paths["request.extra."+es.to] = kp
			}
			switch x := v.(type) {
			case bool:
				if !x {
					continue
				}
				if r.opts.SubmitterEmail == "" {
					r.add(kp, "true means the submitter's address, which is not known here: give the address")
					continue
				}
				lists[es.to] = appendNew(lists[es.to], r.opts.SubmitterEmail)
			default:
				for _, a := range r.strList(kp, v, true) {
					lists[es.to] = appendNew(lists[es.to], a)
				}
			}
		}
		if v, ok := get(src.m, "ssh_pubkeys"); ok {
			extra["sshPubKeys"] = mergeLists(extra["sshPubKeys"], v)
			paths["request.extra.sshPubKeys"] = joinPath(src.prefix, "ssh_pubkeys")
		}
	}
	for to, list := range lists {
		extra[to] = list
	}
}

// appendNew appends s to list unless it is there already.
func appendNew(list []any, s string) []any {
	if slices.Contains(list, any(s)) {
		return list
	}
	return append(list, s)
}

// mergeLists joins two version 1 values that are each a string or a list into one list (a
// value of another type is kept as is, for the version 2 rules to report).
func mergeLists(a, b any) any {
	if a == nil {
		return b
	}
	var out []any
	for _, v := range []any{a, b} {
		switch x := v.(type) {
		case []any:
			out = append(out, x...)
		case string:
			out = append(out, x)
		default:
			return v
		}
	}
	return out
}

// v1Project sets the owner of the version 2 job from a version 1 file: its owner as given, and
// the top-level project (a name or a URN, as imec's old clients wrote it) as the project.
func (r *reader) v1Project(top, v2 map[string]any, paths map[string]string) {
	var owner map[string]any
	if o, ok := get(top, "owner"); ok {
		v2["owner"] = o
		owner, _ = o.(map[string]any)
	}
	p, ok := get(top, "project")
	if !ok {
		return
	}
	name, ok := r.str("project", p)
	if !ok {
		return
	}
	name = strings.TrimSpace(name)
	if name == "" {
		r.add("project", "must name a project")
		return
	}
	if owner != nil {
		if given, ok := owner["projectUrn"].(string); ok && given != "" && given != name {
			r.add("project", fmt.Sprintf("names project %q, but owner.projectUrn names %q", name, given))
			return
		}
		o := maps.Clone(owner)
		o["projectUrn"] = name
		v2["owner"] = o
		return
	}
	if _, isObj := v2["owner"]; isObj {
		return // an owner that is not an object: the version 2 rules report it
	}
	v2["owner"] = map[string]any{"projectUrn": name}
	paths["owner.projectUrn"] = "project"
}
