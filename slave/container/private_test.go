package container

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/opengpulab/gpulab/internal/testenv"
)

// uniqueImage is the test image with a label of this test (an image id of its own), removed
// when the test ends.
func uniqueImage(t *testing.T, e *env) string {
	t.Helper()
	ctx := context.Background()
	c, err := e.cli.ContainerCreate(ctx, &container.Config{Image: e.image, Cmd: []string{"true"}}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}) }()
	ref := "gpulab-test-private:" + strings.ToLower(rand.Text())
	if _, err := e.cli.ContainerCommit(ctx, c.ID, container.CommitOptions{Reference: ref,
		Config: &container.Config{Cmd: []string{"/bin/sh"}, Env: []string{"PATH=/bin"}, Labels: map[string]string{"test": ref}}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testenv.UntagImage(t, e.cli, ref) })
	return ref
}

func TestPrivateImageNeedsCredentials(t *testing.T) {
	t.Parallel()
	record := filepath.Join(t.TempDir(), "private-images.json")
	e := newEnv(t, func(c *Config) { c.PrivateImages = record })
	reg := testenv.StartRegistry(t, true)
	src := uniqueImage(t, e)
	ref := reg.Push(t, e.cli, src, "private/busybox")
	// Now only in the registry: the engine gets it back by a pull, under the private name only.
	testenv.UntagImage(t, e.cli, src)
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

	// Nor by its id, whole or short.
	info, err := e.cli.ImageInspect(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	refused(e.rt, info.ID, private)
	refused(e.rt, strings.TrimPrefix(info.ID, "sha256:")[:12], private)
	// The private image shares its layers with the public test image: that one still runs.
	started(e.rt, e.image)

	// A restarted slave reads the record again.
	restarted := New(e.cli, e.cfg, nil)
	refused(restarted, ref, private)

	// Without the record (a slave that never saw the pull with credentials) the job without
	// credentials runs the image: the hole the record closes.
	cfg := e.cfg
	cfg.PrivateImages = filepath.Join(t.TempDir(), "other.json")
	started(New(e.cli, cfg, nil), ref)
}

// A public image pulled with credentials stays public: naming an image with a password (or a
// failed pull with credentials) does not make it private for everybody else.
func TestPublicImageStaysPublic(t *testing.T) {
	t.Parallel()
	record := filepath.Join(t.TempDir(), "private-images.json")
	e := newEnv(t, func(c *Config) { c.PrivateImages = record })
	reg := testenv.StartRegistry(t, false)
	ref := reg.Push(t, e.cli, e.image, "public/busybox")
	t.Cleanup(func() { testenv.UntagImage(t, e.cli, ref) })
	run := func(image string) error {
		a := e.assignment("true")
		a.Job.Request.Docker.Image = image
		s, err := e.rt.Start(context.Background(), a)
		if err == nil {
			e.wait(s.ContainerID)
		}
		return err
	}
	if err := run("bob:any-password@" + ref); err != nil {
		t.Fatalf("with credentials: %v", err)
	}
	if err := run(ref); err != nil {
		t.Errorf("without credentials, after a pull with credentials: %v", err)
	}
	// A pull with credentials that fails (no registry there) records nothing either.
	unreachable := "127.0.0.1:1/some/image:1"
	if err := run("bob:pw@" + unreachable); err == nil {
		t.Fatal("a pull from no registry succeeded")
	}
	if b, err := os.ReadFile(record); err == nil && (strings.Contains(string(b), "public/busybox") || strings.Contains(string(b), "some/image")) {
		t.Errorf("recorded private: %s", b)
	}
}
