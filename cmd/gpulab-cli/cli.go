package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/opengpulab/gpulab/client"
	"github.com/opengpulab/gpulab/internal/secretfile"
)

// version is the client's version, set at build time with
// -ldflags "-X main.version=1.2.3"; otherwise taken from the module's build information.
var version = ""

func clientVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return strings.TrimPrefix(bi.Main.Version, "v")
	}
	return "dev"
}

// Exit codes, as imec's CLI (click) uses them.
const (
	exitOK    = 0
	exitError = 1 // the API or the job said no
	exitUsage = 2 // the command line is wrong
)

// app is one invocation of the CLI: its environment, streams and global options. Nothing in
// it is global state, so tests run many invocations side by side.
type app struct {
	ctx    context.Context
	env    func(string) string
	stdin  io.Reader
	stdout *printer
	stderr *printer

	now func() time.Time
	loc *time.Location
	// waitPoll and logPoll are how often `wait` and `log -f` ask the master again.
	waitPoll, logPoll time.Duration
	// maxPollErrors is how many failed polls in a row a wait tolerates when the failure is not
	// one that passes by itself (client.Temporary: those never end a wait).
	maxPollErrors int

	g globalOptions

	// readPassword prompts for the certificate's password; nil when stdin is not a terminal.
	readPassword func(prompt string) (string, error)

	cl *client.Client
}

// globalOptions are the options of imec's CLI that come before the command (here they may
// also come after it).
type globalOptions struct {
	cert     string
	password string
	// passwordFile holds the password (mode 0600), so it stays off the command line.
	passwordFile string
	masterURL    string
	serverCert   string
	// retryMaxTime bounds the retries of one API call ("" means the client's default).
	retryMaxTime string
	debug        bool
	version      bool
}

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(a *app, args []string) error
}

// commands lists the subcommands in the order the help shows them.
var commands = []*command{
	{name: "submit", summary: "Submit a job request (JSON file or stdin); prints the job's ID", run: (*app).cmdSubmit},
	{name: "jobs", summary: "List jobs, or show one job in detail", run: (*app).cmdJobs},
	{name: "log", summary: "Show a job's output (-f to follow it)", run: (*app).cmdLog},
	{name: "debug", summary: "Show a job's events (state changes, warnings, scheduler explanations)", run: (*app).cmdDebug},
	{name: "wait", summary: "Wait until a job runs (--wait-run) or ends (--wait-done)", run: (*app).cmdWait},
	{name: "cancel", summary: "Cancel jobs (must be typed in full)", run: (*app).cmdCancel},
	{name: "halt", summary: "Halt a running job (tests its HALT procedure)", run: (*app).cmdHalt},
	{name: "hold", summary: "Put queued jobs on hold", run: (*app).cmdHold},
	{name: "release", summary: "Release jobs that are on hold", run: (*app).cmdRelease},
	{name: "rm", summary: "Delete jobs (must be typed in full)", run: (*app).cmdRm},
	{name: "clusters", summary: "Show clusters and their slaves with free/total resources", run: (*app).cmdClusters},
	{name: "convert", summary: "Convert a version 1 job definition to a version 2 job request", run: (*app).cmdConvert},
	{name: "version", summary: "Show the client's and the master's versions", run: (*app).cmdVersion},
	{name: "ssh", summary: "Log in to a running job of yours with ssh, or run a command there", run: (*app).cmdSSH},
	{name: "sftp", summary: "Copy files from and to a running job of yours with sftp", run: (*app).cmdSFTP},
	{name: "interactive", summary: "Start an interactive job and log in to it with ssh", run: (*app).cmdInteractive},
	{name: "certs", summary: "List your API certificates, or revoke one by serial", run: (*app).cmdCerts},
	{name: "admin", summary: "Admins: list users, disable/enable users and slaves", run: (*app).cmdAdmin},
	{name: "help", summary: "Show the help of a command"}, // run by main: it needs this table
}

// aliases are the extra names imec's CLI accepts for some commands.
var aliases = map[string]string{
	"logs":   "log",
	"job":    "jobs",
	"slave":  "clusters",
	"slaves": "clusters",
	// "s" was submit's prefix before ssh and sftp came: it stays submit.
	"s": "submit",
}

// noPrefix lists the commands that must be typed in full: a prefix of them never resolves,
// even to another command, so that a typo can never cancel or delete a job.
var noPrefix = []string{"rm", "cancel"}

// resolveCommand finds the command a user meant: the exact name or alias, else the one
// command that the name is a prefix of. A name that is a prefix of a dangerous command (rm,
// cancel) resolves to nothing, as in imec's CLI ("r" is not "release", "c" not "clusters").
func resolveCommand(name string) (*command, error) {
	if target, ok := aliases[name]; ok {
		name = target
	}
	for _, c := range commands {
		if c.name == name {
			return c, nil
		}
	}
	if name == "" {
		return nil, usagef("no command given")
	}
	for _, d := range noPrefix {
		if strings.HasPrefix(d, name) {
			return nil, usagef("unknown command %q (%s must be typed in full)", name, d)
		}
	}
	var matches []*command
	for _, c := range commands {
		if strings.HasPrefix(c.name, name) && !slices.Contains(noPrefix, c.name) {
			matches = append(matches, c)
		}
	}
	switch len(matches) {
	case 0:
		return nil, usagef("unknown command %q", name)
	case 1:
		return matches[0], nil
	}
	names := make([]string, len(matches))
	for i, m := range matches {
		names[i] = m.name
	}
	slices.Sort(names)
	return nil, usagef("ambiguous command %q: it could be %s", name, strings.Join(names, ", "))
}

// run executes one invocation and returns its exit code.
func run(args []string, env func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	a := newApp(ctx, env, stdin, stdout, stderr)
	return a.main(args)
}

func newApp(ctx context.Context, env func(string) string, stdin io.Reader, stdout, stderr io.Writer) *app {
	a := &app{
		ctx:           ctx,
		env:           env,
		stdin:         stdin,
		stdout:        &printer{w: stdout},
		stderr:        &printer{w: stderr},
		now:           time.Now,
		loc:           time.Local,
		waitPoll:      2 * time.Second,
		logPoll:       time.Second,
		maxPollErrors: 5,
	}
	if tz := env("TZ"); tz != "" {
		if loc, err := time.LoadLocation(tz); err == nil {
			a.loc = loc
		}
	}
	if f, ok := stdin.(*os.File); ok && isTerminal(f) {
		a.readPassword = func(prompt string) (string, error) {
			a.stderr.printf("%s", prompt)
			pw, err := readPasswordNoEcho(f)
			a.stderr.printf("\n")
			return pw, err
		}
	}
	return a
}

// main parses the global options, runs the command and maps its error to an exit code.
func (a *app) main(args []string) int {
	a.g = globalOptions{
		cert:         a.env("GPULAB_CERT"),
		password:     a.env("GPULAB_PASSWORD"),
		passwordFile: a.env("GPULAB_PASSWORD_FILE"),
		masterURL:    firstNonEmpty(a.env("GPULAB_API_BASE"), a.env("GPULAB_CUSTOM_MASTER_URL")),
		serverCert:   a.env("GPULAB_SERVER_CERT"),
		retryMaxTime: a.env("GPULAB_RETRY_MAX_TIME"),
	}
	fs := newFlagSet("gpulab-cli", "gpulab-cli [global options] COMMAND [options] [arguments]", "")
	a.registerGlobals(fs)
	fs.Bool(&a.g.version, "version", "print the client's version and exit")
	fs.fs.SetOutput(io.Discard)
	err := fs.fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		a.printMainHelp()
		return exitOK
	case err != nil:
		return a.fail(&usageError{msg: cleanFlagError(err)})
	case a.g.version:
		a.stdout.printf("%s\n", clientVersion())
		return exitOK
	}
	rest := fs.fs.Args()
	if len(rest) == 0 {
		a.printMainHelp()
		return exitUsage
	}
	cmd, err := resolveCommand(rest[0])
	if err != nil {
		return a.fail(err)
	}
	if cmd.name == "help" {
		err = a.cmdHelp(rest[1:])
	} else {
		err = cmd.run(a, rest[1:])
	}
	if errors.Is(err, errHelp) {
		return exitOK
	}
	if errors.Is(err, errAlreadyReported) {
		return exitError
	}
	var es *exitStatus
	if errors.As(err, &es) {
		return es.code // ssh's own status: its messages are on stderr already
	}
	if err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			a.stderr.printf("Error: %s\n", ue.msg)
			a.stderr.printf("Run 'gpulab-cli %s --help' for its usage.\n", cmd.name)
			return exitUsage
		}
		return a.fail(err)
	}
	if a.stdout.err != nil {
		a.stderr.printf("Error: write output: %v\n", a.stdout.err)
		return exitError
	}
	return exitOK
}

// fail prints an error the way imec's CLI does ("Error: ...") with a hint when one helps, and
// returns the exit code for it.
func (a *app) fail(err error) int {
	var ue *usageError
	if errors.As(err, &ue) {
		a.stderr.printf("Error: %s\n", ue.msg)
		a.stderr.printf("Run 'gpulab-cli --help' for the list of commands.\n")
		return exitUsage
	}
	a.stderr.printf("Error: %s\n", err)
	if h := a.hint(err); h != "" {
		a.stderr.printf("%s\n", h)
	}
	return exitError
}

// hint suggests what to do about an error, naming this CLI's own flags.
func (a *app) hint(err error) string {
	switch {
	case errors.Is(err, client.ErrServerNotTrusted):
		return "Hint: give the master's CA certificate with --servercert FILE (or GPULAB_SERVER_CERT)."
	case errors.Is(err, client.ErrCertificateRejected):
		return "Hint: this master does not accept your certificate; download your login PEM from its portal (profile page)."
	case errors.Is(err, client.ErrPasswordRequired):
		return "Hint: give the password with -p/--password (or GPULAB_PASSWORD)."
	case errors.Is(err, client.ErrOutcomeUnknown):
		return "Hint: the master may have stored the job all the same: look with 'gpulab-cli jobs' before you submit it again."
	case errors.Is(err, client.ErrUnreachable):
		return fmt.Sprintf("Hint: check the master's address (--custom-master-url or GPULAB_API_BASE; now %s).", a.baseURLForHint())
	case client.Temporary(err):
		return "Hint: the master is busy or restarting; --retry-max-time (GPULAB_RETRY_MAX_TIME) sets how long to keep trying."
	}
	switch client.StatusCode(err) {
	case http.StatusUnauthorized:
		return "Hint: give your login PEM with --cert FILE (or GPULAB_CERT)."
	}
	return ""
}

func (a *app) baseURLForHint() string {
	us, err := client.ParseBaseURLs(a.g.masterURL)
	if err != nil {
		return a.g.masterURL
	}
	s := make([]string, len(us))
	for i, u := range us {
		s[i] = u.String()
	}
	return strings.Join(s, ", ")
}

// registerGlobals adds the global options to a flag set. Each command's flag set gets them too,
// with the values parsed so far as defaults, so they may follow the command name.
func (a *app) registerGlobals(fs *flagSet) {
	fs.String(&a.g.cert, "cert", "PEM", "your login PEM: certificate and private key, from the portal's\nprofile page [$GPULAB_CERT]")
	fs.String(&a.g.password, "p,password", "PASSWORD", "password of the PEM's private key, if it is encrypted\n[$GPULAB_PASSWORD]; asked for when needed on a terminal")
	fs.String(&a.g.passwordFile, "password-file", "FILE", "file (mode 0600) holding the PEM's password, which then stays\noff the command line [$GPULAB_PASSWORD_FILE]")
	fs.String(&a.g.masterURL, "custom-master-url", "URL", "the master's URL up to /api, as for imec's client, e.g.\nhttps://gpulab.example.org/api/ (https://host:port and the full API base\nhttps://host/api/gpulab/v3.1 also work); several masters separated by commas:\nthe next is used when one cannot be reached\n[$GPULAB_API_BASE] (default "+client.DefaultBaseURL+")")
	fs.String(&a.g.serverCert, "servercert", "PEM", "CA certificate to trust for the master, for a master with its own CA\n[$GPULAB_SERVER_CERT]")
	fs.String(&a.g.retryMaxTime, "retry-max-time", "DURATION", "how long one API call keeps retrying while the master cannot be\nreached or answers 502/503/504, e.g. 90s or 5m (seconds without unit;\n0: no retries) [$GPULAB_RETRY_MAX_TIME] (default 1m)")
	fs.Bool(&a.g.debug, "debug", "print each API request and answer, and each retry, on stderr")
}

// parseCommand parses a command's arguments, accepting the global options among them.
func (a *app) parseCommand(fs *flagSet, args []string) ([]string, error) {
	before := len(fs.help)
	a.registerGlobals(fs)
	fs.hideLast(len(fs.help) - before)
	pos, err := fs.parse(args)
	if errors.Is(err, errHelp) {
		fs.printHelp(a.stdout.w)
	}
	return pos, err
}

func (a *app) printMainHelp() {
	p := a.stdout
	p.printf("gpulab-cli %s: the command-line client of GPULab\n\n", clientVersion())
	p.printf("Usage: gpulab-cli [global options] COMMAND [options] [arguments]\n\n")
	p.printf("Global options:\n")
	fs := newFlagSet("gpulab-cli", "", "")
	g := a.g
	a.registerGlobals(fs)
	a.g = g
	var rows [][2]string
	for _, h := range fs.help {
		left := ""
		for i, n := range h.names {
			if i > 0 {
				left += ", "
			}
			if len(n) == 1 {
				left += "-" + n
			} else {
				left += "--" + n
			}
		}
		rows = append(rows, [2]string{left + " " + h.arg, h.usage})
	}
	rows = append(rows, [2]string{"--version", "print the client's version and exit"})
	printTwoColumns(p, rows)
	p.printf("\nCommands (any unambiguous prefix works, except for rm and cancel):\n")
	rows = rows[:0]
	for _, c := range commands {
		rows = append(rows, [2]string{c.name, c.summary})
	}
	printTwoColumns(p, rows)
	p.printf("\nRun 'gpulab-cli COMMAND --help' for the options of a command.\n")
}

// cmdHelp shows the help of a command: `gpulab-cli help jobs` is `gpulab-cli jobs --help`.
func (a *app) cmdHelp(args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		a.printMainHelp()
		return nil
	}
	cmd, err := resolveCommand(args[0])
	if err != nil {
		return err
	}
	if cmd.name == "help" {
		a.printMainHelp()
		return nil
	}
	return cmd.run(a, []string{"--help"})
}

// client returns the API client, built on first use. needCert says whether the command needs
// the user's certificate. Commands that do not (clusters, version) use it when it is
// configured, and when it cannot be used they warn and go on without it, as imec's CLI does.
func (a *app) client(needCert bool) (*client.Client, error) {
	if a.cl != nil {
		return a.cl, nil
	}
	retryMax, err := parseRetryMaxTime(a.g.retryMaxTime)
	if err != nil {
		return nil, err
	}
	if a.g.passwordFile != "" {
		if a.g.password, err = secretfile.Either("--password", a.g.password, expandHome(a.g.passwordFile, a.env)); err != nil {
			return nil, usagef("%v", err)
		}
	}
	cfg := client.Config{
		BaseURL:      a.g.masterURL,
		Password:     a.g.password,
		UserAgent:    "gpulab-cli/" + clientVersion(),
		RetryMaxTime: retryMax,
	}
	if a.g.debug {
		cfg.Debug = a.stderr.w
	}
	if a.g.serverCert != "" {
		data, err := os.ReadFile(expandHome(a.g.serverCert, a.env))
		if err != nil {
			return nil, fmt.Errorf("read server CA certificate: %w", err)
		}
		cfg.ServerCA, cfg.ServerCAName = data, a.g.serverCert
	}
	if a.g.cert == "" && needCert {
		return nil, usagef("this command needs your login PEM: give it with --cert FILE (or GPULAB_CERT)")
	}
	cl, err := a.newClient(cfg)
	if err != nil && !needCert && a.g.cert != "" {
		a.stderr.printf("Warning: %v\nContinuing without the certificate.\n", err)
		a.g.cert = ""
		cl, err = a.newClient(cfg)
	}
	if err != nil {
		return nil, err
	}
	a.cl = cl
	return cl, nil
}

// newClient builds the client with the certificate in a.g.cert, if any, asking for its
// password on the terminal when it is encrypted and none was given.
func (a *app) newClient(cfg client.Config) (*client.Client, error) {
	if a.g.cert != "" {
		data, err := os.ReadFile(expandHome(a.g.cert, a.env))
		if err != nil {
			return nil, fmt.Errorf("read certificate: %w", err)
		}
		cfg.CertPEM, cfg.CertName = data, a.g.cert
	}
	cl, err := client.New(cfg)
	if errors.Is(err, client.ErrPasswordRequired) && a.readPassword != nil {
		pw, perr := a.readPassword(fmt.Sprintf("Password for %s: ", a.g.cert))
		if perr != nil {
			return nil, fmt.Errorf("read password: %w", perr)
		}
		cfg.Password = pw
		a.g.password = pw
		cl, err = client.New(cfg)
	}
	return cl, err
}

// identity returns the user's identity from the certificate, for commands that filter on
// "my" jobs or qualify a project name.
func (a *app) identity() (client.Identity, error) {
	cl, err := a.client(true)
	if err != nil {
		return client.Identity{}, err
	}
	id, ok := cl.Identity()
	if !ok || id.UserURN == "" {
		return client.Identity{}, fmt.Errorf("certificate %s holds no user URN (URI SubjectAltName)", a.g.cert)
	}
	return id, nil
}

// parseRetryMaxTime reads --retry-max-time: a Go duration ("90s", "5m") or, as curl's option
// of the same name takes it, a number of seconds. "" is the client's default; 0 turns retries
// off.
func parseRetryMaxTime(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		secs, serr := strconv.ParseFloat(s, 64)
		if serr != nil {
			return 0, usagef("--retry-max-time %q: want a duration such as 90s or 5m, or seconds", s)
		}
		d = time.Duration(secs * float64(time.Second))
	}
	switch {
	case d < 0:
		return 0, usagef("--retry-max-time %q: must not be negative", s)
	case d == 0:
		return -1, nil // no retries
	}
	return d, nil
}

func expandHome(path string, env func(string) string) string {
	if path == "~" || strings.HasPrefix(path, "~/") {
		if home := env("HOME"); home != "" {
			return home + path[1:]
		}
	}
	return path
}

func firstNonEmpty(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}

// printer writes to a stream and remembers the first write error, so that a closed pipe is
// reported once at the end instead of checked after every line.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) printf(format string, args ...any) {
	if p.err != nil {
		return
	}
	_, p.err = fmt.Fprintf(p.w, format, args...)
}

func (p *printer) write(b []byte) {
	if p.err != nil {
		return
	}
	_, p.err = p.w.Write(b)
}

// sleep waits for d or until the invocation is interrupted.
func (a *app) sleep(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-a.ctx.Done():
		return fmt.Errorf("interrupted: %w", a.ctx.Err())
	case <-t.C:
		return nil
	}
}
