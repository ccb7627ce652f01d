package store

import (
	"database/sql/driver"
)

// texts is a text[] argument for the statements that run most (a heartbeat's, a batch of
// state changes' or of assignments'), written as lib/pq's StringArray writes it (every element
// quoted, its backslashes and double quotes escaped) but into one buffer of the right size,
// handed to pq as bytes, which it sends as they are. StringArray grows its buffer as it goes
// and copies it into a string, which pq copies again into bytes; and its elements must be
// strings, so the slaves' usage reports (some hundred bytes each) were copied into strings
// first: together ~5 % of what B8x's master allocated. nil is NULL, as with StringArray.
// (Bytes go out as text because pq sends every parameter as text; with its binary_parameters
// set it would send them as binary, which the store's JSON arguments, bytes too, do not
// survive either.)
type texts[T ~string | ~[]byte] []T

// Value writes the array's text ("{\"a\",\"b\"}").
func (a texts[T]) Value() (driver.Value, error) {
	if a == nil {
		return nil, nil
	}
	size := 2 + max(len(a)-1, 0) // braces and commas
	for _, s := range a {
		size += 2 + len(s) + escapes(s)
	}
	b := make([]byte, 0, size)
	b = append(b, '{')
	for i, s := range a {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		if escapes(s) == 0 {
			b = append(b, s...)
		} else {
			for k := 0; k < len(s); k++ {
				if s[k] == '\\' || s[k] == '"' {
					b = append(b, '\\')
				}
				b = append(b, s[k])
			}
		}
		b = append(b, '"')
	}
	return append(b, '}'), nil
}

// escapes counts the bytes of s that an array's quoted element escapes (backslashes, quotes).
func escapes[T ~string | ~[]byte](s T) int {
	n := 0
	for k := 0; k < len(s); k++ {
		if s[k] == '\\' || s[k] == '"' {
			n++
		}
	}
	return n
}
