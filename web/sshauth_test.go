package web_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/store"
)

// Two test keys (public halves only: the master never sees more).
const (
	sshKeyA = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBJV0zuFkeUGxoSarO4CDg0AktQqQeW04BHo7P8pg1gz alice@laptop"
	sshKeyB = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKmFUSrT+m77Q9RbSYpj0x6d/VFLOpuYgrYdYak4OYhR bob@laptop"
)

// The master decides every SSH login a slave asks about: only for a job RUNNING on the asking
// slave, only with a key of the job or its owner, and records the login on the job.
func TestSSHAuthDecidesPerJobAndSlave(t *testing.T) {
	w := newProtoWorld(t)
	ctx := context.Background()
	status, data, _ := w.m.Do(w.alice, "POST", v31+"/jobs", strings.NewReader(`{"name": "p", "request": {"resources": {"cpus": 1, "gpus": 1, "cpuMemoryGb": 1},
	  "docker": {"image": "busybox"}, "extra": {"sshPubKeys": ["`+sshKeyA+`"]}}}`))
	if status != 201 {
		t.Fatalf("submit: %d %s", status, data)
	}
	id := strings.TrimSpace(string(data))
	if _, err := w.m.Store.AssignJobs(ctx, []store.Assignment{{JobUUID: id, Placement: store.Placement{SlaveName: w.name, SlaveInstanceID: "i1", ClusterID: 1,
		Resources: job.StateResources{SlaveName: w.name, GPUIDs: []int{0}, CPUIDs: []int{0}, CPUMemoryGb: 1}}}}); err != nil {
		t.Fatal(err)
	}
	rec, err := w.m.Store.GetJob(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	attempt := rec.Attempt
	ask := func(c *protocol.Client, user, key string) protocol.SSHAuthAnswer {
		t.Helper()
		ans, err := c.SSHAuth(ctx, protocol.SSHAuthRequest{User: user, PublicKey: key, RemoteAddr: "10.0.0.5:51234"})
		if err != nil {
			t.Fatalf("ssh-auth %s: %v", user, err)
		}
		return ans
	}
	// Not running yet (ASSIGNED): refused.
	if ans := ask(w.slave, id, sshKeyA); ans.Allowed {
		t.Fatalf("a login into an ASSIGNED job was allowed: %+v", ans)
	}
	w.advance(t, w.slave, id, attempt, job.StatusRunning)
	for _, user := range []string{id, id[:8], strings.ToUpper(id[:8])} {
		if ans := ask(w.slave, user, sshKeyA); !ans.Allowed || ans.JobUUID != id || ans.UserName != "alice" {
			t.Fatalf("login as %s with the job's key: %+v", user, ans)
		}
	}
	if ans := ask(w.slave, id, sshKeyB); ans.Allowed {
		t.Fatalf("a key of nobody was allowed: %+v", ans)
	}
	for _, user := range []string{id[:7], id[:9], "root", "../../etc"} {
		if ans := ask(w.slave, user, sshKeyA); ans.Allowed {
			t.Fatalf("user %q was allowed: %+v", user, ans)
		}
	}
	// Another slave may not open the job.
	other := w.slaveClient(t, "proto2")
	if ans := ask(other, id, sshKeyA); ans.Allowed {
		t.Fatalf("another slave was allowed into the job: %+v", ans)
	}
	// The login is an event on the job, naming the owner and the client's address.
	found := false
	for _, ev := range w.events(t, id) {
		found = found || strings.HasPrefix(ev.Message, "ssh login by alice from 10.0.0.5")
	}
	if !found {
		t.Fatalf("no login event: %+v", w.events(t, id))
	}
	// Bad input is a 400 naming the field.
	for field, req := range map[string]protocol.SSHAuthRequest{
		"publicKey":  {User: id, PublicKey: "ssh-ed25519 not-base64!"},
		"user":       {User: strings.Repeat("a", 65), PublicKey: sshKeyA},
		"remoteAddr": {User: id, PublicKey: sshKeyA, RemoteAddr: "10.0.0.5\x00"},
	} {
		_, err := w.slave.SSHAuth(ctx, req)
		var se *protocol.StatusError
		if !errors.As(err, &se) || se.Status != 400 || !strings.Contains(se.Message, field) {
			t.Errorf("bad %s: %v, want a 400 naming it", field, err)
		}
	}
	// The job ends: refused.
	if err := w.slave.Done(ctx, protocol.Completion{JobUUID: id, Attempt: attempt, From: job.StatusRunning, To: job.StatusFinished, ExitCode: new(int)}); err != nil {
		t.Fatal(err)
	}
	if ans := ask(w.slave, id, sshKeyA); ans.Allowed {
		t.Fatalf("a login into an ended job was allowed: %+v", ans)
	}
}
