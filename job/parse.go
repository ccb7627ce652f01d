package job

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Options configure Parse with what differs per deployment. Zero fields take the values of
// DefaultOptions, so Options{} is usable.
type Options struct {
	// DefaultMinDuration and DefaultMaxDuration fill request.scheduling when a job leaves them
	// out (imec: 1 week and 2 weeks). Stored jobs always carry both, so a later change of the
	// defaults never changes a job already submitted.
	DefaultMinDuration, DefaultMaxDuration time.Duration
	// KnownFeatures are the slave features (request.resources.features) this master knows; a
	// job asking for any other could never run, so it is refused at once.
	KnownFeatures []string
	// Now is the clock, injected so that tests and the trace simulator decide what "the past"
	// is (a notAfter in the past is refused).
	Now func() time.Time
	// Limits bound every part of a job; zero fields take DefaultLimits.
	Limits Limits
	// SubmitterEmail is the address of who submits: a version 1 file's `email_run: true` or
	// `email_done: true` means "mail me", as imec's old client's --email-run did. Empty where
	// nobody is known (a conversion without login): then such a true is refused, naming it.
	SubmitterEmail string
}

// DefaultOptions are imec's defaults: minDuration 1 week, maxDuration 2 weeks, no features.
func DefaultOptions() Options {
	return Options{
		DefaultMinDuration: 7 * 24 * time.Hour,
		DefaultMaxDuration: 14 * 24 * time.Hour,
		Now:                time.Now,
		Limits:             DefaultLimits(),
	}
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.DefaultMinDuration <= 0 {
		o.DefaultMinDuration = d.DefaultMinDuration
	}
	if o.DefaultMaxDuration <= 0 {
		o.DefaultMaxDuration = d.DefaultMaxDuration
	}
	if o.Now == nil {
		o.Now = d.Now
	}
	o.Limits = o.Limits.withDefaults()
	return o
}

// Parse reads a job submission: version 2, or version 1 (`{"jobDefinition": ...}`, detected and
// converted). It checks every rule of SPEC section 3 and fills the defaults, so that what it
// returns can be stored and scheduled as is: durations set, gpuModel a list, storage paths
// completed, shorthands expanded. The returned job has no UUID, owner user or state: the server
// sets those.
//
// The error is a *SyntaxError when the text is not JSON (with line and column), or a
// *ValidationError listing every problem with the path of its field. Trailing commas before
// '}' and ']' are tolerated, because imec's documentation prints them.
func Parse(data []byte, opts Options) (*Job, error) {
	tree, pre, err := decodeDocument(data, opts.Limits)
	if err != nil {
		return nil, err
	}
	r := newReader(opts)
	r.problems = pre
	top, ok := tree.(map[string]any)
	if !ok {
		r.add("", "a job must be a JSON object, not "+describe(tree))
		return r.finish(nil)
	}
	if isV1Tree(top) {
		return r.convertV1(top)
	}
	return r.finish(r.job(top))
}

// reader walks a document tree, collects problems and builds the job.
type reader struct {
	opts     Options
	now      time.Time
	problems []Problem
	// rewrite maps the paths of a converted version 1 document back to what the user wrote.
	rewrite func(string) string
	// legacy is set for a version 1 document: its counts may be numeric strings ("4"), as
	// imec's old clients wrote them. A version 2 document must use JSON numbers.
	legacy bool
}

func newReader(opts Options) *reader {
	opts = opts.withDefaults()
	return &reader{opts: opts, now: opts.Now()}
}

func (r *reader) add(p, msg string) {
	if r.rewrite != nil {
		p = r.rewrite(p)
	}
	r.problems = append(r.problems, Problem{Path: p, Message: msg})
}

func (r *reader) addf(p, format string, args ...any) { r.add(p, fmt.Sprintf(format, args...)) }

// maxProblems bounds the problems reported: a machine-made document can hold thousands of the
// same mistake, and the answer should stay readable and small.
const maxProblems = 100

// finish returns the job, or all problems sorted by path.
func (r *reader) finish(j *Job) (*Job, error) {
	if len(r.problems) == 0 {
		return j, nil
	}
	ps := slices.Clone(r.problems)
	slices.SortStableFunc(ps, func(a, b Problem) int { return strings.Compare(a.Path, b.Path) })
	ps = slices.Compact(ps)
	if len(ps) > maxProblems {
		n := len(ps) - maxProblems
		ps = append(ps[:maxProblems:maxProblems], Problem{Message: fmt.Sprintf("and %d more problems", n)})
	}
	return nil, &ValidationError{Problems: ps}
}

// ---- generic readers ----

// describe names a value in a message: "a list", "an object", `"abc"`, 2.5, true, null.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case json.Number:
		s := string(x)
		if len(s) > 40 {
			s = s[:40] + "…"
		}
		return s
	case string:
		if len([]rune(x)) > 40 {
			x = string([]rune(x)[:40]) + "…"
		}
		return strconv.Quote(x)
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	}
	return fmt.Sprintf("%T", v)
}

// get returns m[key] when it is present and not null: null means "not given" everywhere, as in
// imec's documented defaults (`"notBefore": null`).
func get(m map[string]any, key string) (any, bool) {
	v, ok := m[key]
	return v, ok && v != nil
}

// onlyKeys reports every key of m that is not allowed, with its full path.
func (r *reader) onlyKeys(p string, m map[string]any, allowed ...string) {
	for _, k := range sortedKeys(m) {
		if !slices.Contains(allowed, k) {
			kp := joinPath(p, k)
			r.add(kp, fmt.Sprintf("Invalid key %q", kp))
		}
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (r *reader) object(p string, v any) (map[string]any, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		r.add(p, "must be an object, not "+describe(v))
	}
	return m, ok
}

func (r *reader) str(p string, v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		r.add(p, "must be a string, not "+describe(v))
	}
	return s, ok
}

// optString reads an optional string field.
func (r *reader) optString(m map[string]any, p, key string) string {
	v, ok := get(m, key)
	if !ok {
		return ""
	}
	s, _ := r.str(joinPath(p, key), v)
	return s
}

// boolean reads a JSON bool; the strings "true" and "false" are accepted too, because HTML
// forms and some scripts send them.
func (r *reader) boolean(p string, v any) bool {
	switch x := v.(type) {
	case bool:
		return x
	case string:
		switch strings.ToLower(strings.TrimSpace(x)) {
		case "true":
			return true
		case "false":
			return false
		}
	}
	r.add(p, "must be true or false, not "+describe(v))
	return false
}

func (r *reader) optBool(m map[string]any, p, key string) bool {
	v, ok := get(m, key)
	if !ok {
		return false
	}
	return r.boolean(joinPath(p, key), v)
}

var intTextRe = regexp.MustCompile(`^[+-]?\d+$`)

// integer reads a JSON integer (2, 2.0, 2e1), or in a version 1 document a string holding one
// ("2"). Counts are kept
// within 32 bits: nothing in a job is larger, and the store keeps them in int columns.
func (r *reader) integer(p string, v any) (int, bool) {
	var text string
	switch x := v.(type) {
	case json.Number:
		text = string(x)
	case string:
		if !r.legacy {
			r.add(p, "must be a number, not the string "+describe(v))
			return 0, false
		}
		text = strings.TrimSpace(x)
		if !intTextRe.MatchString(text) {
			r.add(p, "must be an integer, not "+describe(v))
			return 0, false
		}
	default:
		r.add(p, "must be an integer, not "+describe(v))
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimPrefix(text, "+"), 10, 64)
	if err != nil {
		rat, ok := parseDecimal(text)
		switch {
		case ok && rat.IsInt() && rat.Num().IsInt64():
			n = rat.Num().Int64()
		case ok && !rat.IsInt():
			r.add(p, "must be an integer, not "+describe(v))
			return 0, false
		default:
			r.add(p, fmt.Sprintf("must be at most %d", math.MaxInt32))
			return 0, false
		}
	}
	if n > math.MaxInt32 {
		r.add(p, fmt.Sprintf("must be at most %d", math.MaxInt32))
		return 0, false
	}
	if n < math.MinInt32 {
		n = math.MinInt32 // reported by the caller's lower bound
	}
	return int(n), true
}

// intField reads an integer field that must be at least lo. A missing optional field is 0.
func (r *reader) intField(m map[string]any, p, key string, required bool, lo int) int {
	kp := joinPath(p, key)
	v, ok := get(m, key)
	if !ok {
		if required {
			r.add(kp, "is required")
		}
		return 0
	}
	n, ok := r.integer(kp, v)
	if !ok {
		return 0
	}
	if n < lo {
		r.addf(kp, "must be at least %d, not %d", lo, n)
		return 0
	}
	return n
}

// atMost reports a value above its limit, naming the limit and what sets it.
func (r *reader) atMost(p string, n, limit int, what string) bool {
	if n > limit {
		r.addf(p, "must be at most %d%s, not %d", limit, what, n)
		return false
	}
	return true
}

// maxBytes reports a string longer than its limit.
func (r *reader) maxBytes(p, s string, limit int) bool {
	if len(s) > limit {
		r.addf(p, "is %d bytes long: at most %d bytes are accepted", len(s), limit)
		return false
	}
	return true
}

// maxItems reports a list longer than its limit; its entries are then not read one by one.
func (r *reader) maxItems(p string, list []any, limit int) bool {
	if len(list) > r.opts.Limits.ListItems {
		return false // reported when the document was read
	}
	if len(list) > limit {
		r.addf(p, "has %d entries: at most %d are accepted", len(list), limit)
		return false
	}
	return true
}

// strList reads a list of strings; with single, one string stands for a list of one (imec's
// clients send both forms). An empty list is nil.
func (r *reader) strList(p string, v any, single bool) []string {
	if s, ok := v.(string); ok && single {
		return []string{s}
	}
	list, ok := v.([]any)
	if !ok {
		if single {
			r.add(p, "must be a string or a list of strings, not "+describe(v))
		} else {
			r.add(p, "must be a list of strings, not "+describe(v))
		}
		return nil
	}
	var out []string
	for i, e := range list {
		if s, ok := r.str(indexPath(p, i), e); ok {
			out = append(out, s)
		}
	}
	return out
}
