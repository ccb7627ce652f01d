package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// ModuleBinary is a program of this repository kept in a Go module of its own (the
// development OpenID provider internal/devidp, the development registry
// internal/devregistry), built once per test process by Path.
type ModuleBinary struct {
	Dir  string // its folder from the repository's root, e.g. "internal/devidp"
	Name string // the binary's name, e.g. "gpulab-devidp"

	once    sync.Once
	bin     string
	tempDir string
	err     error
}

// Path builds the program once per test process into <module>/.tmp/bin (kept between runs; Go's
// build cache makes later builds a link step) or, when that cannot be written, into a
// temporary folder that Remove removes, and returns the binary's path.
func (b *ModuleBinary) Path() (string, error) {
	b.once.Do(func() {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			b.err = fmt.Errorf("go env GOMOD: %w", err)
			return
		}
		root := filepath.Dir(strings.TrimSpace(string(out)))
		dir := filepath.Join(root, ".tmp", "bin")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			if dir, err = os.MkdirTemp("", b.Name+"-"); err != nil {
				b.err = fmt.Errorf("make build folder: %w", err)
				return
			}
			b.tempDir = dir
		}
		// Built under a name of this process, then renamed: another test process may be
		// running the previous binary, which keeps working.
		tmp := filepath.Join(dir, fmt.Sprintf(".%s-%d", b.Name, os.Getpid()))
		cmd := exec.Command("go", "build", "-o", tmp, ".")
		cmd.Dir = filepath.Join(root, filepath.FromSlash(b.Dir))
		if out, err := cmd.CombinedOutput(); err != nil {
			_ = os.Remove(tmp)
			b.err = fmt.Errorf("go build %s: %w\n%s", b.Dir, err, out)
			return
		}
		b.bin = filepath.Join(dir, b.Name)
		if err := os.Rename(tmp, b.bin); err != nil {
			b.err = fmt.Errorf("install %s: %w", b.Name, err)
		}
	})
	return b.bin, b.err
}

// Remove removes what Path built into a temporary folder (call it from TestMain).
func (b *ModuleBinary) Remove() {
	if b.tempDir != "" {
		_ = os.RemoveAll(b.tempDir)
	}
}
