package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

// TestSimulate: every policy gives a row on a small trace, and the seed and the rules that
// filled the missing columns are printed; a bad policy or share is a usage error naming the flag.
func TestSimulate(t *testing.T) {
	var out, errb bytes.Buffer
	err := simulate(context.Background(), []string{"--trace", "../../scheduler/sim/testdata/small.csv", "--slaves", "2", "--seed", "7"},
		func(string) string { return "" }, &out, &errb)
	if err != nil {
		t.Fatalf("simulate: %v (%s)", err, errb.String())
	}
	for _, want := range []string{"| fifo |", "| fair |", "| fair-halt |", "| sjf-oracle |", "| las |", "seed 7;", "50 % of jobs restartable"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	for _, args := range [][]string{{"--policy", "srtf"}, {"--restartable", "1.5"}, {"--halt-factor", "0.5"}} {
		err := simulate(context.Background(), append([]string{"--trace", "x.csv"}, args...), func(string) string { return "" }, &out, &errb)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), strings.TrimPrefix(args[0], "--")) {
			t.Errorf("%v: error %v, want a usage error naming the flag", args, err)
		}
	}
}
