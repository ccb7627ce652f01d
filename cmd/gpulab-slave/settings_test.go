package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/internal/settings/settingstest"
)

func slaveRun(env map[string]string, args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, func(k string) string { return env[k] }, &out, &errOut)
	return code, out.String(), errOut.String()
}

func tomlFile(t *testing.T, content string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "slave.toml")
	if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// A bad value from the environment, the file or a flag stops the slave before it does
// anything, naming the setting.
func TestSlaveBadValuesAreErrors(t *testing.T) {
	cases := []struct {
		env  map[string]string
		file string
		want string
	}{
		{map[string]string{"GPULAB_SLAVE_CPUS": "many"}, "", "GPULAB_SLAVE_CPUS"},
		{map[string]string{"GPULAB_SLAVE_PIDS_LIMIT": "-"}, "", "GPULAB_SLAVE_PIDS_LIMIT"},
		{map[string]string{"GPULAB_LOG_FORMAT": "xml"}, "", "--log-format"},
		{nil, "cpus = \"eight\"\n", "slave.toml: cpus"},
		{nil, "gpus = 2\n", "unknown setting \"gpus\""},
		{nil, "log-level = \"chatty\"\n", "--log-level"},
	}
	for _, tc := range cases {
		args := []string{"run", "--state-dir", t.TempDir()}
		if tc.file != "" {
			args = append(args, "--config", tomlFile(t, tc.file))
		}
		code, _, errOut := slaveRun(tc.env, args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v %q: exit %d %q; want 2 naming %q", tc.env, tc.file, code, errOut, tc.want)
		}
	}
}

// Lists come as arrays from the file, comma-separated from the environment; the environment
// wins over the file, a flag over both.
func TestSlaveConfigPrecedence(t *testing.T) {
	file := tomlFile(t, `storage = ["/project=/srv/p/{project}", "/scratch=/srv/s/{project}"]
cpus = 4
network = "from-file"
fake-gpus = "2xV100-32GB"
`)
	code, out, errOut := slaveRun(map[string]string{"GPULAB_SLAVE_NETWORK": "from-env", "GPULAB_FAKE_GPUS": "1xA100-80GB"},
		"config", "check", file, "--cpus", "6")
	if code != 0 {
		t.Fatalf("config check: %d %s", code, errOut)
	}
	for _, want := range []string{
		`storage = "/project=/srv/p/{project},/scratch=/srv/s/{project}"  # file`,
		`cpus = "6"  # flag`,
		`network = "from-env"  # env GPULAB_SLAVE_NETWORK`,
		`fake-gpus = "1xA100-80GB"  # env GPULAB_FAKE_GPUS`,
		`pids-limit = "4096"  # default`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("config check output lacks %q:\n%s", want, out)
		}
	}
}

// contrib/config/slave.toml lists every setting of run and join with its default; uncommented
// it passes config check and changes nothing. Regenerate with
// `go generate ./cmd/gpulab-slave`.
func TestSlaveExampleConfigListsEverySetting(t *testing.T) {
	fs, _ := allSettings(noEnv)
	settingstest.CheckExample(t, "../../contrib/config/slave.toml", fs, func(string) bool { return false },
		"go generate ./cmd/gpulab-slave", func(file string) (int, string, string) { return slaveRun(nil, "config", "check", file) })
}

// Each setting has its own environment variable, and every variable a default is read from is
// the one its flag is set from again (see internal/settings).
func TestSlaveEnvironmentVariablesAreTheFlags(t *testing.T) {
	settingstest.CheckEnvNames(t, func(getenv func(string) string) *flag.FlagSet { fs, _ := allSettings(getenv); return fs }, envPrefix)
}

// config check refuses what run would refuse: a storage entry without its template.
func TestSlaveConfigCheckRefusesBadStorage(t *testing.T) {
	code, _, errOut := slaveRun(nil, "config", "check", tomlFile(t, "storage = [\"/project\"]\n"))
	if code != 2 || !strings.Contains(errOut, "--storage") {
		t.Errorf("config check of a bad storage entry: exit %d %q", code, errOut)
	}
}
