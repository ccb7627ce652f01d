package main

import (
	"context"
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/store"
)

// slave-token makes its token through handlers.IssueSlaveToken, as the portal's Admin page
// does: bad input is a usage error naming the flag's field, a good one prints a token that
// joins once.
func TestSlaveTokenCommand(t *testing.T) {
	db, data := testenv.PostgresURL(t), t.TempDir()
	for _, s := range []struct {
		args     []string
		code     int
		contains string
	}{
		{[]string{"cluster", "add", "3"}, 0, ""},
		{[]string{"slave-token", "--name", "Bad Name", "--cluster", "3"}, 2, "name:"},
		{[]string{"slave-token", "--name", "gpu3", "--cluster", "9"}, 2, "clusterId: no cluster 9"},
		{[]string{"slave-token", "--name", "gpu3", "--cluster", "3", "--valid", "0s"}, 2, "valid:"},
	} {
		code, stdout, stderr := master(t, db, data, s.args...)
		if code != s.code || !strings.Contains(stdout+stderr, s.contains) {
			t.Errorf("gpulab-master %s: exit %d, output %q %q; want exit %d containing %q", strings.Join(s.args, " "), code, stdout, stderr, s.code, s.contains)
		}
	}
	code, stdout, stderr := master(t, db, data, "slave-token", "--name", "gpu3", "--cluster", "3")
	token := strings.TrimSpace(stdout)
	if code != 0 || !strings.Contains(stderr, "gpulab-slave join --master URL --ca ca.pem --token "+token) {
		t.Fatalf("slave-token: exit %d, %q %q", code, stdout, stderr)
	}
	ctx := context.Background()
	st, err := store.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	if name, cluster, err := st.UseSlaveToken(ctx, handlers.HashToken(token)); err != nil || name != "gpu3" || cluster != 3 {
		t.Fatalf("the token joins %q in %d: %v", name, cluster, err)
	}
}
