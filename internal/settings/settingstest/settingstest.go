// Package settingstest holds the checks that every command reading settings through package
// settings must pass (the master's serve, the slave's run and join), so that each command's
// tests state them in one line instead of repeating them.
package settingstest

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/internal/settings"
)

// CheckExample checks a generated example file (settings.Example): it lists every flag of fs
// but those skip names, and uncommented it is a valid file, by check (run `config check` on the
// file, returning exit code, output and error output), that sets each flag to its default.
// regenerate is the command that rewrites the file, for the error message.
func CheckExample(t *testing.T, path string, fs *flag.FlagSet, skip func(name string) bool, regenerate string,
	check func(file string) (code int, out, errOut string)) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# ([a-z0-9-]+) = (.*)$`).FindAllStringSubmatch(string(data), -1) {
		lines = append(lines, m[1]+" = "+m[2])
		listed[m[1]] = true
	}
	fs.VisitAll(func(f *flag.Flag) {
		if !skip(f.Name) && !listed[f.Name] {
			t.Errorf("%s lacks %q: run `%s`", path, f.Name, regenerate)
		}
	})
	file := filepath.Join(t.TempDir(), "example.toml")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := check(file)
	if code != 0 {
		t.Fatalf("config check of the uncommented example: exit %d %s", code, errOut)
	}
	fs.VisitAll(func(f *flag.Flag) {
		if skip(f.Name) {
			return
		}
		want := f.Name + " = \"" + settings.Redact(f.Name, f.DefValue) + "\"  # file"
		if !strings.Contains(out, want) {
			t.Errorf("example's %s is not its default: want %q in\n%s", f.Name, want, out)
		}
	})
}

// CheckEnvNames checks that each flag made by flags has its own environment variable, and that
// every variable a default is read from (flags's getenv is asked for it) is the one its flag is
// set from again, so that none is read for a default and then overridden by the file.
func CheckEnvNames(t *testing.T, flags func(getenv func(string) string) *flag.FlagSet, prefix string) {
	t.Helper()
	asked := map[string]bool{}
	fs := flags(func(k string) string { asked[k] = true; return "" })
	owner := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		env := settings.EnvName(f, prefix)
		if other, dup := owner[env]; dup {
			t.Errorf("--%s and --%s both take %s: the usage of one names another's variable first", other, f.Name, env)
		}
		owner[env] = f.Name
	})
	for k := range asked {
		if owner[k] == "" {
			t.Errorf("a flag's default reads %s but no flag's usage names it as \"(env %s)\"", k, k)
		}
	}
}
