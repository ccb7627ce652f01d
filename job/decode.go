package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The document tree Parse validates: what encoding/json gives for `any` with UseNumber, i.e.
// map[string]any, []any, string, json.Number, bool and nil. Validation walks it by hand instead
// of decoding into the structs, so that it can name the path of every problem, reject unknown
// keys, accept the documented aliases and shorthands, and report all problems at once.

// maxDepth bounds nesting. A valid job is at most five levels deep; anything far deeper is an
// attack or an accident, and must not cost recursion.
const maxDepth = 32

// utf8BOM is skipped at the start of a document: Windows editors write it.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// decodeDocument turns submission text into a tree. Text that is not JSON gives a *SyntaxError
// with the line and column of the fault. Duplicate keys and too deep nesting are returned as
// problems beside the tree (the text is JSON, but not a job).
func decodeDocument(data []byte, lim Limits) (any, []Problem, error) {
	lim = lim.withDefaults()
	if len(data) > lim.DocumentBytes {
		return nil, nil, &ValidationError{Problems: []Problem{{Message: fmt.Sprintf("the document is %d bytes, larger than the limit of %d bytes", len(data), lim.DocumentBytes)}}}
	}
	skip := 0
	if bytes.HasPrefix(data, utf8BOM) {
		skip = len(utf8BOM)
	}
	body := data[skip:]
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, nil, &SyntaxError{Line: 1, Column: 1, Msg: "the document is empty: expected a JSON object"}
	}
	body = stripTrailingCommas(body)
	// encoding/json's own scanner finds the fault and its offset reliably; the token reader
	// below then only ever sees valid JSON.
	var raw json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, nil, syntaxErrorAt(data, skip, body, se)
		}
		return nil, nil, &SyntaxError{Line: 1, Column: 1, Msg: err.Error()}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	t := &treeReader{dec: dec, body: body, lim: lim}
	v, err := t.value("", 0)
	if err != nil {
		// Cannot happen for text json.Unmarshal accepted; keep the error rather than panic.
		return nil, nil, &SyntaxError{Line: 1, Column: 1, Msg: err.Error()}
	}
	return v, t.problems, nil
}

// syntaxErrorAt converts encoding/json's byte offset into a line and a column (in characters)
// of the original text, and adds a hint for the two typos people make most.
func syntaxErrorAt(data []byte, skip int, body []byte, se *json.SyntaxError) *SyntaxError {
	// json.Unmarshal reports the offset just past the offending byte; at end of input it is
	// the input length.
	pos := int(se.Offset)
	atEnd := pos >= len(body) && strings.Contains(se.Error(), "unexpected end")
	if pos > 0 && !atEnd {
		pos--
	}
	pos = min(pos, len(body)) + skip
	line := 1 + bytes.Count(data[:pos], []byte("\n"))
	lineStart := bytes.LastIndexByte(data[:pos], '\n') + 1
	if lineStart == 0 {
		lineStart = skip
	}
	col := utf8.RuneCount(data[lineStart:pos]) + 1
	msg := se.Error()
	switch {
	case strings.HasSuffix(msg, "after object key:value pair"), strings.HasSuffix(msg, "after array element"):
		msg += " (is a comma missing?)"
	case strings.HasSuffix(msg, "after object key"):
		msg += " (is a colon missing?)"
	case strings.Contains(msg, "unexpected end"):
		msg = "unexpected end of the document (is a closing bracket or quote missing?)"
	}
	return &SyntaxError{Line: line, Column: col, Msg: msg}
}

// stripTrailingCommas blanks out a comma that directly precedes '}' or ']' (only whitespace in
// between) and follows a value. imec's documentation prints examples with such commas, people
// copy them, and JSON5 and most editors tolerate them; nothing else is guessed (a missing comma
// or colon stays an error). Commas are replaced by a space so offsets, lines and columns of
// later errors stay those of the user's text. Strings are skipped correctly, escapes included.
func stripTrailingCommas(b []byte) []byte {
	var out []byte  // copied on first change
	prev := byte(0) // the last significant byte outside strings
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case ',':
			j := i + 1
			for j < len(b) && (b[j] == ' ' || b[j] == '\t' || b[j] == '\n' || b[j] == '\r') {
				j++
			}
			if j < len(b) && (b[j] == '}' || b[j] == ']') && prev != 0 && !strings.ContainsRune("[{,:", rune(prev)) {
				if out == nil {
					out = slices.Clone(b)
				}
				out[i] = ' '
				continue // prev stays the value before the comma
			}
		}
		prev = c
	}
	if out == nil {
		return b
	}
	return out
}

// treeReader builds the tree from valid JSON tokens, noting duplicate keys (encoding/json would
// silently keep the last one, so a user's first value would vanish without a word).
//
// It also checks every scalar where it stands, so that the problem names its path: strings
// must be valid UTF-8 (encoding/json would silently replace bad bytes by U+FFFD), hold no NUL
// (Postgres refuses it, and no program expects it) and stay within the string limit; numbers
// are bounded in length (a 1e999999 costs nothing to send and much to compute with); lists are
// bounded in length.
type treeReader struct {
	dec      *json.Decoder
	body     []byte
	lim      Limits
	problems []Problem
}

func (t *treeReader) add(path, msg string) {
	t.problems = append(t.problems, Problem{Path: path, Message: msg})
}

// maxNumberText bounds the text of a JSON number: no count, port or duration needs more.
const maxNumberText = 40

// token reads the next token and checks it when it is a string or a number.
// A key is checked as its object's content (key set): its own path would carry the bad text.
func (t *treeReader) token(path string, key bool) (json.Token, error) {
	start := t.dec.InputOffset()
	tok, err := t.dec.Token()
	if err != nil {
		return nil, err
	}
	switch x := tok.(type) {
	case string:
		end := t.dec.InputOffset()
		if start >= 0 && end <= int64(len(t.body)) && start <= end && !utf8.Valid(t.body[start:end]) {
			t.add(path, what(key, "is not valid UTF-8 text"))
		} else if strings.ContainsRune(x, 0) {
			t.add(path, what(key, "must not contain a NUL character"))
		} else if len(x) > t.lim.StringBytes {
			t.add(path, fmt.Sprintf("is %d bytes long, longer than the limit of %d bytes", len(x), t.lim.StringBytes))
		}
	case json.Number:
		if len(x) > maxNumberText {
			t.add(path, fmt.Sprintf("is a number of %d characters: at most %d are accepted", len(x), maxNumberText))
			return json.Number("0"), nil
		}
	}
	return tok, nil
}

// what words a message about a string for a value or for a key of the object at the path.
func what(key bool, msg string) string {
	if key {
		return "has a key that " + msg
	}
	return msg
}

func (t *treeReader) value(path string, depth int) (any, error) {
	tok, err := t.token(path, false)
	if err != nil {
		return nil, err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return tok, nil
	}
	if depth >= maxDepth {
		t.problems = append(t.problems, Problem{Path: path, Message: fmt.Sprintf("nested more than %d levels deep", maxDepth)})
		return nil, t.skip()
	}
	switch d {
	case '{':
		m := map[string]any{}
		for t.dec.More() {
			kt, err := t.token(path, true)
			if err != nil {
				return nil, err
			}
			k, _ := kt.(string)
			kp := joinPath(path, k)
			if !utf8.ValidString(k) || strings.ContainsRune(k, 0) {
				// Reported at the parent; a path with such a key would carry it on.
				kp = joinPath(path, strconv.QuoteToASCII(k))
			}
			v, err := t.value(kp, depth+1)
			if err != nil {
				return nil, err
			}
			if _, dup := m[k]; dup {
				t.problems = append(t.problems, Problem{Path: kp, Message: "duplicate key: given more than once"})
			}
			m[k] = v
		}
		_, err := t.dec.Token() // '}'
		return m, err
	case '[':
		list := []any{}
		for i := 0; t.dec.More(); i++ {
			v, err := t.value(indexPath(path, i), depth+1)
			if err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		if len(list) > t.lim.ListItems {
			t.add(path, fmt.Sprintf("has %d entries: at most %d are accepted", len(list), t.lim.ListItems))
		}
		_, err := t.dec.Token() // ']'
		return list, err
	}
	return nil, fmt.Errorf("unexpected %v", d)
}

// skip consumes the rest of a container whose opening delimiter was just read.
func (t *treeReader) skip() error {
	n := 1
	for n > 0 {
		tok, err := t.dec.Token()
		if err == io.EOF {
			return io.ErrUnexpectedEOF
		}
		if err != nil {
			return err
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				n++
			} else {
				n--
			}
		}
	}
	return nil
}

// joinPath appends an object key to a problem path.
func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// indexPath appends a list index to a problem path.
func indexPath(path string, i int) string {
	return fmt.Sprintf("%s[%d]", path, i)
}

// CheckJSON checks any JSON document the master accepts besides a job (a reservation, a slave
// protocol message) as a job's text is checked: valid JSON (else a *SyntaxError), and a
// *ValidationError naming the path of invalid UTF-8, a NUL character, a duplicate key, too
// deep nesting, an oversized string, list or number. The caller then decodes it into its type.
func CheckJSON(data []byte, lim Limits) error {
	if plainJSON(data, lim.withDefaults()) {
		return nil
	}
	_, problems, err := decodeDocument(data, lim)
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		r := &reader{problems: problems}
		_, err := r.finish(nil)
		return err
	}
	return nil
}
