package mail

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/google/uuid"
	gomail "github.com/wneessen/go-mail"

	"github.com/opengpulab/gpulab/store"
)

// TLS modes of the SMTP connection.
const (
	TLSNone     = "none"     // plain SMTP (a local relay or catcher)
	TLSStartTLS = "starttls" // STARTTLS is required (submission, port 587)
	TLSImplicit = "tls"      // TLS from the first byte (SMTPS, port 465)
)

// SMTP is the SMTP server mails go through.
type SMTP struct {
	Host string
	Port int
	// TLS is TLSNone, TLSStartTLS or TLSImplicit.
	TLS string
	// User and Password authenticate (no authentication when User is empty).
	User, Password string
	// From is the sender address of every mail.
	From string
	// TLSConfig overrides the TLS client configuration (tests: a private CA).
	TLSConfig *tls.Config
}

// Config configures the Service.
type Config struct {
	SMTP SMTP
	// PublicURL is the portal's root (https://host:port) for links to job pages.
	PublicURL string
	// ReminderAt is the share (0 to 1) of its maxDuration past which a running job's owner gets
	// one reminder; 0: no reminders.
	ReminderAt float64
	// Interval is how often the service looks for work (default 5 s).
	Interval time.Duration
	// Lease is how long a claimed mail stays with its sender before another may take it over
	// (default 2 minutes); a send must end within half of it.
	Lease time.Duration
	// Retry is the backoff of failed sends (default 30 s doubling up to 30 minutes, given up
	// after 50 attempts: about a day).
	Retry store.MailRetry
	// Keep is how long sent and given-up mails stay in the outbox (default 30 days).
	Keep time.Duration
}

func (c Config) withDefaults() Config {
	if c.Interval <= 0 {
		c.Interval = 5 * time.Second
	}
	if c.Lease <= 0 {
		c.Lease = 2 * time.Minute
	}
	if c.Retry.Base <= 0 {
		c.Retry.Base = 30 * time.Second
	}
	if c.Retry.Max <= 0 {
		c.Retry.Max = 30 * time.Minute
	}
	if c.Retry.MaxAttempts <= 0 {
		c.Retry.MaxAttempts = 50
	}
	if c.Keep <= 0 {
		c.Keep = 30 * 24 * time.Hour
	}
	return c
}

// Validate names the setting that is wrong.
func (s SMTP) Validate() error {
	switch {
	case s.Host == "":
		return errors.New("--smtp-host is empty")
	case s.TLS != TLSNone && s.TLS != TLSStartTLS && s.TLS != TLSImplicit:
		return fmt.Errorf("--smtp-tls %q: must be none, starttls or tls", s.TLS)
	case s.Port < 1 || s.Port > 65535:
		return fmt.Errorf("--smtp-port %d: must be from 1 to 65535", s.Port)
	case s.From == "":
		return errors.New("--smtp-from is empty: mails need a sender address")
	case s.User != "" && s.Password == "":
		return errors.New("--smtp-user needs --smtp-password-file")
	}
	if err := gomail.NewMsg().From(s.From); err != nil {
		return fmt.Errorf("--smtp-from %q: %w", s.From, err)
	}
	return nil
}

// Service turns queued job events into mails and sends them.
type Service struct {
	st   *store.Store
	cfg  Config
	log  *slog.Logger
	host string // for Message-IDs
}

// New makes the mail service of a master.
func New(st *store.Store, cfg Config, log *slog.Logger) *Service {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "gpulab"
	}
	return &Service{st: st, cfg: cfg.withDefaults(), log: log, host: host}
}

// Run works until ctx ends: reminders, then queued events into the outbox, then the outbox out,
// every Interval. Database and SMTP failures are logged and retried at the next round.
func (s *Service) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		if err := s.Round(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("mail round", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Round does one round of work; tests call it to run the service step by step.
func (s *Service) Round(ctx context.Context) error {
	if s.cfg.ReminderAt > 0 {
		if n, err := s.st.AddReminders(ctx, s.cfg.ReminderAt); err != nil {
			return err
		} else if n > 0 {
			s.log.Info("long-running reminders", "jobs", n)
		}
	}
	for {
		n, err := s.st.DispatchMailEvents(ctx, 100, func(evs []store.MailEvent) []store.OutMail { return Compose(evs, s.cfg.PublicURL) })
		if err != nil {
			return err
		}
		if n < 100 {
			break
		}
	}
	if err := s.sendDue(ctx); err != nil {
		return err
	}
	_, err := s.st.DeleteOldMails(ctx, s.cfg.Keep, 1000)
	return err
}

// sendDue claims due mails and sends them on one SMTP connection per batch; each mail is marked
// sent or failed under its claim. A send is bounded by half the lease, so that a claim is never
// taken over while its mail may still go out.
func (s *Service) sendDue(ctx context.Context) error {
	for {
		token := uuid.NewString()
		mails, err := s.st.ClaimMails(ctx, token, s.cfg.Lease, 20)
		if err != nil || len(mails) == 0 {
			return err
		}
		sctx, cancel := context.WithTimeout(ctx, s.cfg.Lease/2)
		errs := s.send(sctx, mails)
		cancel()
		for i, m := range mails {
			if errs[i] != nil {
				s.log.Warn("mail not sent", "mail", m.ID, "to", m.Recipient, "attempt", m.Attempts, "err", errs[i])
				if err := s.st.MarkMailFailed(ctx, m.ID, token, errs[i].Error(), s.cfg.Retry); err != nil {
					return err
				}
				continue
			}
			ok, err := s.st.MarkMailSent(ctx, m.ID, token)
			if err != nil {
				return err
			}
			if !ok {
				s.log.Warn("mail sent after its claim ran out", "mail", m.ID, "to", m.Recipient)
			} else {
				s.log.Info("mail sent", "mail", m.ID, "to", m.Recipient, "category", m.Category, "job", m.JobUUID)
			}
		}
		for _, e := range errs {
			if e != nil {
				return nil // the server is failing: wait for the next round (the backoff)
			}
		}
	}
}

// send sends mails over one connection; the error of each mail, nil when it went out.
func (s *Service) send(ctx context.Context, mails []store.OutMail) []error {
	errs := make([]error, len(mails))
	msgs := make([]*gomail.Msg, 0, len(mails))
	idx := make([]int, 0, len(mails))
	for i, m := range mails {
		msg, err := s.message(m)
		if err != nil {
			errs[i] = err
			continue
		}
		msgs, idx = append(msgs, msg), append(idx, i)
	}
	if len(msgs) == 0 {
		return errs
	}
	c, err := s.client()
	if err != nil {
		for _, i := range idx {
			errs[i] = err
		}
		return errs
	}
	conn, err := c.DialToSMTPClientWithContext(ctx)
	if err != nil {
		for _, i := range idx {
			errs[i] = fmt.Errorf("smtp %s:%d: %w", s.cfg.SMTP.Host, s.cfg.SMTP.Port, err)
		}
		return errs
	}
	// One message at a time on the connection, so each mail has its own outcome; none is begun
	// once the send's time (half the lease) is out: the rest wait for the next round.
	for j, msg := range msgs {
		if ctx.Err() != nil {
			errs[idx[j]] = fmt.Errorf("not sent within half the lease: %w", ctx.Err())
			continue
		}
		if err := c.SendWithSMTPClient(conn, msg); err != nil {
			errs[idx[j]] = fmt.Errorf("smtp %s:%d: %w", s.cfg.SMTP.Host, s.cfg.SMTP.Port, err)
		}
	}
	if err := c.CloseWithSMTPClient(conn); err != nil {
		s.log.Debug("close smtp connection", "err", err) // the mails went out already
	}
	return errs
}

// message is the mail as sent; its Message-ID is made of the outbox id, so that the rare
// duplicate (a sender that lost its claim during a send) is recognisable.
func (s *Service) message(m store.OutMail) (*gomail.Msg, error) {
	msg := gomail.NewMsg()
	if err := msg.From(s.cfg.SMTP.From); err != nil {
		return nil, fmt.Errorf("from %q: %w", s.cfg.SMTP.From, err)
	}
	if err := msg.To(m.Recipient); err != nil {
		return nil, fmt.Errorf("to %q: %w", m.Recipient, err)
	}
	msg.Subject(m.Subject)
	msg.SetMessageIDWithValue(fmt.Sprintf("gpulab-mail-%d.%s@%s", m.ID, m.JobUUID, s.host))
	msg.SetDate()
	msg.SetGenHeader("X-GPULab-Category", m.Category)
	if m.JobUUID != "" {
		msg.SetGenHeader("X-GPULab-Job", m.JobUUID)
	}
	msg.SetBodyString(gomail.TypeTextPlain, m.Body)
	return msg, nil
}

func (s *Service) client() (*gomail.Client, error) {
	c := s.cfg.SMTP
	opts := []gomail.Option{gomail.WithPort(c.Port), gomail.WithTimeout(s.cfg.Lease / 4)}
	switch c.TLS {
	case TLSNone:
		opts = append(opts, gomail.WithTLSPolicy(gomail.NoTLS))
	case TLSStartTLS:
		opts = append(opts, gomail.WithTLSPolicy(gomail.TLSMandatory))
	case TLSImplicit:
		opts = append(opts, gomail.WithSSL())
	}
	if c.TLSConfig != nil {
		tc := c.TLSConfig.Clone()
		if tc.ServerName == "" {
			tc.ServerName = c.Host
		}
		opts = append(opts, gomail.WithTLSConfig(tc))
	}
	if c.User != "" {
		opts = append(opts, gomail.WithSMTPAuth(gomail.SMTPAuthAutoDiscover), gomail.WithUsername(c.User), gomail.WithPassword(c.Password))
	}
	return gomail.NewClient(c.Host, opts...)
}
