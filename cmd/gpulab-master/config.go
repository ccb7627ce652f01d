package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/internal/secretfile"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/leader"
	"github.com/opengpulab/gpulab/mail"
	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/store"
	"github.com/opengpulab/gpulab/web"
)

// config is the master's configuration: every field is a flag with an environment variable.
type config struct {
	DatabaseURL        string
	DBMaxConns         int // serve's requests' pool; 0 (other commands): store.DefaultConns
	DataDir            string
	Authority          string
	Listen             string
	SSHListen          string
	SSHAdvertise       string
	Hostnames          string
	Admins             string
	TLSCert, TLSKey    string
	DefaultMinDuration string
	DefaultMaxDuration string
	LogLevel           string
	LogFormat          string
	NoMigrate          bool
	OIDCIssuer         string
	OIDCClientID       string
	OIDCClientSecret   string
	OIDCRedirectURL    string
	OIDCUsernameClaim  string
	OIDCScopes         string
	SessionKeys        string
	// Files holding the secrets above (secretfile: mode 0600), so they stay off the command line.
	OIDCClientSecretFile, SessionKeysFile string
	HeartbeatInterval                     time.Duration
	HeartbeatJitter                       float64
	UsageFlush                            time.Duration
	HeartbeatGrace                        time.Duration
	JobGrace                              time.Duration
	FenceMargin                           time.Duration
	AssignLease                           time.Duration
	HandOverLease                         time.Duration
	StartLease                            time.Duration
	StartDeadline                         time.Duration
	HaltLease                             time.Duration
	SchedulerInterval                     time.Duration
	ForecastEvery                         time.Duration
	MaxBusy                               float64
	MemoryReserveGb                       int
	MaxRunningUser                        int
	MaxRunningProject                     int
	TallyHalfLife                         time.Duration
	HaltFactor                            float64
	HaltNonRestartable                    bool
	MaxNotebooksPerUser                   int
	limits                                limitFlags
	idle                                  idleFlags

	// issue 14: e-mail (see mailConfig).
	SMTPHost, SMTPTLS, SMTPUser, SMTPPasswordFile, SMTPFrom string
	SMTPPort                                                int
	PublicURL                                               string
	ReminderAt                                              float64

	retention retentionFlags

	// issue 10: identities and revocation.
	AutoCreateCertUsers bool
	UserCertValidity    time.Duration
	SlaveCertValidity   time.Duration
}

// addCommon registers the flags every command needs (database, data folder, authority).
func (c *config) addCommon(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&c.DatabaseURL, "database-url", getenv("DATABASE_URL"), "Postgres URL (env DATABASE_URL)")
	fs.StringVar(&c.DataDir, "data-dir", envOr(getenv, "GPULAB_DATA_DIR", "/var/lib/gpulab"), "folder of the CA files ca.pem and ca-key.pem (env GPULAB_DATA_DIR)")
	fs.StringVar(&c.Authority, "authority", envOr(getenv, "GPULAB_AUTHORITY", "gpulab.local"), "URN authority of users and projects (env GPULAB_AUTHORITY)")
	fs.StringVar(&c.LogLevel, "log-level", envOr(getenv, "GPULAB_LOG_LEVEL", "info"), "debug, info, warn or error (env GPULAB_LOG_LEVEL)")
	fs.StringVar(&c.LogFormat, "log-format", envOr(getenv, "GPULAB_LOG_FORMAT", "text"), "text (key=value lines) or json (one JSON object a line) (env GPULAB_LOG_FORMAT)")
}

// addCertValidity registers the lifetimes of issued certificates (serve and the admin commands
// that issue them).
func (c *config) addCertValidity(fs *flag.FlagSet, getenv func(string) string) {
	fs.DurationVar(&c.UserCertValidity, "user-cert-validity", envDuration(getenv, "GPULAB_USER_CERT_VALIDITY", pki.DefaultUserValidity), "lifetime of user certificates the master issues (env GPULAB_USER_CERT_VALIDITY)")
	fs.DurationVar(&c.SlaveCertValidity, "slave-cert-validity", envDuration(getenv, "GPULAB_SLAVE_CERT_VALIDITY", pki.DefaultSlaveValidity), "lifetime of slave certificates the master issues at a join (env GPULAB_SLAVE_CERT_VALIDITY)")
}

// addServe registers the flags of `serve`.
func (c *config) addServe(fs *flag.FlagSet, getenv func(string) string) {
	c.addCertValidity(fs, getenv)
	fs.StringVar(&c.Listen, "listen", envOr(getenv, "GPULAB_LISTEN", ":8443"), "HTTPS listen address (env GPULAB_LISTEN)")
	fs.StringVar(&c.SSHListen, "ssh-listen", getenv("GPULAB_SSH_LISTEN"), "listen address of the SSH jump host to users' jobs (e.g. :2222); empty: none (env GPULAB_SSH_LISTEN)")
	fs.StringVar(&c.SSHAdvertise, "ssh-advertise", getenv("GPULAB_SSH_ADVERTISE"), "HOST:PORT users reach the SSH jump host at, as the job JSON's sshProxyHost/Port say (default: the first --hostnames or localhost, and the --ssh-listen port; env GPULAB_SSH_ADVERTISE)")
	fs.StringVar(&c.Hostnames, "hostnames", getenv("GPULAB_HOSTNAMES"), "comma-separated names and IPs for the server certificate, besides localhost, 127.0.0.1 and the host name (env GPULAB_HOSTNAMES)")
	fs.StringVar(&c.Admins, "admins", getenv("GPULAB_ADMINS"), "comma-separated admins, each a verified e-mail address or ISSUER#SUBJECT of an OpenID login; a bare name is refused (env GPULAB_ADMINS)")
	fs.BoolVar(&c.AutoCreateCertUsers, "auto-create-cert-users", getenv("GPULAB_AUTO_CREATE_CERT_USERS") == "1", "a valid certificate of a user the master does not know creates him; off: 401 (env GPULAB_AUTO_CREATE_CERT_USERS=1)")
	fs.StringVar(&c.TLSCert, "tls-cert", getenv("GPULAB_TLS_CERT"), "server certificate PEM instead of one from the CA (env GPULAB_TLS_CERT)")
	fs.StringVar(&c.TLSKey, "tls-key", getenv("GPULAB_TLS_KEY"), "key of --tls-cert (env GPULAB_TLS_KEY)")
	fs.BoolVar(&c.NoMigrate, "no-migrate", getenv("GPULAB_NO_MIGRATE") == "1", "do not migrate the schema at start; refuse to start on an older one (env GPULAB_NO_MIGRATE=1)")
	fs.DurationVar(&c.HeartbeatInterval, "heartbeat-interval", envDuration(getenv, "GPULAB_HEARTBEAT_INTERVAL", 5*time.Second), "how often slaves heartbeat (env GPULAB_HEARTBEAT_INTERVAL)")
	fs.Float64Var(&c.HeartbeatJitter, "heartbeat-jitter", envFloat(getenv, "GPULAB_HEARTBEAT_JITTER", handlers.DefaultHeartbeatJitter),
		"each reply to a slave names an interval drawn within ± this fraction of --heartbeat-interval (0 to 0.5), so that a fleet's heartbeats stay spread over time instead of gathering into bursts; 0: exactly the interval (env GPULAB_HEARTBEAT_JITTER)")
	fs.DurationVar(&c.UsageFlush, "usage-flush", envDuration(getenv, "GPULAB_USAGE_FLUSH", store.DefaultUsageFlush),
		"how long a job's usage samples are summed in the master before they are written as one point of its series; at most a quarter of --idle-gpu-after is used (env GPULAB_USAGE_FLUSH)")
	fs.DurationVar(&c.HeartbeatGrace, "heartbeat-grace", envDuration(getenv, "GPULAB_HEARTBEAT_GRACE", 30*time.Second), "a slave silent this long is offline (env GPULAB_HEARTBEAT_GRACE)")
	fs.DurationVar(&c.JobGrace, "job-grace", envDuration(getenv, "GPULAB_JOB_GRACE", 5*time.Minute), "a slave that reaches no master this long stops its jobs; after this plus --fence-margin offline, they fail with `worker lost` (env GPULAB_JOB_GRACE)")
	fs.DurationVar(&c.FenceMargin, "fence-margin", envDuration(getenv, "GPULAB_FENCE_MARGIN", 45*time.Second), "time a cut-off slave has to stop its jobs before they may start elsewhere (env GPULAB_FENCE_MARGIN)")
	fs.DurationVar(&c.AssignLease, "assign-lease", envDuration(getenv, "GPULAB_ASSIGN_LEASE", store.DefaultLeases.Assigned), "an assigned job not taken by its slave this long after the slave was handed it is queued again (env GPULAB_ASSIGN_LEASE)")
	fs.DurationVar(&c.HandOverLease, "handover-lease", envDuration(getenv, "GPULAB_HANDOVER_LEASE", store.DefaultLeases.HandOver), "an assigned job its slave has not asked for this long is queued again; at least assign-lease (env GPULAB_HANDOVER_LEASE)")
	fs.DurationVar(&c.StartLease, "start-lease", envDuration(getenv, "GPULAB_START_LEASE", store.DefaultLeases.Starting), "a starting job its slave stops reporting this long fails (env GPULAB_START_LEASE)")
	fs.DurationVar(&c.StartDeadline, "start-deadline", envDuration(getenv, "GPULAB_START_DEADLINE", store.DefaultLeases.StartDeadline), "the longest a job may take to start, image pull included (env GPULAB_START_DEADLINE)")
	fs.DurationVar(&c.HaltLease, "halt-lease", envDuration(getenv, "GPULAB_HALT_LEASE", store.DefaultLeases.Halting), "a halt not begun, or not ended, this long fails the job (env GPULAB_HALT_LEASE)")
	fs.DurationVar(&c.SchedulerInterval, "scheduler-interval", envDuration(getenv, "GPULAB_SCHEDULER_INTERVAL", 5*time.Second), "longest time between scheduler passes (env GPULAB_SCHEDULER_INTERVAL)")
	fs.DurationVar(&c.ForecastEvery, "forecast-every", envDuration(getenv, "GPULAB_FORECAST_EVERY", leader.DefaultForecastEvery),
		"how often the leader forecasts the queued jobs' start times and writes them, beside the scheduler passes; 0: after every pass, as often as the forecast keeps up (env GPULAB_FORECAST_EVERY)")
	fs.Float64Var(&c.MaxBusy, "scheduler-max-busy", envFloat(getenv, "GPULAB_SCHEDULER_MAX_BUSY", leader.DefaultMaxBusy),
		"the most of the time scheduler passes woken by work may take while jobs wait for room, kept over time: the loop banks up to 100 ms of pass time while idle and rests after passes that spend more (0.2: back-to-back passes rest four times as long as they took; a rest is never longer than --scheduler-interval); 0 or 1: passes back to back; passes that place jobs and leave none waiting for room never rest (env GPULAB_SCHEDULER_MAX_BUSY)")
	fs.IntVar(&c.DBMaxConns, "db-max-conns", envInt(getenv, "GPULAB_DB_MAX_CONNS", store.DefaultConns),
		"most Postgres connections the API, portal and slave calls use at once; the scheduler and the heartbeats have a few more of their own (env GPULAB_DB_MAX_CONNS)")
	fs.IntVar(&c.MemoryReserveGb, "memory-reserve-gb", envInt(getenv, "GPULAB_MEMORY_RESERVE_GB", 1), "memory kept free on every slave for its system (env GPULAB_MEMORY_RESERVE_GB)")
	c.limits.addLimits(fs, getenv)
	c.idle.addIdle(fs, getenv)

	c.retention.add(fs)
	fs.DurationVar(&c.TallyHalfLife, "tally-half-life", envDuration(getenv, "GPULAB_TALLY_HALF_LIFE", 7*24*time.Hour), "usage tally half-life (env GPULAB_TALLY_HALF_LIFE)")
	fs.Float64Var(&c.HaltFactor, "halt-factor", envFloat(getenv, "GPULAB_HALT_FACTOR", scheduler.DefaultHaltFactor),
		"a fairness (SCORE) halt needs the victim's fair rank at this many times the waiting job's; 1: any higher rank (env GPULAB_HALT_FACTOR)")
	fs.BoolVar(&c.HaltNonRestartable, "halt-non-restartable", getenv("GPULAB_HALT_NON_RESTARTABLE") == "1",
		"let fairness (SCORE) halts take non-restartable jobs, which lose all their work; off, only restartable ones are taken (halts for interactive jobs, private clusters and reservations take any) (env GPULAB_HALT_NON_RESTARTABLE=1)")
	fs.IntVar(&c.MaxRunningUser, "max-running-per-user", envInt(getenv, "GPULAB_MAX_RUNNING_PER_USER", 10), "running jobs one user may have at once (0: no cap; env GPULAB_MAX_RUNNING_PER_USER)")
	fs.IntVar(&c.MaxRunningProject, "max-running-per-project", envInt(getenv, "GPULAB_MAX_RUNNING_PER_PROJECT", 20), "running jobs one project may have at once (0: no cap; env GPULAB_MAX_RUNNING_PER_PROJECT)")
	fs.IntVar(&c.MaxNotebooksPerUser, "max-notebooks-per-user", envInt(getenv, "GPULAB_MAX_NOTEBOOKS_PER_USER", handlers.DefaultMaxNotebooksPerUser),
		"notebook jobs (named "+handlers.NotebookJobName+") one user may have not ended at once; more are refused with 409 (0: no limit; env GPULAB_MAX_NOTEBOOKS_PER_USER)")
	fs.StringVar(&c.DefaultMinDuration, "default-min-duration", envOr(getenv, "GPULAB_DEFAULT_MIN_DURATION", "1 week"), "minDuration of jobs that give none (env GPULAB_DEFAULT_MIN_DURATION)")
	fs.StringVar(&c.DefaultMaxDuration, "default-max-duration", envOr(getenv, "GPULAB_DEFAULT_MAX_DURATION", "2 weeks"), "maxDuration of jobs that give none (env GPULAB_DEFAULT_MAX_DURATION)")
	fs.StringVar(&c.OIDCIssuer, "oidc-issuer", getenv("GPULAB_OIDC_ISSUER"), "OpenID Connect issuer URL of the portal login; none: the portal login is off (env GPULAB_OIDC_ISSUER)")
	fs.StringVar(&c.OIDCClientID, "oidc-client-id", getenv("GPULAB_OIDC_CLIENT_ID"), "client id of the master at the OpenID provider (env GPULAB_OIDC_CLIENT_ID)")
	// Secrets get no default from the environment here: -h prints defaults. fillSecrets reads them.
	fs.StringVar(&c.OIDCClientSecret, "oidc-client-secret", "", "client secret at the OpenID provider; prefer the env GPULAB_OIDC_CLIENT_SECRET (flags show in ps)")
	fs.StringVar(&c.OIDCRedirectURL, "oidc-redirect-url", getenv("GPULAB_OIDC_REDIRECT_URL"), "callback URL registered at the provider (default https://<first --hostnames or localhost>:<port>/auth/callback; env GPULAB_OIDC_REDIRECT_URL)")
	fs.StringVar(&c.OIDCUsernameClaim, "oidc-username-claim", envOr(getenv, "GPULAB_OIDC_USERNAME_CLAIM", "preferred_username"), "ID-token claim holding the user name; without it, the e-mail's local part (env GPULAB_OIDC_USERNAME_CLAIM)")
	fs.StringVar(&c.OIDCScopes, "oidc-scopes", envOr(getenv, "GPULAB_OIDC_SCOPES", "openid,profile,email"), "comma-separated scopes asked of the provider (env GPULAB_OIDC_SCOPES)")
	fs.StringVar(&c.SessionKeys, "session-keys", "", "comma-separated session cookie keys, 96 bytes each in hex or base64, the first current; none: made once and kept in <data-dir>/session-keys; prefer --session-keys-file (flags show in ps)")
	fs.StringVar(&c.OIDCClientSecretFile, "oidc-client-secret-file", getenv("GPULAB_OIDC_CLIENT_SECRET_FILE"), "file (mode 0600) holding the client secret at the OpenID provider (env GPULAB_OIDC_CLIENT_SECRET_FILE)")
	c.addMail(fs, getenv)
	fs.StringVar(&c.SessionKeysFile, "session-keys-file", getenv("GPULAB_SESSION_KEYS_FILE"), "file (mode 0600) holding the session cookie keys, one a line or comma-separated, the first current (env GPULAB_SESSION_KEYS_FILE)")
}

// fillSecrets takes secrets not given as flags from the environment (after parsing, so that
// -h never prints them).
// A secret file (--oidc-client-secret-file, --session-keys-file) is read here too; giving a
// secret both directly and as a file is refused.
func (c *config) fillSecrets(getenv func(string) string) error {
	if c.OIDCClientSecret == "" && c.OIDCClientSecretFile == "" {
		c.OIDCClientSecret = getenv("GPULAB_OIDC_CLIENT_SECRET")
	}
	if c.SessionKeys == "" && c.SessionKeysFile == "" {
		c.SessionKeys = getenv("GPULAB_SESSION_KEYS")
	}
	var err error
	if c.OIDCClientSecret, err = secretfile.Either("--oidc-client-secret", c.OIDCClientSecret, c.OIDCClientSecretFile); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if c.SessionKeys, err = secretfile.Either("--session-keys", c.SessionKeys, c.SessionKeysFile); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	c.SessionKeys = strings.ReplaceAll(c.SessionKeys, "\n", ",")
	return nil
}

// oidcConfig is the portal login's configuration (login off without an issuer).
func (c *config) oidcConfig() (web.OIDCConfig, error) {
	if c.OIDCIssuer == "" {
		return web.OIDCConfig{}, nil
	}
	if c.OIDCClientID == "" {
		return web.OIDCConfig{}, errors.New("--oidc-issuer needs --oidc-client-id (env GPULAB_OIDC_CLIENT_ID)")
	}
	if u, err := url.Parse(c.OIDCIssuer); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return web.OIDCConfig{}, fmt.Errorf("--oidc-issuer %q is not an http(s) URL", c.OIDCIssuer)
	}
	redirect := c.OIDCRedirectURL
	if redirect == "" {
		host := "localhost"
		if names := splitList(c.Hostnames); len(names) > 0 {
			host = names[0]
		}
		_, port, err := net.SplitHostPort(c.Listen)
		if err != nil {
			return web.OIDCConfig{}, fmt.Errorf("--listen %q: %w", c.Listen, err)
		}
		if port != "443" {
			host = net.JoinHostPort(host, port)
		}
		redirect = "https://" + host + web.CallbackPath
	}
	if u, err := url.Parse(redirect); err != nil || u.Scheme == "" || u.Host == "" {
		return web.OIDCConfig{}, fmt.Errorf("--oidc-redirect-url %q is not an absolute URL", redirect)
	}
	return web.OIDCConfig{Issuer: c.OIDCIssuer, ClientID: c.OIDCClientID, ClientSecret: c.OIDCClientSecret, RedirectURL: redirect,
		UsernameClaim: c.OIDCUsernameClaim, Scopes: splitList(c.OIDCScopes)}, nil
}

// sessionKeys are the configured session keys, else those kept in the data folder (made at
// the first start), so restarts and masters sharing the folder keep users logged in.
func (c *config) sessionKeys() (keys []web.SessionKey, created bool, err error) {
	if c.SessionKeys != "" {
		keys, err := web.ParseSessionKeys(c.SessionKeys)
		if err != nil {
			return nil, false, fmt.Errorf("%w: --session-keys: %w", errUsage, err)
		}
		return keys, false, nil
	}
	return web.LoadOrCreateSessionKeys(c.DataDir)
}

// addMail registers the e-mail flags (issue 14). The SMTP password is only ever read from a
// file: a flag would show in ps.
func (c *config) addMail(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&c.SMTPHost, "smtp-host", getenv("GPULAB_SMTP_HOST"), "SMTP server of job mails; empty: no mails are sent (env GPULAB_SMTP_HOST)")
	fs.IntVar(&c.SMTPPort, "smtp-port", envInt(getenv, "GPULAB_SMTP_PORT", 0), "port of --smtp-host (default 25 with --smtp-tls none, 587 with starttls, 465 with tls; env GPULAB_SMTP_PORT)")
	fs.StringVar(&c.SMTPTLS, "smtp-tls", envOr(getenv, "GPULAB_SMTP_TLS", mail.TLSStartTLS), "none, starttls (required) or tls (from the first byte) (env GPULAB_SMTP_TLS)")
	fs.StringVar(&c.SMTPUser, "smtp-user", getenv("GPULAB_SMTP_USER"), "SMTP login; empty: no authentication (env GPULAB_SMTP_USER)")
	fs.StringVar(&c.SMTPPasswordFile, "smtp-password-file", getenv("GPULAB_SMTP_PASSWORD_FILE"), "file (mode 0600) holding the password of --smtp-user (env GPULAB_SMTP_PASSWORD_FILE)")
	fs.StringVar(&c.SMTPFrom, "smtp-from", getenv("GPULAB_SMTP_FROM"), "sender address of job mails, e.g. 'GPULab <gpulab@example.org>' (env GPULAB_SMTP_FROM)")
	fs.StringVar(&c.PublicURL, "public-url", getenv("GPULAB_PUBLIC_URL"), "the portal's root URL as users reach it, for links in mails (default https://<first --hostnames or localhost>:<port>; env GPULAB_PUBLIC_URL)")
	fs.Float64Var(&c.ReminderAt, "reminder-at", envFloat(getenv, "GPULAB_REMINDER_AT", 0.8), "share of its maxDuration after which a running job's owner gets one reminder mail; 0: none (env GPULAB_REMINDER_AT)")
}

// mailConfig is the mail service's configuration; ok is false when no --smtp-host is set (no
// mails). Each wrong setting is an error naming it.
func (c *config) mailConfig() (cfg mail.Config, ok bool, err error) {
	if c.SMTPHost == "" {
		return cfg, false, nil
	}
	port := c.SMTPPort
	if port == 0 {
		port = map[string]int{mail.TLSNone: 25, mail.TLSStartTLS: 587, mail.TLSImplicit: 465}[c.SMTPTLS]
	}
	cfg.SMTP = mail.SMTP{Host: c.SMTPHost, Port: port, TLS: c.SMTPTLS, User: c.SMTPUser, From: c.SMTPFrom}
	if c.SMTPPasswordFile != "" {
		if c.SMTPUser == "" {
			return cfg, false, errors.New("--smtp-password-file needs --smtp-user")
		}
		if cfg.SMTP.Password, err = secretfile.Read(c.SMTPPasswordFile); err != nil {
			return cfg, false, fmt.Errorf("--smtp-password-file: %w", err)
		}
	}
	if err := cfg.SMTP.Validate(); err != nil {
		return cfg, false, err
	}
	if c.ReminderAt < 0 || c.ReminderAt >= 1 {
		return cfg, false, fmt.Errorf("--reminder-at %g: must be 0 (off) or a share below 1, e.g. 0.8", c.ReminderAt)
	}
	cfg.ReminderAt = c.ReminderAt
	if cfg.PublicURL, err = c.publicURL(); err != nil {
		return cfg, false, err
	}
	return cfg, true, nil
}

// publicURL is --public-url, else https://<first --hostnames or localhost>:<listen port>.
func (c *config) publicURL() (string, error) {
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return "", fmt.Errorf("--public-url %q is not an http(s) URL", c.PublicURL)
		}
		return strings.TrimRight(c.PublicURL, "/"), nil
	}
	host := "localhost"
	if names := splitList(c.Hostnames); len(names) > 0 {
		host = names[0]
	}
	_, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return "", fmt.Errorf("--listen %q: %w", c.Listen, err)
	}
	if port != "443" {
		host = net.JoinHostPort(host, port)
	}
	return "https://" + host, nil
}

func envFloat(getenv func(string) string, key string, def float64) float64 {
	if f, err := strconv.ParseFloat(getenv(key), 64); err == nil {
		return f
	}
	return def
}

// envDuration, envInt and envOr give a flag its default from the environment, so that -h shows
// it. They never judge the value: parseFlags (settings.Parse) sets every flag not on the command
// line again from the variable its usage names, and a value the flag refuses is an error at
// start that names the variable, never a silent fallback to the default.
func envDuration(getenv func(string) string, key string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(getenv(key)); err == nil && d > 0 {
		return d
	}
	return def
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

// leases are the store's leases from the flags.
func (c *config) leases() store.Leases {
	return store.Leases{Assigned: c.AssignLease, HandOver: c.HandOverLease, Starting: c.StartLease, StartDeadline: c.StartDeadline, MustHalt: c.HaltLease, Halting: c.HaltLease}
}

func (c *config) openStore(ctx context.Context) (*store.Store, error) {
	if c.DatabaseURL == "" {
		return nil, fmt.Errorf("no database: give --database-url or DATABASE_URL: %w", errUsage)
	}
	if c.DBMaxConns > 0 {
		return store.OpenPool(ctx, c.DatabaseURL, c.DBMaxConns)
	}
	return store.Open(ctx, c.DatabaseURL)
}

func (c *config) loadCA() (*pki.CA, bool, error) {
	return pki.LoadOrCreateCA(c.DataDir, "GPULab CA ("+c.Authority+")")
}

func (c *config) jobOptions() (job.Options, error) {
	opts := job.DefaultOptions()
	min, err := job.ParseDuration(c.DefaultMinDuration)
	if err != nil {
		return opts, fmt.Errorf("--default-min-duration: %w", err)
	}
	max, err := job.ParseDuration(c.DefaultMaxDuration)
	if err != nil {
		return opts, fmt.Errorf("--default-max-duration: %w", err)
	}
	if min > max {
		return opts, fmt.Errorf("--default-min-duration (%s) is longer than --default-max-duration (%s)", c.DefaultMinDuration, c.DefaultMaxDuration)
	}
	opts.DefaultMinDuration, opts.DefaultMaxDuration = min, max
	if opts.Limits, err = c.limits.jobLimits(); err != nil {
		return opts, err
	}
	return opts, nil
}

func (c *config) hosts() []string {
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	if h, err := os.Hostname(); err == nil {
		hosts = append(hosts, h)
	}
	return append(hosts, splitList(c.Hostnames)...)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
