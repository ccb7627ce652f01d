package job

import (
	"bytes"
	"unicode/utf8"
)

// plainJSON reports whether data is a JSON document that CheckJSON would accept as it is: valid
// JSON, nothing after its value, no byte-order mark, no trailing comma, valid UTF-8, no NUL
// character (escaped or not), no key given twice in an object, no nesting deeper than
// maxDepth, and no string, number or list over the limits. It reads the text once and
// allocates only for objects of more than a few keys.
//
// It is CheckJSON's fast path for the documents machines send (a slave's heartbeat, ten times
// a minute from each slave), which are always plain. decodeDocument builds a tree of every
// value through encoding/json's token reader to name the path of a problem: at 1,000
// heartbeats a second that was a tenth of the master's CPU and much of its garbage (bench/
// B8x). plainJSON only needs to be sound, never complete: where it answers false, for a real
// problem or for something merely unusual (an escaped key, a string that might be long once
// unescaped), decodeDocument decides and words the problem, so every message stays the same.
func plainJSON(data []byte, lim Limits) bool {
	if len(data) > lim.DocumentBytes || bytes.HasPrefix(data, utf8BOM) || !utf8.Valid(data) {
		return false
	}
	p := plainReader{b: data, lim: lim}
	p.space()
	if !p.value(0) {
		return false
	}
	p.space()
	return p.i == len(p.b)
}

// plainReader is plainJSON's cursor. keys holds the keys of the objects being read (each
// object's from its mark), raw: a key with an escape sends the document to the slow path.
type plainReader struct {
	b    []byte
	i    int
	lim  Limits
	keys [][]byte
}

// smallObject is the number of keys compared pairwise; an object with more gets a set.
const smallObject = 16

func (p *plainReader) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// value reads one value at nesting depth (the document's own value is at 0).
func (p *plainReader) value(depth int) bool {
	if p.i >= len(p.b) {
		return false
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return depth < maxDepth && p.object(depth)
	case c == '[':
		return depth < maxDepth && p.array(depth)
	case c == '"':
		_, ok := p.str()
		return ok
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	default:
		for _, lit := range [...]string{"true", "false", "null"} {
			if bytes.HasPrefix(p.b[p.i:], []byte(lit)) {
				p.i += len(lit)
				return true
			}
		}
		return false
	}
}

func (p *plainReader) object(depth int) bool {
	p.i++ // '{'
	mark := len(p.keys)
	defer func() { p.keys = p.keys[:mark] }()
	var set map[string]struct{}
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return true
	}
	for {
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return false
		}
		k, ok := p.str()
		if !ok || bytes.IndexByte(k, '\\') >= 0 {
			return false
		}
		switch n := len(p.keys) - mark; {
		case n < smallObject:
			for _, o := range p.keys[mark:] {
				if bytes.Equal(o, k) {
					return false
				}
			}
			p.keys = append(p.keys, k)
		default:
			if set == nil {
				set = make(map[string]struct{}, 2*smallObject)
				for _, o := range p.keys[mark:] {
					set[string(o)] = struct{}{}
				}
			}
			if _, dup := set[string(k)]; dup {
				return false
			}
			set[string(k)] = struct{}{}
		}
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return false
		}
		p.i++
		if more, ok := p.element(depth, '}'); !ok || !more {
			return ok
		}
	}
}

func (p *plainReader) array(depth int) bool {
	p.i++ // '['
	p.space()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return true
	}
	for n := 1; ; n++ {
		if n > p.lim.ListItems {
			return false
		}
		if more, ok := p.element(depth, ']'); !ok || !more {
			return ok
		}
	}
}

// element reads a value of the container at depth and what follows it: more after a comma,
// not after the container's end.
func (p *plainReader) element(depth int, end byte) (more, ok bool) {
	p.space()
	if !p.value(depth + 1) {
		return false, false
	}
	p.space()
	if p.i >= len(p.b) {
		return false, false
	}
	switch p.b[p.i] {
	case ',':
		p.i++
		return true, true
	case end:
		p.i++
		return false, true
	}
	return false, false
}

// str reads a string and returns its text between the quotes, raw (escapes as written). It
// fails on what JSON forbids in a string, on an escaped NUL, and when the string might be over
// the limit once unescaped: each \u escape is counted as 3 bytes, the most one can stand for
// (a surrogate pair, two escapes, stands for 4).
func (p *plainReader) str() ([]byte, bool) {
	p.i++ // '"'
	start, decoded := p.i, 0
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			return s, decoded <= p.lim.StringBytes
		case c < 0x20:
			return nil, false
		case c == '\\':
			if p.i+1 >= len(p.b) {
				return nil, false
			}
			switch p.b[p.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.i += 2
				decoded++
			case 'u':
				if p.i+6 > len(p.b) {
					return nil, false
				}
				hex := p.b[p.i+2 : p.i+6]
				for _, h := range hex {
					if (h < '0' || h > '9') && (h < 'a' || h > 'f') && (h < 'A' || h > 'F') {
						return nil, false
					}
				}
				if string(hex) == "0000" {
					return nil, false
				}
				p.i += 6
				decoded += 3
			default:
				return nil, false
			}
		default:
			p.i++
			decoded++
		}
	}
	return nil, false
}

// number reads a number as JSON writes one, at most maxNumberText characters long.
func (p *plainReader) number() bool {
	start := p.i
	digits := func() int {
		n := 0
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	if p.b[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(p.b) && p.b[p.i] == '0':
		p.i++
	case digits() == 0:
		return false
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if digits() == 0 {
			return false
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return false
		}
	}
	return p.i-start <= maxNumberText
}
