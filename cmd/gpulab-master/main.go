// Command gpulab-master is the GPULab master: one HTTPS server for the JSON API, the portal and
// the slave protocol over Postgres, with the scheduler loop; plus the admin commands that manage
// users, projects, clusters, slave tokens and certificates, and the trace simulator.
//
//	gpulab-master [serve]                          run the master (migrates the schema first)
//	gpulab-master migrate                          apply schema migrations and exit
//	gpulab-master user-cert --user N --email E     write a user's client certificate PEM
//	gpulab-master project add NAME                 create a project
//	gpulab-master member add PROJECT USER          add a user to a project
//	gpulab-master cluster add ID [--name N]        create a cluster
//	gpulab-master slave-token --name N --cluster C a one-time token for a slave to join
//	gpulab-master slave drain|open NAME            stop / resume placing jobs on a slave
//	gpulab-master slave disable|enable NAME        no jobs, no job secrets for a slave
//	gpulab-master user list|disable|enable|link    users, their logins, disabling
//	gpulab-master cert list|revoke                 issued certificates, revocation
//	gpulab-master service-cert --name N            a service identity's certificate (acts for users)
//	gpulab-master service-revoke|service-list      revoke a service / list services
//	gpulab-master config check FILE               validate a configuration file, print the settings
//	gpulab-master simulate --trace CSV             replay a workload trace through the scheduler
//
// Configuration comes from flags, each also an environment variable and a key of the TOML file
// named by --config or GPULAB_CONFIG (precedence flag > environment > file > default; see -h
// and `gpulab-master config example`).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// errUsage marks errors that are the caller's mistake (exit code 2).
var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "serve":
		err = serve(ctx, args, getenv, stderr)
	case "migrate":
		err = migrate(ctx, args, getenv, stdout, stderr)
	case "user-cert":
		err = userCert(ctx, args, getenv, stdout, stderr)
	case "project":
		err = projectCmd(ctx, args, getenv, stdout, stderr)
	case "member":
		err = memberCmd(ctx, args, getenv, stdout, stderr)
	case "cluster":
		err = clusterCmd(ctx, args, getenv, stdout, stderr)
	case "slave-token":
		err = slaveToken(ctx, args, getenv, stdout, stderr)
	case "slave":
		err = slaveCmd(ctx, args, getenv, stdout, stderr)
	case "simulate":
		err = simulate(ctx, args, getenv, stdout, stderr)
	case "user":
		err = userCmd(ctx, args, getenv, stdout, stderr)
	case "cert":
		err = certCmd(ctx, args, getenv, stdout, stderr)
	case "service-cert":
		err = serviceCert(ctx, args, getenv, stdout, stderr)
	case "service-revoke":
		err = serviceRevoke(ctx, args, getenv, stdout, stderr)
	case "service-list":
		err = serviceList(ctx, args, getenv, stdout, stderr)
	case "config":
		err = configCmd(ctx, args, getenv, stdout, stderr)

	case "mail-list":
		err = mailList(ctx, args, getenv, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "gpulab-master: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "gpulab-master %s: %v\n", cmd, err)
	if errors.Is(err, errUsage) {
		return 2
	}
	return 1
}

const usage = `Usage: gpulab-master COMMAND [flags]

Commands:
  serve                          run the master (the default); applies migrations first
  migrate                        apply database schema migrations and exit
  user-cert --user NAME --email E [--out FILE] [--password P]
                                 write a user's API client certificate (PEM with key)
  project add NAME [--gid N] [--description D]
                                 create a project
  project list                   list projects and their members
  member add PROJECT USER        add a user to a project (the user is created if new)
  member remove PROJECT USER     remove a user from a project
  cluster add ID [--name N] [--private]
                                 create a cluster
  cluster list                   list clusters
  slave-token --name NAME --cluster ID [--valid 24h]
                                 make a one-time token with which a slave joins
  slave drain NAME | slave open NAME
                                 stop / resume placing jobs on a slave
  slave disable NAME [--revoke] | slave enable NAME
                                 no jobs and no job secrets for a slave (--revoke: and its certificates)
  user list | user disable NAME | user enable NAME
                                 list users (with their OpenID login) / refuse or allow a user
  user link NAME --issuer I --subject S
                                 link an OpenID login to an existing account
  cert list [--owner NAME --kind user|slave] | cert revoke SERIAL
                                 list issued certificates / revoke one (by serial)
  service-cert --name NAME [--projects p1,p2] [--out FILE] [--password P]
                                 write a service's certificate (PEM with key); it acts for any
                                 user, or for members of the projects, named in X-GPULab-Act-As
  service-revoke --name NAME     disable a service and revoke all its certificates
  service-list                   list services
  config check FILE [flags]      validate a configuration file (with the environment and flags)
                                 and print the effective settings, secrets redacted
  config example                 print a configuration file of every setting and its default
  mail-list [--pending] [--limit N]
                                 list the job mails of the outbox, with attempts and last error
  simulate --trace CSV [--policy fifo|fair|fair-halt|sjf-oracle|las|all] [--seed N] [--slaves N] [--gpus-per-slave G] [--jobs N]
                                 replay a workload trace through the scheduler in simulated time

Run 'gpulab-master COMMAND -h' for the flags of a command.
`
