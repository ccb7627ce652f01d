package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/mail"
	"github.com/opengpulab/gpulab/store"
)

// mailConfig is a mail service sending to srv, quickly (tests wait on conditions).
func mailConfig(srv *testenv.SMTPServer) *mail.Config {
	return &mail.Config{SMTP: mail.SMTP{Host: srv.Host, Port: srv.Port, TLS: mail.TLSNone, From: "GPULab <gpulab@example.org>"},
		ReminderAt: 0.8, Interval: 200 * time.Millisecond, Lease: 20 * time.Second,
		Retry: store.MailRetry{Base: 200 * time.Millisecond, Max: time.Second, MaxAttempts: 1000}}
}

// waitMail waits for a mail to rcpt whose subject contains all of words, and returns it.
func waitMail(t *testing.T, srv *testenv.SMTPServer, rcpt string, words ...string) testenv.Mail {
	t.Helper()
	var found testenv.Mail
	waitUntil(t, fmt.Sprintf("a mail to %s about %q", rcpt, words), func() bool {
		for _, m := range srv.Mails(t) {
			ok := slices.Contains(m.To, rcpt)
			for _, w := range words {
				ok = ok && strings.Contains(m.Subject, w)
			}
			if ok {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

// A real job's life on a real slave mails what its emailOn* lists ask for, and its owner the
// reminder and the idle-GPU warning; each mail names the job, its state, the reason and the
// project, and links to the job page.
func TestMailsOfAJobsLife(t *testing.T) {
	srv := testenv.StartSMTP(t)
	e := newEnvWith(t, testmaster.Options{Mail: mailConfig(srv)})
	e.startSlave(slaveOpts{name: "mail", cluster: 1})
	ctx := context.Background()
	const ops = "ops@example.org"
	lists := func(r map[string]any) {
		r["scheduling"] = map[string]any{"restartable": true, "maxDuration": "1 day"}
	}
	body := e.jobFile("mailed", haltScript, lists)
	body = strings.Replace(body, `"request":{`, `"request":{"extra":{"emailOnQueue":["`+ops+`"],"emailOnRun":["`+ops+`"],"emailOnEnd":["`+ops+
		`","alice@example.org"],"emailOnHalt":["`+ops+`"],"emailOnRestart":["`+ops+`"]},`, 1)
	id := e.submit(body)
	short := id[:8]

	queued := waitMail(t, srv, ops, "mailed", short, "queued")
	for _, want := range []string{"State:   QUEUED", "Project: vision", e.m.URL + "/jobs/" + id, "emailOnQueue"} {
		if !strings.Contains(queued.Body, want) {
			t.Errorf("the queued mail lacks %q:\n%s", want, queued.Body)
		}
	}
	e.waitFor(id, job.StatusRunning)
	waitMail(t, srv, ops, short, "is running")

	// Past 80 % of its maxDuration (back-dated: a day is too long for a test): one reminder.
	if _, err := e.m.Store.DB().Exec(`UPDATE jobs SET event_times = jsonb_set(event_times, '{RUNNING}', to_jsonb(now() - interval '20 hours')) WHERE uuid = $1`, id); err != nil {
		t.Fatal(err)
	}
	reminder := waitMail(t, srv, "alice@example.org", short, "running long")
	if !strings.Contains(reminder.Body, "maxDuration") || !strings.Contains(reminder.Body, "as the job's owner") {
		t.Errorf("reminder:\n%s", reminder.Body)
	}
	// The idle-GPU detection adds this event; its owner is warned.
	if err := e.m.Store.AddJobEvent(ctx, store.Event{JobUUID: id, Kind: mail.IdleGPUEvent, Actor: "master",
		Message: "GPU 0 averaged 2 % over the last hour"}); err != nil {
		t.Fatal(err)
	}
	idle := waitMail(t, srv, "alice@example.org", short, "not using its GPUs")
	if !strings.Contains(idle.Body, "Reason:  GPU 0 averaged 2 % over the last hour") {
		t.Errorf("idle warning:\n%s", idle.Body)
	}

	e.put(id, "MUSTHALT")
	e.waitFor(id, job.StatusHalted)
	waitMail(t, srv, ops, short, "was halted")
	restart := e.waitRestartOf(id)
	restarted := waitMail(t, srv, ops, restart[:8], "was restarted")
	if !strings.Contains(restarted.Body, "restart 1 of job "+id) {
		t.Errorf("restart mail:\n%s", restarted.Body)
	}
	e.waitFor(restart, job.StatusRunning)
	waitMail(t, srv, ops, restart[:8], "is running")
	e.put(restart, "CANCELLED")
	e.waitFor(restart, job.StatusCancelled)
	ended := waitMail(t, srv, "alice@example.org", restart[:8], "ended CANCELLED")
	if !strings.Contains(ended.Body, "emailOnEnd") {
		t.Errorf("end mail:\n%s", ended.Body)
	}
	waitMail(t, srv, ops, restart[:8], "ended CANCELLED")

	fin := e.submit(strings.Replace(e.jobFile("short", "echo done", nil), `"request":{`, `"request":{"extra":{"emailOnEnd":["`+ops+`"]},`, 1))
	e.waitFor(fin, job.StatusFinished)
	waitMail(t, srv, ops, fin[:8], "ended FINISHED")

	// Wait for the outbox to drain, then check that nothing came twice and nothing unasked came.
	waitUntil(t, "the outbox empty", func() bool {
		n, err := e.m.Store.CountPendingMails(ctx)
		return err == nil && n == 0
	})
	counts := map[string]int{}
	for _, m := range srv.Mails(t) {
		counts[strings.Join(m.To, ",")+" "+m.Subject]++
	}
	for k, n := range counts {
		if n != 1 {
			t.Errorf("%d mails %s", n, k)
		}
	}
	// The halted job is not "queued" again on its restart, nor the reminder sent twice.
	// ops: queued, running, halted, then restarted, running, ended; alice: reminder, idle,
	// ended; ops: the short job ended.
	want := 10
	if len(counts) != want {
		t.Errorf("%d distinct mails, want %d: %v", len(counts), want, counts)
	}
	t.Logf("%d mails received: %v", len(counts), counts)
}

// The outbox survives an SMTP outage and a master restart: a master stops while its mails wait
// for the SMTP server (one of them claimed by a master that died), and the master started
// next sends them all once the server is back, each once.
func TestOutboxSurvivesOutageAndMasterRestart(t *testing.T) {
	srv := testenv.StartSMTP(t)
	dbURL := testenv.PostgresURL(t)
	ctx := context.Background()
	srv.Stop(t)
	const jobs = 3
	var ids []string
	t.Run("first master", func(t *testing.T) {
		m := testmaster.Start(t, testmaster.Options{DatabaseURL: dbURL, Mail: mailConfig(srv)})
		alice := m.AddUser("alice", false, "", "vision")
		for i := range jobs {
			body := fmt.Sprintf(`{"name": "wait%d", "request": {"resources": {"cpus": 1, "gpus": 0, "cpuMemoryGb": 1},
 "docker": {"image": "busybox", "command": "true"}, "extra": {"emailOnQueue": ["alice@example.org", "ops@example.org"]}}}`, i)
			status, data, _ := m.Do(alice, "POST", v31+"/jobs", strings.NewReader(body))
			if status != 201 {
				t.Fatalf("submit: %d %s", status, data)
			}
			ids = append(ids, strings.TrimSpace(string(data)))
		}
		waitUntil(t, "failed attempts during the outage", func() bool {
			ms, err := m.Store.ListMails(ctx, 100)
			if err != nil {
				t.Fatal(err)
			}
			failed := 0
			for _, x := range ms {
				if x.Attempts >= 1 && x.LastError != "" && x.SentAt == nil {
					failed++
				}
			}
			return failed == 2*jobs
		})
		// A master that dies holding claims: they come back after the lease.
		waitUntil(t, "a claim by a master that dies", func() bool {
			got, err := m.Store.ClaimMails(ctx, uuid.NewString(), 3*time.Second, 2)
			if err != nil {
				t.Fatal(err)
			}
			return len(got) > 0
		})
	})
	srv.Start(t)
	m := testmaster.Start(t, testmaster.Options{DatabaseURL: dbURL, Mail: mailConfig(srv)})
	waitUntil(t, "the outbox empty", func() bool {
		n, err := m.Store.CountPendingMails(ctx)
		return err == nil && n == 0
	})
	seen := map[string]bool{}
	for _, x := range srv.Mails(t) {
		id := x.Header.Get("Message-Id")
		if seen[id] {
			t.Errorf("mail %s arrived twice", id)
		}
		seen[id] = true
	}
	if len(seen) != 2*jobs {
		t.Errorf("%d mails arrived, want %d", len(seen), 2*jobs)
	}
	for _, id := range ids {
		waitMail(t, srv, "ops@example.org", id[:8], "queued")
	}
	ms, _ := m.Store.ListMails(ctx, 100)
	for _, x := range ms {
		t.Logf("mail %d to %s: %d attempts, sent %v", x.ID, x.Recipient, x.Attempts, x.SentAt != nil)
	}
}
