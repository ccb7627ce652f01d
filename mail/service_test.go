package mail_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/mail"
	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/store"
)

func newStore(t *testing.T) *store.Store {
	st, _ := newStoreURL(t)
	return st
}

func newStoreURL(t *testing.T) (*store.Store, string) {
	t.Helper()
	ctx := context.Background()
	url := testenv.PostgresURL(t)
	st, err := store.Open(ctx, url)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return st, url
}

// submit stores a QUEUED job of alice in project vision with the given extra (its queued
// event is then in the mail queue when extra names a list).
func submit(t *testing.T, st *store.Store, extra job.Extra) string {
	t.Helper()
	ctx := context.Background()
	u, err := st.UpsertUser(ctx, "urn:publicid:IDN+test+user+alice", "alice", "alice@example.org", false)
	if err != nil {
		t.Fatal(err)
	}
	p, err := st.GetProjectByName(ctx, "vision")
	if errors.Is(err, store.ErrNotFound) {
		p, err = st.CreateProject(ctx, "urn:publicid:IDN+test+project+vision", "vision", "", 0)
	}
	if err != nil {
		t.Fatal(err)
	}
	j, err := job.Parse([]byte(`{"name": "train", "request": {"resources": {"clusterId": 1, "gpus": 1, "cpus": 1, "cpuMemoryGb": 1},
 "docker": {"image": "debian:stable", "command": "true"}}}`), job.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	j.UUID = uuid.NewString()
	j.Owner = job.Owner{UserURN: u.URN, UserEmail: u.Email, ProjectURN: p.URN}
	j.Request.Extra = extra
	j.State.Status = job.StatusQueued
	if err := st.CreateJob(ctx, j, u.ID, p.ID, "submitted"); err != nil {
		t.Fatal(err)
	}
	return j.UUID
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func service(st *store.Store, srv *testenv.SMTPServer, lease time.Duration) *mail.Service {
	return mail.New(st, mail.Config{SMTP: mail.SMTP{Host: srv.Host, Port: srv.Port, TLS: mail.TLSNone, From: "gpulab@example.org"},
		PublicURL: "https://gpulab.test", Lease: lease, Retry: store.MailRetry{Base: 100 * time.Millisecond, Max: 500 * time.Millisecond, MaxAttempts: 1000}},
		quiet())
}

// waitUntil polls cond until it holds (two minutes at most).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within 2 minutes", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// countByMessageID fails the test when a mail arrived twice, and returns how many arrived.
func countByMessageID(t *testing.T, srv *testenv.SMTPServer) int {
	t.Helper()
	seen := map[string]string{}
	for _, m := range srv.Mails(t) {
		id := m.Header.Get("Message-Id")
		if prev, ok := seen[id]; ok {
			t.Fatalf("mail %s arrived twice: %s and %s", id, prev, m.File)
		}
		seen[id] = m.File
	}
	return len(seen)
}

// An SMTP outage: the mails wait in the outbox with their attempts and last error, and all
// arrive once the server is back, none twice.
func TestOutboxSurvivesSMTPOutage(t *testing.T) {
	st := newStore(t)
	srv := testenv.StartSMTP(t)
	ctx := context.Background()
	srv.Stop(t)
	const jobs = 5
	for range jobs {
		submit(t, st, job.Extra{EmailOnQueue: []string{"alice@example.org", "bob@example.org"}})
	}
	s := service(st, srv, time.Minute)
	waitUntil(t, "failed attempts recorded", func() bool {
		if err := s.Round(ctx); err != nil {
			t.Fatal(err)
		}
		ms, err := st.ListMails(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		failed := 0
		for _, m := range ms {
			if m.SentAt == nil && m.Attempts >= 2 && m.LastError != "" {
				failed++
			}
		}
		return len(ms) == 2*jobs && failed == 2*jobs
	})
	if n, err := st.CountPendingMails(ctx); err != nil || n != 2*jobs {
		t.Fatalf("pending mails during the outage: %d, %v", n, err)
	}
	ms, _ := st.ListMails(ctx, 1)
	t.Logf("during the outage: attempts %d, last error %q", ms[0].Attempts, ms[0].LastError)
	srv.Start(t)
	waitUntil(t, "all mails sent", func() bool {
		if err := s.Round(ctx); err != nil {
			t.Fatal(err)
		}
		n, err := st.CountPendingMails(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	if got := countByMessageID(t, srv); got != 2*jobs {
		t.Fatalf("%d mails arrived, want %d", got, 2*jobs)
	}
	for _, m := range srv.Mails(t) {
		if len(m.To) != 1 || (m.To[0] != "alice@example.org" && m.To[0] != "bob@example.org") {
			t.Errorf("mail to %v", m.To)
		}
	}
}

// Several senders on one database, each with its own connection pool as separate masters
// have, never send a mail twice, and together send them all.
func TestConcurrentSendersSendEachMailOnce(t *testing.T) {
	st, url := newStoreURL(t)
	srv := testenv.StartSMTP(t)
	ctx := context.Background()
	const jobs, senders = 60, 4
	for range jobs {
		submit(t, st, job.Extra{EmailOnQueue: []string{"alice@example.org", "carol@example.org"}})
	}
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for i := range senders {
		other, err := store.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = other.Close() })
		s := service(other, srv, time.Minute)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				if err := s.Round(ctx); err != nil {
					errs <- fmt.Errorf("sender %d: %w", i, err)
					return
				}
				n, err := other.CountPendingMails(ctx)
				all, err2 := other.ListMails(ctx, 1000)
				if err == nil && err2 == nil && n == 0 && len(all) == 2*jobs {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	waitUntil(t, "all mails sent", func() bool {
		n, err := st.CountPendingMails(ctx)
		return err == nil && n == 0
	})
	if got := countByMessageID(t, srv); got != 2*jobs {
		t.Fatalf("%d mails arrived, want %d", got, 2*jobs)
	}
	t.Logf("%d senders sent %d mails, each once", senders, 2*jobs)
}

// A claim whose sender died is taken over once its lease ran out on the database clock, and
// the dead sender can no longer mark it.
func TestDeadSendersClaimIsTakenOverAfterItsLease(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	submit(t, st, job.Extra{EmailOnQueue: []string{"alice@example.org"}})
	if _, err := st.DispatchMailEvents(ctx, 10, func(evs []store.MailEvent) []store.OutMail { return mail.Compose(evs, "") }); err != nil {
		t.Fatal(err)
	}
	dead := uuid.NewString()
	got, err := st.ClaimMails(ctx, dead, 2*time.Second, 10)
	if err != nil || len(got) != 1 {
		t.Fatalf("first claim: %v, %v", got, err)
	}
	if again, err := st.ClaimMails(ctx, uuid.NewString(), time.Minute, 10); err != nil || len(again) != 0 {
		t.Fatalf("a held mail was claimed again: %v, %v", again, err)
	}
	live := uuid.NewString()
	waitUntil(t, "the lease running out", func() bool {
		again, err := st.ClaimMails(ctx, live, time.Minute, 10)
		if err != nil {
			t.Fatal(err)
		}
		return len(again) == 1 && again[0].Attempts == 2
	})
	if ok, err := st.MarkMailSent(ctx, got[0].ID, dead); err != nil || ok {
		t.Fatalf("the dead sender marked the mail sent: %v, %v", ok, err)
	}
	if ok, err := st.MarkMailSent(ctx, got[0].ID, live); err != nil || !ok {
		t.Fatalf("the live sender could not mark the mail sent: %v, %v", ok, err)
	}
}

// A user who turned a category off gets no mail of it; the other recipients do.
func TestProfileOptOut(t *testing.T) {
	st := newStore(t)
	srv := testenv.StartSMTP(t)
	ctx := context.Background()
	id := submit(t, st, job.Extra{EmailOnEnd: []string{"alice@example.org", "dave@example.org"}})
	alice, err := st.GetUserByName(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetMailOff(ctx, alice.ID, []string{string(mail.End)}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.TransitionJob(ctx, id, []job.Status{job.StatusQueued}, job.StatusCancelled, store.Event{Actor: "owner", Message: "cancelled by the test"}); err != nil {
		t.Fatal(err)
	}
	s := service(st, srv, time.Minute)
	waitUntil(t, "the end mail sent", func() bool {
		if err := s.Round(ctx); err != nil {
			t.Fatal(err)
		}
		return len(srv.Mails(t)) >= 1
	})
	ms := srv.Mails(t)
	if len(ms) != 1 || ms[0].To[0] != "dave@example.org" {
		t.Fatalf("mails: %+v", ms)
	}
}

// Mails go over STARTTLS or TLS with a login, verified against the server's CA; a wrong
// password, or a server without STARTTLS when it is required, sends nothing and says why.
func TestSendsOverTLSWithLogin(t *testing.T) {
	dir := t.TempDir()
	ca, _, err := pki.LoadOrCreateCA(filepath.Join(dir, "ca"), "mail test CA")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.ServerCert([]string{"127.0.0.1", "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, pwFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "pw")
	for f, data := range map[string][]byte{
		certFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}),
		keyFile:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}),
		pwFile:   []byte("s3cret\n"),
	} {
		if err := os.WriteFile(f, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	send := func(t *testing.T, srv *testenv.SMTPServer, mode, password string) (store.OutMail, []testenv.Mail) {
		t.Helper()
		st := newStore(t)
		submit(t, st, job.Extra{EmailOnQueue: []string{"alice@example.org"}})
		s := mail.New(st, mail.Config{SMTP: mail.SMTP{Host: srv.Host, Port: srv.Port, TLS: mode, User: "gpulab", Password: password,
			From: "gpulab@example.org", TLSConfig: &tls.Config{RootCAs: ca.Pool()}}, Retry: store.MailRetry{Base: time.Hour, Max: time.Hour, MaxAttempts: 10}}, quiet())
		if err := s.Round(ctx); err != nil {
			t.Fatal(err)
		}
		ms, err := st.ListMails(ctx, 1)
		if err != nil || len(ms) != 1 {
			t.Fatalf("outbox: %v, %v", ms, err)
		}
		return ms[0], srv.Mails(t)
	}
	for _, mode := range []string{mail.TLSStartTLS, mail.TLSImplicit} {
		t.Run(mode, func(t *testing.T) {
			srv := testenv.StartSMTP(t, "--tls", mode, "--tls-cert", certFile, "--tls-key", keyFile, "--auth-user", "gpulab", "--auth-password-file", pwFile)
			m, got := send(t, srv, mode, "s3cret")
			if m.SentAt == nil || len(got) != 1 || got[0].Header.Get("X-Catcher-TLS") != "yes" || got[0].Header.Get("X-Catcher-Login") != "gpulab" {
				t.Fatalf("sent %v (%s), received %+v", m.SentAt, m.LastError, got)
			}
			m, got = send(t, srv, mode, "wrong")
			if m.SentAt != nil || m.LastError == "" || len(got) != 1 {
				t.Errorf("with a wrong password: sent %v, error %q, %d received", m.SentAt, m.LastError, len(got))
			}
			t.Logf("wrong password: %s", m.LastError)
		})
	}
	t.Run("starttls required", func(t *testing.T) {
		srv := testenv.StartSMTP(t)
		m, got := send(t, srv, mail.TLSStartTLS, "s3cret")
		if m.SentAt != nil || len(got) != 0 || m.LastError == "" {
			t.Errorf("sent without STARTTLS: %v, %q, %d received", m.SentAt, m.LastError, len(got))
		}
		t.Logf("no STARTTLS: %s", m.LastError)
	})
}

// Sent mails leave the outbox after Keep; pending ones stay.
func TestOldMailsAreDeleted(t *testing.T) {
	st := newStore(t)
	srv := testenv.StartSMTP(t)
	ctx := context.Background()
	submit(t, st, job.Extra{EmailOnQueue: []string{"alice@example.org"}})
	s := service(st, srv, time.Minute)
	if err := s.Round(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Stop(t)
	submit(t, st, job.Extra{EmailOnQueue: []string{"bob@example.org"}})
	if err := s.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DB().Exec(`UPDATE mails SET sent_at = now() - interval '31 days' WHERE sent_at IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
	if err := s.Round(ctx); err != nil {
		t.Fatal(err)
	}
	ms, err := st.ListMails(ctx, 10)
	if err != nil || len(ms) != 1 || ms[0].Recipient != "bob@example.org" || ms[0].SentAt != nil {
		t.Fatalf("outbox after the clean-up: %+v, %v", ms, err)
	}
}
