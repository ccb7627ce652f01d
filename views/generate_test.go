package views

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGeneratedFilesAreFresh regenerates the views with the pinned templ (go tool templ) into
// a temporary folder and compares: the committed *_templ.go files must be exactly what their
// .templ files give (run `make generate` when this fails).
func TestGeneratedFilesAreFresh(t *testing.T) {
	if testing.Short() {
		t.Skip("runs templ")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go not in PATH: %v", err)
	}
	sources, err := filepath.Glob("*.templ")
	if err != nil || len(sources) == 0 {
		t.Fatalf("no .templ files: %v", err)
	}
	tmp := t.TempDir()
	for _, src := range sources {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, src), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(goBin, "tool", "templ", "generate", "-path", tmp, "-log-level", "error")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("templ generate: %v\n%s", err, out)
	}
	for _, src := range sources {
		gen := strings.TrimSuffix(src, ".templ") + "_templ.go"
		want, err := os.ReadFile(filepath.Join(tmp, gen))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(gen)
		if err != nil {
			t.Errorf("%s is missing: run `make generate`", gen)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run `make generate`", gen)
		}
	}
	committed, _ := filepath.Glob("*_templ.go")
	for _, gen := range committed {
		if _, err := os.Stat(strings.TrimSuffix(gen, "_templ.go") + ".templ"); err != nil {
			t.Errorf("%s has no .templ file: remove it", gen)
		}
	}
}
