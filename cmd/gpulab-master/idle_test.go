package main

import (
	"strings"
	"testing"
)

// A bad idle-GPU setting stops serve before it touches anything, naming the flag.
func TestServeRefusesBadIdleSettings(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--idle-gpu-action", "kill"}, "--idle-gpu-action"},
		{[]string{"--idle-gpu-threshold", "150"}, "--idle-gpu-threshold"},
		{[]string{"--idle-gpu-action", "cancel", "--idle-gpu-after", "2h", "--idle-gpu-action-after", "1h"}, "--idle-gpu-action-after"},
	} {
		args := append([]string{"serve", "--listen", "127.0.0.1:0"}, tt.args...)
		code, _, errOut := master(t, "postgres://nowhere.invalid/x", t.TempDir(), args...)
		if code != 2 || !strings.Contains(errOut, tt.want) {
			t.Errorf("serve %s: exit %d, %q; want 2 naming %s", strings.Join(tt.args, " "), code, errOut, tt.want)
		}
	}
}
