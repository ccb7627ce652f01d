package main

// The documented example file of every setting (a test keeps it complete: run `go generate` after
// adding a flag).
//go:generate sh -c "go run . config example > ../../contrib/config/slave.toml"

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/opengpulab/gpulab/internal/settings"
	"github.com/opengpulab/gpulab/slave/storage"
)

// envPrefix makes the environment variable of a flag whose usage names none
// (GPULAB_SLAVE_CPUS for --cpus).
const envPrefix = "GPULAB_SLAVE_"

func noEnv(string) string { return "" }

// isSetting says whether name is a flag of run or join: the keys of the slave's file, which
// both commands read.
func isSetting(name string) bool {
	run, join := flag.NewFlagSet("run", flag.ContinueOnError), flag.NewFlagSet("join", flag.ContinueOnError)
	addRunFlags(run, noEnv)
	addJoinFlags(join, noEnv)
	return run.Lookup(name) != nil || join.Lookup(name) != nil
}

// parseFlags parses a command's flags and fills those not on the command line from the
// environment, else the configuration file (--config, env GPULAB_CONFIG); see
// internal/settings. A bad value from any source is a usage error naming it.
func parseFlags(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	settings.AddConfigFlag(fs)
	_, err := settings.Parse(fs, args, getenv, settings.Options{EnvPrefix: envPrefix, Known: isSetting})
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	return err
}

// newLogger is the slave's logger, text or JSON lines.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// configCmd is `gpulab-slave config check FILE` and `config example`, as the master's.
func configCmd(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("want `config check FILE [flags]` or `config example`: %w", errUsage)
	}
	switch args[0] {
	case "example":
		fs, _ := allSettings(noEnv)
		settings.Example(stdout, "gpulab-slave run and join: configuration file (gpulab-slave --config FILE, env GPULAB_CONFIG)", fs, envPrefix)
		return nil
	case "check":
		if len(args) < 2 {
			return fmt.Errorf("config check: want the file: %w", errUsage)
		}
		fs, rf := allSettings(getenv)
		fs.SetOutput(stderr)
		settings.AddConfigFlag(fs)
		res, err := settings.Parse(fs, append([]string{"--config", args[1]}, args[2:]...), getenv, settings.Options{EnvPrefix: envPrefix})
		if err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		if _, err := newLogger(io.Discard, *rf.logLevel, *rf.logFormat); err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		if _, err := rf.hard.hardening(); err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		if _, err := storage.ParseMap(rf.storage); err != nil {
			return fmt.Errorf("--storage: %w: %w", err, errUsage)
		}
		fmt.Fprintf(stdout, "# %s is valid; effective settings (source after #):\n", res.File)
		settings.WriteTOML(stdout, res.Effective())
		return nil
	}
	return fmt.Errorf("config: unknown subcommand %q (want check or example): %w", args[0], errUsage)
}

// allSettings is one flag set of every setting of the file: run's flags and those of join
// that run lacks (both have --master and --state-dir).
func allSettings(getenv func(string) string) (*flag.FlagSet, *runFlags) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	rf := addRunFlags(fs, getenv)
	join := flag.NewFlagSet("join", flag.ContinueOnError)
	addJoinFlags(join, getenv)
	join.VisitAll(func(f *flag.Flag) {
		if fs.Lookup(f.Name) == nil {
			fs.Var(f.Value, f.Name, f.Usage)
		}
	})
	return fs, rf
}
