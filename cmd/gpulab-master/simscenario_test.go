package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSimulateScenario: --scenario states the scenario and adds its table, and the estimate
// table is printed; a scenario with a bad key is a usage error naming the key.
func TestSimulateScenario(t *testing.T) {
	var out, errb bytes.Buffer
	err := simulate(context.Background(), []string{"--trace", "../../scheduler/sim/testdata/small.csv", "--slaves", "12", "--policy", "fair",
		"--scenario", "../../bench/scenarios/philly-example.toml", "--estimate-every", "1"}, func(string) string { return "" }, &out, &errb)
	if err != nil {
		t.Fatalf("simulate: %v (%s)", err, errb.String())
	}
	for _, want := range []string{"Scenario: reservation deadline-103959: 4 slaves", "private cluster 2: 8 slaves for b436b2",
		"| policy | holders' jobs |", "| policy | waited | started at once |", "maxDuration = run time rounded up to 1h0m0s/2h0m0s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.toml")
	if err := os.WriteFile(bad, []byte("[windows]\nnotAfterShare = 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = simulate(context.Background(), []string{"--trace", "x.csv", "--scenario", bad}, func(string) string { return "" }, &out, &errb)
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "windows.notAfterShare") {
		t.Errorf("bad scenario: %v, want a usage error naming windows.notAfterShare", err)
	}
	err = simulate(context.Background(), []string{"--trace", "x.csv", "--estimate-every", "0"}, func(string) string { return "" }, &out, &errb)
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "estimate-every") {
		t.Errorf("--estimate-every 0: %v, want a usage error", err)
	}
}
