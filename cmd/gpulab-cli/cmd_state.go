package main

import (
	"errors"
	"fmt"

	"github.com/opengpulab/gpulab/client"
	"github.com/opengpulab/gpulab/job"
)

func (a *app) cmdCancel(args []string) error {
	return a.setStatusCommand(args, "cancel", job.StatusCancelled, "",
		"Cancel jobs: a queued job never starts, a running one is stopped (SIGTERM, then SIGKILL\n"+
			"after 10 seconds). Prints the ID of each job cancelled.")
}

func (a *app) cmdHalt(args []string) error {
	return a.setStatusCommand(args, "halt", job.StatusMustHalt, "",
		"Halt running jobs, to test their HALT procedure: RUNNING -> MUSTHALT -> HALTING -> HALTED\n"+
			"(or FAILED if the job does not exit with 123 within 15 seconds of SIGUSR1).")
}

func (a *app) cmdHold(args []string) error {
	return a.setStatusCommand(args, "hold", job.StatusOnHold, job.StatusQueued,
		"Put queued jobs on hold (QUEUED -> ONHOLD): they are not started until released.")
}

func (a *app) cmdRelease(args []string) error {
	return a.setStatusCommand(args, "release", job.StatusQueued, job.StatusOnHold,
		"Release jobs that are on hold (ONHOLD -> QUEUED).")
}

// setStatusCommand is cancel, halt, hold and release: one state change for each job named.
// allFrom, when set, enables -a/--all: every job of the user in that state.
func (a *app) setStatusCommand(args []string, name string, to job.Status, allFrom job.Status, about string) error {
	var all bool
	usage := fmt.Sprintf("gpulab-cli %s ID...", name)
	if allFrom != "" {
		usage = fmt.Sprintf("gpulab-cli %s (ID...|--all)", name)
	}
	fs := newFlagSet(name, usage, about)
	if allFrom != "" {
		fs.Bool(&all, "a,all", fmt.Sprintf("all your %s jobs", allFrom))
	}
	ids, err := a.parseCommand(fs, args)
	if err != nil {
		return err
	}
	switch {
	case all && len(ids) > 0:
		return usagef("give either job IDs or --all, not both")
	case !all && len(ids) == 0:
		return usagef("%s needs at least one job ID", name)
	}
	cl, err := a.client(true)
	if err != nil {
		return err
	}
	if all {
		ids, err = a.myJobIDs(cl, client.ListOptions{Pending: true}, func(j *job.Job) bool { return j.State.Status == allFrom })
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			a.stderr.printf("You have no %s jobs.\n", allFrom)
			return nil
		}
	}
	return a.forEachJob(ids, name, func(id string) error { return cl.SetStatus(a.ctx, id, to) })
}

// forEachJob applies fn to each job, printing the ID of each success on stdout (as imec's CLI
// does, so the output can be piped on) and each failure on stderr; it fails if any failed.
func (a *app) forEachJob(ids []string, verb string, fn func(id string) error) error {
	failed := 0
	for _, id := range ids {
		if err := fn(id); err != nil {
			if a.ctx.Err() != nil {
				return err
			}
			failed++
			a.stderr.printf("Error: %v\n", err)
			if h := a.hint(err); h != "" {
				a.stderr.printf("%s\n", h)
			}
			continue
		}
		a.stdout.printf("%s\n", id)
	}
	if failed > 0 {
		if len(ids) == 1 {
			return errAlreadyReported
		}
		return fmt.Errorf("%s failed for %d of %d jobs", verb, failed, len(ids))
	}
	return nil
}

// errAlreadyReported makes run exit 1 without printing the error again.
var errAlreadyReported = errors.New("already reported")

// myJobIDs lists the IDs of the user's own jobs that match the filter and keep, reading every
// page so that "all" means all.
func (a *app) myJobIDs(cl *client.Client, lo client.ListOptions, keep func(*job.Job) bool) ([]string, error) {
	id, err := a.identity()
	if err != nil {
		return nil, err
	}
	lo.UserURN = id.UserURN
	lo.PageSize = 200
	lo.Sort = "-created"
	seen := map[string]bool{}
	var ids []string
	for page := 1; page <= 100; page++ {
		lo.Page = page
		jobs, err := cl.ListJobs(a.ctx, lo)
		if err != nil {
			return nil, err
		}
		fresh := 0
		for i := range jobs {
			j := &jobs[i]
			if seen[j.UUID] {
				continue
			}
			seen[j.UUID] = true
			fresh++
			if j.Owner.UserURN != "" && j.Owner.UserURN != id.UserURN {
				continue // never touch another user's job, whatever the master sent
			}
			if keep(j) {
				ids = append(ids, j.UUID)
			}
		}
		if fresh == 0 || len(jobs) < lo.PageSize {
			break
		}
	}
	return ids, nil
}

func (a *app) cmdRm(args []string) error {
	var o client.DeleteOptions
	var allFinished bool
	fs := newFlagSet("rm", "gpulab-cli rm [options] (ID...|--all-finished)",
		"Delete jobs: they are marked DELETED and hidden from the lists. Prints the ID of each job\n"+
			"deleted. The flags have the meanings of imec's gpulab-cli.")
	fs.Bool(&o.Finished, "f,finished", "allow deleting jobs that have ended (FINISHED, FAILED, CANCELLED, HALTED)")
	fs.Bool(&o.Real, "r,real", "really remove the job from the database instead of marking it DELETED\n(admins only)")
	fs.Bool(&o.Force, "F,force", "delete the job whatever its state (admins only; needs --real)")
	fs.Bool(&allFinished, "all-finished", "delete all of your jobs that have ended")
	ids, err := a.parseCommand(fs, args)
	if err != nil {
		return err
	}
	switch {
	case o.Force && !o.Real:
		return usagef("--force needs --real")
	case allFinished && len(ids) > 0:
		return usagef("give either job IDs or --all-finished, not both")
	case !allFinished && len(ids) == 0:
		return usagef("rm needs at least one job ID")
	}
	cl, err := a.client(true)
	if err != nil {
		return err
	}
	if allFinished {
		o.Finished = true
		ids, err = a.myJobIDs(cl, client.ListOptions{Finished: true}, func(j *job.Job) bool {
			return j.State.Status.Ended() && j.State.Status != job.StatusDeleted
		})
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			a.stderr.printf("You have no ended jobs to delete.\n")
			return nil
		}
	}
	return a.forEachJob(ids, "rm", func(id string) error { return cl.DeleteJob(a.ctx, id, o) })
}
