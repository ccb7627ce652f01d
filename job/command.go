package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// SplitCommand splits a command string into words the way a POSIX shell does, without running
// one: blanks separate words; single quotes keep everything literally; double quotes keep
// everything except that a backslash escapes \ " $ ` and a newline; outside quotes a backslash
// escapes any character; a backslash-newline joins lines. Nothing is expanded: `$HOME`, backticks,
// `*`, `>` and `;` stay literal characters, because the container is started without a shell,
// exactly as `docker run image cmd...` would get them from the user's own shell quoting.
// An unterminated quote or a trailing backslash is an error.
func SplitCommand(s string) ([]string, error) {
	var (
		words   []string
		cur     []rune
		inWord  bool // a word has started (also an empty one, from '' or "")
		rs      = []rune(s)
		nextIdx = func(i int) (rune, bool) {
			if i+1 < len(rs) {
				return rs[i+1], true
			}
			return 0, false
		}
	)
	for i := 0; i < len(rs); i++ {
		c := rs[i]
		switch c {
		case ' ', '\t', '\n', '\r':
			if inWord {
				words = append(words, string(cur))
				cur, inWord = cur[:0], false
			}
		case '\\':
			n, ok := nextIdx(i)
			if !ok {
				return nil, errors.New("command ends with a backslash that escapes nothing")
			}
			i++
			if n == '\n' {
				continue // line continuation
			}
			cur, inWord = append(cur, n), true
		case '\'':
			end := -1
			for j := i + 1; j < len(rs); j++ {
				if rs[j] == '\'' {
					end = j
					break
				}
			}
			if end < 0 {
				return nil, fmt.Errorf("unterminated single quote at character %d", i+1)
			}
			cur, inWord = append(cur, rs[i+1:end]...), true
			i = end
		case '"':
			start := i
			closed := false
			for i++; i < len(rs); i++ {
				d := rs[i]
				if d == '"' {
					closed = true
					break
				}
				if d == '\\' {
					if n, ok := nextIdx(i); ok && (n == '\\' || n == '"' || n == '$' || n == '`' || n == '\n') {
						i++
						if n != '\n' {
							cur = append(cur, n)
						}
						continue
					}
				}
				cur = append(cur, d)
			}
			if !closed {
				return nil, fmt.Errorf("unterminated double quote at character %d", start+1)
			}
			inWord = true
		default:
			cur, inWord = append(cur, c), true
		}
	}
	if inWord {
		words = append(words, string(cur))
	}
	return words, nil
}

// Args is the argv the container runs: the list as given, or the string split by SplitCommand.
// nil means "no command": the image's own CMD runs.
func (c Command) Args() ([]string, error) {
	if c.IsList {
		if len(c.List) == 0 {
			return nil, nil
		}
		return slices.Clone(c.List), nil
	}
	words, err := SplitCommand(c.Text)
	if err != nil {
		return nil, err
	}
	if len(words) == 0 {
		return nil, nil
	}
	return words, nil
}

// IsZero reports whether no command was given, so that `omitzero` leaves it out of the JSON.
func (c Command) IsZero() bool { return c.Text == "" && len(c.List) == 0 }

// String shows the command as a user would type it: the text, or the list's words joined by
// spaces (for display only: it is not re-splittable when words hold blanks).
func (c Command) String() string {
	if c.IsList {
		return strings.Join(c.List, " ")
	}
	return c.Text
}

// MarshalJSON writes the command in the form it was given: a string or a list.
func (c Command) MarshalJSON() ([]byte, error) {
	if c.IsList {
		if c.List == nil {
			return []byte("[]"), nil
		}
		return json.Marshal(c.List)
	}
	return json.Marshal(c.Text)
}

// UnmarshalJSON reads a string or a list of strings (null is no command). It does not validate
// the string's quoting: stored jobs are re-read as they were accepted; Parse validates.
func (c *Command) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		*c = Command{}
		return nil
	case len(b) > 0 && b[0] == '[':
		var list []string
		if err := json.Unmarshal(b, &list); err != nil {
			return fmt.Errorf("command: must be a string or a list of strings: %w", err)
		}
		*c = Command{List: list, IsList: true}
		return nil
	default:
		var text string
		if err := json.Unmarshal(b, &text); err != nil {
			return fmt.Errorf("command: must be a string or a list of strings: %w", err)
		}
		*c = Command{Text: text}
		return nil
	}
}
