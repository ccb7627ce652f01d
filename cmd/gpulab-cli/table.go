package main

import (
	"strings"
	"unicode/utf8"
)

// align is how a table cell is placed in its column.
type align int

const (
	alignLeft align = iota
	alignCenter
)

// column is a table column: a title, a minimum width (imec's tables keep fixed widths, e.g.
// 20 for the host) and how values are aligned. Titles are always left-aligned.
type column struct {
	title string
	min   int
	align align
}

// table is an ASCII table drawn as imec's CLI draws them:
//
//	+---------+---------+
//	| Cluster | Version |
//	+---------+---------+
//	| 1       | stable  |
//	+---------+---------+
//
// or, without lines, as columns separated by two spaces.
type table struct {
	cols []column
	rows [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) widths() []int {
	w := make([]int, len(t.cols))
	for i, c := range t.cols {
		w[i] = max(c.min, utf8.RuneCountInString(c.title))
	}
	for _, r := range t.rows {
		for i := range t.cols {
			if i < len(r) {
				w[i] = max(w[i], utf8.RuneCountInString(r[i]))
			}
		}
	}
	return w
}

// render writes the table; lines draws the +---+ borders and | separators.
func (t *table) render(p *printer, lines bool) {
	w := t.widths()
	titles := make([]string, len(t.cols))
	for i, c := range t.cols {
		titles[i] = c.title
	}
	if !lines {
		p.printf("%s\n", t.line(titles, w, false, "  "))
		for _, r := range t.rows {
			p.printf("%s\n", t.line(r, w, true, "  "))
		}
		return
	}
	var sep strings.Builder
	sep.WriteString("+")
	for _, n := range w {
		sep.WriteString(strings.Repeat("-", n+2))
		sep.WriteString("+")
	}
	border := sep.String()
	p.printf("%s\n", border)
	p.printf("| %s |\n", t.line(titles, w, false, " | "))
	p.printf("%s\n", border)
	for _, r := range t.rows {
		p.printf("| %s |\n", t.line(r, w, true, " | "))
	}
	p.printf("%s\n", border)
}

func (t *table) line(cells []string, w []int, aligned bool, sep string) string {
	parts := make([]string, len(t.cols))
	for i, c := range t.cols {
		cell := ""
		if i < len(cells) {
			cell = cells[i]
		}
		a := alignLeft
		if aligned {
			a = c.align
		}
		parts[i] = pad(cell, w[i], a)
	}
	s := strings.Join(parts, sep)
	if sep == "  " {
		s = strings.TrimRight(s, " ")
	}
	return s
}

// pad places s in a field of width runes. Centering splits the space exactly as Python's
// str.center does, which imec's tables use.
func pad(s string, width int, a align) string {
	n := utf8.RuneCountInString(s)
	if n >= width {
		return s
	}
	gap := width - n
	if a == alignCenter {
		left := gap/2 + (gap & width & 1)
		return strings.Repeat(" ", left) + s + strings.Repeat(" ", gap-left)
	}
	return s + strings.Repeat(" ", gap)
}

// truncate shortens s to at most n runes, marking the cut with "..." so a table stays narrow.
func truncate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ") // no newlines or tabs inside a table cell
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	if n <= 3 {
		return string(r[:n])
	}
	return string(r[:n-3]) + "..."
}
