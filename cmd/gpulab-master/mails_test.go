package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/mail"
	"github.com/opengpulab/gpulab/store"
)

// mail-list shows the outbox with the attempts and last error of mails that wait.
func TestMailList(t *testing.T) {
	db, data := testenv.PostgresURL(t), t.TempDir()
	for _, args := range [][]string{{"project", "add", "vision"}, {"member", "add", "vision", "alice", "--email", "alice@example.org"}} {
		if code, out, errOut := master(t, db, data, args...); code != 0 {
			t.Fatalf("%v: %d %s %s", args, code, out, errOut)
		}
	}
	ctx := context.Background()
	st, err := store.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	u, err := st.GetUserByName(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	p, err := st.GetProjectByName(ctx, "vision")
	if err != nil {
		t.Fatal(err)
	}
	j, err := job.Parse([]byte(`{"name": "train", "request": {"resources": {"clusterId": 1, "gpus": 0, "cpus": 1, "cpuMemoryGb": 1},
 "docker": {"image": "debian:stable", "command": "true"}, "extra": {"emailOnQueue": ["ops@example.org"]}}}`), job.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	j.UUID, j.State.Status = uuid.NewString(), job.StatusQueued
	if err := st.CreateJob(ctx, j, u.ID, p.ID, "submitted"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DispatchMailEvents(ctx, 10, func(evs []store.MailEvent) []store.OutMail { return mail.Compose(evs, "") }); err != nil {
		t.Fatal(err)
	}
	token := uuid.NewString()
	ms, err := st.ClaimMails(ctx, token, time.Minute, 10)
	if err != nil || len(ms) != 1 {
		t.Fatalf("claim: %v %v", ms, err)
	}
	if err := st.MarkMailFailed(ctx, ms[0].ID, token, "dial tcp: connection refused", store.MailRetry{Base: time.Hour, Max: time.Hour, MaxAttempts: 5}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := master(t, db, data, "mail-list", "--pending")
	if code != 0 {
		t.Fatalf("mail-list: %d %s", code, errOut)
	}
	for _, want := range []string{"ops@example.org", "queue", j.UUID[:8], "pending", "connection refused"} {
		if !strings.Contains(out, want) {
			t.Errorf("mail-list lacks %q:\n%s", want, out)
		}
	}
	if code, _, errOut := master(t, db, data, "mail-list", "--limit", "0"); code != 2 || !strings.Contains(errOut, "--limit") {
		t.Errorf("--limit 0: %d %s", code, errOut)
	}
}
