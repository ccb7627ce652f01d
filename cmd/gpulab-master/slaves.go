package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/pki"
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
	valid := fs.Duration("valid", 24*time.Hour, "how long the token can be used")
	st, err := adminSetup(ctx, fs, &c, args, getenv)
	if err != nil {
		return err
	}
	defer func() { _ = st.Close() }()
	if !pki.NamePattern.MatchString(*name) {
		return fmt.Errorf("--name %q: must be lowercase letters, digits, '.', '_' or '-': %w", *name, errUsage)
	}
	clusters, err := st.ListClusters(ctx)
	if err != nil {
		return err
	}
	found := false
	for _, cl := range clusters {
		found = found || cl.ID == *cluster
	}
	if !found {
		return fmt.Errorf("--cluster %d: no such cluster (create it with `gpulab-master cluster add %d`): %w", *cluster, *cluster, errUsage)
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return fmt.Errorf("make token: %w", err)
	}
	token := base64.RawURLEncoding.EncodeToString(b)
	if err := st.CreateSlaveToken(ctx, handlers.HashToken(token), *name, *cluster, *valid); err != nil {
		return err
	}
	fmt.Fprintln(stdout, token)
	fmt.Fprintf(stderr, "one-time token for slave %s in cluster %d, valid for %s:\n  gpulab-slave join --master URL --ca CA.pem --token %s\n", *name, *cluster, *valid, token)
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
