package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/internal/logsink"
	"github.com/opengpulab/gpulab/leader"
	"github.com/opengpulab/gpulab/mail"
	"github.com/opengpulab/gpulab/metrics"
	"github.com/opengpulab/gpulab/retention"
	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/sshjump"
	"github.com/opengpulab/gpulab/store"
	"github.com/opengpulab/gpulab/web"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

// latestClientVersion is the newest gpulab-cli release the master knows of.
const latestClientVersion = "4.0.0"

func serve(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	var c config
	fs := serveFlags(&c, getenv)
	fs.SetOutput(stderr)
	if _, err := parseFlags(fs, args, getenv); err != nil {
		return err
	}
	if err := c.fillSecrets(getenv); err != nil {
		return err
	}
	checked, err := c.check()
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	sink := logsink.New(stderr)
	defer func() { _ = sink.Close() }()
	log := newLogger(sink, c.LogLevel, c.LogFormat)
	opts, webLimits, oidcCfg := checked.jobOptions, checked.webLimits, checked.oidc
	mailCfg, mailOn, idle := checked.mail, checked.mailOn, checked.idle
	var sessionKeys []web.SessionKey
	if oidcCfg.Issuer != "" {
		var created bool
		if sessionKeys, created, err = c.sessionKeys(); err != nil {
			return err
		}
		if created {
			log.Info("made session keys", "file", filepath.Join(absPath(c.DataDir), web.SessionKeysFile))
		}
	}
	st, err := c.openStore(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = st.Close() }()
	st.SetUsageFlush(leader.UsageFlush(c.UsageFlush, idle))
	if !c.NoMigrate {
		applied, err := st.Migrate(ctx)
		if err != nil {
			return err
		}
		if len(applied) > 0 {
			log.Info("schema migrated", "applied", applied)
		}
	}
	if err := st.CheckSchema(ctx); err != nil {
		return err
	}
	st.SetLeases(c.leases())
	ca, created, err := c.loadCA()
	if err != nil {
		return err
	}
	if created {
		log.Info("made a new CA", "dir", absPath(c.DataDir))
	}
	wcfg := web.Config{Addr: c.Listen, CA: ca, Hosts: c.hosts(), Admins: splitList(c.Admins), Authority: c.Authority,
		OIDC: oidcCfg, SessionKeys: sessionKeys, Limits: webLimits, AutoCreateCertUsers: c.AutoCreateCertUsers}
	if oidcCfg.Issuer != "" {
		log.Info("portal login configured", "issuer", oidcCfg.Issuer, "client_id", oidcCfg.ClientID, "redirect_url", oidcCfg.RedirectURL,
			"username_claim", oidcCfg.UsernameClaim)
	} else {
		log.Info("portal login off: no --oidc-issuer")
	}
	if c.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
		if err != nil {
			return fmt.Errorf("load --tls-cert: %w", err)
		}
		wcfg.TLSCert = &cert
	}
	jump, err := c.startSSHJump(ctx, st, log)
	if err != nil {
		return err
	}
	mets := metrics.NewMaster(st, metrics.MasterOptions{Log: log, OutboxDepth: st.CountPendingMails})
	wcfg.Metrics = mets
	wake, work := scheduler.NewSignal(), scheduler.NewSignal()
	h := handlers.New(st, handlers.Config{Metrics: mets, Authority: c.Authority, Version: version, LatestClientVersion: latestClientVersion,
		JobOptions: opts, CA: ca, HeartbeatInterval: c.HeartbeatInterval, HeartbeatJitter: c.HeartbeatJitter, TallyHalfLife: c.TallyHalfLife, FenceAfter: c.JobGrace,
		MemoryReserveGb: c.MemoryReserveGb, UserCertValidity: c.UserCertValidity, SlaveCertValidity: c.SlaveCertValidity,
		SSHJump: jump, MaxNotebooksPerUser: c.MaxNotebooksPerUser, IdleThreshold: idle.Threshold, MaxJobLog: c.retention.maxJobLog}, log, wake, work)
	srv := web.New(wcfg, st, h, log)
	// The scheduler has a pool of its own, so that a flood of API requests cannot keep it
	// from renewing its lease (store.LeaderConns).
	lst, err := store.OpenPool(ctx, c.DatabaseURL, store.LeaderConns)
	if err != nil {
		return err
	}
	defer func() { _ = lst.Close() }()
	lst.SetLeases(c.leases())
	loop := leader.NewLoop(lst, leader.Config{Interval: c.SchedulerInterval, HeartbeatGrace: c.HeartbeatGrace,
		JobGrace: c.JobGrace, FenceMargin: c.FenceMargin, MemoryReserveGb: c.MemoryReserveGb,
		Limits: &scheduler.Limits{PerUser: c.MaxRunningUser, PerProject: c.MaxRunningProject}, TallyHalfLife: c.TallyHalfLife, Metrics: mets, Idle: idle,
		HaltFactor: c.HaltFactor, HaltNonRestartable: c.HaltNonRestartable, ForecastEvery: c.ForecastEvery, MaxBusy: c.MaxBusy,
		WhileLeading: retention.New(st, c.retention.policy(), log).Run}, log, wake, work)
	go func() {
		if err := loop.Run(ctx); err != nil {
			log.Error("scheduler stopped", "err", err)
		}
	}()
	if mailOn {
		// Every master with SMTP sends: the outbox's claims keep them from sending a mail twice.
		svc := mail.New(st, mailCfg, log)
		go func() {
			if err := svc.Run(ctx); err != nil && ctx.Err() == nil {
				log.Error("mail service stopped", "err", err)
			}
		}()
		log.Info("job mails on", "smtp", net.JoinHostPort(mailCfg.SMTP.Host, strconv.Itoa(mailCfg.SMTP.Port)), "tls", mailCfg.SMTP.TLS,
			"from", mailCfg.SMTP.From, "public_url", mailCfg.PublicURL, "reminder_at", mailCfg.ReminderAt)
	} else {
		log.Info("job mails off: no --smtp-host")
	}
	// What other masters change (submits, job ends, assignments) wakes this one's scheduler
	// and slaves' long polls.
	go listen(ctx, st, log, wake, work)
	l, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.Listen, err)
	}
	log.Info("master listening", "url", "https://"+displayAddr(l.Addr()), "ca", absPath(c.DataDir)+"/ca.pem", "authority", c.Authority)
	return srv.Serve(ctx, l)
}

// startSSHJump serves the SSH jump host when --ssh-listen is set (nil, nil otherwise), with
// the host key made once in the data folder, and says where users reach it.
func (c *config) startSSHJump(ctx context.Context, st *store.Store, log *slog.Logger) (*handlers.SSHJumpHost, error) {
	if c.SSHListen == "" {
		return nil, nil
	}
	signer, created, err := sshjump.LoadOrCreateHostKey(c.DataDir)
	if err != nil {
		return nil, err
	}
	if created {
		log.Info("made the SSH host key", "file", filepath.Join(absPath(c.DataDir), sshjump.HostKeyFile))
	}
	l, err := net.Listen("tcp", c.SSHListen)
	if err != nil {
		return nil, fmt.Errorf("listen on --ssh-listen %s: %w", c.SSHListen, err)
	}
	jump, err := sshAdvertised(c.SSHAdvertise, splitList(c.Hostnames), l.Addr())
	if err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("%w: --ssh-advertise: %w", errUsage, err)
	}
	jump.HostKey = sshjump.AuthorizedKey(signer.PublicKey())
	srv := sshjump.New(st, sshjump.Config{HostKey: signer}, log)
	go func() {
		if err := srv.Serve(ctx, l); err != nil {
			log.Error("ssh jump host stopped", "err", err)
		}
	}()
	log.Info("ssh jump host listening", "addr", l.Addr().String(), "advertised", net.JoinHostPort(jump.Host, strconv.Itoa(jump.Port)))
	return jump, nil
}

// sshAdvertised is the jump host as users reach it: --ssh-advertise, else the first of
// --hostnames (localhost when none) with the port listened on.
func sshAdvertised(advertise string, hostnames []string, listened net.Addr) (*handlers.SSHJumpHost, error) {
	if advertise == "" {
		host := "localhost"
		if len(hostnames) > 0 {
			host = hostnames[0]
		}
		return &handlers.SSHJumpHost{Host: host, Port: listened.(*net.TCPAddr).Port}, nil
	}
	host, port, err := net.SplitHostPort(advertise)
	if err != nil {
		return nil, fmt.Errorf("want HOST:PORT, not %q", advertise)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 || host == "" {
		return nil, fmt.Errorf("want HOST:PORT with a port from 1 to 65535, not %q", advertise)
	}
	return &handlers.SSHJumpHost{Host: host, Port: p}, nil
}

// listen passes the other masters' notifications to this master's signals, listening again
// after a failure until ctx ends. Each time it begins to listen it wakes the scheduler and
// every long poll, as a listener's reconnection does (store.Listen): what was sent before is
// lost, and no poll looks again on a timer (handlers.Config.WorkRecheck).
func listen(ctx context.Context, st *store.Store, log *slog.Logger, wake, work *scheduler.Signal) {
	all := func() { wake.Wake(); work.Wake() }
	for ctx.Err() == nil {
		err := st.Listen(ctx, log, wake.Wake, func(names []string) {
			if names == nil {
				work.Wake()
				return
			}
			work.WakeKeys(names...)
		}, all)
		if err != nil {
			log.Warn("database notifications", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
	}
}

func displayAddr(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}

func migrate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c config
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.addCommon(fs, getenv)
	if _, err := parseFlags(fs, args, getenv); err != nil {
		return err
	}
	st, err := c.openStore(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = st.Close() }()
	applied, err := st.Migrate(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "schema at version %d (applied now: %v)\n", store.LatestVersion(), applied)
	return nil
}
