package job

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	const day, week = 24 * time.Hour, 7 * 24 * time.Hour
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"1h", time.Hour},
		{"5 minutes", 5 * time.Minute},
		{"3 days", 3 * day},
		{"2 weeks", 2 * week},
		{"1 week", week},
		{"3 hour", 3 * time.Hour},
		{"8 hour", 8 * time.Hour},
		{"24 hours", day},
		{"1 day", day},
		{"30s", 30 * time.Second},
		{"30 s", 30 * time.Second},
		{"1 sec", time.Second},
		{"2 secs", 2 * time.Second},
		{"1 second", time.Second},
		{"2 seconds", 2 * time.Second},
		{"5m", 5 * time.Minute},
		{"5 min", 5 * time.Minute},
		{"5 mins", 5 * time.Minute},
		{"1 minute", time.Minute},
		{"1 hour", time.Hour},
		{"1.5 hours", 90 * time.Minute},
		{"1.5h", 90 * time.Minute},
		{".5 days", 12 * time.Hour},
		{"0.1 s", 100 * time.Millisecond},
		{"0 seconds", 0},
		{"2 WEEKS", 2 * week},
		{"1 Hour", time.Hour},
		{"  10\tminutes  ", 10 * time.Minute},
		{"007 hours", 7 * time.Hour},
		{"15000 weeks", 15000 * week},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDuration(tt.in)
			if err != nil {
				t.Fatalf("ParseDuration(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Errorf("ParseDuration(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseDurationInvalid(t *testing.T) {
	for _, in := range []string{"", "1", "h", "1 fortnight", "1 d", "1 w", "1 hr", "-1 hour", "1,5 hours", "1.5.2 hours", "1 hour 5 minutes", "1e3 s", "one hour", "1. hours", "1 hours!", "+1 hour"} {
		t.Run(in, func(t *testing.T) {
			_, err := ParseDuration(in)
			if err == nil {
				t.Fatalf("ParseDuration(%q) accepted", in)
			}
			want := "Invalid duration: " + in + ". Must be a number followed by a time unit (examples: '1h', '5 minutes', '3 days', etc.)."
			if err.Error() != want {
				t.Errorf("message\n got %q\nwant %q", err.Error(), want)
			}
		})
	}
	t.Run("too long", func(t *testing.T) {
		_, err := ParseDuration("1000000 weeks")
		if err == nil || !strings.Contains(err.Error(), "too long") {
			t.Errorf("ParseDuration(1000000 weeks) = %v, want a 'too long' error", err)
		}
	})
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0 seconds"},
		{time.Second, "1 second"},
		{90 * time.Second, "90 seconds"},
		{time.Minute, "1 minute"},
		{90 * time.Minute, "90 minutes"},
		{time.Hour, "1 hour"},
		{7 * time.Hour, "7 hours"},
		{36 * time.Hour, "36 hours"},
		{48 * time.Hour, "2 days"},
		{7 * 24 * time.Hour, "1 week"},
		{14 * 24 * time.Hour, "2 weeks"},
		{15 * 24 * time.Hour, "15 days"},
		{1500 * time.Millisecond, "1.5 seconds"},
		{time.Nanosecond, "0.000000001 seconds"},
		{-time.Hour, "-1 hour"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := FormatDuration(tt.d); got != tt.want {
				t.Errorf("FormatDuration(%v) = %q, want %q", tt.d, got, tt.want)
			}
			if tt.d >= 0 {
				back, err := ParseDuration(tt.want)
				if err != nil || back != tt.d {
					t.Errorf("ParseDuration(%q) = %v, %v; want %v", tt.want, back, err, tt.d)
				}
			}
		})
	}
	// Extremes do not panic.
	_ = FormatDuration(time.Duration(-1 << 63))
	_ = FormatDuration(time.Duration(1<<63 - 1))
}

func TestDurationJSON(t *testing.T) {
	b, err := json.Marshal(Duration(90 * time.Minute))
	if err != nil || string(b) != `"90 minutes"` {
		t.Fatalf("Marshal = %s, %v; want \"90 minutes\"", b, err)
	}
	tests := []struct {
		in   string
		want time.Duration
	}{
		{`"2 weeks"`, 14 * 24 * time.Hour},
		{`"1h"`, time.Hour},
		{`3600`, time.Hour},
		{`1.5`, 1500 * time.Millisecond},
		{`"\u0032 hours"`, 2 * time.Hour}, // escaped: read by encoding/json, not the plain path
		{`"1.5\tdays"`, 36 * time.Hour},   // an escaped tab between number and unit
	}
	for _, tt := range tests {
		var d Duration
		if err := json.Unmarshal([]byte(tt.in), &d); err != nil || d.Std() != tt.want {
			t.Errorf("Unmarshal(%s) = %v, %v; want %v", tt.in, d, err, tt.want)
		}
	}
	for _, in := range []string{`"2 parsecs"`, `-1`, `true`, `1e99`} {
		var d Duration
		if err := json.Unmarshal([]byte(in), &d); err == nil {
			t.Errorf("Unmarshal(%s) accepted: %v", in, d)
		}
	}
}

// TestParseWholeDuration: the fast path reads what FormatDuration writes, and whatever it reads
// it reads as the general path does (random inputs near the grammar; the seed is printed).
func TestParseWholeDuration(t *testing.T) {
	for _, d := range []time.Duration{time.Second, 90 * time.Minute, 36 * time.Hour, 14 * 24 * time.Hour, 1 << 50} {
		d = d.Truncate(time.Second)
		if got, ok := parseWholeDuration(FormatDuration(d)); !ok || got != d {
			t.Errorf("%q: %v %v, want %v", FormatDuration(d), got, ok, d)
		}
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	read := 0
	for range 20000 {
		var num strings.Builder
		digits := 1 + rng.IntN(4)
		if rng.IntN(4) == 0 {
			digits = 1 + rng.IntN(16) // near and past what fits
		}
		for range digits {
			num.WriteByte(byte('0' + rng.IntN(10)))
		}
		s := pick("", " ") + num.String() + pick("", ".5", "e3") + pick("", " ", "  ", "\t") +
			pick("s", "sec", "m", "minutes", "h", "Hours", "day", "days", "week", "weeks", "w", "", "h ")
		got, ok := parseWholeDuration(s)
		if !ok {
			continue
		}
		read++
		want, err := parseAnyDuration(s)
		if err != nil || got != want {
			t.Fatalf("%q: fast path %v, general path %v (%v)", s, got, want, err)
		}
	}
	if read < 1000 {
		t.Errorf("the fast path read only %d of the inputs", read)
	}
}
