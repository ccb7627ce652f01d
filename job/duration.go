package job

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Duration is a scheduling duration (minDuration, maxDuration). It is a distinct type so that
// the job JSON carries durations the way imec's users write them ("2 weeks", "90 minutes")
// instead of Go's nanosecond integers, and reads back both that form and a plain number of
// seconds.
type Duration time.Duration

// Std returns the duration as a time.Duration, for arithmetic.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String is FormatDuration, so durations print the same in logs, the CLI and the JSON.
func (d Duration) String() string { return FormatDuration(time.Duration(d)) }

// MarshalJSON writes the canonical human form, e.g. "1 week".
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(FormatDuration(time.Duration(d)))
}

// UnmarshalJSON reads a duration string (ParseDuration's grammar) or a JSON number of seconds.
// null leaves the duration unchanged, as encoding/json does for other types.
func (d *Duration) UnmarshalJSON(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "null" {
		return nil
	}
	if strings.HasPrefix(s, `"`) {
		var text string
		if len(s) >= 2 && s[len(s)-1] == '"' && plainASCII(s[1:len(s)-1]) {
			text = s[1 : len(s)-1] // no escapes: the text is what is between the quotes
		} else if err := json.Unmarshal(b, &text); err != nil {
			return err
		}
		v, err := ParseDuration(text)
		if err != nil {
			return err
		}
		*d = Duration(v)
		return nil
	}
	v, err := durationFromSeconds(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// plainASCII says whether a JSON string's content is printable ASCII without escapes, so that
// it is its own value.
func plainASCII(s string) bool {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// durationRe is the duration grammar of SPEC section 3: a non-negative decimal number, optional
// blanks, a unit word.
var durationRe = regexp.MustCompile(`^(\d+(?:\.\d+)?|\.\d+)[ \t]*([a-zA-Z]+)$`)

// durationUnits maps every accepted unit word (lower case) to its length.
var durationUnits = map[string]time.Duration{
	"s": time.Second, "sec": time.Second, "secs": time.Second, "second": time.Second, "seconds": time.Second,
	"m": time.Minute, "min": time.Minute, "mins": time.Minute, "minute": time.Minute, "minutes": time.Minute,
	"h": time.Hour, "hour": time.Hour, "hours": time.Hour,
	"day": 24 * time.Hour, "days": 24 * time.Hour,
	"week": 7 * 24 * time.Hour, "weeks": 7 * 24 * time.Hour,
}

// invalidDuration is imec's message, kept word for word because users and scripts know it.
func invalidDuration(s string) error {
	return fmt.Errorf("Invalid duration: %s. Must be a number followed by a time unit (examples: '1h', '5 minutes', '3 days', etc.).", s) //nolint:staticcheck // imec-compatible message (SPEC 3)
}

// ParseDuration reads a duration as GPULab users write it: a number (decimals allowed), optional
// blanks, and a unit (s sec secs second seconds, m min mins minute minutes, h hour hours, day
// days, week weeks), case-insensitive: "1h", "5 minutes", "1.5 days", "2 Weeks". Go's own
// time.ParseDuration is not used: it knows no days or weeks and wants no space. The result is
// exact to the nanosecond (decimals are computed as fractions, not floats).
func ParseDuration(s string) (time.Duration, error) {
	if d, ok := parseWholeDuration(s); ok {
		return d, nil
	}
	return parseAnyDuration(s)
}

// parseAnyDuration is ParseDuration's general path: the whole grammar, decimals exactly.
func parseAnyDuration(s string) (time.Duration, error) {
	m := durationRe.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, invalidDuration(s)
	}
	unit, ok := durationUnits[strings.ToLower(m[2])]
	if !ok {
		return 0, invalidDuration(s)
	}
	return scale(s, m[1], unit)
}

// parseWholeDuration reads, without a regular expression or exact fractions, the form
// FormatDuration writes and most people type: whole digits, at most one blank, a unit in lower
// case ("2 weeks", "90 minutes", "1h"). ok is false for anything else, which ParseDuration's
// general path reads (and gives the same value for what this reads: TestParseWholeDuration).
// Every stored request is decoded again wherever it is read (the leader reads 100,000 queued
// ones at a term's start), and the general path was a third of a request's decoding.
func parseWholeDuration(s string) (time.Duration, bool) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 || i > 15 { // 15 digits cannot overflow an int64
		return 0, false
	}
	unitText := s[i:]
	if len(unitText) > 0 && (unitText[0] == ' ' || unitText[0] == '\t') {
		unitText = unitText[1:]
	}
	unit, ok := durationUnits[unitText]
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil || n > math.MaxInt64/int64(unit) {
		return 0, false
	}
	return time.Duration(n) * unit, true
}

// durationFromSeconds reads a JSON number of seconds (as old clients and scripts send).
func durationFromSeconds(num string) (time.Duration, error) {
	return scale(num, num, time.Second)
}

// scale multiplies the decimal number text num by unit, exactly, rounding to the nearest
// nanosecond. input is what the user wrote, for the error message.
func scale(input, num string, unit time.Duration) (time.Duration, error) {
	r, ok := parseDecimal(num)
	if !ok || r.Sign() < 0 {
		return 0, invalidDuration(input)
	}
	ns := new(big.Rat).Mul(r, new(big.Rat).SetInt64(int64(unit)))
	// Round half up: (num*2 + den) / (den*2).
	n := new(big.Int).Mul(ns.Num(), big.NewInt(2))
	n.Add(n, ns.Denom())
	q := n.Quo(n, new(big.Int).Mul(ns.Denom(), big.NewInt(2)))
	if !q.IsInt64() {
		return 0, fmt.Errorf("duration %s is too long (at most about 292 years)", input)
	}
	return time.Duration(q.Int64()), nil
}

// decimalRe is a decimal number, JSON's grammar relaxed a little ("007", ".5", "1.").
var decimalRe = regexp.MustCompile(`^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$`)

// parseDecimal reads a JSON number exactly. It refuses (ok false) numbers whose text or exponent
// is so large that exact arithmetic on them would cost real time: nobody means 1e999999 seconds,
// and a request must not be able to make the server compute it.
func parseDecimal(num string) (*big.Rat, bool) {
	if len(num) > 64 || !decimalRe.MatchString(num) {
		return nil, false
	}
	if i := strings.IndexAny(num, "eE"); i >= 0 {
		exp, err := strconv.Atoi(strings.TrimPrefix(num[i+1:], "+"))
		if err != nil || exp > 40 || exp < -40 {
			return nil, false
		}
	}
	return new(big.Rat).SetString(num)
}

// formatUnits are the units FormatDuration picks from, largest first.
var formatUnits = []struct {
	d          time.Duration
	one, other string
}{
	{7 * 24 * time.Hour, "week", "weeks"},
	{24 * time.Hour, "day", "days"},
	{time.Hour, "hour", "hours"},
	{time.Minute, "minute", "minutes"},
	{time.Second, "second", "seconds"},
}

// FormatDuration writes d in the largest unit that divides it exactly ("2 weeks", "36 hours",
// "90 minutes", "1 hour"), so that the text is both readable and exact: ParseDuration gives back
// the same value. A duration that is not a whole number of seconds is written in seconds with
// decimals ("1.5 seconds"). Negative durations get a minus sign (ParseDuration refuses those:
// a negative duration is never valid in a request).
func FormatDuration(d time.Duration) string {
	sign := ""
	// Work on the magnitude as uint64 so that math.MinInt64 is handled too.
	mag := uint64(d)
	if d < 0 {
		sign = "-"
		mag = uint64(-(d + 1)) + 1
	}
	if mag == 0 {
		return "0 seconds"
	}
	for _, u := range formatUnits {
		if mag%uint64(u.d) == 0 {
			n := mag / uint64(u.d)
			name := u.other
			if n == 1 {
				name = u.one
			}
			return sign + strconv.FormatUint(n, 10) + " " + name
		}
	}
	secs := mag / uint64(time.Second)
	frac := strings.TrimRight(fmt.Sprintf("%09d", mag%uint64(time.Second)), "0")
	return sign + strconv.FormatUint(secs, 10) + "." + frac + " seconds"
}
