package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/store"
)

// slaveToken makes a one-time join token: the slave exchanges it (with a CSR) for its
// certificate. Only the token's hash is stored.
func slaveToken(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c config
	fs := flag.NewFlagSet("slave-token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("name", "", "the slave's name (required)")
	cluster := fs.Int("cluster", 0, "the cluster the slave joins (required; create it with `gpulab-master cluster add`)")
	valid := fs.Duration("valid", handlers.DefaultSlaveTokenValidity, "how long the token can be used")
	st, err := adminSetup(ctx, fs, &c, args, getenv)
	if err != nil {
		return err
	}
	defer func() { _ = st.Close() }()
	token, err := handlers.IssueSlaveToken(ctx, st, handlers.SlaveTokenRequest{Name: *name, ClusterID: *cluster, Valid: *valid})
	var bad *handlers.Error
	if errors.As(err, &bad) && bad.Status == http.StatusBadRequest {
		return fmt.Errorf("%w: %w", err, errUsage)
	} else if err != nil {
		return err
	}
	fmt.Fprintln(stdout, token)
	fmt.Fprintf(stderr, "one-time token for slave %s in cluster %d, valid for %s:\n  %s\n", *name, *cluster, *valid, handlers.SlaveJoinCommand("URL", token))
	return nil
}

// slaveCmd drains or reopens a slave.
func slaveCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "disable" || args[0] == "enable") {
		return slaveDisable(ctx, args, getenv, stdout, stderr)
	}
	if len(args) < 1 || (args[0] != "drain" && args[0] != "open") {
		return fmt.Errorf("expected `slave drain|open|disable|enable NAME`: %w", errUsage)
	}
	var c config
	fs := flag.NewFlagSet("slave "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	name, rest := firstArg(args[1:])
	st, err := adminSetup(ctx, fs, &c, rest, getenv)
	if err != nil {
		return err
	}
	defer func() { _ = st.Close() }()
	if err := st.SetSlaveAccepting(ctx, name, args[0] == "open"); errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no slave %q", name)
	} else if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "slave %s: %s\n", name, map[string]string{"drain": "drained (running jobs go on, no new ones)", "open": "accepting jobs"}[args[0]])
	return nil
}
