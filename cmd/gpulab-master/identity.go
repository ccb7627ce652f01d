package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/opengpulab/gpulab/store"
)

// Identities, disabling and revocation from the command line (issue 10), working directly on
// the database: what they change holds at every master's next request.
//
//	gpulab-master user list | disable NAME | enable NAME | link NAME --issuer I --subject S
//	gpulab-master cert list [--owner NAME --kind user|slave] | revoke SERIAL
//	gpulab-master slave disable NAME [--revoke] | enable NAME

func userCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("expected `user list`, `user disable NAME`, `user enable NAME` or `user link NAME --issuer I --subject S`: %w", errUsage)
	}
	var c config
	fs := flag.NewFlagSet("user "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	issuer := fs.String("issuer", "", "link: the OpenID provider's issuer URL (as the refused login's page shows it)")
	subject := fs.String("subject", "", "link: the user's subject at that provider")
	name, rest := firstArg(args[1:])
	switch args[0] {
	case "list", "disable", "enable", "link":
	default:
		return fmt.Errorf("unknown `user %s`: %w", args[0], errUsage)
	}
	if args[0] != "list" && name == "" {
		return fmt.Errorf("`user %s` needs a user name: %w", args[0], errUsage)
	}
	st, err := adminSetup(ctx, fs, &c, rest, getenv)
	if err != nil {
		return err
	}
	defer func() { _ = st.Close() }()
	switch args[0] {
	case "list":
		us, err := st.ListUsers(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tE-MAIL\tVERIFIED\tADMIN\tDISABLED\tLOGIN (ISSUER#SUBJECT)")
		for _, u := range us {
			login := "-"
			if u.Subject != "" {
				login = u.Issuer + "#" + u.Subject
			}
			fmt.Fprintf(tw, "%s\t%s\t%t\t%t\t%t\t%s\n", u.Name, u.Email, u.EmailVerified, u.IsAdmin, u.Disabled, login)
		}
		return tw.Flush()
	case "link":
		if *issuer == "" || *subject == "" {
			return fmt.Errorf("`user link` needs --issuer and --subject: %w", errUsage)
		}
		if err := st.LinkLogin(ctx, name, *issuer, *subject); err != nil {
			return notFoundAs(err, "no user %q", name)
		}
		fmt.Fprintf(stdout, "user %s: logs in as %s#%s\n", name, *issuer, *subject)
		return nil
	}
	disable := args[0] == "disable"
	if err := st.SetUserDisabled(ctx, name, disable); err != nil {
		return notFoundAs(err, "no user %q", name)
	}
	fmt.Fprintf(stdout, "user %s: %s\n", name, map[bool]string{true: "disabled (refused at his next request, at every master)", false: "enabled"}[disable])
	return nil
}

func certCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "list" && args[0] != "revoke") {
		return fmt.Errorf("expected `cert list [--owner NAME --kind user|slave|service]` or `cert revoke SERIAL`: %w", errUsage)
	}
	var c config
	fs := flag.NewFlagSet("cert "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	owner := fs.String("owner", "", "list: only the certificates of this user or slave (with --kind)")
	kind := fs.String("kind", store.CertUser, "list: user, slave or service (with --owner)")
	serial, rest := firstArg(args[1:])
	if args[0] == "revoke" && serial == "" {
		return fmt.Errorf("`cert revoke` needs a serial (see `cert list`): %w", errUsage)
	}
	st, err := adminSetup(ctx, fs, &c, rest, getenv)
	if err != nil {
		return err
	}
	defer func() { _ = st.Close() }()
	if args[0] == "revoke" {
		cert, err := st.RevokeCertificate(ctx, serial)
		if err != nil {
			return notFoundAs(err, "no certificate %q", serial)
		}
		fmt.Fprintf(stdout, "certificate %s of %s %s: revoked (refused at its next request, at every master)\n", serial, cert.Kind, cert.Owner)
		return nil
	}
	if *kind != store.CertUser && *kind != store.CertSlave && *kind != store.CertService {
		return fmt.Errorf("--kind %q: user, slave or service: %w", *kind, errUsage)
	}
	k := *kind
	if *owner == "" {
		k = ""
	}
	cs, err := st.ListCertificates(ctx, k, *owner)
	if err != nil {
		return err
	}
	now := time.Now()
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERIAL\tKIND\tOWNER\tNOT AFTER\tSTATE")
	for _, cert := range cs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", cert.Serial, cert.Kind, cert.Owner, cert.NotAfter.UTC().Format(time.DateTime), cert.State(now))
	}
	return tw.Flush()
}

// slaveDisable disables (or enables) a slave: it gets no jobs and no job secrets, the jobs
// assigned to it and not taken are queued again; with --revoke its certificates are revoked,
// so it gets 401 on the slave protocol and fences itself.
func slaveDisable(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c config
	fs := flag.NewFlagSet("slave "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	revoke := fs.Bool("revoke", false, "disable: also revoke the slave's certificates (it must join again with a new token)")
	name, rest := firstArg(args[1:])
	if name == "" {
		return fmt.Errorf("`slave %s` needs a slave name: %w", args[0], errUsage)
	}
	st, err := adminSetup(ctx, fs, &c, rest, getenv)
	if err != nil {
		return err
	}
	defer func() { _ = st.Close() }()
	disable := args[0] == "disable"
	requeued, err := st.SetSlaveDisabled(ctx, name, disable)
	if err != nil {
		return notFoundAs(err, "no slave %q", name)
	}
	if !disable {
		fmt.Fprintf(stdout, "slave %s: enabled\n", name)
		return nil
	}
	fmt.Fprintf(stdout, "slave %s: disabled (no jobs, no job secrets); %d assigned jobs queued again\n", name, len(requeued))
	if *revoke {
		serials, err := st.RevokeCertificatesOf(ctx, store.CertSlave, name)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "slave %s: %d certificates revoked\n", name, len(serials))
	}
	return nil
}

// notFoundAs words a store.ErrNotFound for the command line.
func notFoundAs(err error, format string, args ...any) error {
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf(format, args...)
	}
	return err
}
