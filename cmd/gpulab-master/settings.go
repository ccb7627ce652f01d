package main

// The documented example file of every setting (a test keeps it complete: run `go generate` after
// adding a flag).
//go:generate sh -c "go run . config example > ../../contrib/config/master.toml"

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/opengpulab/gpulab/internal/logsink"
	"github.com/opengpulab/gpulab/internal/settings"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/leader"
	"github.com/opengpulab/gpulab/mail"
	"github.com/opengpulab/gpulab/web"
)

// envPrefix makes the environment variable of a flag whose usage names none.
const envPrefix = "GPULAB_"

// noEnv is an empty environment: flags registered with it show their true defaults.
func noEnv(string) string { return "" }

// serveFlags is the flag set of `serve`, the master's settings: the configuration file's keys.
func serveFlags(c *config, getenv func(string) string) *flag.FlagSet {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c.addCommon(fs, getenv)
	c.addServe(fs, getenv)
	settings.AddConfigFlag(fs)
	return fs
}

// isServeSetting says whether name is a setting of `serve` (and so a key of the file).
func isServeSetting(name string) bool {
	return serveFlags(&config{}, noEnv).Lookup(name) != nil
}

// parseFlags parses a command's flags (which must include serve's or some of them) and fills
// the settings not on the command line from the environment, else the configuration file
// (--config, env GPULAB_CONFIG). The admin commands read the same file as serve: its keys are
// serve's, and their own flags (--user, --name...) come from the command line only.
func parseFlags(fs *flag.FlagSet, args []string, getenv func(string) string) (*settings.Result, error) {
	opts := settings.Options{EnvPrefix: envPrefix}
	if fs.Name() != "serve" {
		opts.Known = isServeSetting
	}
	if fs.Lookup(settings.ConfigFlag) == nil {
		settings.AddConfigFlag(fs)
	}
	res, err := settings.Parse(fs, args, getenv, opts)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	return res, err
}

// checkedServe is the serve configuration, checked, in the shapes the parts take.
type checkedServe struct {
	jobOptions job.Options
	webLimits  web.Limits
	oidc       web.OIDCConfig
	// mail is the mail service's configuration; mailOn is false without --smtp-host.
	mail   mail.Config
	mailOn bool
	idle   leader.IdleConfig
}

// check validates the settings serve uses beyond what their flags parse (ranges, formats,
// combinations), each error naming its setting; `config check` runs it too.
func (c *config) check() (checkedServe, error) {
	var out checkedServe
	if _, err := parseLogLevel(c.LogLevel); err != nil {
		return out, err
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return out, fmt.Errorf("--log-format %q: want text or json", c.LogFormat)
	}
	var err error
	if out.jobOptions, err = c.jobOptions(); err != nil {
		return out, err
	}
	if out.webLimits, err = c.limits.webLimits(); err != nil {
		return out, err
	}
	if out.oidc, err = c.oidcConfig(); err != nil {
		return out, err
	}
	// issue 10: admins by verified e-mail or ISSUER#SUBJECT; a bare name is a usage error.
	if _, err := web.ParseAdmins(splitList(c.Admins)); err != nil {
		return out, fmt.Errorf("--admins: %w", err)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"user-cert-validity", c.UserCertValidity}, {"slave-cert-validity", c.SlaveCertValidity},
		{"heartbeat-interval", c.HeartbeatInterval}, {"heartbeat-grace", c.HeartbeatGrace}, {"job-grace", c.JobGrace},
		{"fence-margin", c.FenceMargin}, {"assign-lease", c.AssignLease}, {"handover-lease", c.HandOverLease},
		{"start-lease", c.StartLease},
		{"start-deadline", c.StartDeadline}, {"halt-lease", c.HaltLease}, {"scheduler-interval", c.SchedulerInterval},
		{"tally-half-life", c.TallyHalfLife}, {"usage-flush", c.UsageFlush}} {
		if d.v <= 0 {
			return out, fmt.Errorf("--%s must be positive, not %s", d.name, d.v)
		}
	}
	if c.ForecastEvery < 0 {
		return out, fmt.Errorf("--forecast-every must be 0 (every pass) or positive, not %s", c.ForecastEvery)
	}
	if !(c.MaxBusy >= 0 && c.MaxBusy <= 1) { // NaN too
		return out, fmt.Errorf("--scheduler-max-busy %g: must be between 0 and 1", c.MaxBusy)
	}
	if !(c.HeartbeatJitter >= 0 && c.HeartbeatJitter <= 0.5) { // NaN too
		return out, fmt.Errorf("--heartbeat-jitter %g: must be between 0 and 0.5", c.HeartbeatJitter)
	}
	if c.HaltFactor < 1 {
		return out, fmt.Errorf("--halt-factor %g: must be 1 (any higher fair rank) or more", c.HaltFactor)
	}
	if c.DBMaxConns < 1 {
		return out, fmt.Errorf("--db-max-conns %d: must be at least 1", c.DBMaxConns)
	}
	if c.MaxNotebooksPerUser < 0 {
		return out, fmt.Errorf("--max-notebooks-per-user %d: must be 0 (no limit) or more", c.MaxNotebooksPerUser)
	}
	// The mail, idle-GPU and retention settings are checked here too, so that `config check`
	// refuses what serve would refuse.
	if out.mail, out.mailOn, err = c.mailConfig(); err != nil {
		return out, err
	}
	if out.idle, err = c.idle.config(); err != nil {
		return out, err
	}
	if err := c.retention.check(); err != nil {
		return out, err
	}
	return out, nil
}

// configCmd is `gpulab-master config check FILE` (validate a file and print the effective
// settings, secrets redacted) and `config example` (a documented file of every setting).
func configCmd(_ context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("want `config check FILE [flags]` or `config example`: %w", errUsage)
	}
	switch args[0] {
	case "example":
		settings.Example(stdout, "gpulab-master serve: configuration file (gpulab-master --config FILE, env GPULAB_CONFIG)",
			serveFlags(&config{}, noEnv), envPrefix)
		return nil
	case "check":
		if len(args) < 2 {
			return fmt.Errorf("config check: want the file: %w", errUsage)
		}
		var c config
		fs := serveFlags(&c, getenv)
		fs.SetOutput(stderr)
		res, err := parseFlags(fs, append([]string{"--config", args[1]}, args[2:]...), getenv)
		if err != nil {
			return err
		}
		if err := c.fillSecrets(getenv); err != nil {
			return err
		}
		if _, err := c.check(); err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		fmt.Fprintf(stdout, "# %s is valid; effective settings (source after #):\n", res.File)
		settings.WriteTOML(stdout, res.Effective())
		return nil
	default:
		return fmt.Errorf("config: unknown subcommand %q (want check or example): %w", args[0], errUsage)
	}
}

// parseLogLevel is --log-level as slog's level.
func parseLogLevel(level string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return l, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return l, nil
}

// newLogger is the process's logger: key=value lines, or one JSON object a line with
// --log-format json (for log collectors); lines logged while serving a request carry its
// request_id. They are written to sink in batches, warnings and errors at once (logsink).
// Values are checked first (check).
func newLogger(sink *logsink.Sink, level, format string) *slog.Logger {
	l, _ := parseLogLevel(level)
	opts := &slog.HandlerOptions{Level: l}
	var h slog.Handler = slog.NewTextHandler(sink, opts)
	if format == "json" {
		h = slog.NewJSONHandler(sink, opts)
	}
	return slog.New(web.WithRequestID(sink.Handler(h)))
}
