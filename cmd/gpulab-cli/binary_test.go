package main

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuiltBinary builds gpulab-cli and runs it as users do, against the fake master: the
// process boundary (arguments, environment, stdin, exit codes, version stamping) is part of
// the compatibility contract.
func TestBuiltBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	bin := filepath.Join(t.TempDir(), "gpulab-cli")
	build := exec.Command("go", "build", "-ldflags", "-X main.version=1.2.3-test", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	e := newTestEnv(t)
	e.m.set(func(m *fakeMaster) { m.clusters = seedClusters })

	runBin := func(stdin string, env []string, args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append([]string{"TZ=UTC", "HOME=" + e.dir}, env...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var exitErr *exec.ExitError
		switch {
		case errors.As(err, &exitErr):
			return exitErr.ExitCode(), out.String(), errOut.String()
		case err != nil:
			t.Fatalf("run %v: %v", args, err)
		}
		return 0, out.String(), errOut.String()
	}

	code, out, errOut := runBin("", nil, "--version")
	if code != 0 || out != "1.2.3-test\n" {
		t.Errorf("--version: exit %d, %q, %q", code, out, errOut)
	}
	code, out, errOut = runBin("", nil,
		"--custom-master-url", e.m.apiURL(), "--servercert", e.caFile, "clusters", "--short", "1")
	if code != 0 || out != seedClustersShort {
		t.Errorf("clusters --short: exit %d\n%s\n%s", code, out, errOut)
	}
	env := []string{"GPULAB_CERT=" + e.certFile, "GPULAB_API_BASE=" + e.m.srv.URL, "GPULAB_SERVER_CERT=" + e.caFile}
	code, out, errOut = runBin(helloJob, env, "submit")
	if code != 0 || e.m.job(t, strings.TrimSpace(out)) == nil {
		t.Errorf("submit from stdin: exit %d\n%s\n%s", code, out, errOut)
	}
	code, _, errOut = runBin("", env, "ca", strings.TrimSpace(out))
	if code != 2 || !strings.Contains(errOut, "cancel must be typed in full") {
		t.Errorf("ca ID: exit %d, %s", code, errOut)
	}
	code, _, errOut = runBin("", env, "jobs", "nosuchjob")
	if code != 1 || !strings.HasPrefix(errOut, "Error: ") {
		t.Errorf("jobs nosuchjob: exit %d, %s", code, errOut)
	}
}
