package settings

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestEnvNameFromUsageElsePrefix(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.String("database-url", "", "Postgres URL (env DATABASE_URL)")
	fs.Bool("no-migrate", false, "do not migrate (env GPULAB_NO_MIGRATE=1)")
	fs.Int("memory-reserve-gb", 1, "memory kept free")
	for name, want := range map[string]string{"database-url": "DATABASE_URL", "no-migrate": "GPULAB_NO_MIGRATE", "memory-reserve-gb": "GPULAB_MEMORY_RESERVE_GB"} {
		if got := EnvName(fs.Lookup(name), "GPULAB_"); got != want {
			t.Errorf("EnvName(%s) = %q, want %q", name, got, want)
		}
	}
}

func TestRedact(t *testing.T) {
	cases := []struct{ name, value, want string }{
		{"oidc-client-secret", "s3cret", "<redacted>"},
		{"oidc-client-secret-file", "/etc/gpulab/secret", "/etc/gpulab/secret"},
		{"session-keys", "abcd", "<redacted>"},
		{"token", "t", "<redacted>"},
		{"password", "", ""},
		{"database-url", "postgres://u:pw@db/gpulab", "postgres://u:xxxxx@db/gpulab"},
		{"database-url", "postgres://u@db/gpulab", "postgres://u@db/gpulab"},
		{"listen", ":8443", ":8443"},
	}
	for _, c := range cases {
		if got := Redact(c.name, c.value); got != c.want {
			t.Errorf("Redact(%s, %q) = %q, want %q", c.name, c.value, got, c.want)
		}
	}
}

// A flag added to the set later is in the file and the environment with no more code.
func TestAnyFlagIsASetting(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	AddConfigFlag(fs)
	idle := fs.Duration("idle-gpu-after", time.Hour, "a new flag (env GPULAB_IDLE_GPU_AFTER)")
	util := fs.Int("idle-gpu-util", 5, "another")
	file := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(file, []byte("idle-gpu-after = \"2h\"\nidle-gpu-util = 7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"GPULAB_IDLE_GPU_UTIL": "9"}
	res, err := Parse(fs, []string{"--config", file}, func(k string) string { return env[k] }, Options{EnvPrefix: "GPULAB_"})
	if err != nil {
		t.Fatal(err)
	}
	if *idle != 2*time.Hour || *util != 9 || res.Source("idle-gpu-after") != FromFile || res.Source("idle-gpu-util") != FromEnv {
		t.Errorf("idle-gpu-after %s (%s), idle-gpu-util %d (%s)", *idle, res.Source("idle-gpu-after"), *util, res.Source("idle-gpu-util"))
	}
	env["GPULAB_IDLE_GPU_AFTER"] = "an hour"
	fs2 := flag.NewFlagSet("t", flag.ContinueOnError)
	fs2.SetOutput(io.Discard)
	fs2.Duration("idle-gpu-after", time.Hour, "a new flag (env GPULAB_IDLE_GPU_AFTER)")
	_, err = Parse(fs2, nil, func(k string) string { return env[k] }, Options{EnvPrefix: "GPULAB_"})
	if err == nil || !strings.Contains(err.Error(), "GPULAB_IDLE_GPU_AFTER") || !strings.Contains(err.Error(), "an hour") {
		t.Errorf("a bad environment value: %v", err)
	}
}
