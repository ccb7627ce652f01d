// Package testmaster runs a real master for tests: real Postgres (a fresh database from
// testenv), real TLS on a loopback port with a test CA, and real client certificates. API, CLI
// and end-to-end tests talk to it exactly as users talk to a deployed master.
package testmaster

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/leader"
	"github.com/opengpulab/gpulab/metrics"

	"github.com/opengpulab/gpulab/mail"
	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/scheduler"
	"github.com/opengpulab/gpulab/store"
	"github.com/opengpulab/gpulab/web"
)

// Authority is the URN authority of test masters.
const Authority = "test.gpulab"

// Master is a running test master.
type Master struct {
	t testing.TB
	// URL is the server root (https://127.0.0.1:PORT); APIBase the v3.1 API base.
	URL, APIBase string
	CA           *pki.CA
	Store        *store.Store
	// DatabaseURL is the master's test database (see DatabaseOutage; give it to
	// Options.DatabaseURL of a second master on the same database).
	DatabaseURL string
	// Dir holds CA and certificate files for tools that read files (the CLI, curl).
	Dir    string
	CAFile string
	// IdP is the development identity provider of a master started with Options.DevIdP.
	IdP *DevIdP
}

// Options tweak a test master.
type Options struct {
	Admins []string
	Job    *job.Options
	// Scheduler runs the scheduler loop (with short intervals) besides the API.
	Scheduler bool
	// Loop overrides the loop's timings (defaults: pass every 200 ms, slave offline after 10 s
	// without a heartbeat, its jobs given up 10 s (its slave's fence time) plus a 1 s margin
	// later). Heartbeats come every 500 ms whatever the engine does; the graces are generous
	// for two test suites sharing the machine's two cores.
	Loop leader.Config
	// Leases overrides the store's leases (default store.DefaultLeases).
	Leases *store.Leases
	// MissingGrace is how long a heartbeat may leave out a job before it is taken as gone
	// (default: the handlers' default).
	MissingGrace time.Duration
	// DatabaseURL, when set, is the database to use (another master's, to run several
	// masters on one database) instead of a fresh one.
	DatabaseURL string
	// MaxLongPoll bounds a slave's long poll (default 5 s).
	MaxLongPoll time.Duration
	// HeartbeatInterval is what slaves are told (default 500 ms).
	HeartbeatInterval time.Duration
	// HeartbeatJitter spreads the intervals told as --heartbeat-jitter does (0: serve's
	// default, handlers.DefaultHeartbeatJitter; negative: none, every reply names exactly
	// HeartbeatInterval).
	HeartbeatJitter float64
	// UsageFlush is --usage-flush (default store.DefaultUsageFlush, at most a quarter of the
	// idle check's window as the master makes it).
	UsageFlush time.Duration
	// OIDC turns the portal login on against a given provider. Its RedirectURL may be left
	// empty (derived from the request); the provider must accept URL+"/auth/callback", so
	// give Listener too when the provider needs the master's address in advance.
	OIDC *web.OIDCConfig
	// Listener, when set, is where the master serves (its URL is then known before Start).
	Listener net.Listener
	// DevIdP starts the Dex development provider (internal/devidp) with these users and the
	// portal login against it (Master.IdP; log in with Master.Login). Empty: no provider.
	DevIdP []IdPUser
	// SessionKeys sign and encrypt the session cookies (default: random).
	SessionKeys []web.SessionKey
	// Web bounds connections and requests (default web.DefaultLimits).
	Web web.Limits
	// CA, when set, is the CA to use (another master's, so both accept the same certificates).
	CA *pki.CA
	// AutoCreateCertUsers lets certificates of unknown users create them (web.Config).
	AutoCreateCertUsers bool
	// SSHJump is the jump host the job JSON names (handlers.Config.SSHJump; nil: none).
	SSHJump *handlers.SSHJumpHost
	// MaxNotebooksPerUser is --max-notebooks-per-user: 0 gives the master's default
	// (handlers.DefaultMaxNotebooksPerUser), a negative value no limit.
	MaxNotebooksPerUser int
	// Log, when set, is the master's logger (default: warnings and errors to the test's log).
	Log *slog.Logger

	// Mail runs the mail service with this configuration (PublicURL defaults to the master's
	// URL); nil: no mails.
	Mail *mail.Config
}

// Start runs a master for the test's duration.
func Start(t testing.TB, opts Options) *Master {
	t.Helper()
	// The listener and the provider first: a test skipped for want of Dex leaves nothing behind.
	l := opts.Listener
	if l == nil {
		var err error
		if l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatalf("listen: %v", err)
		}
	}
	t.Cleanup(func() { _ = l.Close() }) // for a test that ends before the master serves
	url := "https://" + l.Addr().String()
	var idp *DevIdP
	var oidcCfg web.OIDCConfig
	switch {
	case opts.OIDC != nil:
		oidcCfg = *opts.OIDC
	case len(opts.DevIdP) > 0:
		idp = StartDevIdP(t, url+web.CallbackPath, opts.DevIdP...)
		oidcCfg = web.OIDCConfig{Issuer: idp.Issuer, ClientID: idp.ClientID, ClientSecret: idp.ClientSecret, RedirectURL: url + web.CallbackPath}
	}
	ctx, cancel := context.WithCancel(context.Background())
	dbURL := opts.DatabaseURL
	if dbURL == "" {
		dbURL = testenv.PostgresURL(t)
	}
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		cancel()
		t.Fatalf("open store: %v", err)
	}
	if _, err := st.Migrate(ctx); err != nil {
		cancel()
		t.Fatalf("migrate: %v", err)
	}
	if opts.Leases != nil {
		st.SetLeases(*opts.Leases)
	}
	dir := t.TempDir()
	ca, _, err := pki.LoadOrCreateCA(filepath.Join(dir, "ca"), "GPULab test CA")
	if opts.CA != nil {
		ca, err = opts.CA, os.WriteFile(filepath.Join(dir, "ca", "ca.pem"), opts.CA.CertPEM, 0o644)
	}
	if err != nil {
		cancel()
		t.Fatalf("make CA: %v", err)
	}
	jobOpts := job.DefaultOptions()
	if opts.Job != nil {
		jobOpts = *opts.Job
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if opts.HeartbeatInterval == 0 {
		opts.HeartbeatInterval = 500 * time.Millisecond
	}
	jitter := cmp.Or(opts.HeartbeatJitter, handlers.DefaultHeartbeatJitter)
	if jitter < 0 {
		jitter = 0
	}
	lc := opts.Loop
	if lc.Interval == 0 {
		lc.Interval = 200 * time.Millisecond
	}
	if lc.HeartbeatGrace == 0 {
		lc.HeartbeatGrace = 10 * time.Second
	}
	if lc.JobGrace == 0 {
		lc.JobGrace = 10 * time.Second
	}
	if lc.FenceMargin == 0 {
		lc.FenceMargin = time.Second
	}
	st.SetUsageFlush(leader.UsageFlush(cmp.Or(opts.UsageFlush, store.DefaultUsageFlush), lc.Idle))
	notebooks := cmp.Or(opts.MaxNotebooksPerUser, handlers.DefaultMaxNotebooksPerUser)
	if notebooks < 0 {
		notebooks = 0
	}
	mets := metrics.NewMaster(st, metrics.MasterOptions{Log: log})
	lc.Metrics = mets
	wake, work := scheduler.NewSignal(), scheduler.NewSignal()
	h := handlers.New(st, handlers.Config{Metrics: mets, Authority: Authority, Version: "test", LatestClientVersion: "4.0.0", JobOptions: jobOpts,
		CA: ca, HeartbeatInterval: opts.HeartbeatInterval, HeartbeatJitter: jitter, MaxLongPoll: cmp.Or(opts.MaxLongPoll, 5*time.Second), FenceAfter: lc.JobGrace,
		MissingGrace: opts.MissingGrace, SSHJump: opts.SSHJump, MaxNotebooksPerUser: notebooks,
		IdleThreshold: lc.Idle.Threshold}, log, wake, work)
	wcfg := web.Config{CA: ca, Hosts: []string{"127.0.0.1", "localhost"}, Admins: opts.Admins, Authority: Authority,
		OIDC: oidcCfg, SessionKeys: opts.SessionKeys, Limits: opts.Web, AutoCreateCertUsers: opts.AutoCreateCertUsers, Metrics: mets}
	srv := web.New(wcfg, st, h, log)
	loopDone := make(chan struct{})
	listenDone := make(chan struct{})
	listening := make(chan struct{})
	go func() {
		defer close(listenDone)
		_ = st.Listen(ctx, log, wake.Wake, func(names []string) {
			if names == nil {
				work.Wake()
				return
			}
			work.WakeKeys(names...)
		}, func() { close(listening) })
	}()
	// A test may act on another master at once: this one must not miss its notifications.
	select {
	case <-listening:
	case <-listenDone:
		t.Fatalf("the master's database notifications ended before they began")
	case <-time.After(time.Minute):
		t.Fatalf("the master did not listen to database notifications within a minute")
	}
	if opts.Scheduler {
		loop := leader.NewLoop(st, lc, log, wake, work)
		go func() { defer close(loopDone); _ = loop.Run(ctx) }()
	} else {
		close(loopDone)
	}
	mailDone := make(chan struct{})
	if opts.Mail != nil {
		mc := *opts.Mail
		mc.PublicURL = cmp.Or(mc.PublicURL, url)
		svc := mail.New(st, mc, log)
		go func() { defer close(mailDone); _ = svc.Run(ctx) }()
	} else {
		close(mailDone)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Logf("master stopped: %v", err)
			}
		case <-time.After(time.Minute):
			t.Errorf("master did not stop within a minute")
		}
		<-loopDone
		<-mailDone
		<-listenDone
		_ = st.Close()
	})
	m := &Master{t: t, URL: url, CA: ca, Store: st, DatabaseURL: dbURL, Dir: dir, CAFile: filepath.Join(dir, "ca", "ca.pem"), IdP: idp}
	m.APIBase = m.URL + "/api/gpulab/v3.1"
	return m
}

// ForceJobStatus moves a job to a status whatever the transition rules say, as the scheduler
// and a slave would move it together (tests without either).
func (m *Master) ForceJobStatus(id string, to job.Status) {
	m.t.Helper()
	ctx := context.Background()
	rec, err := m.Store.GetJob(ctx, id)
	if err != nil {
		m.t.Fatalf("force job %s to %s: %v", id, to, err)
	}
	if _, err := m.Store.TransitionJob(ctx, id, []job.Status{rec.Job.State.Status}, to, store.Event{Actor: "test", Message: "forced by the test"}); err != nil {
		m.t.Fatalf("force job %s to %s: %v", id, to, err)
	}
}

// DatabaseOutage cuts the master off from its database, as if Postgres had stopped, until the
// returned function (or the test's cleanup) ends the outage. The master keeps running.
func (m *Master) DatabaseOutage() (heal func()) {
	m.t.Helper()
	return testenv.DatabaseOutage(m.t, m.DatabaseURL)
}

// testWriter sends the master's log to the test log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// User is a test user with his certificate.
type User struct {
	store.User
	// CertFile is a PEM with certificate and key; CertPEM its contents.
	CertFile string
	CertPEM  []byte
	TLS      tls.Certificate
	// Serial is the certificate's serial (recorded, so it can be revoked).
	Serial string
}

// AddUser creates a user, makes him a member of the given projects (created when new) and
// issues his client certificate (password-protected when password is not empty).
func (m *Master) AddUser(name string, admin bool, password string, projects ...string) *User {
	m.t.Helper()
	ctx := context.Background()
	urn := pki.UserURN(Authority, name)
	u, err := m.Store.UpsertUser(ctx, urn, name, name+"@example.org", admin)
	if err != nil {
		m.t.Fatalf("add user %s: %v", name, err)
	}
	for _, pn := range projects {
		p, err := m.Store.GetProjectByName(ctx, pn)
		if errors.Is(err, store.ErrNotFound) {
			p, err = m.Store.CreateProject(ctx, pki.ProjectURN(Authority, pn), pn, "", 0)
		}
		if err != nil {
			m.t.Fatalf("project %s: %v", pn, err)
		}
		if err := m.Store.AddMember(ctx, p.ID, u.ID); err != nil {
			m.t.Fatalf("add %s to %s: %v", name, pn, err)
		}
	}
	cert, key, err := m.CA.IssueClient(pki.ClientSpec{Kind: pki.KindUser, URN: urn, Email: u.Email, Name: name})
	if err != nil {
		m.t.Fatalf("issue certificate: %v", err)
	}
	fp, err := pki.SSHFingerprint(cert.PublicKey)
	if err != nil {
		m.t.Fatalf("certificate key fingerprint: %v", err)
	}
	if err := m.Store.RecordCertificate(ctx, cert.SerialNumber.String(), store.CertUser, name, cert.NotAfter, fp); err != nil {
		m.t.Fatalf("record certificate: %v", err)
	}
	pemData, err := pki.ClientPEM(cert, key, password)
	if err != nil {
		m.t.Fatalf("encode certificate: %v", err)
	}
	file := filepath.Join(m.Dir, name+".pem")
	if err := os.WriteFile(file, pemData, 0o600); err != nil {
		m.t.Fatalf("write certificate: %v", err)
	}
	tlsCert, err := pki.LoadClientPEM(pemData, password)
	if err != nil {
		m.t.Fatalf("load certificate: %v", err)
	}
	return &User{User: u, CertFile: file, CertPEM: pemData, TLS: tlsCert, Serial: cert.SerialNumber.String()}
}

// Client returns an HTTP client trusting the master's CA and presenting cert (nil: none).
func (m *Master) Client(cert *tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: m.CA.Pool(), MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 30 * time.Second}
}

// Do sends a request as u (nil: anonymous) to path below the API base and returns status and body.
func (m *Master) Do(u *User, method, path string, body io.Reader, header ...string) (int, []byte, http.Header) {
	m.t.Helper()
	var cert *tls.Certificate
	if u != nil {
		cert = &u.TLS
	}
	return m.do(cert, method, path, body, header...)
}

// DoAs sends a request as service s acting for user (his name or URN; "": no act-as header),
// as Do does.
func (m *Master) DoAs(s *Service, user, method, path string, body io.Reader, header ...string) (int, []byte, http.Header) {
	m.t.Helper()
	if user != "" {
		header = append([]string{handlers.ActAsHeader, user}, header...)
	}
	return m.do(&s.TLS, method, path, body, header...)
}

func (m *Master) do(cert *tls.Certificate, method, path string, body io.Reader, header ...string) (int, []byte, http.Header) {
	m.t.Helper()
	url := path
	if len(path) > 0 && path[0] != 'h' {
		url = m.URL + path
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		m.t.Fatalf("new request: %v", err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	// A client per call: its connection is closed after it, or a test of many calls keeps
	// hundreds open and meets the master's cap of connections per client address.
	c := m.Client(cert)
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		m.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		m.t.Fatalf("read body: %v", err)
	}
	return resp.StatusCode, data, resp.Header
}

// SlaveCert makes a slave in cluster (created when new) as if it had joined, and returns its
// client certificate.
func (m *Master) SlaveCert(name string, cluster int) tls.Certificate {
	m.t.Helper()
	ctx := context.Background()
	if _, err := m.Store.CreateCluster(ctx, store.Cluster{ID: cluster, Name: fmt.Sprintf("cluster%d", cluster)}); err != nil && !errors.Is(err, store.ErrConflict) {
		m.t.Fatalf("create cluster %d: %v", cluster, err)
	}
	if err := m.Store.JoinSlave(ctx, name, cluster); err != nil {
		m.t.Fatalf("join slave %s: %v", name, err)
	}
	cert, key, err := m.CA.IssueClient(pki.ClientSpec{Kind: pki.KindSlave, URN: pki.URN{Authority: Authority, Type: "slave", Name: name}.String(), Name: name})
	if err != nil {
		m.t.Fatalf("issue slave certificate: %v", err)
	}
	if err := m.Store.RecordCertificate(ctx, cert.SerialNumber.String(), store.CertSlave, name, cert.NotAfter, ""); err != nil {
		m.t.Fatalf("record slave certificate: %v", err)
	}
	return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
}

// Service is a test service identity (issue 13) with its client certificate.
type Service struct {
	Name string
	// Projects the service may act in (none: any user).
	Projects []string
	// CertFile is a PEM with certificate and key (mode 0600); CertPEM its contents.
	CertFile string
	CertPEM  []byte
	TLS      tls.Certificate
	// Serial is the certificate's serial (recorded, so it can be revoked).
	Serial string
}

// AddService creates a service that may act for the members of projects (none: any user), or
// renews it, and issues its client certificate as `gpulab-master service-cert` does. The
// projects must exist (AddUser creates them).
func (m *Master) AddService(name string, projects ...string) *Service {
	m.t.Helper()
	_, cert, pemData, err := handlers.IssueServiceCertificate(context.Background(), m.Store, m.CA, Authority,
		handlers.ServiceRequest{Name: name, Projects: projects})
	if err != nil {
		m.t.Fatalf("add service %s: %v", name, err)
	}
	file := filepath.Join(m.Dir, "service-"+name+"-"+cert.SerialNumber.String()+".pem")
	if err := os.WriteFile(file, pemData, 0o600); err != nil {
		m.t.Fatalf("write service certificate: %v", err)
	}
	tlsCert, err := pki.LoadClientPEM(pemData, "")
	if err != nil {
		m.t.Fatalf("load service certificate: %v", err)
	}
	return &Service{Name: name, Projects: projects, CertFile: file, CertPEM: pemData, TLS: tlsCert, Serial: cert.SerialNumber.String()}
}
