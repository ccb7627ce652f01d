// Package settings gives every flag of a command a configuration-file key and an environment
// variable, generically over a flag.FlagSet, so a flag added later is settable all three ways
// without more code.
//
// A flag's file key is its name (`max-notebooks-per-user = 2` in TOML). Its environment
// variable is the one its usage text names as "env NAME" (the project's convention, e.g.
// "(env GPULAB_HEARTBEAT_INTERVAL)"), else the prefix and the name in upper case with
// underscores (GPULAB_MEMORY_RESERVE_GB). Precedence: command line > environment > file >
// default. A value that a flag refuses, from any source, is an error that names the setting and
// where it came from; so is a key of the file that no flag has.
package settings

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// ConfigFlag is the flag (and file key it may not be) naming the configuration file; its
// environment variable is ConfigEnv.
const (
	ConfigFlag = "config"
	ConfigEnv  = "GPULAB_CONFIG"
)

// Source says where a setting's value came from.
type Source string

// The sources, strongest first.
const (
	FromFlag    Source = "flag"
	FromEnv     Source = "env"
	FromFile    Source = "file"
	FromDefault Source = "default"
)

// Options tune Apply.
type Options struct {
	// EnvPrefix makes the environment variable of a flag whose usage names none, e.g. "GPULAB_".
	EnvPrefix string
	// Known, when set, are the settings of the file (e.g. serve's, read by migrate too): keys
	// that are no flag of this set are accepted and ignored, and the set's flags that are not
	// settings (a command's own --user) come from the command line only. Nil: every flag of the
	// set is a setting.
	Known func(key string) bool
}

// Setting is one flag's effective value.
type Setting struct {
	Name, Env, Value string
	Source           Source
}

// Result is what Apply found: the file read (empty: none) and each flag's source.
type Result struct {
	File    string
	sources map[string]Source
	fs      *flag.FlagSet
	opts    Options
}

// Source is where the flag's value came from.
func (r *Result) Source(name string) Source {
	if s, ok := r.sources[name]; ok {
		return s
	}
	return FromDefault
}

// AddConfigFlag registers --config on fs (call before parsing; Apply reads it).
func AddConfigFlag(fs *flag.FlagSet) *string {
	return fs.String(ConfigFlag, "", "TOML configuration file whose keys are these flags' names, e.g. heartbeat-interval = \"5s\"; flags and environment variables override it (env "+ConfigEnv+")")
}

// envPattern finds the environment variable a usage text documents.
var envPattern = regexp.MustCompile(`\benv ([A-Z][A-Z0-9_]*)`)

// EnvName is the environment variable of f: the one its usage names, else the prefix and its
// name in upper case.
func EnvName(f *flag.Flag, prefix string) string {
	if m := envPattern.FindStringSubmatch(f.Usage); m != nil {
		return m[1]
	}
	return prefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
}

// Parse parses args into fs (which must have --config, see AddConfigFlag), then fills every flag
// not given on the command line from the environment, else from the configuration file
// (--config, else $GPULAB_CONFIG). Flags may take defaults from the environment when registered;
// Parse sets them again from it so that the file never overrides the environment, and a value
// the flag refuses is an error here, never a silent default.
func Parse(fs *flag.FlagSet, args []string, getenv func(string) string, opts Options) (*Result, error) {
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	file := ""
	if f := fs.Lookup(ConfigFlag); f != nil {
		file = f.Value.String()
	}
	if file == "" {
		file = getenv(ConfigEnv)
	}
	var values map[string]string
	if file != "" {
		var err error
		if values, err = ReadFile(file, fs, opts.Known); err != nil {
			return nil, err
		}
	}
	return apply(fs, onCommandLine, values, file, getenv, opts)
}

func apply(fs *flag.FlagSet, onCommandLine map[string]bool, values map[string]string, file string, getenv func(string) string, opts Options) (*Result, error) {
	res := &Result{File: file, sources: map[string]Source{}, fs: fs, opts: opts}
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == ConfigFlag {
			if onCommandLine[f.Name] {
				res.sources[f.Name] = FromFlag
			} else if file != "" {
				res.sources[f.Name] = FromEnv
			}
			return
		}
		if onCommandLine[f.Name] {
			res.sources[f.Name] = FromFlag
			return
		}
		if opts.Known != nil && !opts.Known(f.Name) {
			return // a command's own flag (not a setting of the file): command line only
		}
		env := EnvName(f, opts.EnvPrefix)
		if v := getenv(env); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("environment variable %s (--%s): invalid value %q: %w", env, f.Name, v, explain(f, err)))
			}
			res.sources[f.Name] = FromEnv
			return
		}
		if v, ok := values[f.Name]; ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("configuration file %s: %s: invalid value %q: %w", file, f.Name, v, explain(f, err)))
			}
			res.sources[f.Name] = FromFile
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return res, nil
}

// explain replaces the flag package's bare "parse error" by what the setting wants.
func explain(f *flag.Flag, err error) error {
	g, ok := f.Value.(flag.Getter)
	if !ok || err.Error() != "parse error" {
		return err
	}
	switch g.Get().(type) {
	case time.Duration:
		return errors.New("want a duration such as 90s, 5m or 168h")
	case bool:
		return errors.New("want true or false (or 1 or 0)")
	case int, int64, uint, uint64:
		return errors.New("want a whole number")
	case float64:
		return errors.New("want a number")
	}
	return err
}

// ReadFile reads a TOML configuration file into flag values (as the command line would give
// them). A key that is no flag of fs (nor known) is an error naming it; so is a table or a
// value of a type no flag takes. Arrays become comma-separated lists.
func ReadFile(path string, fs *flag.FlagSet, known func(string) bool) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("configuration file: %w", err)
	}
	var raw map[string]any
	if _, err := toml.Decode(string(data), &raw); err != nil {
		return nil, fmt.Errorf("configuration file %s: %w", path, err)
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	values := map[string]string{}
	var errs []error
	for _, k := range keys {
		if k == ConfigFlag {
			errs = append(errs, fmt.Errorf("configuration file %s: %s: a file cannot name another", path, k))
			continue
		}
		if fs.Lookup(k) == nil {
			if known == nil || !known(k) {
				errs = append(errs, fmt.Errorf("configuration file %s: unknown setting %q", path, k))
			}
			continue
		}
		v, err := flagString(raw[k])
		if err != nil {
			errs = append(errs, fmt.Errorf("configuration file %s: %s: %w", path, k, err))
			continue
		}
		values[k] = v
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return values, nil
}

// flagString is a TOML value as a flag's text: strings as they are, numbers and booleans
// formatted, arrays of those joined with commas.
func flagString(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), nil
	case bool:
		return strconv.FormatBool(v), nil
	case []any:
		parts := make([]string, 0, len(v))
		for _, e := range v {
			if _, nested := e.([]any); nested {
				return "", errors.New("nested arrays are not settings")
			}
			s, err := flagString(e)
			if err != nil {
				return "", err
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, ","), nil
	default:
		return "", fmt.Errorf("a %T is no setting's value (want a string, number, boolean or array)", v)
	}
}

// Effective lists every flag with its value and source, sorted by name, secrets redacted
// (see Redact).
func (r *Result) Effective() []Setting {
	var out []Setting
	r.fs.VisitAll(func(f *flag.Flag) {
		out = append(out, Setting{Name: f.Name, Env: EnvName(f, r.opts.EnvPrefix), Value: Redact(f.Name, f.Value.String()), Source: r.Source(f.Name)})
	})
	return out
}

// secretWords mark settings whose values are secrets; a name ending in -file holds a path.
var secretWords = []string{"secret", "password", "token", "session-keys"}

// Redact hides a secret setting's value: a flag named like a secret (see secretWords) unless it
// names a file, and the password of a URL (a database URL's).
func Redact(name, value string) string {
	if value == "" {
		return value
	}
	if !strings.HasSuffix(name, "-file") {
		for _, w := range secretWords {
			if strings.Contains(name, w) {
				return "<redacted>"
			}
		}
	}
	if u, err := url.Parse(value); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			return u.Redacted()
		}
	}
	return value
}

// WriteTOML writes the effective settings as a TOML file (a string per value, so every flag
// type reads back), with each setting's source as a comment.
func WriteTOML(w io.Writer, settings []Setting) {
	for _, s := range settings {
		if s.Name == ConfigFlag {
			continue
		}
		fmt.Fprintf(w, "%s = %s  # %s", s.Name, strconv.Quote(s.Value), s.Source)
		if s.Source == FromEnv {
			fmt.Fprintf(w, " %s", s.Env)
		}
		fmt.Fprintln(w)
	}
}

// Example writes a documented configuration file for fs: every flag but --config, commented
// out with its default, its usage above it. Uncommented, it changes nothing.
func Example(w io.Writer, title string, fs *flag.FlagSet, prefix string) {
	fmt.Fprintf(w, "# %s\n#\n# Every setting is a flag of the same name and an environment variable (named below);\n", title)
	fmt.Fprint(w, "# precedence: command line > environment > this file > default. Values shown are the defaults.\n")
	fmt.Fprint(w, "# Durations are Go durations (\"90s\", \"5m\", \"168h\"); lists are comma-separated strings or arrays.\n")
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == ConfigFlag {
			return
		}
		fmt.Fprintf(w, "\n# %s\n", wrap(f.Usage))
		if !envPattern.MatchString(f.Usage) {
			fmt.Fprintf(w, "# (env %s)\n", EnvName(f, prefix))
		}
		fmt.Fprintf(w, "# %s = %s\n", f.Name, tomlValue(f))
	})
}

// tomlValue is a flag's default as TOML: numbers and booleans bare, the rest quoted.
func tomlValue(f *flag.Flag) string {
	if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); (ok && bf.IsBoolFlag()) || isNumber(f) {
		return f.DefValue
	}
	return strconv.Quote(f.DefValue)
}

// isNumber says whether the flag holds a number (so "0" is a number, not a duration "0").
func isNumber(f *flag.Flag) bool {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return false
	}
	switch g.Get().(type) {
	case int, int64, uint, uint64, float64:
		return true
	}
	return false
}

// wrap breaks a usage text into comment lines of about 100 characters.
func wrap(s string) string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		if line != "" && len(line)+1+len(word) > 100 {
			lines = append(lines, line)
			line = word
			continue
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	lines = append(lines, line)
	return strings.Join(lines, "\n# ")
}
