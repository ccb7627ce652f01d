package testenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath finds Debian's chromium.
func chromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	return ""
}

// Browser starts a headless Chromium for the test (skipped, or failed under
// GPULAB_REQUIRE_SERVICES=1, when it is not installed) and returns a chromedp context. The
// browser trusts no certificate it should not: tests pass the master's CA through
// IgnoreCertErrors only because the master's CA is made per test.
func Browser(t testing.TB) context.Context {
	t.Helper()
	path := chromiumPath()
	if path == "" {
		Missing(t, "Chromium", "chromium is not installed (apt-get install chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("ignore-certificate-errors", true),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	if err := chromedp.Do(ctx); err != nil {
		cancelCtx()
		cancelAlloc()
		Missing(t, "Chromium", err.Error())
	}
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc()
	})
	return ctx
}

// Screenshot saves a full-page PNG of the current page under the test's output folder
// (GPULAB_TEST_OUTPUT, default .tmp/test-output/<test name>) and returns its path.
func Screenshot(t testing.TB, ctx context.Context, name string) string {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100 gives PNG (below: JPEG)
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return ""
	}
	dir := OutputDir(t)
	file := filepath.Join(dir, name+".png")
	if err := os.WriteFile(file, png, 0o644); err != nil {
		t.Errorf("write screenshot: %v", err)
	}
	return file
}

// OutputDir is the folder for a test's artefacts (screenshots), kept after the run.
func OutputDir(t testing.TB) string {
	base := os.Getenv("GPULAB_TEST_OUTPUT")
	if base == "" {
		wd, _ := os.Getwd()
		// tests run in their package folder; put output at the module root's .tmp
		for d := wd; d != "/"; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				base = filepath.Join(d, ".tmp", "test-output")
				break
			}
		}
	}
	dir := filepath.Join(base, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()))
	_ = os.MkdirAll(dir, 0o755)
	return dir
}

// WaitTimeout is how long browser steps may wait for the page.
const WaitTimeout = 30 * time.Second
