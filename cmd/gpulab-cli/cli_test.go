package main

import (
	"errors"
	"strings"
	"testing"
)

func TestResolveCommand(t *testing.T) {
	tests := []struct {
		in        string
		want      string // "" when it must not resolve
		ambiguous []string
	}{
		{in: "submit", want: "submit"},
		{in: "su", want: "submit"},
		{in: "s", want: "submit"},
		{in: "ss", want: "ssh"},
		{in: "sf", want: "sftp"},
		{in: "i", want: "interactive"},
		{in: "j", want: "jobs"},
		{in: "job", want: "jobs"}, // imec alias (and a prefix)
		{in: "jobs", want: "jobs"},
		{in: "cl", want: "clusters"},
		{in: "slaves", want: "clusters"}, // imec alias
		{in: "slave", want: "clusters"},
		{in: "conv", want: "convert"},
		{in: "co", want: "convert"},
		{in: "w", want: "wait"},
		{in: "logs", want: "log"}, // imec alias
		{in: "lo", want: "log"},
		{in: "de", want: "debug"},
		{in: "ha", want: "halt"},
		{in: "rel", want: "release"},
		{in: "re", want: "release"}, // "re" is no prefix of "rm"
		{in: "v", want: "version"},
		{in: "rm", want: "rm"},
		{in: "cancel", want: "cancel"},
		// rm and cancel are never reached by a prefix, and a prefix of them resolves to nothing.
		{in: "r"},
		{in: "c"},
		{in: "ca"},
		{in: "can"},
		{in: "cance"},
		{in: "h", ambiguous: []string{"halt", "help", "hold"}},
		{in: "hol", want: "hold"},
		{in: "he", want: "help"},
		{in: "d", want: "debug"},
		{in: "x"},
		{in: "jobsx"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			cmd, err := resolveCommand(tt.in)
			switch {
			case tt.want != "":
				if err != nil || cmd.name != tt.want {
					t.Fatalf("resolveCommand(%q) = %v, %v; want %s", tt.in, cmdName(cmd), err, tt.want)
				}
			default:
				var ue *usageError
				if err == nil || !errors.As(err, &ue) {
					t.Fatalf("resolveCommand(%q) = %v, %v; want a usage error", tt.in, cmdName(cmd), err)
				}
				for _, c := range tt.ambiguous {
					if !strings.Contains(err.Error(), c) {
						t.Errorf("error %q does not list candidate %s", err, c)
					}
				}
				if len(tt.ambiguous) > 0 && !strings.Contains(err.Error(), "ambiguous") {
					t.Errorf("error %q does not say the command is ambiguous", err)
				}
			}
		})
	}
}

func cmdName(c *command) string {
	if c == nil {
		return "<nil>"
	}
	return c.name
}

func TestEveryCommandHasHelp(t *testing.T) {
	e := newTestEnv(t)
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			r := e.run(c.name, "--help")
			if r.code != exitOK || !strings.Contains(r.stdout, "Usage: gpulab-cli") {
				t.Errorf("%s --help:\n%s", c.name, r)
			}
			if len(e.m.reqs("GET", "jobs")) > 0 {
				t.Errorf("%s --help called the API", c.name)
			}
		})
	}
	r := e.run("help", "cl")
	if r.code != exitOK || !strings.Contains(r.stdout, "gpulab-cli clusters") {
		t.Errorf("help cl:\n%s", r)
	}
}

func TestUsageErrorsExitTwo(t *testing.T) {
	e := newTestEnv(t)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{}, "Usage: gpulab-cli"},
		{[]string{"ca", "abcdef"}, "cancel must be typed in full"},
		{[]string{"r", "abcdef"}, "rm must be typed in full"},
		{[]string{"h"}, "ambiguous command"},
		{[]string{"nosuch"}, `unknown command "nosuch"`},
		{[]string{"--nosuch", "jobs"}, "flag provided but not defined: --nosuch"},
		{[]string{"jobs", "--nosuch"}, "flag provided but not defined: --nosuch"},
		{[]string{"jobs", "a", "b"}, "at most one job ID"},
		{[]string{"jobs", "-d"}, "--definition needs a job ID"},
		{[]string{"jobs", "-u", "abcdef"}, "not both"},
		{[]string{"wait", "abcdef"}, "--wait-run or --wait-done"},
		{[]string{"rm", "-F", "abcdef"}, "--force needs --real"},
		{[]string{"rm"}, "at least one job ID"},
		{[]string{"cancel"}, "at least one job ID"},
		{[]string{"hold", "--all", "abcdef"}, "not both"},
		{[]string{"clusters", "x"}, "not a number"},
		{[]string{"submit", "--hold", "--wait-run", "f.json"}, "--hold never runs"},
		{[]string{"submit", "--email-run", "me@example.org", "f.json"}, "--email-run=ADDR"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := e.run(tt.args...)
			if r.code != exitUsage || !strings.Contains(r.stdout+r.stderr, tt.want) {
				t.Errorf("want exit 2 and %q, got:\n%s", tt.want, r)
			}
		})
	}
	// A command that needs the certificate, run without one, is a usage error too.
	delete(e.vars, "GPULAB_CERT")
	r := e.run("jobs")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--cert") {
		t.Errorf("jobs without a certificate:\n%s", r)
	}
}

func TestRunEntryPoint(t *testing.T) {
	var out, errOut strings.Builder
	code := run([]string{"--version"}, func(string) string { return "" }, strings.NewReader(""), &out, &errOut)
	if code != exitOK || strings.TrimSpace(out.String()) != clientVersion() {
		t.Errorf("--version: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
}

func TestParseInterspersedFlags(t *testing.T) {
	var d bool
	var n int
	fs := newFlagSet("x", "x", "")
	fs.Bool(&d, "d,definition", "")
	fs.Int(&n, "c,max-count", "N", "")
	pos, err := fs.parse([]string{"ID1", "-d", "--max-count", "5", "ID2", "--", "-c"})
	if err != nil {
		t.Fatal(err)
	}
	if !d || n != 5 || strings.Join(pos, " ") != "ID1 ID2 -c" {
		t.Errorf("d=%v n=%d pos=%q", d, n, pos)
	}
}

func TestOptionalValueFlag(t *testing.T) {
	var v optionalValue
	fs := newFlagSet("x", "x", "")
	fs.Var(&v, "email-run", "[=ADDR]", "")
	pos, err := fs.parse([]string{"--email-run", "job.json", "--email-run=bob@example.org"})
	if err != nil {
		t.Fatal(err)
	}
	// A bare --email-run must not swallow the job file, as in imec's CLI where it is a switch.
	if len(pos) != 1 || pos[0] != "job.json" {
		t.Errorf("positional = %q, want [job.json]", pos)
	}
	if !v.set || len(v.values) != 2 || v.values[0] != "" || v.values[1] != "bob@example.org" {
		t.Errorf("values = %q", v.values)
	}
}
