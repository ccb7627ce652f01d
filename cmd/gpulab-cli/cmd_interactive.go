package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/opengpulab/gpulab/job"
)

// interactiveOptions are the flags of `interactive`, imec's names.
type interactiveOptions struct {
	project, image         string
	minutes, cpus, gpus    int
	mem, clusterID         int
	onlyShow, show, noProx bool
}

// waitScript keeps an interactive job alive for its duration, or until the user removes
// /tmp/running (imec's way to end it early from inside).
func waitScript(minutes int) string {
	return "touch /tmp/running; end=$(( $(date +%s) + " + strconv.Itoa(minutes*60) + " )); " +
		`while [ -e /tmp/running ] && [ "$(date +%s)" -lt "$end" ]; do sleep 2; done`
}

// interactiveJob is the job `interactive` submits: it waits, with the project share at
// /project, for at most the duration asked.
func interactiveJob(o interactiveOptions) map[string]any {
	res := map[string]any{"cpus": o.cpus, "gpus": o.gpus, "cpuMemoryGb": o.mem}
	if o.clusterID > 0 {
		res["clusterId"] = o.clusterID
	}
	return map[string]any{
		"name": "interactive",
		"request": map[string]any{
			"resources": res,
			"docker": map[string]any{
				"image":   o.image,
				"command": []string{"/bin/sh", "-c", waitScript(o.minutes)},
				"storage": []any{map[string]any{"hostPath": "PROJECT_SHARE_AUTO", "containerPath": "/project"}},
			},
			"scheduling": map[string]any{"interactive": true, "maxDuration": strconv.Itoa(o.minutes) + " minutes"},
		},
	}
}

func (a *app) cmdInteractive(args []string) error {
	o := interactiveOptions{cpus: 1, mem: 2}
	fs := newFlagSet("interactive", "gpulab-cli interactive --project P --duration-minutes N --docker-image IMG [options]",
		"Start a job that waits (it ends after the duration, or when /tmp/running is removed in it),\n"+
			"with the project's share at /project, wait until it runs, and log in to it with ssh.")
	fs.String(&o.project, "project", "NAME", "the project to run in (name or URN; default $GPULAB_PROJECT)")
	fs.Int(&o.minutes, "duration-minutes", "N", "how long the job may run, in minutes")
	fs.String(&o.image, "docker-image", "IMAGE", "the Docker image to run (it needs /bin/sh)")
	fs.Int(&o.cpus, "cpus", "N", "CPUs (default 1)")
	fs.Int(&o.gpus, "gpus", "N", "GPUs (default 0)")
	fs.Int(&o.mem, "mem", "GB", "memory in GB (default 2)")
	fs.Int(&o.clusterID, "cluster-id", "ID", "run on this cluster")
	fs.Bool(&o.onlyShow, "only-show", "print the job that would be submitted, and submit nothing")
	fs.Bool(&o.show, "s,show", "once the job runs, print the ssh command instead of running it")
	fs.Bool(&o.noProx, "P,no-proxy", "connect to the slave directly, not through the jump host")
	pos, err := a.parseCommand(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return usagef("interactive takes no arguments, got %q", pos[0])
	case o.minutes < 1:
		return usagef("--duration-minutes must be at least 1")
	case o.image == "":
		return usagef("--docker-image is required")
	case o.cpus < 1 || o.gpus < 0 || o.mem < 1:
		return usagef("--cpus and --mem must be at least 1, --gpus at least 0")
	}
	doc, err := json.Marshal(interactiveJob(o))
	if err != nil {
		return fmt.Errorf("encode job: %w", err)
	}
	cl, err := a.client(true)
	if err != nil {
		return err
	}
	so := submitOptions{project: o.project}
	so.sshKeys = a.sshPubKeys()
	body, err := a.prepareSubmission(doc, "interactive job", so)
	if err != nil {
		return err
	}
	if o.onlyShow {
		var out bytes.Buffer
		if err := json.Indent(&out, body, "", "  "); err != nil {
			return fmt.Errorf("format job: %w", err)
		}
		a.stdout.printf("%s\n", bytes.TrimSpace(out.Bytes()))
		return nil
	}
	id, err := cl.SubmitJob(a.ctx, body, false)
	if err != nil {
		return err
	}
	a.stderr.printf("Submitted interactive job %s\n", id)
	j, err := a.waitFor(cl, id, false)
	if err != nil {
		return err
	}
	if j.State.Status != job.StatusRunning {
		return fmt.Errorf("job %s is %s, not RUNNING: see gpulab-cli debug %s", id, j.State.Status, id)
	}
	return a.runSSH(cl, "ssh", j, sshFlags{show: o.show, noProxy: o.noProx}, nil)
}
