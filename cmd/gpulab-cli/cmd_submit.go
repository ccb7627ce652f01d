package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/opengpulab/gpulab/client"
	"github.com/opengpulab/gpulab/job"
)

// submitOptions are the flags of `submit`.
type submitOptions struct {
	project                                           string
	hold, waitRun, waitDone                           bool
	emailQueue, emailRun, emailEnd, emailHalt, emailR optionalValue
	sshKeys                                           stringList
}

func (a *app) cmdSubmit(args []string) error {
	var o submitOptions
	fs := newFlagSet("submit", "gpulab-cli submit [options] [FILE|-]",
		"Submit the job request in FILE (or on stdin when FILE is - or absent) and print the new\n"+
			"job's ID. Version 1 job definitions (\"jobDefinition\") are accepted too.")
	fs.String(&o.project, "project", "NAME", "the project to run in (name or URN); overrides owner.projectUrn in the\nfile, which overrides $GPULAB_PROJECT")
	fs.Bool(&o.hold, "hold", "submit the job ONHOLD instead of QUEUED (start it with release)")
	fs.Bool(&o.waitRun, "wait-run", "wait until the job runs; fail if it ends without running")
	fs.Bool(&o.waitDone, "wait-done", "wait until the job ends; fail if it ends FAILED or CANCELLED")
	fs.Var(&o.emailQueue, "email-queue,email-queued", "[=ADDR]", "e-mail ADDR (your own address if none) when the job is queued")
	fs.Var(&o.emailRun, "email-run", "[=ADDR]", "e-mail when the job starts running")
	fs.Var(&o.emailEnd, "email-end,email-done", "[=ADDR]", "e-mail when the job ends")
	fs.Var(&o.emailHalt, "email-halt", "[=ADDR]", "e-mail when the job is halted")
	fs.Var(&o.emailR, "email-restart", "[=ADDR]", "e-mail when the job is restarted")
	fs.Var(&o.sshKeys, "ssh-pub-key", "KEY", "add an SSH public key (the key, or a file holding it) to\nrequest.extra.sshPubKeys; may be repeated")
	pos, err := a.parseCommand(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		for _, p := range pos {
			if strings.Contains(p, "@") {
				return usagef("submit takes one job file, got %d: give e-mail addresses as --email-run=ADDR", len(pos))
			}
		}
		return usagef("submit takes one job file, got %d", len(pos))
	}
	if o.hold && (o.waitRun || o.waitDone) {
		return usagef("a job submitted with --hold never runs by itself: drop --wait-run/--wait-done")
	}
	data, name, err := a.readInput(pos)
	if err != nil {
		return err
	}
	cl, err := a.client(true)
	if err != nil {
		return err
	}
	body, err := a.prepareSubmission(data, name, o)
	if err != nil {
		return err
	}
	id, err := cl.SubmitJob(a.ctx, body, o.hold)
	if err != nil {
		if client.StatusCode(err) == http.StatusForbidden {
			return fmt.Errorf("%w\nHint: check the project (--project or GPULAB_PROJECT): you must be one of its members", err)
		}
		return err
	}
	a.stdout.printf("%s\n", id)
	if o.waitRun || o.waitDone {
		if _, err := a.waitFor(cl, id, o.waitDone); err != nil {
			return err
		}
	}
	return nil
}

// readInput reads the job file named by the only positional argument, or stdin for "-" or
// none. It returns the data and a name for messages.
func (a *app) readInput(pos []string) ([]byte, string, error) {
	if len(pos) == 0 || pos[0] == "-" {
		data, err := io.ReadAll(a.stdin)
		if err != nil {
			return nil, "", fmt.Errorf("read job from stdin: %w", err)
		}
		if len(bytes.TrimSpace(data)) == 0 {
			return nil, "", usagef("no job on stdin: give a job file, or pipe one in")
		}
		return data, "stdin", nil
	}
	data, err := os.ReadFile(expandHome(pos[0], a.env))
	if err != nil {
		return nil, "", fmt.Errorf("read job file: %w", err)
	}
	return data, pos[0], nil
}

// prepareSubmission returns the body to submit. A file that needs no change is sent exactly as
// written, so that the master's error positions (line, column) match the user's file. When the
// project, e-mail or SSH options must be written into it, the document is decoded (a version 1
// definition is converted to version 2 first, because only version 2 has owner and extra),
// changed and encoded again.
func (a *app) prepareSubmission(data []byte, name string, o submitOptions) ([]byte, error) {
	emails := map[string]*optionalValue{
		"emailOnQueue": &o.emailQueue, "emailOnRun": &o.emailRun, "emailOnEnd": &o.emailEnd,
		"emailOnHalt": &o.emailHalt, "emailOnRestart": &o.emailR,
	}
	wantsExtra := len(o.sshKeys) > 0
	for _, v := range emails {
		wantsExtra = wantsExtra || v.set
	}
	envProject := a.env("GPULAB_PROJECT")
	if o.project == "" && envProject == "" && !wantsExtra {
		return data, nil
	}

	submitter := ""
	if job.IsV1(data) {
		// A version 1 file's `email_run: true` means "mail me", as for imec's old client.
		if id, err := a.identity(); err == nil {
			submitter = id.Email
		}
	}
	doc, err := decodeJobDocument(data, name, submitter)
	if err != nil {
		return nil, err
	}
	project := o.project
	if project == "" {
		owner, _ := doc["owner"].(map[string]any)
		switch urn, _ := owner["projectUrn"].(string); {
		case urn == "":
			project = envProject
		case !strings.HasPrefix(urn, "urn:"):
			project = urn // a bare name, as a version 1 file's project: made a URN below
		}
	}
	if project == "" && !wantsExtra {
		return data, nil // the file names its project and nothing else changes
	}
	if project != "" {
		urn, err := a.projectURN(project)
		if err != nil {
			return nil, err
		}
		owner, _ := doc["owner"].(map[string]any)
		if owner == nil {
			owner = map[string]any{}
		}
		owner["projectUrn"] = urn
		doc["owner"] = owner
	}
	if wantsExtra {
		extra := requestExtra(doc)
		for _, key := range slices.Sorted(maps.Keys(emails)) {
			v := emails[key]
			for _, addr := range v.values {
				if addr == "" {
					id, err := a.identity()
					if err != nil {
						return nil, err
					}
					if id.Email == "" {
						return nil, usagef("your certificate holds no e-mail address: give one, as in --email-run=ADDR")
					}
					addr = id.Email
				}
				extra[key] = appendUnique(extra[key], addr)
			}
		}
		for _, k := range o.sshKeys {
			key, err := readSSHKey(k, a.env)
			if err != nil {
				return nil, err
			}
			extra["sshPubKeys"] = appendUnique(extra["sshPubKeys"], key)
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("encode job: %w", err)
	}
	return buf.Bytes(), nil
}

// decodeJobDocument decodes a job file into a generic document (numbers kept exact), the
// version 1 format converted to version 2 (its project kept as owner.projectUrn; submitter is
// the address its `email_run: true` means). Errors name the file and, for JSON errors, the
// line and column.
func decodeJobDocument(data []byte, name, submitter string) (map[string]any, error) {
	if job.IsV1(data) {
		opts := localJobOptions()
		opts.SubmitterEmail = submitter
		j, err := job.ConvertV1(data, opts)
		if err != nil {
			return nil, &jobFileError{name: name, err: err}
		}
		sub, err := json.Marshal(job.Submission(j))
		if err != nil {
			return nil, fmt.Errorf("encode converted job: %w", err)
		}
		doc, err := decodeObject(sub)
		if err != nil {
			return nil, fmt.Errorf("decode converted job: %w", err)
		}
		// Version 1 has no scheduling options: what the conversion filled in are this client's
		// defaults, and the master must apply its own configured ones instead.
		if req, ok := doc["request"].(map[string]any); ok {
			delete(req, "scheduling")
		}
		if j.Owner.ProjectURN != "" {
			doc["owner"] = map[string]any{"projectUrn": j.Owner.ProjectURN}
		}
		return doc, nil
	}
	doc, err := decodeObject(stripTrailingCommas(data))
	if err != nil {
		// Let the job package say where the JSON breaks: it counts lines and columns.
		if _, perr := job.Parse(data, localJobOptions()); perr != nil {
			var se *job.SyntaxError
			if errors.As(perr, &se) {
				return nil, &jobFileError{name: name, err: perr}
			}
		}
		return nil, &jobFileError{name: name, err: err}
	}
	return doc, nil
}

func decodeObject(data []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	if doc == nil {
		return nil, errors.New("a job must be a JSON object")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("unexpected data after the job's JSON object")
	}
	return doc, nil
}

// stripTrailingCommas removes commas that directly precede '}' or ']' outside strings: imec's
// documentation prints job examples with them and the master accepts them.
func stripTrailingCommas(data []byte) []byte {
	out := make([]byte, 0, len(data))
	inString, escaped := false, false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if inString {
			out = append(out, c)
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		if c == '"' {
			inString = true
		}
		if c == ',' {
			j := i + 1
			for j < len(data) && strings.IndexByte(" \t\r\n", data[j]) >= 0 {
				j++
			}
			if j < len(data) && (data[j] == '}' || data[j] == ']') {
				continue
			}
		}
		out = append(out, c)
	}
	return out
}

// requestExtra returns request.extra of a document, creating it, and first moves a top-level
// "extra" into it (the master reads a top-level extra as request.extra; imec's API page
// shows it there), so that additions are never split over two places.
func requestExtra(doc map[string]any) map[string]any {
	req, _ := doc["request"].(map[string]any)
	if req == nil {
		req = map[string]any{}
		doc["request"] = req
	}
	extra, _ := req["extra"].(map[string]any)
	if extra == nil {
		extra = map[string]any{}
		req["extra"] = extra
	}
	if top, ok := doc["extra"].(map[string]any); ok {
		for k, v := range top {
			list, isList := v.([]any)
			if !isList {
				if _, exists := extra[k]; !exists {
					extra[k] = v
				}
				continue
			}
			for _, item := range list {
				if s, ok := item.(string); ok {
					extra[k] = appendUnique(extra[k], s)
				}
			}
		}
		delete(doc, "extra")
	}
	return extra
}

// appendUnique appends s to a JSON list (which may be absent) unless it is already there.
func appendUnique(list any, s string) []any {
	items, _ := list.([]any)
	for _, it := range items {
		if it == s {
			return items
		}
	}
	return append(items, s)
}

// projectURN qualifies a project name with the authority of the user's URN, as imec's CLI
// does; a full URN is used as given.
func (a *app) projectURN(project string) (string, error) {
	if strings.HasPrefix(project, "urn:") {
		return project, nil
	}
	id, err := a.identity()
	if err != nil {
		return "", err
	}
	auth := id.Authority()
	if auth == "" {
		return "", fmt.Errorf("cannot make a project URN from your user URN %q: give the project as a URN", id.UserURN)
	}
	return "urn:publicid:IDN+" + auth + "+project+" + project, nil
}

// readSSHKey returns an SSH public key given on the command line: the key itself, or the name
// of a file holding it.
func readSSHKey(v string, env func(string) string) (string, error) {
	v = strings.TrimSpace(v)
	if strings.HasPrefix(v, "ssh-") || strings.HasPrefix(v, "ecdsa-") || strings.HasPrefix(v, "sk-") {
		return v, nil
	}
	data, err := os.ReadFile(expandHome(v, env))
	if err != nil {
		return "", fmt.Errorf("--ssh-pub-key %s: neither a public key nor a readable file: %w", v, err)
	}
	return strings.TrimSpace(string(data)), nil
}

// jobFileError is a job file that could not be read as a job, with every problem listed.
type jobFileError struct {
	name string
	err  error
}

func (e *jobFileError) Error() string {
	var ve *job.ValidationError
	if errors.As(e.err, &ve) {
		var b strings.Builder
		fmt.Fprintf(&b, "%s is not a valid job:", e.name)
		for _, p := range ve.Problems {
			b.WriteString("\n  ")
			b.WriteString(p.String())
		}
		return b.String()
	}
	return e.name + ": " + e.err.Error()
}

func (e *jobFileError) Unwrap() error { return e.err }

func (a *app) cmdWait(args []string) error {
	var waitRun, waitDone bool
	fs := newFlagSet("wait", "gpulab-cli wait (--wait-run|--wait-done) ID",
		"Wait for a job, showing its state changes on stderr. Exits 1 if the job ends without\n"+
			"reaching what was waited for (FAILED, CANCELLED).")
	fs.Bool(&waitRun, "wait-run", "wait until the job runs")
	fs.Bool(&waitDone, "wait-done", "wait until the job ends")
	pos, err := a.parseCommand(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("wait needs exactly one job ID")
	}
	if !waitRun && !waitDone {
		return usagef("give --wait-run or --wait-done")
	}
	cl, err := a.client(true)
	if err != nil {
		return err
	}
	_, err = a.waitFor(cl, pos[0], waitDone)
	return err
}

// waitFor polls a job until it runs (or, with untilDone, until it ends), reporting each state
// change and each new explanation of why it waits on stderr. It fails when the job ends in a
// way that means the wait was in vain.
func (a *app) waitFor(cl *client.Client, id string, untilDone bool) (*job.Job, error) {
	goal := "to run"
	if untilDone {
		goal = "to end"
	}
	start := a.now()
	var last job.Status
	var lastExpl string
	failures := 0
	link := contact{a: a}
	for {
		j, err := cl.GetJob(a.ctx, id)
		switch {
		case err != nil && a.ctx.Err() != nil:
			return nil, fmt.Errorf("stop waiting for job %s: %w", id, a.ctx.Err())
		case err != nil && link.lost(err):
			// The master is restarting or its database is down: keep waiting.
		case err != nil && client.StatusCode(err) >= 400 && client.StatusCode(err) < 500:
			return nil, err
		case err != nil:
			failures++
			if failures > a.maxPollErrors {
				return nil, fmt.Errorf("give up waiting for job %s: %w", id, err)
			}
			a.stderr.printf("Could not check job %s, will try again: %v\n", id, err)
		default:
			link.ok()
			failures = 0
			id = j.UUID
			st := j.State.Status
			if last == "" {
				a.stderr.printf("Waiting for job %s %s (%s)\n", id, goal, st)
			} else if st != last {
				a.stderr.printf("Job %s is %s (after %s)\n", id, st, a.durationSince(start))
			}
			if st == job.StatusOnHold && last != st {
				a.stderr.printf("  the job is on hold: it waits until released (gpulab-cli release %s)\n", id)
			}
			last = st
			if expl := strings.Join(j.State.Scheduling.QueuedExplanations, "\n"); expl != lastExpl && !st.Ended() {
				lastExpl = expl
				for _, line := range j.State.Scheduling.QueuedExplanations {
					a.stderr.printf("  %s\n", line)
				}
			}
			if done, err := waitOutcome(j, untilDone); done {
				return j, err
			}
		}
		if err := a.sleep(a.waitPoll); err != nil {
			return nil, fmt.Errorf("stop waiting for job %s: %w", id, err)
		}
	}
}

// waitOutcome says whether waiting is over and whether that is a failure.
func waitOutcome(j *job.Job, untilDone bool) (bool, error) {
	st := j.State.Status
	if !untilDone {
		switch st {
		case job.StatusRunning, job.StatusMustHalt, job.StatusHalting:
			return true, nil
		}
	}
	if !st.Ended() {
		return false, nil
	}
	switch st {
	case job.StatusFinished, job.StatusHalted:
		return true, nil
	}
	msg := fmt.Sprintf("job %s ended %s", j.UUID, st)
	if r := j.State.Resources; r != nil && r.ExitCode != nil {
		msg += fmt.Sprintf(" (exit code %d)", *r.ExitCode)
	}
	if st == job.StatusFailed {
		msg += "\nHint: see why with: gpulab-cli debug " + j.UUID
	}
	return true, errors.New(msg)
}

func (a *app) cmdConvert(args []string) error {
	fs := newFlagSet("convert", "gpulab-cli convert [FILE|-]",
		"Convert a version 1 job definition (\"jobDefinition\") in FILE or on stdin to a version 2\n"+
			"job request and print it. With a certificate configured the master converts it (its\n"+
			"rules and defaults apply); without one, or when the master cannot be reached, this\n"+
			"client does, with the same rules.")
	pos, err := a.parseCommand(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usagef("convert takes one job file, got %d", len(pos))
	}
	data, name, err := a.readInput(pos)
	if err != nil {
		return err
	}
	if a.g.cert != "" {
		if a.g.retryMaxTime == "" {
			// The local conversion is as good: do not wait for a master that is away.
			a.g.retryMaxTime = "0"
		}
		cl, err := a.client(false)
		if err != nil {
			return err
		}
		if _, ok := cl.Identity(); ok {
			out, err := cl.Convert(a.ctx, data)
			switch {
			case err == nil:
				return a.writeJSON(out)
			case errors.Is(err, client.ErrUnreachable), client.Temporary(err), client.StatusCode(err) == http.StatusNotFound:
				a.stderr.printf("Warning: %v\nConverting locally instead.\n", err)
			default:
				return err
			}
		}
	}
	j, err := job.Parse(data, localJobOptions())
	if err != nil {
		return &jobFileError{name: name, err: err}
	}
	return a.writeValue(job.Submission(j))
}

// localJobOptions are the options of the CLI's own checks and conversions (offline): the job
// package's defaults with the client limits, so that what an operator allows (more GPUs, other
// host ports) is left for the master to decide.
func localJobOptions() job.Options {
	o := job.DefaultOptions()
	o.Limits = job.ClientLimits()
	return o
}
