package views

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/a-h/templ"
	"golang.org/x/net/html"
)

// page is rendered HTML, parsed, for finding nodes by attribute (never by comparing text of
// whole pages).
type page struct {
	t    *testing.T
	root *html.Node
	raw  string
}

func render(t *testing.T, c templ.Component) *page {
	t.Helper()
	var buf bytes.Buffer
	if err := c.Render(context.Background(), &buf); err != nil {
		t.Fatalf("render: %v", err)
	}
	root, err := html.Parse(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatalf("parse HTML: %v", err)
	}
	return &page{t: t, root: root, raw: buf.String()}
}

func attr(n *html.Node, name string) (string, bool) {
	if n == nil {
		return "", false
	}
	for _, a := range n.Attr {
		if a.Key == name {
			return a.Val, true
		}
	}
	return "", false
}

func attrOf(n *html.Node, name string) string { v, _ := attr(n, name); return v }

func hasClass(n *html.Node, class string) bool {
	for _, c := range strings.Fields(attrOf(n, "class")) {
		if c == class {
			return true
		}
	}
	return false
}

// all finds the elements below n for which match is true, in document order.
func all(n *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && match(n) {
			out = append(out, n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return out
}

func byAttr(name, val string) func(*html.Node) bool {
	return func(n *html.Node) bool { v, ok := attr(n, name); return ok && v == val }
}

func byTag(tag string) func(*html.Node) bool {
	return func(n *html.Node) bool { return n.Data == tag }
}

// one finds exactly one element with attribute name=val below n.
func (p *page) one(n *html.Node, name, val string) *html.Node {
	p.t.Helper()
	if n == nil {
		n = p.root
	}
	found := all(n, byAttr(name, val))
	if len(found) != 1 {
		p.t.Fatalf("want one element with %s=%q, found %d", name, val, len(found))
	}
	return found[0]
}

func (p *page) id(id string) *html.Node { p.t.Helper(); return p.one(nil, "id", id) }

func (p *page) testID(n *html.Node, id string) *html.Node {
	p.t.Helper()
	return p.one(n, "data-testid", id)
}

// none checks no element with attribute name=val is below n.
func (p *page) none(n *html.Node, name, val string) {
	p.t.Helper()
	if n == nil {
		n = p.root
	}
	if found := all(n, byAttr(name, val)); len(found) != 0 {
		p.t.Errorf("want no element with %s=%q, found %d", name, val, len(found))
	}
}

// text is the text content of n, blanks collapsed.
func text(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return strings.Join(strings.Fields(b.String()), " ")
}

// rawText is the text content of n as it is (for <pre>).
func rawText(n *html.Node) string {
	var b strings.Builder
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if c.Type == html.TextNode {
			b.WriteString(c.Data)
		} else {
			b.WriteString(rawText(c))
		}
	}
	return b.String()
}

// ancestor is the closest ancestor of n matching, or nil.
func ancestor(n *html.Node, match func(*html.Node) bool) *html.Node {
	for p := n.Parent; p != nil; p = p.Parent {
		if p.Type == html.ElementNode && match(p) {
			return p
		}
	}
	return nil
}

// hiddenValue is the value of the hidden input named name inside form.
func hiddenValue(t *testing.T, form *html.Node, name string) string {
	t.Helper()
	for _, in := range all(form, byTag("input")) {
		if attrOf(in, "name") == name {
			return attrOf(in, "value")
		}
	}
	t.Fatalf("form %s has no input %q", attrOf(form, "action"), name)
	return ""
}
