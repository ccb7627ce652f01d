package testenv

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
)

// churn makes and removes bridge networks (each gets an address on a new bridge interface) and
// containers (each gets a veth) on the engine until stop closes, counting the rounds. Names
// carry this process's suffix; whatever is left is removed by name at the end.
func churn(t *testing.T, cli *client.Client, image string, stop <-chan struct{}, rounds *atomic.Int64) {
	ctx := context.Background()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		name := Name(fmt.Sprintf("gpulab-churn-%d", i))
		if i%4 != 3 { // networks are quicker to make than containers
			n, err := cli.NetworkCreate(ctx, name, network.CreateOptions{Driver: "bridge"})
			if err != nil {
				t.Errorf("create network %s: %v", name, err)
				return
			}
			if err := cli.NetworkRemove(ctx, n.ID); err != nil {
				t.Errorf("remove network %s: %v", name, err)
				return
			}
		} else {
			c, err := cli.ContainerCreate(ctx, &container.Config{Image: image, Cmd: []string{"true"}}, nil, nil, nil, name)
			if err != nil {
				t.Errorf("create container %s: %v", name, err)
				return
			}
			err = cli.ContainerStart(ctx, c.ID, container.StartOptions{})
			if rmErr := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err == nil {
				err = rmErr
			}
			if err != nil {
				t.Errorf("run container %s: %v", name, err)
				return
			}
		}
		rounds.Add(1)
	}
}

// The browser keeps loading pages and fetching from them over HTTPS with HTTP/2 (as the master
// serves) while Docker makes and removes networks and containers: as root (the browser in its
// own network namespace) not one load or fetch fails; elsewhere Navigate's retries must do.
func TestBrowserSurvivesNetworkChanges(t *testing.T) {
	cli := Docker(t)
	image := BusyboxImage(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fetch" {
			_, _ = fmt.Fprint(w, r.Proto)
			return
		}
		_, _ = fmt.Fprintf(w, `<!doctype html><title>churn</title><h1 id="h">%s</h1>`, r.Proto)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ctx := Browser(t)
	isolated := os.Geteuid() == 0

	stop := make(chan struct{})
	var rounds atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); churn(t, cli, image, stop, &rounds) }()
	defer func() { close(stop); wg.Wait() }()

	const minLoads, minRounds = 30, 12
	deadline := time.Now().Add(5 * time.Minute)
	loads := 0
	for ; loads < minLoads || rounds.Load() < minRounds; loads++ {
		if time.Now().After(deadline) {
			t.Fatalf("%d loads and %d network changes did not happen within 5 minutes", loads, rounds.Load())
		}
		nav := Navigate(fmt.Sprintf("%s/page?%d", srv.URL, loads))
		if isolated {
			nav = chromedp.Navigate(fmt.Sprintf("%s/page?%d", srv.URL, loads)) // no retries: nothing may fail
		}
		step, cancel := context.WithTimeout(ctx, WaitTimeout)
		err := chromedp.Do(step, nav, chromedp.WaitVisible(chromedp.ID("h")))
		if err == nil && isolated {
			var proto string
			proto, err = chromedp.Run(step, chromedp.Evaluate[string](`fetch("/fetch").then(r => r.text())`, chromedp.EvalAwaitPromise))
			if err == nil && proto != "HTTP/2.0" {
				t.Errorf("fetch over %q, want HTTP/2.0", proto)
			}
		}
		cancel()
		if err != nil {
			t.Fatalf("load %d (after %d network changes): %v", loads, rounds.Load(), err)
		}
	}
	t.Logf("%d loads while Docker made and removed %d networks and containers", loads, rounds.Load())
}
