package container

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/internal/testenv"
)

func TestPrivateImageNeedsCredentials(t *testing.T) {
	t.Parallel()
	record := filepath.Join(t.TempDir(), "private-images.json")
	e := newEnv(t, func(c *Config) { c.PrivateImages = record })
	reg := testenv.StartRegistry(t)
	ref := reg.PushPrivate(t, e.cli, e.image, "busybox")
	t.Cleanup(func() { testenv.UntagImage(t, e.cli, ref) })
	withCreds := reg.User + ":" + reg.Password + "@" + ref

	refused := func(rt *Runtime, image, want string) {
		t.Helper()
		a := e.assignment("true")
		a.Job.Request.Docker.Image = image
		_, err := rt.Start(context.Background(), a)
		var se *StartError
		if !errors.As(err, &se) || !strings.Contains(se.Reason, want) {
			t.Errorf("Start(%s) = %v, want a refusal with %q", ref, err, want)
		} else if strings.Contains(se.Reason, reg.Password) {
			t.Errorf("the reason shows the password: %q", se.Reason)
		}
		e.assertGone(ContainerName(a.Job.UUID))
	}
	started := func(rt *Runtime, image string) {
		t.Helper()
		a := e.assignment("true")
		a.Job.Request.Docker.Image = image
		s, err := rt.Start(context.Background(), a)
		if err != nil {
			t.Fatalf("Start(%s): %v", ref, err)
		}
		if code := e.wait(s.ContainerID); code != 0 {
			t.Errorf("exit %d", code)
		}
	}

	// Without credentials the registry refuses the pull.
	refused(e.rt, ref, "pull "+ref)
	// With them the job runs, and the image is recorded private.
	started(e.rt, withCreds)
	if b, err := os.ReadFile(record); err != nil || !strings.Contains(string(b), reg.Addr+"/private/busybox") {
		t.Errorf("record %s: %s, %v", record, b, err)
	}
	// The engine has the image now, but a job without credentials does not get it...
	const private = "is private on this slave (it was pulled with registry credentials)"
	refused(e.rt, ref, private)
	// ...nor under another tag of the repository.
	refused(e.rt, strings.TrimSuffix(ref, ":"+testenv.Suffix())+":other", private)
	// Credentials are checked by the registry at every start, also with the image present:
	// wrong ones are refused.
	refused(e.rt, reg.User+":wrong-password@"+ref, "pull "+ref)
	started(e.rt, withCreds)

	// A restarted slave reads the record again.
	restarted := New(e.cli, e.cfg, nil)
	refused(restarted, ref, private)

	// Without the record (a slave that never saw the pull with credentials) the job without
	// credentials runs the image: the hole the record closes.
	cfg := e.cfg
	cfg.PrivateImages = filepath.Join(t.TempDir(), "other.json")
	started(New(e.cli, cfg, nil), ref)
}
