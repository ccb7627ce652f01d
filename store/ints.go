package store

import (
	"bytes"
	"fmt"
	"strconv"
)

// Ints is a Postgres integer array read as ints. What a running job holds (Held's GPU and CPU
// ids) is read into the leader's memory once and handed to the planner as it is
// (scheduler.Placed's indices); read as int64s, it was copied into ints for every running job
// at every pass (most of building a pass's running jobs at 2,000 slaves: bench/ B8x).
type Ints []int

// Scan reads an integer array's text ("{1,2,3}"); NULL is nil.
func (a *Ints) Scan(src any) error {
	var text []byte
	switch v := src.(type) {
	case nil:
		*a = nil
		return nil
	case []byte:
		text = v
	case string:
		text = []byte(v)
	default:
		return fmt.Errorf("read an integer array from %T", src)
	}
	inner, open := bytes.CutPrefix(text, []byte("{"))
	inner, closed := bytes.CutSuffix(inner, []byte("}"))
	if !open || !closed {
		return fmt.Errorf("read an integer array from %q: not {…}", text)
	}
	if len(inner) == 0 {
		*a = Ints{}
		return nil
	}
	out := make(Ints, 0, bytes.Count(inner, []byte(","))+1)
	for f := range bytes.SplitSeq(inner, []byte(",")) {
		n, err := strconv.Atoi(string(f))
		if err != nil {
			return fmt.Errorf("read an integer array from %q: %w", text, err)
		}
		out = append(out, n)
	}
	*a = out
	return nil
}
