package testenv

import (
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/chromedp/chromedp"
)

func TestBrowserRendersAPage(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`<!doctype html><title>probe</title><h1 id="h">Hello from the test</h1>`))
	}))
	defer srv.Close()
	ctx := Browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL), chromedp.WaitVisible(chromedp.ID("h"))); err != nil {
		t.Fatal(err)
	}
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("h")))
	if err != nil || text != "Hello from the test" {
		t.Fatalf("text %q, %v", text, err)
	}
	if f := Screenshot(t, ctx, "probe"); f != "" {
		if info, err := os.Stat(f); err != nil || info.Size() == 0 {
			t.Fatalf("screenshot %s: %v", f, err)
		}
	}
}
