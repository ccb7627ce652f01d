package testenv

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
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
//
// As root, the browser runs in a network namespace of its own (see browsernet.go), so that the
// veths and bridges Docker makes and removes meanwhile, for this test or another test process,
// do not abort its requests with net::ERR_NETWORK_CHANGED. Elsewhere it shares the host's
// network, and Navigate retries what such a change aborted.
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
	if bn, err := isolateBrowser(t); err != nil {
		t.Logf("the browser shares the host's network (%v): Docker's network changes may abort its requests", err)
	} else {
		opts = append(opts,
			// Every request through the proxy, loopback included (Chromium bypasses a proxy
			// for loopback unless told not to).
			chromedp.ProxyServer("socks5://"+bn.proxy),
			chromedp.Flag("proxy-bypass-list", "<-loopback>"),
			chromedp.ModifyCmdFunc(func(cmd *exec.Cmd) {
				cmd.Args = append([]string{"nsenter", "--net=" + bn.nsPath, "--", cmd.Path}, cmd.Args[1:]...)
				cmd.Path = nsenterPath()
				// As chromedp does by default: the browser dies with the test process.
				cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			}),
		)
	}
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

func nsenterPath() string {
	if p, err := exec.LookPath("nsenter"); err == nil {
		return p
	}
	return "/usr/bin/nsenter"
}

// navigateAttempts bounds Navigate's retries.
const navigateAttempts = 5

// Navigate is chromedp.Navigate that tries again, a few times, when the browser aborted the
// load with net::ERR_NETWORK_CHANGED: an interface of the host came or went (Docker makes and
// removes them for containers and networks), which is no fault of the page. Loading a URL
// again is safe; a form's POST is not, which is why Browser isolates the browser where it can.
func Navigate(url string) chromedp.Action[chromedp.Void] {
	nav := chromedp.Navigate(url)
	return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		for attempt := 1; ; attempt++ {
			v, err := nav(ctx, tg)
			if err == nil || !NetworkChanged(err) || attempt == navigateAttempts || ctx.Err() != nil {
				return v, err
			}
			select {
			case <-ctx.Done():
				return v, err
			case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
			}
		}
	}
}

// NetworkChanged reports whether err is a load the browser aborted because the host's network
// changed.
func NetworkChanged(err error) bool {
	var le *chromedp.LoadError
	return errors.As(err, &le) && strings.Contains(le.ErrorText, "ERR_NETWORK_CHANGED")
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

// WaitTimeout is how long browser steps may wait for the page: generous, since two test
// processes may share the machine.
const WaitTimeout = time.Minute
