package job

import (
	"testing"
	"time"
)

func TestEstimateRange(t *testing.T) {
	now := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	for _, tc := range []struct {
		s    StateScheduling
		want string
	}{
		{StateScheduling{}, ""},
		{StateScheduling{EstimatedStart: at(time.Hour)}, ""},
		{StateScheduling{EstimatedStartEarliest: at(5*time.Hour + 10*time.Minute), EstimatedStartLatest: at(6*time.Hour + 30*time.Minute)}, "likely 14:10–15:30"},
		{StateScheduling{EstimatedStartEarliest: at(time.Hour), EstimatedStartLatest: at(time.Hour)}, "likely 10:00"},
		{StateScheduling{EstimatedStartEarliest: at(time.Hour), EstimatedStartLatest: at(26 * time.Hour)}, "likely 10:00–May 2 11:00"},
	} {
		if got := tc.s.EstimateRange(now, time.UTC); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.s, got, tc.want)
		}
	}
}
