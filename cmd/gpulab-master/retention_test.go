package main

import (
	"flag"
	"io"
	"testing"
	"time"
)

func TestRetentionFlags(t *testing.T) {
	for _, c := range []struct {
		args    []string
		logs    time.Duration
		wantErr bool
	}{
		{nil, 90 * 24 * time.Hour, false},
		{[]string{"--retention-logs", "7d"}, 7 * 24 * time.Hour, false},
		{[]string{"--retention-logs", "36h"}, 36 * time.Hour, false},
		{[]string{"--retention-logs", "0"}, 0, false},
		{[]string{"--retention-logs", "seven days"}, 0, true},
		{[]string{"--retention-logs", "-1d"}, 0, true},
		{[]string{"--retention-batch", "0"}, 0, true},
		{[]string{"--max-job-log", "-5"}, 0, true},
	} {
		var r retentionFlags
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		r.add(fs)
		err := fs.Parse(c.args)
		if err == nil {
			err = r.check()
		}
		if (err != nil) != c.wantErr {
			t.Errorf("%v: err %v, want error %v", c.args, err, c.wantErr)
			continue
		}
		if err == nil && r.policy().Logs != c.logs {
			t.Errorf("%v: logs kept %s, want %s", c.args, r.policy().Logs, c.logs)
		}
	}
	var a ageValue
	_ = a.Set("90d")
	if a.String() != "90d" {
		t.Errorf("90d prints as %q", a.String())
	}
}
