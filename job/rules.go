package job

import (
	"encoding/json"
	"net/netip"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The rules of SPEC section 3, one reader per part of the request. Each reads its part of the
// document tree, reports every problem with its path and returns the part with defaults filled.

// ---- the job ----

// serverFields are refused on input: a client must not choose its job's identity or state.
var serverFields = []string{"uuid", "state", "restartInfo"}

func (r *reader) job(top map[string]any) *Job {
	j := &Job{}
	r.onlyKeys("", top, append([]string{"name", "description", "request", "owner", "deploymentEnvironment", "extra"}, serverFields...)...)
	for _, k := range serverFields {
		if _, ok := top[k]; ok {
			r.add(k, "is set by the server: leave it out of a submission")
		}
	}
	if v, ok := get(top, "name"); !ok {
		r.add("name", "is required")
	} else if s, ok := r.str("name", v); ok {
		if strings.TrimSpace(s) == "" {
			r.add("name", "must not be empty")
		}
		r.maxBytes("name", s, r.opts.Limits.NameBytes)
		j.Name = s
	}
	j.Description = r.optString(top, "", "description")
	r.maxBytes("description", j.Description, r.opts.Limits.DescriptionBytes)
	j.DeploymentEnvironment = r.optString(top, "", "deploymentEnvironment")
	if v, ok := get(top, "owner"); ok {
		if m, ok := r.object("owner", v); ok {
			j.Owner = r.owner("owner", m)
		}
	}
	var req map[string]any
	if v, ok := get(top, "request"); !ok {
		r.add("request", "is required")
	} else {
		req, _ = r.object("request", v)
	}
	// imec's API page shows "extra" at the top level; it means request.extra.
	if e, ok := get(top, "extra"); ok {
		if _, both := get(req, "extra"); both {
			r.add("extra", "cannot be given both here and as request.extra")
		} else if m, ok := r.object("extra", e); ok {
			j.Request.Extra = r.extra("extra", m)
		}
	}
	if req != nil {
		r.request("request", req, &j.Request)
	}
	return j
}

// owner reads the owner as given. The project may be a URN or a bare project name: the API
// resolves it against the caller's memberships, and replaces the user by the authenticated one.
func (r *reader) owner(p string, m map[string]any) Owner {
	r.onlyKeys(p, m, "projectUrn", "userUrn", "userEmail")
	return Owner{
		ProjectURN: r.optString(m, p, "projectUrn"),
		UserURN:    r.optString(m, p, "userUrn"),
		UserEmail:  r.optString(m, p, "userEmail"),
	}
}

func (r *reader) request(p string, m map[string]any, req *Request) {
	r.onlyKeys(p, m, "resources", "docker", "scheduling", "extra")
	if v, ok := get(m, "resources"); !ok {
		r.add(joinPath(p, "resources"), "is required")
	} else if mm, ok := r.object(joinPath(p, "resources"), v); ok {
		req.Resources = r.resources(joinPath(p, "resources"), mm)
	}
	if v, ok := get(m, "docker"); !ok {
		r.add(joinPath(p, "docker"), "is required")
	} else if mm, ok := r.object(joinPath(p, "docker"), v); ok {
		req.Docker = r.docker(joinPath(p, "docker"), mm)
	}
	sched := map[string]any{}
	if v, ok := get(m, "scheduling"); ok {
		if mm, ok := r.object(joinPath(p, "scheduling"), v); ok {
			sched = mm
		}
	}
	req.Scheduling = r.scheduling(joinPath(p, "scheduling"), sched)
	if v, ok := get(m, "extra"); ok {
		if mm, ok := r.object(joinPath(p, "extra"), v); ok {
			req.Extra = r.extra(joinPath(p, "extra"), mm)
		}
	}
}

// ---- resources ----

func (r *reader) resources(p string, m map[string]any) Resources {
	r.onlyKeys(p, m, "cpus", "gpus", "cpuMemoryGb", "gpuMemoryGb", "gpuModel", "minCudaVersion",
		"clusterId", "slaveName", "slaveInstanceId", "features")
	res := Resources{
		CPUs:            r.intField(m, p, "cpus", true, 1),
		GPUs:            r.intField(m, p, "gpus", true, 0),
		CPUMemoryGb:     r.intField(m, p, "cpuMemoryGb", true, 1),
		GPUMemoryGb:     r.intField(m, p, "gpuMemoryGb", false, 1),
		MinCudaVersion:  r.intField(m, p, "minCudaVersion", false, 1),
		ClusterID:       r.intField(m, p, "clusterId", false, 1),
		SlaveName:       r.optString(m, p, "slaveName"),
		SlaveInstanceID: r.optString(m, p, "slaveInstanceId"),
	}
	lim := r.opts.Limits
	const limited = " (this cluster's limit)"
	r.atMost(joinPath(p, "cpus"), res.CPUs, lim.CPUs, limited)
	r.atMost(joinPath(p, "gpus"), res.GPUs, lim.GPUs, limited)
	r.atMost(joinPath(p, "cpuMemoryGb"), res.CPUMemoryGb, lim.MemoryGb, limited)
	r.atMost(joinPath(p, "gpuMemoryGb"), res.GPUMemoryGb, lim.MemoryGb, limited)
	if v, ok := get(m, "gpuModel"); ok {
		kp := joinPath(p, "gpuModel")
		res.GPUModel = r.strList(kp, v, true)
		for i, g := range res.GPUModel {
			if len([]rune(strings.TrimSpace(g))) < 2 {
				at := kp
				if _, isList := v.([]any); isList {
					at = indexPath(kp, i)
				}
				r.add(at, "a GPU model filter must be at least 2 characters long, not "+describe(g))
			}
		}
	}
	if v, ok := get(m, "features"); ok {
		kp := joinPath(p, "features")
		res.Features = r.strList(kp, v, false)
		for i, f := range res.Features {
			if !slices.Contains(r.opts.KnownFeatures, f) {
				if len(r.opts.KnownFeatures) == 0 {
					r.addf(indexPath(kp, i), "unknown feature %q (no slave features are known)", f)
				} else {
					r.addf(indexPath(kp, i), "unknown feature %q (known: %s)", f, strings.Join(r.opts.KnownFeatures, ", "))
				}
			}
		}
	}
	return res
}

// ---- docker ----

var (
	envNameRe    = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
	userRe       = regexp.MustCompile(`^\w+(?::\w+)?$`)
	groupRe      = regexp.MustCompile(`^\w+$`)
	portStringRe = regexp.MustCompile(`(?i)^\s*(\d+)\s*(?:/\s*(tcp|udp|sctp))?\s*$`)
)

func (r *reader) docker(p string, m map[string]any) Docker {
	r.onlyKeys(p, m, "image", "command", "environment", "storage", "portMappings",
		"projectGidVariableName", "workingDir", "user", "groupAdd")
	var d Docker
	if v, ok := get(m, "image"); !ok {
		r.add(joinPath(p, "image"), "is required")
	} else if s, ok := r.str(joinPath(p, "image"), v); ok {
		if !r.maxBytes(joinPath(p, "image"), s, r.opts.Limits.ImageBytes) {
			// not parsed: the size is the problem
		} else if _, err := ParseImage(s); err != nil {
			r.add(joinPath(p, "image"), "invalid image: "+err.Error())
		}
		d.Image = s
	}
	if v, ok := get(m, "command"); ok {
		d.Command = r.command(joinPath(p, "command"), v)
	}
	if v, ok := get(m, "environment"); ok {
		if mm, ok := r.object(joinPath(p, "environment"), v); ok {
			d.Environment = r.environment(joinPath(p, "environment"), mm)
		}
	}
	if v, ok := get(m, "storage"); ok {
		d.Storage = r.storage(joinPath(p, "storage"), v)
	}
	if v, ok := get(m, "portMappings"); ok {
		d.PortMappings = r.portMappings(joinPath(p, "portMappings"), v)
	}
	d.ProjectGidVariableName = r.optString(m, p, "projectGidVariableName")
	if n := d.ProjectGidVariableName; n != "" {
		kp := joinPath(p, "projectGidVariableName")
		if !envNameRe.MatchString(n) {
			r.addf(kp, "%q is not a valid environment variable name (letters, digits and '_', not starting with a digit)", n)
		} else if _, dup := d.Environment[n]; dup {
			r.addf(kp, "%s is also set in environment: the project GID would overwrite it", n)
		}
	}
	d.WorkingDir = r.optString(m, p, "workingDir")
	if d.WorkingDir != "" && !path.IsAbs(d.WorkingDir) {
		r.add(joinPath(p, "workingDir"), "must be an absolute path, not "+describe(d.WorkingDir))
	}
	d.User = r.optString(m, p, "user")
	if d.User != "" && !userRe.MatchString(d.User) {
		r.add(joinPath(p, "user"), "must be a user name or id, optionally with a group (letters, digits, '_'; e.g. root or 1000:1000), not "+describe(d.User))
	}
	if v, ok := get(m, "groupAdd"); ok {
		kp := joinPath(p, "groupAdd")
		d.GroupAdd = r.strList(kp, v, true)
		for i, g := range d.GroupAdd {
			if !groupRe.MatchString(g) {
				at := kp
				if _, isList := v.([]any); isList {
					at = indexPath(kp, i)
				}
				r.add(at, "must be a group name or id (letters, digits, '_'), not "+describe(g))
			}
		}
	}
	return d
}

func (r *reader) command(p string, v any) Command {
	lim := r.opts.Limits
	switch x := v.(type) {
	case string:
		if !r.maxBytes(p, x, lim.CommandBytes) {
			return Command{}
		}
		if words, err := SplitCommand(x); err != nil {
			r.add(p, "cannot split the command into words: "+err.Error())
		} else if len(words) > lim.CommandWords {
			r.addf(p, "has %d words: at most %d are accepted", len(words), lim.CommandWords)
		}
		if x == "" {
			return Command{}
		}
		return Command{Text: x}
	case []any:
		if !r.maxItems(p, x, lim.CommandWords) {
			return Command{}
		}
		list := r.strList(p, x, false)
		total := 0
		for _, w := range list {
			total += len(w)
		}
		if total > lim.CommandBytes {
			r.addf(p, "is %d bytes long: at most %d bytes are accepted", total, lim.CommandBytes)
		}
		if len(list) == 0 {
			return Command{}
		}
		return Command{List: list, IsList: true}
	}
	r.add(p, "must be a string or a list of strings, not "+describe(v))
	return Command{}
}

func (r *reader) environment(p string, m map[string]any) map[string]string {
	if len(m) == 0 {
		return nil
	}
	lim := r.opts.Limits
	if len(m) > lim.EnvVars {
		r.addf(p, "has %d variables: at most %d are accepted", len(m), lim.EnvVars)
		return nil
	}
	env := make(map[string]string, len(m))
	for _, k := range sortedKeys(m) {
		kp := joinPath(p, k)
		if len(k) > lim.EnvNameBytes {
			kp = joinPath(p, k[:32]+"…")
			r.addf(kp, "the name is %d bytes long: at most %d bytes are accepted", len(k), lim.EnvNameBytes)
			continue
		}
		if s, ok := m[k].(string); ok && !r.maxBytes(kp, s, lim.EnvValueBytes) {
			continue
		}
		if !envNameRe.MatchString(k) {
			r.addf(kp, "%q is not a valid environment variable name (letters, digits and '_', not starting with a digit)", k)
			continue
		}
		switch x := m[k].(type) {
		case string:
			env[k] = x
		case json.Number:
			env[k] = string(x) // the number as written: 1 stays "1", 1.50 stays "1.50"
		case bool:
			env[k] = strconv.FormatBool(x)
		default:
			r.add(kp, "must be a string, number or boolean, not "+describe(x))
		}
	}
	return env
}

// storageDefaults are the container paths for host paths that are names, not paths.
var storageDefaults = map[string]string{
	".ssh":           "/root/.ssh/",
	ProjectShareAuto: "/project",
}

func (r *reader) storage(p string, v any) []Storage {
	list, ok := v.([]any)
	if !ok {
		r.add(p, "must be a list, not "+describe(v))
		return nil
	}
	if !r.maxItems(p, list, r.opts.Limits.Storage) {
		return nil
	}
	var out []Storage
	seen := map[string]int{}
	tmpfsGb := 0
	for i, e := range list {
		ep := indexPath(p, i)
		s, ok := r.storageEntry(ep, e)
		if !ok {
			continue
		}
		if j, dup := seen[path.Clean(s.ContainerPath)]; dup {
			r.addf(ep, "containerPath %s is mounted twice (also by entry %d)", s.ContainerPath, j)
		} else {
			seen[path.Clean(s.ContainerPath)] = i
		}
		if s.HostPath == TmpfsHostPath {
			tmpfsGb += s.SizeGb
			if r.atMost(joinPath(ep, "sizeGb"), s.SizeGb, r.opts.Limits.TmpfsGb, " (this cluster's limit for RAM disks)") &&
				tmpfsGb > r.opts.Limits.TmpfsGb {
				r.addf(joinPath(ep, "sizeGb"), "makes the RAM disks %d GB together: at most %d GB are accepted", tmpfsGb, r.opts.Limits.TmpfsGb)
			}
		}
		out = append(out, s)
	}
	return out
}

func (r *reader) storageEntry(p string, v any) (Storage, bool) {
	var (
		s           Storage
		sizeGiven   bool
		hostAt      = p // where problems of each part are reported
		containerAt = p
		sizeAt      = p
	)
	switch x := v.(type) {
	case string:
		if x == TmpfsHostPath {
			r.add(p, `a tmpfs RAM disk must be written {"hostPath": "tmpfs", "containerPath": "/path", "sizeGb": 1}`)
			return s, false
		}
		s.HostPath = x
	case map[string]any:
		r.onlyKeys(p, x, "hostPath", "containerPath", "sizeGb")
		hostAt, containerAt, sizeAt = joinPath(p, "hostPath"), joinPath(p, "containerPath"), joinPath(p, "sizeGb")
		s.HostPath = r.optString(x, p, "hostPath")
		s.ContainerPath = r.optString(x, p, "containerPath")
		_, sizeGiven = get(x, "sizeGb")
		s.SizeGb = r.intField(x, p, "sizeGb", false, 1)
	default:
		r.add(p, "must be an object {hostPath, containerPath} or a path, not "+describe(v))
		return s, false
	}
	if s.HostPath == "" && s.ContainerPath == "" {
		r.add(p, "needs a hostPath or a containerPath")
		return s, false
	}
	ok := true
	if s.HostPath == TmpfsHostPath {
		if s.ContainerPath == "" {
			r.add(containerAt, `is required for a tmpfs RAM disk (hostPath "tmpfs")`)
			ok = false
		}
		if !sizeGiven {
			r.add(sizeAt, `is required for a tmpfs RAM disk (hostPath "tmpfs")`)
			ok = false
		}
	} else if sizeGiven {
		r.add(sizeAt, `is only allowed for a tmpfs RAM disk (hostPath "tmpfs")`)
		ok = false
	}
	if !ok {
		return s, false
	}
	hostDefaulted, containerDefaulted := s.HostPath == "", s.ContainerPath == ""
	if hostDefaulted {
		s.HostPath = s.ContainerPath
	}
	if containerDefaulted {
		if d, special := storageDefaults[s.HostPath]; special {
			s.ContainerPath = d
		} else {
			s.ContainerPath = s.HostPath
		}
	}
	// A path filled from the other one is not reported again: the user wrote only one.
	hostBad := false
	if _, special := storageDefaults[s.HostPath]; !special && s.HostPath != TmpfsHostPath {
		if msg := checkAbsPath(s.HostPath); msg != "" {
			hostBad = true
			if !hostDefaulted {
				r.add(hostAt, msg+`, or one of ".ssh", "tmpfs", "PROJECT_SHARE_AUTO"`)
			}
		}
	}
	containerMsg := checkAbsPath(s.ContainerPath)
	if containerMsg == "" && path.Clean(s.ContainerPath) == "/" {
		containerMsg = "must not be / (the container's root)"
	}
	if containerMsg != "" && (!containerDefaulted || !hostBad) {
		r.add(containerAt, containerMsg)
	}
	return s, !hostBad && containerMsg == ""
}

// checkAbsPath explains why p is not an acceptable absolute path, or returns "".
func checkAbsPath(p string) string {
	if !path.IsAbs(p) {
		return "must be an absolute path, not " + describe(p)
	}
	if slices.Contains(strings.Split(p, "/"), "..") {
		return "must not contain '..', not " + describe(p)
	}
	return ""
}

func (r *reader) portMappings(p string, v any) []PortMapping {
	list, ok := v.([]any)
	if !ok {
		r.add(p, "must be a list, not "+describe(v))
		return nil
	}
	if !r.maxItems(p, list, r.opts.Limits.PortMappings) {
		return nil
	}
	var out []PortMapping
	type pair struct{ c, h int }
	seenPair := map[pair]int{}
	// A host port is taken per address; an empty hostIp means all addresses.
	type hostKey struct {
		ip   string
		port int
	}
	exact := map[hostKey]int{} // (ip, port) → first entry
	allIPs := map[int]int{}    // port → first entry with no hostIp
	anyIP := map[int]int{}     // port → first entry with any hostIp
	for i, e := range list {
		ep := indexPath(p, i)
		pm, ok := r.portMapping(ep, e)
		if !ok {
			continue
		}
		if j, dup := seenPair[pair{pm.ContainerPort, pm.HostPort}]; dup {
			r.addf(ep, "maps the same ports as entry %d", j)
			continue
		}
		seenPair[pair{pm.ContainerPort, pm.HostPort}] = i
		if pm.HostPort != 0 {
			j, clash := allIPs[pm.HostPort]
			if pm.HostIP == "" {
				j, clash = anyIP[pm.HostPort]
			} else if k, same := exact[hostKey{pm.HostIP, pm.HostPort}]; same && (!clash || k < j) {
				j, clash = k, true
			}
			if clash {
				r.addf(joinPath(ep, "hostPort"), "host port %d is also used by entry %d", pm.HostPort, j)
			}
			if _, ok := anyIP[pm.HostPort]; !ok {
				anyIP[pm.HostPort] = i
			}
			if _, ok := exact[hostKey{pm.HostIP, pm.HostPort}]; !ok {
				exact[hostKey{pm.HostIP, pm.HostPort}] = i
			}
			if _, ok := allIPs[pm.HostPort]; !ok && pm.HostIP == "" {
				allIPs[pm.HostPort] = i
			}
		}
		out = append(out, pm)
	}
	return out
}

func (r *reader) portMapping(p string, v any) (PortMapping, bool) {
	var pm PortMapping
	switch x := v.(type) {
	case json.Number, string:
		n, ok := r.port(p, x)
		pm.ContainerPort = n
		return pm, ok
	case map[string]any:
		r.onlyKeys(p, x, "containerPort", "hostPort", "hostIp")
		ok := true
		if c, given := get(x, "containerPort"); !given {
			r.add(joinPath(p, "containerPort"), "is required")
			ok = false
		} else {
			n, good := r.port(joinPath(p, "containerPort"), c)
			pm.ContainerPort, ok = n, ok && good
		}
		if h, given := get(x, "hostPort"); given {
			n, good := r.port(joinPath(p, "hostPort"), h)
			if lim := r.opts.Limits; good && (n < lim.HostPortMin || n > lim.HostPortMax) {
				r.addf(joinPath(p, "hostPort"), "must be within the host port range %d-%d of this cluster, not %d (leave hostPort out to get a free port)",
					lim.HostPortMin, lim.HostPortMax, n)
				good = false
			}
			pm.HostPort, ok = n, ok && good
		}
		if ip := r.optString(x, p, "hostIp"); ip != "" {
			if a, err := netip.ParseAddr(ip); err != nil || a.Zone() != "" {
				r.add(joinPath(p, "hostIp"), "must be an IP address, not "+describe(ip))
				ok = false
			}
			pm.HostIP = ip
		}
		return pm, ok
	}
	r.add(p, "must be an object {containerPort, hostPort, hostIp} or a port number, not "+describe(v))
	return pm, false
}

// port reads a TCP port: a number, or a string like "8888" or "8888/tcp" (docker's notation,
// which version 1 jobs use).
func (r *reader) port(p string, v any) (int, bool) {
	if s, ok := v.(string); ok {
		m := portStringRe.FindStringSubmatch(s)
		if m == nil {
			r.add(p, `must be a port number or a string like "8888/tcp", not `+describe(v))
			return 0, false
		}
		if m[2] != "" && !strings.EqualFold(m[2], "tcp") {
			r.add(p, "only TCP ports can be mapped, not "+describe(v))
			return 0, false
		}
		v = json.Number(m[1])
	}
	n, ok := r.integer(p, v)
	if !ok {
		return 0, false
	}
	if n < 1 || n > 65535 {
		r.addf(p, "must be a port number from 1 to 65535, not %d", n)
		return 0, false
	}
	return n, true
}

// ---- scheduling ----

var (
	bucketNameRe = regexp.MustCompile(`^[\w][\w_\-@.]*$`)
	uuidRe       = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
)

// alias returns the value of key or of its alias, and the key actually used, reporting both.
func (r *reader) alias(m map[string]any, p, key, alias string) (any, string, bool) {
	v, ok := get(m, key)
	a, aok := get(m, alias)
	switch {
	case ok && aok:
		r.addf(joinPath(p, alias), "cannot be given together with %s (it is another name for it)", key)
		return v, key, true
	case aok:
		return a, alias, true
	}
	return v, key, ok
}

func (r *reader) duration(p string, v any) (time.Duration, bool) {
	var (
		d   time.Duration
		err error
	)
	switch x := v.(type) {
	case string:
		d, err = ParseDuration(x)
	case json.Number:
		d, err = durationFromSeconds(string(x))
	default:
		err = invalidDuration(describe(v))
	}
	if err != nil {
		r.add(p, err.Error())
		return 0, false
	}
	return d, true
}

func (r *reader) scheduling(p string, m map[string]any) Scheduling {
	r.onlyKeys(p, m, "interactive", "restartable", "allowHaltWithoutSignal", "minDuration", "killableAfter",
		"maxDuration", "notBefore", "notAfter", "maxSimultaneousJobs", "reservationIds", "reservationId")
	s := Scheduling{
		Interactive:            r.optBool(m, p, "interactive"),
		Restartable:            r.optBool(m, p, "restartable"),
		AllowHaltWithoutSignal: r.optBool(m, p, "allowHaltWithoutSignal"),
	}

	maxD, maxOK := r.opts.DefaultMaxDuration, true
	maxGiven := false
	if v, ok := get(m, "maxDuration"); ok {
		maxGiven = true
		kp := joinPath(p, "maxDuration")
		if maxD, maxOK = r.duration(kp, v); maxOK && maxD < time.Minute {
			r.addf(kp, "must be at least 1 minute, not %s", FormatDuration(maxD))
			maxOK = false
		}
	}
	minD := r.opts.DefaultMinDuration
	if v, key, ok := r.alias(m, p, "minDuration", "killableAfter"); ok {
		kp := joinPath(p, key)
		var minOK bool
		if minD, minOK = r.duration(kp, v); minOK && maxOK && minD > maxD {
			if maxGiven {
				r.addf(kp, "must not be longer than maxDuration (%s > %s)", FormatDuration(minD), FormatDuration(maxD))
			} else {
				r.addf(kp, "must not be longer than maxDuration, which defaults to %s (%s > %s): set maxDuration too", FormatDuration(maxD), FormatDuration(minD), FormatDuration(maxD))
			}
		}
	} else if maxOK {
		// Only maxDuration given (or defaults misconfigured): the default minDuration cannot
		// exceed it, so a one-hour job is haltable after at most one hour.
		minD = min(minD, maxD)
	}
	s.MinDuration, s.MaxDuration = Duration(minD), Duration(maxD)

	s.NotBefore = r.timeField(m, p, "notBefore")
	s.NotAfter = r.timeField(m, p, "notAfter")
	if s.NotAfter != nil {
		switch {
		case s.NotBefore != nil && !s.NotBefore.Before(*s.NotAfter):
			r.add(joinPath(p, "notAfter"), "must be later than notBefore")
		case !s.NotAfter.After(r.now):
			r.add(joinPath(p, "notAfter"), "is in the past: the job could never start")
		}
	}
	if s.Interactive {
		// An interactive job starts now or fails; a time window contradicts that.
		for _, k := range []string{"notBefore", "notAfter"} {
			if _, ok := get(m, k); ok {
				r.add(joinPath(p, k), "cannot be combined with interactive: an interactive job starts at once or fails")
			}
		}
	}
	if v, ok := get(m, "maxSimultaneousJobs"); ok {
		kp := joinPath(p, "maxSimultaneousJobs")
		if mm, ok := r.object(kp, v); ok {
			r.onlyKeys(kp, mm, "bucketName", "bucketMax")
			msj := &MaxSimultaneousJobs{BucketMax: r.intField(mm, kp, "bucketMax", true, 1)}
			if bv, ok := get(mm, "bucketName"); !ok {
				r.add(joinPath(kp, "bucketName"), "is required")
			} else if name, ok := r.str(joinPath(kp, "bucketName"), bv); ok {
				if !bucketNameRe.MatchString(name) {
					r.add(joinPath(kp, "bucketName"), "must start with a letter, digit or '_' and hold only those and '-', '@', '.' (no spaces), not "+describe(name))
				}
				msj.BucketName = name
			}
			s.MaxSimultaneousJobs = msj
		}
	}
	if v, key, ok := r.alias(m, p, "reservationIds", "reservationId"); ok {
		kp := joinPath(p, key)
		ids := r.strList(kp, v, true)
		for i, id := range ids {
			if !uuidRe.MatchString(id) {
				at := kp
				if _, isList := v.([]any); isList {
					at = indexPath(kp, i)
				}
				r.add(at, "must be a reservation UUID like f6dbca7b-58fd-47e3-9ac4-9ad33e7f6030, not "+describe(id))
			}
			ids[i] = strings.ToLower(id)
		}
		s.ReservationIDs = ids
	}
	return s
}

// timeField reads an RFC 3339 time with a zone. The zone is kept as a fixed offset (UTC as
// time.UTC), so that a job reads back from its JSON exactly as it was.
func (r *reader) timeField(m map[string]any, p, key string) *time.Time {
	v, ok := get(m, key)
	if !ok {
		return nil
	}
	kp := joinPath(p, key)
	s, ok := r.str(kp, v)
	if !ok {
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(s))
	if err != nil {
		r.add(kp, "must be a date and time in RFC 3339 format with a zone, like 2030-01-01T00:00:00+01:00, not "+describe(s))
		return nil
	}
	t = normalizeZone(t)
	return &t
}

// normalizeZone replaces the location of a parsed time by a plain fixed offset: time.Parse
// picks time.Local when the offset happens to match it, which would make a job's JSON depend on
// the server's time zone.
func normalizeZone(t time.Time) time.Time {
	_, off := t.Zone()
	if off == 0 {
		return t.UTC()
	}
	return t.In(time.FixedZone("", off))
}

// ---- extra ----

var (
	emailRe  = regexp.MustCompile(`^[^@\s<>,;]+@[^@\s<>,;]+$`)
	sshKeyRe = regexp.MustCompile(`^(?:ssh-[a-z0-9@.-]+|ecdsa-sha2-[a-z0-9@.-]+|sk-[a-z0-9@.-]+) [A-Za-z0-9+/]+={0,3}(?: [^\r\n]*)?$`)
)

func (r *reader) extra(p string, m map[string]any) Extra {
	r.onlyKeys(p, m, "sshPubKeys", "emailOnQueue", "emailOnRun", "emailOnEnd", "emailOnHalt", "emailOnRestart")
	var e Extra
	emails := func(key string) []string {
		v, ok := get(m, key)
		if !ok {
			return nil
		}
		kp := joinPath(p, key)
		list := r.strList(kp, v, true)
		for i, a := range list {
			list[i] = strings.TrimSpace(a)
			if !emailRe.MatchString(list[i]) {
				at := kp
				if _, isList := v.([]any); isList {
					at = indexPath(kp, i)
				}
				r.add(at, "must be an e-mail address, not "+describe(a))
			}
		}
		return list
	}
	e.EmailOnQueue = emails("emailOnQueue")
	e.EmailOnRun = emails("emailOnRun")
	e.EmailOnEnd = emails("emailOnEnd")
	e.EmailOnHalt = emails("emailOnHalt")
	e.EmailOnRestart = emails("emailOnRestart")
	if v, ok := get(m, "sshPubKeys"); ok {
		kp := joinPath(p, "sshPubKeys")
		e.SSHPubKeys = r.strList(kp, v, true)
		for i, k := range e.SSHPubKeys {
			e.SSHPubKeys[i] = strings.TrimSpace(k)
			if !sshKeyRe.MatchString(e.SSHPubKeys[i]) {
				at := kp
				if _, isList := v.([]any); isList {
					at = indexPath(kp, i)
				}
				r.add(at, `must be one SSH public key line like "ssh-ed25519 AAAAC3Nz… me@laptop"`)
			}
		}
	}
	return e
}
