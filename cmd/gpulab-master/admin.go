package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/opengpulab/gpulab/internal/secretfile"
	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/store"
)

// adminSetup parses the common flags of an admin command and opens the store and migrates, so
// admin commands work on a fresh database too.
func adminSetup(ctx context.Context, fs *flag.FlagSet, c *config, args []string, getenv func(string) string) (*store.Store, error) {
	c.addCommon(fs, getenv)
	if _, err := parseFlags(fs, args, getenv); err != nil {
		return nil, err
	}
	st, err := c.openStore(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := st.Migrate(ctx); err != nil {
		_ = st.Close()
		return nil, err
	}
	return st, nil
}

func userCert(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c config
	fs := flag.NewFlagSet("user-cert", flag.ContinueOnError)
	fs.SetOutput(stderr)
	user := fs.String("user", "", "user name (required); the URN is urn:publicid:IDN+<authority>+user+<name>")
	email := fs.String("email", "", "e-mail address, put in the certificate's RFC822 SubjectAltName (required)")
	pem := addPEMFlags(fs, getenv)
	days := fs.Int("days", int(pki.DefaultUserValidity/(24*time.Hour)), "validity in days")
	admin := fs.Bool("admin", false, "make the user an admin")
	st, err := adminSetup(ctx, fs, &c, args, getenv)
	if err != nil {
		return err
	}
	defer func() { _ = st.Close() }()
	password, err := pem.password(getenv)
	if err != nil {
		return err
	}
	if !pki.NamePattern.MatchString(*user) {
		return fmt.Errorf("--user %q: must be lowercase letters, digits, '.', '_' or '-': %w", *user, errUsage)
	}
	if *email == "" {
		return fmt.Errorf("--email is required: %w", errUsage)
	}
	ca, _, err := c.loadCA()
	if err != nil {
		return err
	}
	urn := pki.UserURN(c.Authority, *user)
	if _, err := st.UpsertUser(ctx, urn, *user, *email, *admin); err != nil {
		return err
	}
	if *days <= 0 {
		return fmt.Errorf("--days %d: must be positive: %w", *days, errUsage)
	}
	cert, key, err := ca.IssueClient(pki.ClientSpec{Kind: pki.KindUser, URN: urn, Email: *email, Name: *user, Validity: time.Duration(*days) * 24 * time.Hour})
	if err != nil {
		return err
	}
	// Recorded, so that it can be listed and revoked (`gpulab-master cert`).
	fp, err := pki.SSHFingerprint(cert.PublicKey)
	if err != nil {
		return err
	}
	if err := st.RecordCertificate(ctx, cert.SerialNumber.String(), store.CertUser, *user, cert.NotAfter, fp); err != nil {
		return err
	}
	data, err := pki.ClientPEM(cert, key, password)
	if err != nil {
		return err
	}
	if wrote, err := pem.write(stdout, data); !wrote || err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote certificate %s of %s (%s), valid until %s, to %s\n", cert.SerialNumber, *user, urn, cert.NotAfter.UTC().Format(time.DateTime), *pem.out)
	return nil
}

// pemFlags are the output flags of the commands that issue a certificate with its key.
type pemFlags struct {
	out, pass, passFile *string
}

func addPEMFlags(fs *flag.FlagSet, getenv func(string) string) pemFlags {
	return pemFlags{
		out:      fs.String("out", "", "write the PEM here (mode 0600) instead of stdout"),
		pass:     fs.String("password", "", "encrypt the key with this password; prefer --password-file or the env GPULAB_CERT_PASSWORD (flags show in ps)"),
		passFile: fs.String("password-file", getenv("GPULAB_CERT_PASSWORD_FILE"), "file (mode 0600) holding the password that encrypts the key (env GPULAB_CERT_PASSWORD_FILE)"),
	}
}

// password is the key's password from --password, --password-file or GPULAB_CERT_PASSWORD,
// the last read only after parsing so that -h never shows it.
func (p pemFlags) password(getenv func(string) string) (string, error) {
	pass := *p.pass
	if pass == "" && *p.passFile == "" {
		pass = getenv("GPULAB_CERT_PASSWORD")
	}
	pass, err := secretfile.Either("--password", pass, *p.passFile)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errUsage, err)
	}
	return pass, nil
}

// write puts the PEM in --out (mode 0600), or on stdout without it; wrote says which.
func (p pemFlags) write(stdout io.Writer, data []byte) (wrote bool, err error) {
	if *p.out == "" {
		_, err = stdout.Write(data)
		return false, err
	}
	if err := os.WriteFile(*p.out, data, 0o600); err != nil {
		return false, fmt.Errorf("write certificate: %w", err)
	}
	return true, nil
}

func projectCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("expected `project add NAME` or `project list`: %w", errUsage)
	}
	var c config
	switch args[0] {
	case "add":
		fs := flag.NewFlagSet("project add", flag.ContinueOnError)
		fs.SetOutput(stderr)
		gid := fs.Int("gid", 0, "unix group id of the project's storage (default: the next free one from 20000)")
		desc := fs.String("description", "", "description")
		name, rest := firstArg(args[1:])
		st, err := adminSetup(ctx, fs, &c, rest, getenv)
		if err != nil {
			return err
		}
		defer func() { _ = st.Close() }()
		if !pki.NamePattern.MatchString(name) {
			return fmt.Errorf("project name %q: must be lowercase letters, digits, '.', '_' or '-': %w", name, errUsage)
		}
		p, err := st.CreateProject(ctx, pki.ProjectURN(c.Authority, name), name, *desc, *gid)
		if err != nil {
			if errors.Is(err, store.ErrConflict) {
				return fmt.Errorf("project %s (or gid %d) exists already", name, *gid)
			}
			return err
		}
		fmt.Fprintf(stdout, "created project %s (%s, gid %d)\n", p.Name, p.URN, p.GID)
		return nil
	case "list":
		fs := flag.NewFlagSet("project list", flag.ContinueOnError)
		fs.SetOutput(stderr)
		st, err := adminSetup(ctx, fs, &c, args[1:], getenv)
		if err != nil {
			return err
		}
		defer func() { _ = st.Close() }()
		ps, err := st.ListProjects(ctx)
		if err != nil {
			return err
		}
		for _, p := range ps {
			members, err := st.ListMembers(ctx, p.ID)
			if err != nil {
				return err
			}
			names := make([]string, len(members))
			for i, m := range members {
				names[i] = m.Name
			}
			fmt.Fprintf(stdout, "%-20s gid %-6d %s  members: %v\n", p.Name, p.GID, p.URN, names)
		}
		return nil
	}
	return fmt.Errorf("unknown `project %s`: %w", args[0], errUsage)
}

func memberCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) < 1 || (args[0] != "add" && args[0] != "remove") {
		return fmt.Errorf("expected `member add PROJECT USER` or `member remove PROJECT USER`: %w", errUsage)
	}
	var c config
	fs := flag.NewFlagSet("member "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	email := fs.String("email", "", "e-mail of a user that does not exist yet")
	projectName, rest := firstArg(args[1:])
	userName, rest := firstArg(rest)
	st, err := adminSetup(ctx, fs, &c, rest, getenv)
	if err != nil {
		return err
	}
	defer func() { _ = st.Close() }()
	if projectName == "" || userName == "" {
		return fmt.Errorf("expected `member %s PROJECT USER`: %w", args[0], errUsage)
	}
	p, err := st.GetProjectByName(ctx, projectName)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no project %s (create it with `gpulab-master project add %s`)", projectName, projectName)
	} else if err != nil {
		return err
	}
	if args[0] == "remove" {
		u, err := st.GetUserByName(ctx, userName)
		if err != nil {
			return err
		}
		if err := st.RemoveMember(ctx, p.ID, u.ID); err != nil {
			return fmt.Errorf("%s is not a member of %s: %w", userName, projectName, err)
		}
		fmt.Fprintf(stdout, "removed %s from project %s\n", userName, projectName)
		return nil
	}
	if !pki.NamePattern.MatchString(userName) {
		return fmt.Errorf("user name %q: must be lowercase letters, digits, '.', '_' or '-': %w", userName, errUsage)
	}
	u, err := st.UpsertUser(ctx, pki.UserURN(c.Authority, userName), userName, *email, false)
	if err != nil {
		return err
	}
	if err := st.AddMember(ctx, p.ID, u.ID); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s is a member of project %s\n", userName, projectName)
	return nil
}

func clusterCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("expected `cluster add ID` or `cluster list`: %w", errUsage)
	}
	var c config
	switch args[0] {
	case "add":
		fs := flag.NewFlagSet("cluster add", flag.ContinueOnError)
		fs.SetOutput(stderr)
		name := fs.String("name", "", "cluster name")
		desc := fs.String("description", "", "description")
		private := fs.Bool("private", false, "a private cluster: other projects' jobs run there only as guests")
		idArg, rest := firstArg(args[1:])
		st, err := adminSetup(ctx, fs, &c, rest, getenv)
		if err != nil {
			return err
		}
		defer func() { _ = st.Close() }()
		id, err := strconv.Atoi(idArg)
		if err != nil || id < 1 {
			return fmt.Errorf("cluster id %q: must be a positive integer: %w", idArg, errUsage)
		}
		cl, err := st.CreateCluster(ctx, store.Cluster{ID: id, Name: *name, Description: *desc, Private: *private, GuestLimitS: 3600})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "created cluster %d %q\n", cl.ID, cl.Name)
		return nil
	case "list":
		fs := flag.NewFlagSet("cluster list", flag.ContinueOnError)
		fs.SetOutput(stderr)
		st, err := adminSetup(ctx, fs, &c, args[1:], getenv)
		if err != nil {
			return err
		}
		defer func() { _ = st.Close() }()
		cs, err := st.ListClusters(ctx)
		if err != nil {
			return err
		}
		for _, cl := range cs {
			fmt.Fprintf(stdout, "%-4d %-20s private=%v\n", cl.ID, cl.Name, cl.Private)
		}
		return nil
	}
	return fmt.Errorf("unknown `cluster %s`: %w", args[0], errUsage)
}

// firstArg splits off a leading positional argument, so `project add NAME --gid 5` works
// although the flag package stops at the first non-flag.
func firstArg(args []string) (string, []string) {
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		return args[0], args[1:]
	}
	return "", args
}
