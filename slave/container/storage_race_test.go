package container

import (
	"context"
	"errors"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/slave/storage"
)

// -storage-race-unpinned runs TestStorageSwapRace on the old code path (no pinning), to show
// that it loses: go test ./slave/container -run TestStorageSwapRace -args -storage-race-unpinned
var raceUnpinned = flag.Bool("storage-race-unpinned", false, "TestStorageSwapRace without storage pinning (it must then fail)")

// TestStorageSwapRace: a job of project demo flips its checked folder /project/data with a
// symbolic link (to project other's folder, or to the host's /etc) in a tight loop, atomically
// (renameat2 RENAME_EXCHANGE), while jobs of the same project that mount /project/data start.
// A start may be refused (the folder was a link when checked or opened), but no job may ever
// see anything but demo's own folder.
func TestStorageSwapRace(t *testing.T) {
	e := newEnv(t, nil)
	if *raceUnpinned {
		unpinnedStorage = true
		t.Cleanup(func() { unpinnedStorage = false })
	}
	demo := strings.ReplaceAll(e.cfg.Storage["/project"], storage.ProjectPlaceholder, "demo")
	other := strings.ReplaceAll(e.cfg.Storage["/project"], storage.ProjectPlaceholder, "other")
	data := filepath.Join(demo, "data")
	for _, d := range []string{data, other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(data, "MARKER"), []byte("demo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "MARKER"), []byte("OTHER PROJECT\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	alts := []string{filepath.Join(demo, "to-other"), filepath.Join(demo, "to-etc")}
	for i, target := range []string{other, "/etc"} {
		if err := os.Symlink(target, alts[i]); err != nil {
			t.Fatal(err)
		}
	}

	// The attacker: exchange data with a link and back, as fast as it can.
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	var swaps atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			alt := alts[(i/64)%2]
			// A link for up to 0.5 ms, a folder for up to 2 ms: checks pass often enough
			// for jobs to start, and a start in flight meets a link often.
			for _, hold := range []time.Duration{time.Duration(rng.Int64N(500_000)), time.Duration(rng.Int64N(2_000_000))} {
				if err := unix.Renameat2(unix.AT_FDCWD, data, unix.AT_FDCWD, alt, unix.RENAME_EXCHANGE); err != nil {
					t.Errorf("swap: %v", err)
					return
				}
				swaps.Add(1)
				for until := time.Now().Add(hold); time.Now().Before(until); {
				}
			}
		}
	}()
	var once sync.Once
	stopRacer := func() { once.Do(func() { close(stop); wg.Wait() }) }
	defer stopRacer()

	const wantStarted, maxAttempts = 30, 1500 // most attempts are refused at once, before any container
	var attempts, refused, started, sawOther int
	var ids []string
	reasons := map[string]int{}
	for attempts < maxAttempts && started < wantStarted {
		attempts++
		a := e.assignment("sh", "-c", "cat /data/MARKER 2>&1 || ls /data | head -3; sleep 1")
		a.Job.Request.Docker.Storage = []job.Storage{{HostPath: "/project/data", ContainerPath: "/data"}}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		s, err := e.rt.Start(ctx, a)
		cancel()
		var se *StartError
		switch {
		case errors.As(err, &se) && strings.Contains(se.Reason, "in the container"):
			// Verify caught a mount that is not the checked folder: pinning did not hold.
			t.Errorf("start %d: %v", attempts, err)
		case errors.As(err, &se) && strings.HasPrefix(se.Reason, "storage"):
			refused++ // checked or opened while it was a link
			reason := se.Reason
			if i := strings.Index(reason, ": "); i > 0 && len(reason) > 60 {
				reason = reason[:60]
			}
			reasons[reason]++
			continue
		case err != nil:
			t.Fatalf("start %d: %v", attempts, err)
		}
		started++
		ids = append(ids, s.ContainerID)
	}
	stopRacer()
	var seen []string
	for _, id := range ids {
		e.wait(id)
		if out := e.logs(id); out != "demo\n" {
			sawOther++
			seen = append(seen, strings.TrimSpace(out))
		}
	}
	t.Logf("storage swap race (pinned: %v): %d attempts, %d swaps, %d jobs started, %d refused (a link at check or open), %d saw another folder %q",
		!*raceUnpinned, attempts, swaps.Load(), started, refused, sawOther, seen)
	t.Logf("refusals: %v", reasons)
	if sawOther > 0 {
		t.Fatalf("%d of %d jobs saw another folder than their project's: %q", sawOther, started, seen)
	}
	if started < wantStarted {
		t.Fatalf("only %d jobs started in %d attempts: the race test did not test enough starts", started, attempts)
	}
	if swaps.Load() < int64(attempts) {
		t.Fatalf("only %d swaps in %d attempts: the attacker did not race", swaps.Load(), attempts)
	}
	// Nothing of the pins stays behind.
	if _, err := os.Stat(filepath.Join(e.cfg.ScratchRoot, "pins")); err == nil {
		entries, _ := os.ReadDir(filepath.Join(e.cfg.ScratchRoot, "pins"))
		if len(entries) > 0 {
			t.Errorf("%d staging folders left in %s", len(entries), filepath.Join(e.cfg.ScratchRoot, "pins"))
		}
	}
}
