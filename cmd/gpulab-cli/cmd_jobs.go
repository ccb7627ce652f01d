package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/opengpulab/gpulab/client"
	"github.com/opengpulab/gpulab/job"
)

// jobsOptions are the flags of `jobs`. The one-letter flags mean what they mean in imec's CLI.
type jobsOptions struct {
	maxCount, maxHours, clusterID       int
	user, strictUser                    bool
	userName, project                   string
	pending, running, finished, deleted bool
	raw, definition, noLines, quiet     bool
	table                               bool
}

func (a *app) cmdJobs(args []string) error {
	var o jobsOptions
	fs := newFlagSet("jobs", "gpulab-cli jobs [options] [ID]",
		"Without ID, list jobs, newest first: by default the pending, running and finished jobs you\n"+
			"may see. With ID (or a unique prefix of at least 6 characters), show that job in detail.")
	fs.Int(&o.maxCount, "c,max-count,max", "N", "show at most N jobs (default 10, 50 with -u or -U; the master caps it)")
	fs.Int(&o.maxHours, "H,max-hours,max-age", "HOURS", "only jobs created in the last HOURS hours")
	fs.Bool(&o.user, "u,user", "your own jobs, and the running jobs of other users")
	fs.Bool(&o.strictUser, "U,strict-user", "only your own jobs")
	fs.String(&o.userName, "user-name", "NAME", "only the jobs of the user with this name")
	fs.String(&o.project, "project", "NAME", "only the jobs of this project (name or URN)")
	fs.Int(&o.clusterID, "cluster-id", "ID", "only the jobs on this cluster")
	fs.Bool(&o.pending, "pending", "only pending jobs (ONHOLD, QUEUED); combines with the next three")
	fs.Bool(&o.running, "running", "only running jobs (ASSIGNED, STARTING, RUNNING, MUSTHALT, HALTING)")
	fs.Bool(&o.finished, "finished", "only ended jobs (FINISHED, FAILED, CANCELLED, HALTED)")
	fs.Bool(&o.deleted, "deleted", "only deleted jobs")
	fs.Bool(&o.raw, "r,raw", "print the JSON the master sends")
	fs.Bool(&o.definition, "d,definition", "(with ID) print the job's request as JSON, ready to submit again")
	fs.Bool(&o.table, "table", "(list) a table sized to its contents, with lines between the columns,\ninstead of imec's fixed-width columns")
	fs.Bool(&o.noLines, "n,no-lines", "(list, with --table) draw no lines between the columns")
	fs.Bool(&o.quiet, "q,quiet", "(list) print only the job IDs, one per line")
	pos, err := a.parseCommand(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 1:
		return usagef("jobs takes at most one job ID, got %d", len(pos))
	case len(pos) == 1 && (o.user || o.strictUser):
		return usagef("give either --user/--strict-user or a job ID, not both")
	case len(pos) == 0 && o.definition:
		return usagef("--definition needs a job ID")
	}
	cl, err := a.client(true)
	if err != nil {
		return err
	}
	if len(pos) == 1 {
		return a.showJob(cl, pos[0], o)
	}
	return a.listJobs(cl, o)
}

// listOptions turns the flags into the API's list filters.
func (a *app) listOptions(o jobsOptions) (client.ListOptions, error) {
	lo := client.ListOptions{
		Pending: o.pending, Running: o.running, Finished: o.finished, Deleted: o.deleted,
		UserName: o.userName, ClusterID: o.clusterID, MaxHours: o.maxHours, MaxCount: o.maxCount,
		Sort: "-created",
	}
	if !lo.Pending && !lo.Running && !lo.Finished && !lo.Deleted {
		lo.Pending, lo.Running, lo.Finished = true, true, true
	}
	if strings.HasPrefix(o.project, "urn:") {
		lo.ProjectURN = o.project
	} else {
		lo.ProjectName = o.project
	}
	if o.user || o.strictUser {
		id, err := a.identity()
		if err != nil {
			return lo, err
		}
		lo.UserURN = id.UserURN
		lo.OtherUserRunning = o.user && !o.strictUser
		if lo.MaxCount == 0 {
			lo.MaxCount = 50
		}
	}
	if lo.MaxCount == 0 {
		lo.MaxCount = 10
	}
	return lo, nil
}

func (a *app) listJobs(cl *client.Client, o jobsOptions) error {
	lo, err := a.listOptions(o)
	if err != nil {
		return err
	}
	if o.raw {
		raw, err := cl.ListJobsRaw(a.ctx, lo)
		if err != nil {
			return err
		}
		return a.writeJSON(raw)
	}
	jobs, err := cl.ListJobs(a.ctx, lo)
	if err != nil {
		return err
	}
	if err := a.updateHostsConfig(jobs); err != nil {
		a.stderr.printf("Warning: %v\n", err) // the listing itself is fine
	}
	if o.quiet {
		for _, j := range jobs {
			a.stdout.printf("%s\n", j.UUID)
		}
		return nil
	}
	if o.table || o.noLines {
		a.jobsTable(jobs).render(a.stdout, !o.noLines)
		a.warnIdle(jobs)
		return nil
	}
	a.stdout.printf("%s\n", imecJobLine("TASK ID", "NAME", "COMMAND", "CREATED", "USER", "PROJECT", "CID", "STATUS"))
	for i := range jobs {
		j := &jobs[i]
		created, cid := "", ""
		if t := createdAt(j); !t.IsZero() {
			created = a.formatTime(t)
		}
		// imec shows the cluster a job runs or ran on, none for a job not placed yet.
		if res := j.State.Resources; res != nil && res.ClusterID != 0 {
			cid = strconv.Itoa(res.ClusterID)
		}
		user := imecMiniID(j.Owner.UserURN)
		a.stdout.printf("%s\n", imecJobLine(j.UUID, j.Name, j.Request.Docker.Command.String(), created,
			user, urnName(j.Owner.ProjectURN), cid, string(j.State.Status)))
	}
	// The listing keeps imec's columns (scripts cut them); idle jobs are called out on stderr.
	a.warnIdle(jobs)
	return nil
}

// imecMiniID is the user as imec's listing names one: name@authority, with imec's short names
// for its own authorities (unlike miniID, the authority is kept whole); "" when urn is no user URN.
func imecMiniID(urn string) string {
	auth, _, name := client.SplitURN(urn)
	if name == "" || auth == "" {
		return ""
	}
	switch auth {
	case "wall2.ilabt.iminds.be":
		auth = "w2"
	case "ilabt.imec.be":
		auth = "ilabt"
	case "example.com":
		auth = "ex"
	}
	return name + "@" + auth
}

// imecColumns are the widths of imec's `gpulab-cli jobs` listing, which users' scripts cut and
// awk: each column padded to its width and cut at it (cut: false only pads), one space between.
var imecColumns = []struct {
	width int
	cut   bool
}{{36, false}, {20, true}, {20, true}, {25, true}, {12, true}, {15, true}, {3, false}, {10, true}}

// imecJobLine formats one line of the listing as imec's client does: fixed widths, values cut
// without an ellipsis, an empty value shown as "***" (imec's mark for "none"). Line breaks and
// tabs in a value become spaces, so that a job is always one line.
func imecJobLine(values ...string) string {
	var b strings.Builder
	for i, c := range imecColumns {
		v := "***"
		if i < len(values) && strings.TrimSpace(values[i]) != "" {
			v = strings.Join(strings.Fields(values[i]), " ")
		}
		r := []rune(v)
		if c.cut && len(r) > c.width {
			r = r[:c.width]
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(string(r))
		if pad := c.width - len(r); pad > 0 {
			b.WriteString(strings.Repeat(" ", pad))
		}
	}
	return b.String()
}

// jobsTable lays out jobs as a table sized to its contents (jobs --table): the columns of
// imec's listing with readable titles.
func (a *app) jobsTable(jobs []job.Job) *table {
	t := &table{cols: []column{
		{title: "ID", min: 36}, {title: "Name"}, {title: "Command"}, {title: "Created"},
		{title: "User"}, {title: "Project"}, {title: "Cluster"}, {title: "Status"},
	}}
	for i := range jobs {
		j := &jobs[i]
		t.add(
			j.UUID,
			truncate(dash(j.Name), 20),
			truncate(dash(j.Request.Docker.Command.String()), 20),
			a.formatTime(createdAt(j)),
			truncate(dash(miniID(j.Owner.UserURN)), 20),
			truncate(dash(urnName(j.Owner.ProjectURN)), 15),
			dash(clusterOf(j)),
			dash(string(j.State.Status))+idleMark(j),
		)
	}
	return t
}

func (a *app) showJob(cl *client.Client, id string, o jobsOptions) error {
	if o.raw {
		raw, err := cl.GetJobRaw(a.ctx, id)
		if err != nil {
			return err
		}
		return a.writeJSON(raw)
	}
	j, err := cl.GetJob(a.ctx, id)
	if err != nil {
		return err
	}
	if o.definition {
		return a.writeValue(job.Submission(j))
	}
	k := a.jobDetail(j)
	if _, ran := j.State.EventTimes[job.StatusRunning]; ran {
		// A master without usage series (an older one, imec's) answers an error: the rest of
		// the view stands without it.
		if u, err := cl.JobUsage(a.ctx, j.UUID); err == nil {
			addUsage(k, u)
		}
	}
	k.render(a.stdout)
	return nil
}

// addUsage adds a job's per-GPU averages (last hour and whole run), CPU and memory, and the
// idle-GPU warning when the master flagged the job.
func addUsage(k *kvList, u *client.JobUsage) {
	if u.Averages.Seconds == 0 {
		k.add("Usage", "no samples yet")
		return
	}
	whole := map[int]float64{}
	for _, g := range u.Averages.GPUs {
		whole[g.Index] = g.UtilPercent
	}
	var lines []string
	for _, g := range u.LastHour.GPUs {
		lines = append(lines, fmt.Sprintf("GPU %d: %s %% last hour, %s %% whole run, %s memory", g.Index,
			pct(g.UtilPercent), pct(whole[g.Index]), mibText(g.MemoryUsedMiB)))
	}
	if len(lines) > 0 {
		k.add("GPU usage", strings.Join(lines, "\n"))
	}
	k.add("CPU usage", fmt.Sprintf("%s %% last hour (100 %% = one CPU), %s memory", pct(u.LastHour.CPUPercent), mibText(u.LastHour.MemoryMiB)))
	if len(u.IdleGPUs) > 0 {
		k.add("WARNING", fmt.Sprintf("idle GPUs: GPU %s under %s %% busy; stop the job if it does not need them", joinInts(u.IdleGPUs), pct(u.IdleThreshold)))
	}
}

func pct(v float64) string {
	if v >= 10 || v == float64(int(v)) {
		return strconv.FormatFloat(float64(int(v+0.5)), 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

func mibText(m int64) string {
	if m >= 1024 {
		return strconv.FormatFloat(float64(m*10/1024)/10, 'f', -1, 64) + " GiB"
	}
	return strconv.FormatInt(m, 10) + " MiB"
}

// kvList is a block of "Key: value" lines with the keys right-aligned, as imec's job view.
type kvList struct{ rows [][2]string }

func (k *kvList) add(key, value string) { k.rows = append(k.rows, [2]string{key, value}) }

func (k *kvList) render(p *printer) {
	width := 0
	for _, r := range k.rows {
		width = max(width, len(r[0]))
	}
	for _, r := range k.rows {
		lines := strings.Split(r[1], "\n")
		p.printf("%*s: %s\n", width, r[0], lines[0])
		for _, l := range lines[1:] {
			p.printf("%*s  %s\n", width, "", l)
		}
	}
}

// jobDetail builds the detail view of one job: who and what, its state and timings, where it
// runs and how to reach it, and why it waits.
func (a *app) jobDetail(j *job.Job) *kvList {
	k := &kvList{}
	req := j.Request
	k.add("Job ID", j.UUID)
	k.add("Name", dash(j.Name))
	k.add("Description", dash(j.Description))
	k.add("Project", dash(urnName(j.Owner.ProjectURN)))
	user := dash(miniID(j.Owner.UserURN))
	if j.Owner.UserURN != "" {
		user += " (" + j.Owner.UserURN + ")"
	}
	k.add("User", user)
	if j.Owner.UserEmail != "" {
		k.add("Email", j.Owner.UserEmail)
	}
	k.add("Docker image", dash(redactImage(req.Docker.Image)))
	k.add("Command", dash(req.Docker.Command.String()))

	status := dash(string(j.State.Status))
	if j.State.Status == job.StatusFailed {
		status += fmt.Sprintf("\nmore about why: gpulab-cli debug %s", j.UUID)
	}
	k.add("Status", status)
	if j.State.Status == job.StatusOnHold {
		k.add("", "release it with: gpulab-cli release "+j.UUID)
	}
	if expl := j.State.Scheduling.QueuedExplanations; len(expl) > 0 && !j.State.Status.Ended() {
		k.add("Waiting because", strings.Join(expl, "\n"))
	}
	if est := j.State.Scheduling.EstimatedStart; est != nil && j.State.Status == job.StatusQueued {
		v := a.formatTime(*est)
		if rg := j.State.Scheduling.EstimateRange(a.now(), a.loc); rg != "" {
			v += " (" + rg + ")"
		}
		k.add("Expected start", v)
	}

	a.addTimings(k, j)

	sched := req.Scheduling
	var flags []string
	if sched.Interactive {
		flags = append(flags, "interactive")
	}
	if sched.Restartable {
		flags = append(flags, "restartable")
	}
	if sched.AllowHaltWithoutSignal {
		flags = append(flags, "may halt without signal")
	}
	if len(flags) > 0 {
		k.add("Scheduling", strings.Join(flags, ", "))
	}
	if sched.MaxDuration != 0 {
		k.add("Max duration", job.FormatDuration(sched.MaxDuration.Std()))
	}
	if sched.MinDuration != 0 {
		k.add("Min duration", job.FormatDuration(sched.MinDuration.Std()))
	}
	if sched.NotBefore != nil {
		k.add("Not before", a.formatTime(*sched.NotBefore))
	}
	if sched.NotAfter != nil {
		k.add("Not after", a.formatTime(*sched.NotAfter))
	}

	res := j.State.Resources
	cluster := clusterOf(j)
	k.add("Cluster", dash(cluster))
	slave := j.State.Scheduling.AssignedSlaveName
	if res != nil && res.SlaveName != "" {
		slave = res.SlaveName
	}
	k.add("Slave", dash(slave))
	if res != nil && res.SlaveHost != "" {
		k.add("Slave host", res.SlaveHost)
	}
	k.add("GPUs", withIDs(req.Resources.GPUs, res, func(r *job.StateResources) []int { return r.GPUIDs }))
	k.add("CPUs", withIDs(req.Resources.CPUs, res, func(r *job.StateResources) []int { return r.CPUIDs }))
	mem := req.Resources.CPUMemoryGb
	if res != nil && res.CPUMemoryGb != 0 {
		mem = res.CPUMemoryGb
	}
	k.add("Memory", fmt.Sprintf("%d GB", mem))
	if len(req.Resources.GPUModel) > 0 {
		k.add("GPU model", strings.Join(req.Resources.GPUModel, " or "))
	}
	if res != nil && len(res.PortMappings) > 0 {
		k.add("Port mappings", portMappings(res.PortMappings, res.SlaveHost))
	} else if len(req.Docker.PortMappings) > 0 {
		var ps []string
		for _, pm := range req.Docker.PortMappings {
			ps = append(ps, strconv.Itoa(pm.ContainerPort))
		}
		k.add("Port mappings", strings.Join(ps, ", ")+" (host ports known once the job starts)")
	}
	if login := sshLogin(j); login != "" {
		k.add("SSH login", login)
	}
	if res != nil && res.ExitCode != nil {
		k.add("Exit code", strconv.Itoa(*res.ExitCode))
	}
	if ri := j.RestartInfo; ri != nil {
		k.add("Restart info", fmt.Sprintf("restart %d of job %s", ri.RestartCount, ri.InitialJobUUID))
	}
	return k
}

// addTimings adds when the job was created, queued, started and ended, each with the time it
// took since the step before, so a user sees at once how long it waited and ran.
func (a *app) addTimings(k *kvList, j *job.Job) {
	et := j.State.EventTimes
	created := createdAt(j)
	if !created.IsZero() {
		k.add("Created", a.formatTime(created)+" ("+a.ago(created)+")")
	}
	if t, ok := et[job.StatusOnHold]; ok && !t.Equal(created) {
		k.add("On hold", a.formatTime(t))
	}
	queued, hasQueued := et[job.StatusQueued]
	if hasQueued && !queued.Equal(created) {
		k.add("Queued", a.formatTime(queued)+" (after "+humanDuration(queued.Sub(created))+")")
	}
	if !hasQueued {
		queued = created
	}
	if t, ok := et[job.StatusAssigned]; ok {
		k.add("Assigned", a.formatTime(t)+" (after "+humanDuration(t.Sub(queued))+" in the queue)")
	}
	started, hasStarted := et[job.StatusRunning]
	if hasStarted {
		k.add("Started", a.formatTime(started)+" (after "+humanDuration(started.Sub(queued))+" in the queue)")
	}
	if t, ok := et[job.StatusMustHalt]; ok {
		k.add("Halt requested", a.formatTime(t))
	}
	if t, ok := et[job.StatusHalting]; ok {
		k.add("Halting", a.formatTime(t))
	}
	ended := endedAt(j)
	switch {
	case !ended.IsZero():
		line := a.formatTime(ended) + " (" + a.ago(ended) + ")"
		k.add("Ended", line)
		if hasStarted {
			k.add("Duration", humanDuration(ended.Sub(started)))
		}
	case hasStarted:
		k.add("Duration", humanDuration(a.now().Sub(started))+" so far")
	case !created.IsZero() && !j.State.Status.Ended():
		k.add("Waiting", humanDuration(a.now().Sub(queued))+" so far")
	}
	if up := updatedAt(j); !up.IsZero() {
		k.add("State updated", a.formatTime(up)+" ("+a.ago(up)+")")
	}
}

// withIDs writes a requested count with the IDs actually assigned ("2 (ids 0,1)").
func withIDs(n int, res *job.StateResources, ids func(*job.StateResources) []int) string {
	s := strconv.Itoa(n)
	if res != nil {
		if list := ids(res); len(list) > 0 {
			s += " (ids " + joinInts(list) + ")"
		}
	}
	return s
}

// portMappings writes each mapping as "containerPort -> host:hostPort", the address a user
// connects to.
func portMappings(pms []job.PortMapping, slaveHost string) string {
	var parts []string
	for _, pm := range pms {
		host := pm.HostIP
		if host == "" || host == "0.0.0.0" || host == "::" {
			host = slaveHost
		}
		switch {
		case pm.HostPort == 0:
			parts = append(parts, fmt.Sprintf("%d -> (not published)", pm.ContainerPort))
		case host == "":
			parts = append(parts, fmt.Sprintf("%d -> %d", pm.ContainerPort, pm.HostPort))
		default:
			parts = append(parts, fmt.Sprintf("%d -> %s:%d", pm.ContainerPort, host, pm.HostPort))
		}
	}
	return strings.Join(parts, "\n")
}

// sshLogin is the ssh command to reach a job that asked for SSH access (extra.sshPubKeys) and
// publishes container port 22; empty otherwise.
func sshLogin(j *job.Job) string {
	res := j.State.Resources
	if len(j.Request.Extra.SSHPubKeys) == 0 || res == nil || res.SlaveHost == "" {
		return ""
	}
	for _, pm := range res.PortMappings {
		if pm.ContainerPort != 22 || pm.HostPort == 0 {
			continue
		}
		user := "root"
		if u, _, _ := strings.Cut(j.Request.Docker.User, ":"); u != "" {
			if _, err := strconv.Atoi(u); err != nil {
				user = u
			}
		}
		return fmt.Sprintf("ssh -p %d %s@%s", pm.HostPort, user, res.SlaveHost)
	}
	return ""
}

// durationSince is how long ago t was, for progress lines.
func (a *app) durationSince(t time.Time) string { return humanDuration(a.now().Sub(t)) }

// idleMark marks a job whose GPUs the master found idle in the --table listing.
func idleMark(j *job.Job) string {
	if len(j.State.IdleGPUs) == 0 {
		return ""
	}
	return " (idle GPUs)"
}

// warnIdle writes one warning per listed job whose GPUs the master found idle.
func (a *app) warnIdle(jobs []job.Job) {
	for i := range jobs {
		if j := &jobs[i]; len(j.State.IdleGPUs) > 0 && !j.State.Status.Ended() {
			a.stderr.printf("Warning: job %s holds idle GPUs (GPU %s): stop it if it does not need them\n", j.UUID, joinInts(j.State.IdleGPUs))
		}
	}
}
