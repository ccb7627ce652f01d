package job

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestREADMEDiagramMatchesTable parses the mermaid state diagram of README.md and checks that it
// draws exactly the transitions of Transitions, each labelled with exactly its actors, so that
// the drawing cannot drift from the code. Lines from or to [*] (submission, the end) are not
// transitions of the table and are skipped.
func TestREADMEDiagramMatchesTable(t *testing.T) {
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```mermaid\n(.*?)```").FindSubmatch(data)
	if block == nil {
		t.Fatal("README.md has no mermaid block")
	}
	lines := strings.Split(string(block[1]), "\n")
	if strings.TrimSpace(lines[0]) != "stateDiagram-v2" {
		t.Fatalf("mermaid block starts with %q, want stateDiagram-v2", lines[0])
	}
	arrow := regexp.MustCompile(`^(\S+)\s*-->\s*(\S+)\s*(?::\s*(.*))?$`)
	key := func(from, to string, by []string) string {
		by = slices.Clone(by)
		slices.Sort(by)
		return fmt.Sprintf("%s --> %s : %s", from, to, strings.Join(by, ", "))
	}
	drawn := map[string]bool{}
	for _, l := range lines[1:] {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "%%") {
			continue
		}
		m := arrow.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("unexpected line in the diagram: %q", l)
			continue
		}
		if m[1] == "[*]" || m[2] == "[*]" {
			continue
		}
		var by []string
		for _, a := range strings.Split(m[3], ",") {
			by = append(by, strings.TrimSpace(a))
		}
		k := key(m[1], m[2], by)
		if drawn[k] {
			t.Errorf("drawn twice: %s", k)
		}
		drawn[k] = true
	}
	var want []string
	for _, tr := range Transitions {
		by := make([]string, len(tr.By))
		for i, a := range tr.By {
			by[i] = string(a)
		}
		k := key(string(tr.From), string(tr.To), by)
		want = append(want, fmt.Sprintf("    %s --> %s : %s", tr.From, tr.To, strings.Join(by, ", ")))
		if !drawn[k] {
			t.Errorf("README.md does not draw %s", k)
		}
		delete(drawn, k)
	}
	for k := range drawn {
		t.Errorf("README.md draws %s, which is not in Transitions", k)
	}
	if t.Failed() {
		t.Logf("the transition lines for README.md:\n%s", strings.Join(want, "\n"))
	}
}
