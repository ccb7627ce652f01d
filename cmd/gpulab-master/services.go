package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/pki"
)

// Service identities from the command line (issue 13), working directly on the database:
//
//	gpulab-master service-cert --name NAME [--projects p1,p2] [--out FILE] [--password P]
//	gpulab-master service-revoke --name NAME
//	gpulab-master service-list

// serviceCert issues a service's certificate (creating the service, or renewing it with a new
// project list): a PEM with certificate and key, as user-cert writes one.
func serviceCert(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c config
	fs := flag.NewFlagSet("service-cert", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("name", "", "service name (required); the URN is urn:publicid:IDN+<authority>+service+<name>")
	projects := fs.String("projects", "", "comma-separated projects whose members the service may act for (default: any user)")
	pem := addPEMFlags(fs, getenv)
	days := fs.Int("days", int(pki.DefaultServiceValidity/(24*time.Hour)), "validity in days")
	st, err := adminSetup(ctx, fs, &c, args, getenv)
	if err != nil {
		return err
	}
	defer func() { _ = st.Close() }()
	password, err := pem.password(getenv)
	if err != nil {
		return err
	}
	if *name == "" {
		return fmt.Errorf("--name is required: %w", errUsage)
	}
	if *days <= 0 {
		return fmt.Errorf("--days %d: must be positive: %w", *days, errUsage)
	}
	ca, _, err := c.loadCA()
	if err != nil {
		return err
	}
	svc, cert, data, err := handlers.IssueServiceCertificate(ctx, st, ca, c.Authority, handlers.ServiceRequest{
		Name: *name, Projects: handlers.ParseProjectList(*projects), Validity: time.Duration(*days) * 24 * time.Hour, Password: password})
	if err != nil {
		return err
	}
	scope := "any user"
	if len(svc.Projects) > 0 {
		scope = "members of " + strings.Join(svc.Projects, ", ")
	}
	if wrote, err := pem.write(stdout, data); !wrote || err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote certificate %s of service %s (%s, acts for %s), valid until %s, to %s\n", cert.SerialNumber,
		svc.Name, pki.ServiceURN(c.Authority, svc.Name), scope, cert.NotAfter.UTC().Format(time.DateTime), *pem.out)
	return nil
}

// serviceRevoke disables a service and revokes all its certificates: its next request, at
// every master, gets 401. A new service-cert enables it again.
func serviceRevoke(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c config
	fs := flag.NewFlagSet("service-revoke", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("name", "", "service name (required)")
	st, err := adminSetup(ctx, fs, &c, args, getenv)
	if err != nil {
		return err
	}
	defer func() { _ = st.Close() }()
	if *name == "" {
		return fmt.Errorf("--name is required: %w", errUsage)
	}
	serials, err := st.RevokeService(ctx, *name)
	if err != nil {
		return notFoundAs(err, "no service %q", *name)
	}
	fmt.Fprintf(stdout, "service %s: disabled, %d certificates revoked (refused at its next request, at every master)\n", *name, len(serials))
	return nil
}

// serviceList lists the services: projects, state, certificates.
func serviceList(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c config
	fs := flag.NewFlagSet("service-list", flag.ContinueOnError)
	fs.SetOutput(stderr)
	st, err := adminSetup(ctx, fs, &c, args, getenv)
	if err != nil {
		return err
	}
	defer func() { _ = st.Close() }()
	svcs, err := st.ListServices(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tACTS FOR\tSTATE\tCERTIFICATES\tLAST ISSUED")
	for _, s := range svcs {
		scope, state, last := "any user", "enabled", "-"
		if len(s.Projects) > 0 {
			scope = "members of " + strings.Join(s.Projects, ",")
		}
		if s.Disabled {
			state = "disabled"
		}
		if s.LastIssued.Valid {
			last = s.LastIssued.Time.UTC().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", s.Name, scope, state, s.Certificates, last)
	}
	return tw.Flush()
}
