package main

import (
	"strings"
	"time"

	"github.com/opengpulab/gpulab/client"
)

func (a *app) cmdLog(args []string) error {
	var follow bool
	fs := newFlagSet("log", "gpulab-cli log [options] ID",
		"Print a job's output (its stdout and stderr).")
	fs.Bool(&follow, "f,follow", "keep printing new output until the job has ended")
	pos, err := a.parseCommand(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("log needs exactly one job ID")
	}
	cl, err := a.client(true)
	if err != nil {
		return err
	}
	return a.printLog(cl, pos[0], follow)
}

// printLog prints a job's log. Following asks only for the bytes after those already printed
// (HTTP Range), so nothing is repeated or lost; it stops once the job has ended and no output
// is left.
func (a *app) printLog(cl *client.Client, id string, follow bool) error {
	var offset int64
	link := contact{a: a}
	for {
		data, next, err := cl.Log(a.ctx, id, offset)
		if err != nil && follow && a.ctx.Err() == nil && link.lost(err) {
			if err := a.sleep(a.logPoll); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		link.ok()
		a.stdout.write(data)
		if a.stdout.err != nil {
			return nil // reported by main
		}
		offset = next
		if !follow {
			if offset == 0 {
				a.stderr.printf("No log output (yet?) for job %s.\n", id)
			}
			return nil
		}
		if len(data) > 0 {
			continue // there may be more right away
		}
		j, err := cl.GetJob(a.ctx, id)
		if err != nil && a.ctx.Err() == nil && link.lost(err) {
			if err := a.sleep(a.logPoll); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		link.ok()
		if j.State.Status.Ended() {
			// The slave ships the last output before it reports the end; one more read gets it.
			data, _, err := cl.Log(a.ctx, id, offset)
			if err != nil {
				return err
			}
			a.stdout.write(data)
			return nil
		}
		if err := a.sleep(a.logPoll); err != nil {
			return err
		}
	}
}

func (a *app) cmdDebug(args []string) error {
	var raw bool
	fs := newFlagSet("debug", "gpulab-cli debug [options] ID",
		"Print a job's events, oldest first: its state changes, warnings, errors (why it FAILED)\n"+
			"and the scheduler's explanations.")
	fs.Bool(&raw, "r,raw", "print the JSON the master sends")
	pos, err := a.parseCommand(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("debug needs exactly one job ID")
	}
	cl, err := a.client(true)
	if err != nil {
		return err
	}
	if raw {
		data, err := cl.DebugRaw(a.ctx, pos[0])
		if err != nil {
			return err
		}
		return a.writeJSON(data)
	}
	events, err := cl.Debug(a.ctx, pos[0])
	if err != nil {
		return err
	}
	for _, e := range events {
		a.stdout.printf("%s\n", a.formatEvent(e))
	}
	if len(events) == 0 {
		a.stderr.printf("No events for job %s.\n", pos[0])
	}
	return nil
}

// formatEvent writes an event on one line, in the layout of imec's `gpulab-cli debug`:
// "TIME STATE CHANGED -> RUNNING" or "TIME LOG TYPE: message".
func (a *app) formatEvent(e client.Event) string {
	ts := a.formatTime(e.Time)
	if e.Status != "" {
		s := ts + " STATE CHANGED -> " + e.Status
		if e.Message != "" {
			s += ": " + e.Message
		}
		return s
	}
	typ := e.Type
	if typ == "" {
		typ = "EVENT"
	}
	return ts + " LOG " + typ + ": " + e.Message
}

func (a *app) cmdVersion(args []string) error {
	fs := newFlagSet("version", "gpulab-cli version",
		"Print this client's version, then the master's version and the latest client version it\n"+
			"knows of. (`gpulab-cli --version` prints only this client's version.)")
	pos, err := a.parseCommand(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("version takes no arguments")
	}
	a.stdout.printf("Client version: %s\n", clientVersion())
	cl, err := a.client(false)
	if err != nil {
		return err
	}
	v, err := cl.Version(a.ctx)
	if err != nil {
		return err
	}
	a.stdout.printf("Master version: %s (%s)\n", dash(v.Version), cl.BaseURL())
	a.stdout.printf("Latest client version: %s\n", dash(v.LatestClientVersion))
	return nil
}

// contact follows whether a long wait (wait, submit --wait-run, log -f) reaches the master.
// Failures that pass by themselves (client.Temporary: the master restarting, its database
// down) never end such a wait: the client has already retried each call for a while, and the
// user asked to wait. They are reported once when they begin and once when they end.
type contact struct {
	a      *app
	lostAt time.Time // zero while the master answers
}

// lost reports whether err is a temporary failure, telling the user when it is the first.
func (c *contact) lost(err error) bool {
	if !client.Temporary(err) {
		return false
	}
	if c.lostAt.IsZero() {
		c.lostAt = c.a.now()
		msg, _, _ := strings.Cut(err.Error(), "\n")
		c.a.stderr.printf("Lost contact with the master: %s\nStill waiting: trying again until it answers (Ctrl-C to stop).\n", msg)
	}
	return true
}

// ok notes an answer of the master.
func (c *contact) ok() {
	if !c.lostAt.IsZero() {
		c.a.stderr.printf("The master answers again (after %s).\n", c.a.durationSince(c.lostAt))
		c.lostAt = time.Time{}
	}
}
