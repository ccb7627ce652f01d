package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/internal/settings"
	"github.com/opengpulab/gpulab/internal/settings/settingstest"
	"github.com/opengpulab/gpulab/internal/testenv"
)

// runWith runs gpulab-master in-process with exactly this environment.
func runWith(env map[string]string, args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, func(k string) string { return env[k] }, &out, &errOut)
	return code, out.String(), errOut.String()
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "master.toml")
	if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// effective parses `config check` output into name → value and name → source.
func effective(t *testing.T, out string) (map[string]string, map[string]string) {
	t.Helper()
	values, sources := map[string]string{}, map[string]string{}
	line := regexp.MustCompile(`^([a-z0-9-]+) = "(.*)"  # (\w+)`)
	for _, l := range strings.Split(out, "\n") {
		if m := line.FindStringSubmatch(l); m != nil {
			values[m[1]], sources[m[1]] = m[2], m[3]
		}
	}
	if len(values) == 0 {
		t.Fatalf("no settings in the output:\n%s", out)
	}
	return values, sources
}

// A bad value in the environment used to fall back to the default without a word: now every
// source's bad value stops the start, naming the setting and where it came from.
func TestBadValuesAreErrorsNamingTheSetting(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		file string
		args []string
		want []string
	}{
		{"env duration", map[string]string{"GPULAB_HEARTBEAT_INTERVAL": "5"}, "", nil, []string{"GPULAB_HEARTBEAT_INTERVAL", "--heartbeat-interval"}},
		{"env duration zero", map[string]string{"GPULAB_SCHEDULER_INTERVAL": "0s"}, "", nil, []string{"--scheduler-interval must be positive"}},
		{"env int", map[string]string{"GPULAB_MAX_NOTEBOOKS_PER_USER": "two"}, "", nil, []string{"GPULAB_MAX_NOTEBOOKS_PER_USER", "invalid value \"two\""}},
		{"env limit int", map[string]string{"GPULAB_MAX_JOB_GPUS": "8x"}, "", nil, []string{"GPULAB_MAX_JOB_GPUS", "--max-job-gpus"}},
		{"env bool", map[string]string{"GPULAB_NO_MIGRATE": "maybe"}, "", nil, []string{"GPULAB_NO_MIGRATE", "--no-migrate"}},
		{"env without documented name", map[string]string{"GPULAB_MEMORY_RESERVE_GB": "lots"}, "", nil, []string{"GPULAB_MEMORY_RESERVE_GB"}},
		{"env log level", map[string]string{"GPULAB_LOG_LEVEL": "loud"}, "", nil, []string{"--log-level \"loud\""}},
		{"env log format", map[string]string{"GPULAB_LOG_FORMAT": "xml"}, "", nil, []string{"--log-format \"xml\""}},
		{"flag", nil, "", []string{"--job-grace", "soon"}, []string{"-job-grace", "soon"}},
		{"file duration", nil, "heartbeat-grace = \"30 seconds\"\n", nil, []string{"master.toml: heartbeat-grace"}},
		{"file type", nil, "max-running-per-user = \"ten\"\n", nil, []string{"master.toml: max-running-per-user", "\"ten\""}},
		{"file unknown key", nil, "heartbeat-intervall = \"5s\"\n", nil, []string{"unknown setting \"heartbeat-intervall\""}},
		{"file table", nil, "[scheduler]\ninterval = \"5s\"\n", nil, []string{"master.toml: unknown setting \"scheduler\""}},
		{"file array of tables", nil, "admins = [{ name = \"x\" }]\n", nil, []string{"master.toml: admins", "no setting's value"}},
		{"file syntax", nil, "listen = \n", nil, []string{"master.toml"}},
		{"env config file missing", map[string]string{settings.ConfigEnv: "/nonexistent/master.toml"}, "", nil, []string{"/nonexistent/master.toml"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"serve", "--listen", "127.0.0.1:0"}, tc.args...)
			if tc.file != "" {
				args = append(args, "--config", writeFile(t, tc.file))
			}
			code, out, errOut := runWith(tc.env, args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2 (usage); output %q %q", code, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("error %q does not contain %q", errOut, w)
				}
			}
		})
	}
}

// Precedence: command line > environment > file > default, for every kind of flag.
func TestConfigPrecedence(t *testing.T) {
	file := writeFile(t, `
heartbeat-interval = "7s"
scheduler-interval = "9s"
max-notebooks-per-user = 3
admins = ["alice@example.org", "bob@example.org"]
auto-create-cert-users = true
memory-reserve-gb = 4
`)
	env := map[string]string{"GPULAB_SCHEDULER_INTERVAL": "11s", "GPULAB_MEMORY_RESERVE_GB": "5"}
	code, out, errOut := runWith(env, "config", "check", file, "--max-notebooks-per-user", "4")
	if code != 0 {
		t.Fatalf("config check: exit %d %s", code, errOut)
	}
	values, sources := effective(t, out)
	want := map[string][2]string{
		"heartbeat-interval":     {"7s", "file"},
		"scheduler-interval":     {"11s", "env"},
		"max-notebooks-per-user": {"4", "flag"},
		"admins":                 {"alice@example.org,bob@example.org", "file"},
		"auto-create-cert-users": {"true", "file"},
		"memory-reserve-gb":      {"5", "env"},
		"heartbeat-grace":        {"30s", "default"},
	}
	for name, w := range want {
		if values[name] != w[0] || sources[name] != w[1] {
			t.Errorf("%s = %q from %s, want %q from %s", name, values[name], sources[name], w[0], w[1])
		}
	}
}

// The file reaches serve itself (and the admin commands), with the database in it.
func TestServeReadsTheConfigFile(t *testing.T) {
	db := testenv.PostgresURL(t)
	file := writeFile(t, "database-url = \""+db+"\"\nno-migrate = true\nlisten = \"127.0.0.1:0\"\ndata-dir = \""+t.TempDir()+"\"\n")
	code, _, errOut := runWith(map[string]string{settings.ConfigEnv: file}, "serve")
	if code != 1 || !strings.Contains(errOut, "gpulab-master migrate") {
		t.Fatalf("serve from a file with no-migrate on an empty database: exit %d, %q", code, errOut)
	}
	code, out, errOut := runWith(nil, "migrate", "--config", file)
	if code != 0 || !strings.Contains(out, "schema at version") {
		t.Fatalf("migrate with the serve file: exit %d, %q %q", code, out, errOut)
	}
}

// config check shows paths of secret files but never a secret, nor a database password.
func TestConfigCheckRedactsSecrets(t *testing.T) {
	secretFile := filepath.Join(t.TempDir(), "client-secret")
	if err := os.WriteFile(secretFile, []byte("file-secret-value\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := writeFile(t, `
database-url = "postgres://gpulab:db-password-value@db.example.org/gpulab"
oidc-issuer = "https://idp.example.org"
oidc-client-id = "gpulab"
oidc-client-secret-file = "`+secretFile+`"
`)
	code, out, errOut := runWith(map[string]string{"GPULAB_SESSION_KEYS": strings.Repeat("ab", 96)}, "config", "check", file)
	if code != 0 {
		t.Fatalf("config check: exit %d %s", code, errOut)
	}
	for _, secret := range []string{"db-password-value", "file-secret-value", strings.Repeat("ab", 96)} {
		if strings.Contains(out, secret) {
			t.Errorf("config check printed a secret %q:\n%s", secret, out)
		}
	}
	values, _ := effective(t, out)
	if values["oidc-client-secret-file"] != secretFile || !strings.Contains(values["database-url"], "db.example.org") {
		t.Errorf("paths and the database host should show: %q %q", values["oidc-client-secret-file"], values["database-url"])
	}
}

// contrib/config/master.toml documents every setting of serve with its true default, and
// uncommented it is a valid file that changes nothing. Regenerate it with
// `go generate ./cmd/gpulab-master` after adding a flag or changing a default.
func TestExampleConfigListsEverySetting(t *testing.T) {
	settingstest.CheckExample(t, "../../contrib/config/master.toml", serveFlags(&config{}, noEnv),
		func(name string) bool { return name == settings.ConfigFlag }, "go generate ./cmd/gpulab-master",
		func(file string) (int, string, string) { return runWith(nil, "config", "check", file) })
}

// Every environment variable the flags read for their defaults is the one parseFlags sets them
// from (their usage names it), so none is read for the default and then overridden by the file.
func TestEveryEnvironmentDefaultIsTheFlagsVariable(t *testing.T) {
	settingstest.CheckEnvNames(t, func(getenv func(string) string) *flag.FlagSet { return serveFlags(&config{}, getenv) }, envPrefix)
}

// `config check` refuses every setting that serve would refuse, the mail, idle-GPU and
// retention ones included, naming it.
func TestConfigCheckRefusesWhatServeRefuses(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"smtp-host = \"mx\"\nsmtp-from = \"g@example.org\"\nsmtp-tls = \"ssl\"\n", "--smtp-tls"},
		{"smtp-host = \"mx\"\nsmtp-from = \"g@example.org\"\nreminder-at = 1.5\n", "--reminder-at"},
		{"idle-gpu-action = \"explode\"\n", "idle"},
		{"retention-logs = \"-1s\"\n", "retention"},
		{"halt-factor = 0.5\n", "--halt-factor"},
		{"scheduler-max-busy = 1.5\n", "--scheduler-max-busy"},
		{"heartbeat-jitter = 0.6\n", "--heartbeat-jitter"},
		{"heartbeat-jitter = -0.1\n", "--heartbeat-jitter"},
		{"forecast-every = \"-1s\"\n", "--forecast-every"},
		{"db-max-conns = 0\n", "--db-max-conns"},
	} {
		code, _, errOut := runWith(nil, "config", "check", writeFile(t, tc.file))
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("config check of %q: exit %d, %q; want a refusal naming %s", tc.file, code, errOut, tc.want)
		}
	}
}
