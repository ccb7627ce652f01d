package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// flagSet wraps a flag.FlagSet to register short and long names together ("c,max-count") and
// to print help the way users of imec's CLI know it (`-c, --max-count N`). The standard flag
// parser already accepts both -name and --name.
type flagSet struct {
	fs    *flag.FlagSet
	help  []flagHelp
	hide  map[string]bool // names left out of the help (the global flags)
	usage string          // "gpulab-cli jobs [options] [ID]"
	about string          // what the command does, printed under the usage line
}

type flagHelp struct {
	names []string
	arg   string
	usage string
}

func newFlagSet(name, usage, about string) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by run, help by printHelp
	return &flagSet{fs: fs, hide: map[string]bool{}, usage: usage, about: about}
}

func splitNames(names string) []string { return strings.Split(names, ",") }

// record notes a flag for the help. A name the command has already taken is left out: a
// command's own flag wins over a global one of the same name (ssh's -p is --proxy; the
// password is then only --password).
func (f *flagSet) record(names, arg, usage string) []string {
	var ns []string
	for _, n := range splitNames(names) {
		if f.fs.Lookup(n) == nil {
			ns = append(ns, n)
		}
	}
	f.help = append(f.help, flagHelp{names: ns, arg: arg, usage: usage})
	return ns
}

// Bool registers a boolean flag under every name in names.
func (f *flagSet) Bool(p *bool, names, usage string) {
	for _, n := range f.record(names, "", usage) {
		f.fs.BoolVar(p, n, *p, usage)
	}
}

// String registers a string flag under every name in names.
func (f *flagSet) String(p *string, names, arg, usage string) {
	for _, n := range f.record(names, arg, usage) {
		f.fs.StringVar(p, n, *p, usage)
	}
}

// Int registers an integer flag under every name in names.
func (f *flagSet) Int(p *int, names, arg, usage string) {
	for _, n := range f.record(names, arg, usage) {
		f.fs.IntVar(p, n, *p, usage)
	}
}

// Var registers a custom flag under every name in names.
func (f *flagSet) Var(v flag.Value, names, arg, usage string) {
	for _, n := range f.record(names, arg, usage) {
		f.fs.Var(v, n, usage)
	}
}

// hidden marks the names registered last as left out of the help.
func (f *flagSet) hideLast(n int) {
	for _, h := range f.help[len(f.help)-n:] {
		for _, name := range h.names {
			f.hide[name] = true
		}
	}
}

// printHelp writes the command's usage, description and flags.
func (f *flagSet) printHelp(w io.Writer) {
	p := &printer{w: w}
	p.printf("Usage: %s\n", f.usage)
	if f.about != "" {
		p.printf("\n%s\n", f.about)
	}
	var rows [][2]string
	for _, h := range f.help {
		if f.hide[h.names[0]] {
			continue
		}
		var parts []string
		for _, n := range h.names {
			if len(n) == 1 {
				parts = append(parts, "-"+n)
			} else {
				parts = append(parts, "--"+n)
			}
		}
		left := strings.Join(parts, ", ")
		switch {
		case strings.HasPrefix(h.arg, "["): // an optional value: --email-run[=ADDR]
			left += h.arg
		case h.arg != "":
			left += " " + h.arg
		}
		rows = append(rows, [2]string{left, h.usage})
	}
	if len(rows) > 0 {
		p.printf("\nOptions:\n")
		printTwoColumns(p, rows)
	}
	p.printf("\nGlobal options (--cert, -p, --custom-master-url, --servercert, --retry-max-time, --debug) may be given\nbefore or after the command.\n")
}

// printTwoColumns prints aligned "left  right" rows, wrapping long right parts onto
// continuation lines that keep the alignment.
func printTwoColumns(p *printer, rows [][2]string) {
	width := 0
	for _, r := range rows {
		width = max(width, len(r[0]))
	}
	width = min(width, 30)
	for _, r := range rows {
		lines := strings.Split(r[1], "\n")
		if len(r[0]) > width {
			p.printf("  %s\n", r[0])
			for _, l := range lines {
				p.printf("  %-*s  %s\n", width, "", l)
			}
			continue
		}
		p.printf("  %-*s  %s\n", width, r[0], lines[0])
		for _, l := range lines[1:] {
			p.printf("  %-*s  %s\n", width, "", l)
		}
	}
}

// errHelp is returned when the user asked for help; run exits 0 after printing it.
var errHelp = errors.New("help requested")

// usageError is a mistake in the command line; run prints it with a pointer to the help and
// exits 2, as imec's CLI does.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// parse parses args allowing flags anywhere between the positional arguments, because users
// type `gpulab-cli jobs ID -d`. A lone "--" ends the flags.
func (f *flagSet) parse(args []string) ([]string, error) {
	var positional []string
	for {
		if err := f.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, errHelp
			}
			return nil, &usageError{msg: cleanFlagError(err)}
		}
		rest := f.fs.Args()
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		if len(rest) == 0 {
			return positional, nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// cleanFlagError rewrites the flag package's messages to show long flags as users type them
// (--max-count rather than -max-count).
func cleanFlagError(err error) string {
	return longFlagRe.ReplaceAllString(err.Error(), "$1--$2")
}

var longFlagRe = regexp.MustCompile(`(^|[ :])-([a-zA-Z][a-zA-Z0-9-]+)`)

// optionalValue is a flag that may be given bare (`--email-run`) or with a value
// (`--email-run=me@example.org`), and more than once. imec's CLI has these e-mail options as
// bare switches meaning "my own address"; accepting a value as well keeps old scripts working
// while letting users name other addresses. A bare occurrence is recorded as "".
type optionalValue struct {
	set    bool
	values []string
}

func (o *optionalValue) String() string { return strings.Join(o.values, ",") }

// Set records one occurrence; the flag package passes "true" for a bare boolean flag.
func (o *optionalValue) Set(v string) error {
	o.set = true
	if b, err := strconv.ParseBool(v); err == nil {
		if b {
			o.values = append(o.values, "")
		}
		return nil
	}
	o.values = append(o.values, v)
	return nil
}

// IsBoolFlag lets the flag be given without a value.
func (o *optionalValue) IsBoolFlag() bool { return true }

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }

// Set appends one value.
func (s *stringList) Set(v string) error {
	*s = append(*s, v)
	return nil
}
