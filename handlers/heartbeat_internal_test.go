package handlers

import (
	"testing"
	"time"
)

func TestJitteredInterval(t *testing.T) {
	const d = 5 * time.Second
	for _, tc := range []struct {
		d    time.Duration
		frac float64
		u    float64
		want time.Duration
	}{
		{d, 0.1, 0, 4500 * time.Millisecond},
		{d, 0.1, 0.5, d},
		{d, 0.1, 0.9999999, 5500 * time.Millisecond}, // rounded to the millisecond
		{d, 0.1, 0.25, 4750 * time.Millisecond},
		{d, 0, 0.9, d},                               // no spread
		{d, -0.3, 0.9, d},                            // a negative spread is none
		{0, 0.1, 0.9, 0},                             // no interval named stays unnamed
		{time.Millisecond, 0.5, 0, time.Millisecond}, // never below a millisecond
		{1234567 * time.Microsecond, 0.2, 0.5, 1235 * time.Millisecond},
	} {
		if got := jitteredInterval(tc.d, tc.frac, tc.u); got != tc.want {
			t.Errorf("jitteredInterval(%v, %g, %g) = %v, want %v", tc.d, tc.frac, tc.u, got, tc.want)
		}
	}
}
